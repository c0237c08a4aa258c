"""A key-splitting random number generator: the compiled loop's randomness as arrays in its state.

A key is a ``uint64``; ``split(keys)`` gives each key a successor and a subkey, and a draw from a
subkey is a pure function of it (counter-based: element ``j`` of a draw hashes ``(subkey, j)``
with SplitMix64's finaliser), so a program can carry its keys through ``rlgrad.lax`` loops and
``rlgrad.jit`` traces every draw, as JAX's ``jax.random`` keys are carried through PureJaxRL.
The functions take arrays of keys with any leading shape (one key per seed, per env copy ...) and
are written with ``rlgrad.numpy``, so the same code runs on NumPy arrays and on traced ones.

``KeyGenerator`` is the same stream behind the methods of ``numpy.random.Generator`` the on-policy
algorithms and the functional environments call (``random``, ``standard_normal``, ``uniform``,
``permutation``, ``integers``): one split per call, then the draw from the subkey. Given to an
eager algorithm (``rlgrad.rl.compiled_loop.use_key_streams``), it makes the eager run draw exactly what the
compiled loop draws, which is how the tests compare the two.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import rlgrad.numpy as rnp

__all__ = ["ALGO_STREAM", "ENV_STREAM", "KeyBatch", "KeyGenerator", "normal", "seed_keys",
           "split", "uniform"]

_U64 = np.uint64
_GOLDEN, _M1, _M2 = _U64(0x9E3779B97F4A7C15), _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_SPLITS = np.array([0x243F6A8885A308D3, 0x13198A2E03707344], dtype=_U64)  # a split's two children
ALGO_STREAM, ENV_STREAM = 1, 2  # an algorithm's draws; its env copies' first states


def _shift_xor(x: Any, bits: int) -> Any:
    return rnp.bitwise_xor(x, x // _U64(1 << bits))  # x ^ (x >> bits): floor division is exact


def _mix(x: Any) -> Any:
    """SplitMix64's finaliser (Steele et al., 2014): a bijection of uint64 that scrambles bits
    (the products wrap modulo 2**64 by design: NumPy's overflow warning for scalars is off)."""
    with np.errstate(over="ignore"):
        x = _shift_xor(x, 30) * _M1
        x = _shift_xor(x, 27) * _M2
        return _shift_xor(x, 31)


def seed_keys(seeds: Any, stream: int) -> np.ndarray:
    """The first key of each seed's stream ``stream`` (``ALGO_STREAM``, ``ENV_STREAM`` + copy)."""
    s = np.asarray(seeds, dtype=np.int64).astype(_U64)
    with np.errstate(over="ignore"):
        return _mix(_mix(s) ^ _mix(_U64(stream) * _GOLDEN))


def split(keys: Any) -> tuple[Any, Any]:
    """(the keys' successors, their subkeys to draw from), each shaped as ``keys``: one hash of
    the keys with two tags side by side."""
    both = _mix(rnp.bitwise_xor(rnp.expand_dims(keys, -1), _SPLITS))
    return both[..., 0], both[..., 1]


def _bits(keys: Any, n: int) -> Any:
    """``n`` hashed words per key: shape ``keys.shape + (n,)`` (a key is already a hash's
    output: SplitMix64's step, key + j * golden, then its finaliser)."""
    with np.errstate(over="ignore"):
        return _mix(rnp.expand_dims(keys, -1) + np.arange(1, n + 1, dtype=_U64) * _GOLDEN)


def uniform(keys: Any, shape: tuple[int, ...] = (), dtype: Any = np.float64) -> Any:
    """Uniforms on [0, 1) of shape ``keys.shape + shape`` (NumPy's ``random``'s resolution:
    53 bits for float64, 24 for float32)."""
    dtype, n = np.dtype(dtype), math.prod(shape)
    bits = _bits(keys, n)
    if dtype == np.float32:
        u = rnp.asarray(bits // _U64(1 << 40), dtype=np.float32) * np.float32(2.0 ** -24)
    else:
        u = rnp.asarray(bits // _U64(1 << 11), dtype=np.float64) * (2.0 ** -53)
    return rnp.reshape(u, tuple(np.shape(keys)) + tuple(shape))


def normal(keys: Any, shape: tuple[int, ...] = (), dtype: Any = np.float64) -> Any:
    """Standard normals (Box-Muller on two uniforms per value, computed in float64)."""
    n = math.prod(shape)
    u = uniform(keys, (2, n))
    r = rnp.sqrt(-2.0 * rnp.log1p(-u[..., 0, :]))  # 1 - u in (0, 1]: log is finite
    z = r * rnp.cos((2.0 * np.pi) * u[..., 1, :])
    return rnp.reshape(rnp.asarray(z, dtype=dtype), tuple(np.shape(keys)) + tuple(shape))


class KeyGenerator:
    """One key's stream behind ``numpy.random.Generator``'s methods that rlgrad's on-policy
    algorithms and functional environments call; each call splits the key once."""

    def __init__(self, key: Any) -> None:
        self.key = np.asarray(key, dtype=_U64).reshape(())

    @classmethod
    def from_seed(cls, seed: int, stream: int) -> KeyGenerator:
        return cls(seed_keys(seed, stream))

    def _sub(self) -> np.ndarray:
        self.key, sub = split(self.key)
        return sub

    def random(self, size: Any = None, dtype: Any = np.float64) -> Any:
        out = uniform(self._sub(), _shape(size), dtype)
        return out[()] if size is None else out

    def standard_normal(self, size: Any = None, dtype: Any = np.float64) -> Any:
        out = normal(self._sub(), _shape(size), dtype)
        return out[()] if size is None else out

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        shape = _shape(size) if size is not None else np.broadcast_shapes(np.shape(low), np.shape(high))
        out = uniform_between(self._sub(), low, high, shape)
        return out[()] if out.ndim == 0 else out

    def permutation(self, x: Any) -> np.ndarray:
        """``x`` (or ``arange(x)``) reordered by the ranks of one uniform per element."""
        arr = np.arange(x) if isinstance(x, int | np.integer) else np.asarray(x)
        order = np.argsort(uniform(self._sub(), (len(arr),)), kind="stable")
        return arr[order]

    def integers(self, low: int, high: int | None = None, size: Any = None) -> Any:
        lo, hi = (0, low) if high is None else (low, high)
        u = uniform(self._sub(), _shape(size))
        out = lo + np.minimum((u * (hi - lo)).astype(np.int64), hi - lo - 1)
        return out[()] if size is None else out


def uniform_between(keys: Any, low: Any, high: Any, shape: tuple[int, ...]) -> Any:
    """NumPy's ``uniform(low, high)``: ``low + (high - low) * u`` (``shape`` per key)."""
    return low + (np.subtract(high, low)) * uniform(keys, shape)


class KeyBatch:
    """A batch of keys posing as one ``numpy.random.Generator`` for ``FuncEnv.initial``: each
    call splits every key once and draws ``size`` per key, so a batch of first states equals
    what a ``KeyGenerator`` per copy gives (``keys`` holds the successors afterwards)."""

    def __init__(self, keys: Any) -> None:
        self.keys = keys

    def uniform(self, low: Any = 0.0, high: Any = 1.0, size: Any = None) -> Any:
        self.keys, sub = split(self.keys)
        shape = _shape(size) if size is not None else np.broadcast_shapes(np.shape(low), np.shape(high))
        return uniform_between(sub, low, high, shape)


def _shape(size: Any) -> tuple[int, ...]:
    if size is None:
        return ()
    return (int(size),) if isinstance(size, int | np.integer) else tuple(int(s) for s in size)

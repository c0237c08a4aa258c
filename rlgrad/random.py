"""Seedable random number generation for sampling (distributions, exploration noise, init).

Every random draw in rlgrad goes through a :class:`Generator`, a thin wrapper around NumPy's
``numpy.random.Generator`` with the PCG64 bit generator.  Functions that draw take a
``generator=`` argument; when it is ``None`` they use the global :data:`default_generator`, which
:func:`seed` (alias :func:`manual_seed`) reseeds in place, so that a run is reproducible::

    rlgrad.random.seed(0)
    a = dist.sample()                                   # from the global generator
    g = rlgrad.random.Generator(1234)
    b = dist.sample(generator=g)                        # from an independent stream

A plain ``numpy.random.Generator`` is accepted wherever a ``Generator`` is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.batching import BatchedTensor, every_slice, rewrap
from rlgrad.device import check_device, is_device
from rlgrad.tensor import Tensor, TraceError, _leaf, _Trace, user_line
from rlgrad.tracer import VMAP_LEVELS

__all__ = [
    "Generator", "default_generator", "seed", "manual_seed", "get_rng_state", "set_rng_state",
    "numpy_generator", "generator_state_dict", "load_generator_state", "multinomial", "randperm",
    "bernoulli",
]


def _os_seed() -> int:
    """A seed from the OS's entropy, in torch's range (what ``Generator.seed()`` returns)."""
    return int(np.random.SeedSequence().entropy % (2 ** 63))


class Generator:
    """A seedable random stream (NumPy's ``Generator`` over ``PCG64``), like ``torch.Generator``.

    ``Generator(seed)`` is reproducible; ``Generator()`` (or torch's ``Generator(device="cpu")``)
    seeds itself from the OS, and ``initial_seed()`` says with what. The NumPy generator is
    available as ``.numpy`` for draws rlgrad does not wrap.
    """

    __slots__ = ("_rng", "_seed")

    def __init__(self, seed: int | Any = None, *, device: Any = None) -> None:
        if isinstance(seed, str) or is_device(seed):  # torch.Generator("cpu")
            seed, device = None, seed
        check_device(device)
        self._seed = _os_seed() if seed is None else seed
        self._rng = np.random.Generator(np.random.PCG64(self._seed))

    @property
    def device(self) -> Any:
        from rlgrad.device import CPU

        return CPU

    def seed(self) -> int:
        """torch's: reseed from the OS's entropy and return the new seed."""
        s = _os_seed()
        self.manual_seed(s)
        return s

    def manual_seed(self, seed: int) -> Generator:
        """Reseed in place (as ``torch.Generator.manual_seed``); returns ``self``."""
        if not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self._seed = int(seed)
        self._rng = np.random.Generator(np.random.PCG64(int(seed)))
        return self

    def initial_seed(self) -> int:
        """The seed given to the constructor or the last ``manual_seed`` / ``seed()``."""
        return self._seed

    @property
    def numpy(self) -> np.random.Generator:
        """The wrapped ``numpy.random.Generator``."""
        return self._rng

    def get_state(self) -> dict:
        """The bit generator's state (a dict); restore it with :meth:`set_state`."""
        return self._rng.bit_generator.state

    def set_state(self, state: dict) -> Generator:
        """Restore a state from :meth:`get_state` (returns ``self``, as torch's)."""
        if not isinstance(state, dict) or "state" not in state:
            raise TypeError(f"set_state takes what get_state() returned (a dict), got "
                            f"{type(state).__name__}")
        self._rng.bit_generator.state = state
        return self

    def spawn(self, n: int) -> list[Generator]:
        """``n`` statistically independent child generators (e.g. one per environment)."""
        children = []
        for bg in self._rng.bit_generator.spawn(n):
            child = Generator.__new__(Generator)
            child._seed = None
            child._rng = np.random.Generator(bg)
            children.append(child)
        return children

    # Draws used by rlgrad; everything else is on ``.numpy``.
    def random(self, size: Any = None, dtype: Any = np.float64) -> Any:
        """Uniform on [0, 1)."""
        return self._rng.random(size, dtype=dtype)

    def standard_normal(self, size: Any = None, dtype: Any = np.float64) -> Any:
        return self._rng.standard_normal(size, dtype=dtype)

    def __repr__(self) -> str:
        return f"rlgrad.random.Generator(seed={self._seed!r})"


default_generator = Generator()


def seed(n: int) -> Generator:
    """Seed everything rlgrad draws from, as ``torch.manual_seed`` does: the global sampling
    generator (reseeded in place: references to it stay valid) and the generator that layers'
    default initialization uses (``rlgrad.nn.init``). Returns the global generator."""
    gen = default_generator.manual_seed(n)
    from rlgrad.nn import init as _nn_init  # lazy: the engine core does not import nn

    _nn_init.manual_seed(n)
    return gen


manual_seed = seed  # PyTorch's name


def get_rng_state() -> dict:
    """State of the global generator, for checkpoints."""
    return default_generator.get_state()


def set_rng_state(state: dict) -> None:
    default_generator.set_state(state)


def generator_state_dict(gen: np.random.Generator) -> dict[str, Any]:
    """A NumPy generator's state with its 128-bit integers as strings (checkpoint-safe: the
    state holds only strings and small integers)."""
    s = gen.bit_generator.state
    return {"bit_generator": s["bit_generator"], "state": str(s["state"]["state"]),
            "inc": str(s["state"]["inc"]), "has_uint32": int(s["has_uint32"]),
            "uinteger": int(s["uinteger"])}


def load_generator_state(gen: np.random.Generator, d: dict[str, Any]) -> None:
    """Restore a state made by :func:`generator_state_dict` in place."""
    gen.bit_generator.state = {
        "bit_generator": str(d["bit_generator"]),
        "state": {"state": int(d["state"]), "inc": int(d["inc"])},
        "has_uint32": int(d["has_uint32"]), "uinteger": int(d["uinteger"]),
    }


def numpy_generator(generator: Generator | np.random.Generator | None = None, *,
                    per_slice: bool = False) -> np.random.Generator:
    """The NumPy generator to draw from: ``generator``'s, or the global one when it is None.
    Inside vmap it follows the levels' ``randomness`` (torch.func's): "error" raises; with
    "different" only ``draw`` (``per_slice=True``) may draw, one draw per slice."""
    if _Trace.compiling:
        raise TraceError(
            f"rlgrad.jit: a random draw at {user_line()} (randn, rand, a distribution's "
            "rsample() or sample()) inside the traced function would be frozen into the compiled "
            "step, the same noise at every call; draw the noise outside and pass it as an argument"
        )
    if VMAP_LEVELS and any(level.randomness != "same" for level in VMAP_LEVELS):
        _check_randomness(per_slice)
    if generator is None:
        return default_generator._rng
    if isinstance(generator, Generator):
        return generator._rng
    if isinstance(generator, np.random.Generator):
        return generator
    raise TypeError(
        f"generator must be an rlgrad.random.Generator or a numpy.random.Generator, got "
        f"{type(generator).__name__}; create one with rlgrad.random.Generator(seed)"
    )


def _check_randomness(per_slice: bool) -> None:
    if any(level.randomness == "error" for level in VMAP_LEVELS):
        raise RuntimeError(
            f"vmap: a random draw at {user_line()} inside a vmapped function: with "
            "randomness='error' (the default) this is refused, as torch.func refuses it; pass "
            "randomness='same' (one draw shared by every slice) or 'different' (one per slice), "
            "or draw outside vmap")
    if not per_slice:
        raise RuntimeError(
            f"vmap: the random draw at {user_line()} has no per-slice form for "
            "randomness='different' (rand*, randn*, randint, normal, bernoulli, uniform_, normal_, "
            "dropout and the distributions' sample/rsample have); use randomness='same', or draw "
            "outside vmap with a batch dimension and vmap over it")


def draw(fn: Callable[[np.random.Generator, tuple[int, ...]], np.ndarray], shape: Any,
         generator: Any = None) -> Any:
    """``fn(rng, shape)``, a random draw of ``shape``, as vmap's ``randomness`` wants it: outside
    vmap, and at levels with randomness='same', the array itself (every slice shares it); at
    levels with 'different', one draw per slice, a tensor batched at those levels (torch.func's
    semantics)."""
    if not VMAP_LEVELS:  # the common case: one draw
        return fn(numpy_generator(generator), shape)
    rng = numpy_generator(generator, per_slice=True)
    diff = [level for level in VMAP_LEVELS if level.randomness == "different"]
    if not diff:
        return fn(rng, tuple(shape))
    return rewrap(fn(rng, tuple(level.size for level in diff) + tuple(shape)), diff)


# ---- torch's random functions that draw integers or samples (rand/randn/randint/normal are in
# rlgrad/toplevel.py); each takes ``generator=`` ------------------------------------------------

def _probabilities(input: Any, what: str) -> np.ndarray:  # noqa: A002
    p = np.asarray(input._value if isinstance(input, Tensor) else input, dtype=np.float64)
    if p.ndim not in (1, 2):
        raise RuntimeError(f"{what}: prob_dist must be 1 or 2 dim, got shape {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise RuntimeError(f"{what}: probability tensor contains either `inf`, `nan` or element < 0")
    return p


def multinomial(input: Any, num_samples: int, replacement: bool = False, *,  # noqa: A002
                generator: Any = None, out: Any = None) -> Tensor:
    """torch's: ``num_samples`` indices per row of the non-negative weights ``input`` (1-D or
    2-D, not necessarily normalized), drawn with or without replacement; an int64 tensor."""
    if out is not None:
        raise TypeError("multinomial(out=) is not supported; use the returned tensor")
    p = _probabilities(input, "multinomial")
    rows = p.reshape(-1, p.shape[-1])
    n = rows.shape[1]
    if not replacement and num_samples > n:
        raise RuntimeError("multinomial: cannot sample n_sample > prob_dist.size(-1) samples "
                           "without replacement")
    if num_samples <= 0:
        raise RuntimeError(f"multinomial: number of samples must be positive, got {num_samples}")
    total = rows.sum(axis=1)
    if np.any(total <= 0):
        raise RuntimeError("multinomial: invalid multinomial distribution (sum of probabilities "
                           "<= 0)")
    rng = numpy_generator(generator)
    picks = np.stack([rng.choice(n, size=num_samples, replace=replacement, p=r / t)
                      for r, t in zip(rows, total)])
    return _leaf(picks.astype(np.int64).reshape(p.shape[:-1] + (num_samples,)))


def randperm(n: int, *, generator: Any = None, dtype: Any = np.int64, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    """torch's: a random permutation of ``0 .. n-1`` (int64 unless ``dtype``)."""
    check_device(device)
    if n < 0:
        raise RuntimeError(f"randperm: n must be non-negative, got {n}")
    return _leaf(numpy_generator(generator).permutation(n).astype(dtype), requires_grad)


def bernoulli(input: Any, p: float | None = None, *, generator: Any = None) -> Tensor:  # noqa: A002
    """torch's: 0/1 draws with the probabilities in ``input`` (or the scalar ``p``), in
    ``input``'s floating dtype; not differentiable, as in torch."""
    if type(input) is BatchedTensor:  # vmap: compared with each slice's probabilities
        _check_probabilities(every_slice(input) if p is None else np.float64(p))
        u = draw(lambda rng, s: rng.random(s, dtype=np.float64), tuple(input.shape), generator)
        dt = input.dtype if input.dtype.kind == "f" else np.dtype(np.float32)
        return ops.astype(ops.less(u, ops.stop_gradient(input) if p is None else p), dt)
    arr = np.asarray(input._value if isinstance(input, Tensor) else input)
    probs = arr if p is None else np.full(arr.shape, p)
    _check_probabilities(probs)
    dt = arr.dtype if arr.dtype.kind == "f" else np.dtype(np.float32)
    draws = draw(lambda rng, s: rng.random(s), arr.shape, generator) < probs
    return draws.astype(dt) if isinstance(draws, Tensor) else _leaf(draws.astype(dt))


def _check_probabilities(probs: np.ndarray) -> None:
    if np.any(~(probs >= 0) | ~(probs <= 1)):
        raise RuntimeError("bernoulli: all probabilities must be in [0, 1]")

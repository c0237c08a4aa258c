"""``rlgrad.jit(fn, check=True)`` (or ``RLGRAD_JIT_CHECK=1``): every replay of a compiled step is
checked against eager execution of ``fn`` on the same arguments, from the same state.

The state a step changes is what its replayed calls reach (parameters, their ``.grad``, an
optimizer's per-parameter state and hyperparameters, a scheduler's counters): it is copied
before the eager run, put back after it, and the compiled step runs from it; outputs and state
must then agree up to rounding (NaN equal to NaN), or ``CheckError`` names the first difference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad.tensor import Tensor


class CheckError(AssertionError):
    """A compiled step gave other results than eager execution (``jit(..., check=True)``)."""


def _arrays_of(d: dict) -> dict[Any, tuple[np.ndarray, np.ndarray]]:
    return {k: (v, v.copy()) for k, v in d.items() if isinstance(v, np.ndarray)}


class Snapshot:
    """The state reachable from ``objs`` (Tensors, optimizers, modules, schedulers, lists of
    them), copied so that it can be put back and compared; ``skip``: ids of tensors left out
    (buffers the step makes itself, which eager execution makes anew)."""

    def __init__(self, objs: list[Any], skip: set[int] | None = None) -> None:
        self.tensors: dict[int, tuple] = {}
        self.dicts: dict[int, tuple] = {}
        self.seen: set[int] = set(skip or ())
        for o in objs:
            self._take(o)

    def _take(self, o: Any) -> None:
        if id(o) in self.seen or isinstance(o, np.ndarray | np.generic):
            return  # (an array is saved with the dict or tensor that holds it)
        self.seen.add(id(o))
        if isinstance(o, Tensor):
            g = o.grad
            self.tensors[id(o)] = (o, o._value, np.array(o._value), g,
                                   None if g is None else np.array(g._value))
        elif isinstance(o, list | tuple):
            for x in o:
                self._take(x)
        elif isinstance(o, dict):
            self.dicts[id(o)] = (o, dict(o), _arrays_of(o))
            for x in o.values():
                self._take(x)
        elif hasattr(o, "parameters") and callable(o.parameters):  # a module
            self._take(list(o.parameters()) + list(getattr(o, "buffers", list)()))
        elif hasattr(o, "__dict__") and not callable(o):  # an optimizer's state, counters...
            self._take(vars(o))

    def restore(self) -> None:
        for t, arr, saved, g, gsaved in self.tensors.values():
            t._value = arr
            if isinstance(arr, np.ndarray):
                np.copyto(arr, saved)
            else:
                t._value = saved[()]
            t.grad = g
            if g is not None:
                np.copyto(g._value, gsaved)
        for d, items, arrays in self.dicts.values():
            d.clear()
            d.update(items)
            for arr, saved in arrays.values():
                np.copyto(arr, saved)

    def values(self) -> list[tuple[str, Any]]:
        """(what, array or None) for every tensor's value and gradient and every array held in
        the dicts, now."""
        out: list[tuple[str, Any]] = []
        for i, (t, *_rest) in enumerate(self.tensors.values()):
            out.append((f"captured tensor {i} (shape {t.shape})", np.array(t._value)))
            out.append((f"the .grad of captured tensor {i}",
                        None if t.grad is None else np.array(t.grad._value)))
        for d, _items, _arrays in self.dicts.values():
            for k, v in d.items():
                if isinstance(v, np.ndarray):
                    out.append((f"state entry {k!r}", v.copy()))
        return out


def compare(expected: list[tuple[str, Any]], got: list[tuple[str, Any]], where: str) -> None:
    """Raise ``CheckError`` at the first pair that is not the same array, bit for bit."""
    if len(expected) != len(got):
        raise CheckError(f"rlgrad.jit(check=True): {where}: {len(got)} values from the compiled "
                         f"step, {len(expected)} from eager execution")
    for (what, e), (_, g) in zip(expected, got):
        if e is None or g is None:
            if (e is None) != (g is None):
                raise CheckError(f"rlgrad.jit(check=True): {where}: {what} is "
                                 f"{'None' if g is None else 'set'} after the compiled step, "
                                 f"{'None' if e is None else 'set'} after eager execution")
            continue
        if not _same(np.asarray(e), np.asarray(g)):
            raise CheckError(f"rlgrad.jit(check=True): {where}: {what} differs from eager "
                             f"execution: {_difference(e, g)}")


def _same(e: np.ndarray, g: np.ndarray) -> bool:
    """Equal up to rounding: eager and compiled may sum in another order (a backward pass is
    recorded as ordinary ops while tracing), so 64 units in the last place of the largest value
    are allowed; a stale value is off by far more."""
    if e.shape != g.shape or e.dtype != g.dtype:
        return False
    if e.dtype.kind not in "fc":
        return bool(np.array_equal(e, g))
    tol = 64 * np.finfo(e.dtype).eps
    finite = np.abs(e[np.isfinite(e)])
    scale = float(finite.max()) if finite.size else 1.0
    return bool(np.allclose(g, e, rtol=tol, atol=tol * scale, equal_nan=True))


def _difference(e: np.ndarray, g: np.ndarray) -> str:
    if e.shape != g.shape or e.dtype != g.dtype:
        return f"compiled {g.dtype}{list(g.shape)}, eager {e.dtype}{list(e.shape)}"
    diff = np.abs(g.astype(np.float64) - e.astype(np.float64)).ravel()
    i = int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff)))
    return (f"max |difference| {diff[i]:.3g} at flat index {i} (compiled {g.ravel()[i]!r}, "
            f"eager {e.ravel()[i]!r})")

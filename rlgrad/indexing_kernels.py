"""The NumPy forwards of the indexing primitives whose speed matters: the scatter-add that is
a gather's gradient, and ``take_along_axis`` / its adjoint through flat positions.

Plain NumPy in and out, no Tensors: ``rlgrad/ops.py`` wraps them as the primitives ``untake``,
``take_along_axis`` and ``scatter_along_axis`` (with their VJP rules), and ``rlgrad/indexing.py``
builds PyTorch's ``gather``/``scatter_add`` and NumPy's ``put_along_axis`` on those. This module
sits below ``ops`` so that both can use it without an import cycle.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from rlgrad.tensor import _shape


# Speed: a gather's forward is NumPy's own indexing (bounds checked in C). Its scatter-add never
# builds a dense one-hot matrix: a plain write where no index can repeat, NumPy's ``add.at``
# otherwise, through flat positions for large batches (its one-dimensional form is several times
# faster there) and directly for small ones (where the flattening costs more than it saves).
def _has_int_array(idx: Any) -> bool:
    parts = idx if isinstance(idx, tuple) else (idx,)
    for p in parts:
        if isinstance(p, list) or (isinstance(p, np.ndarray) and p.dtype.kind in "iu"):
            return True
    return False


def _in_bounds(i: np.ndarray, n: int, axis: int, shape: tuple[int, ...], where: str) -> np.ndarray:
    """``i`` as intp with negative indices wrapped; an IndexError names the index and the shape."""
    i = i.astype(np.intp, copy=False)
    if i.size == 0:
        return i
    lo, hi = i.min(), i.max()
    if lo < -n or hi >= n:
        bad = i[(i < -n) | (i >= n)].flat[0]
        raise IndexError(
            f"{where}index {int(bad)} is out of bounds for axis {axis} with size {n} "
            f"(indexing a tensor of shape {shape})"
        )
    if lo < 0:
        i = np.where(i < 0, i + n, i)
    return i


_FLAT_SCATTER_MIN = 256  # from this many gathered values on, a 1-D scatter beats a tuple one


def _untake(g: Any, idx: Any, shape: tuple[int, ...]) -> Any:
    """Zeros of ``shape`` with ``g`` added at ``idx``: the adjoint of ``x[idx]``."""
    g = np.asarray(g)
    out = np.zeros(shape, dtype=g.dtype)
    if g.size == 1 or not _has_int_array(idx):
        out[idx] = g  # slices, ints, masks and a single element never repeat an element
        return out
    parts = idx if isinstance(idx, tuple) else (idx,)
    if (g.size >= _FLAT_SCATTER_MIN and len(parts) == len(shape)
            and all(isinstance(p, np.ndarray) and p.dtype.kind in "iu" for p in parts)):
        # one coordinate array per axis (q[rows, actions]): scatter through flat positions;
        # NumPy's one-dimensional add.at is several times faster than its tuple form. The
        # forward already checked the bounds, so 'wrap' only resolves negative indices.
        flat = np.ravel_multi_index(parts, shape, mode="wrap")
        np.add.at(out.reshape(-1), flat.reshape(-1), g.reshape(-1))
    else:
        np.add.at(out, idx, g)  # repeated indices accumulate
    return out


def _strides(shape: tuple[int, ...]) -> list[int]:
    """C-order strides of ``shape`` counted in elements."""
    out = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        out[k] = out[k + 1] * shape[k + 1]
    return out


@functools.lru_cache(maxsize=64)  # an RL update gathers with the same shapes at every step
def _lane_offsets(shape: tuple[int, ...], lanes: tuple[int, ...], ax: int) -> Any:
    """Flat offset, in an array of ``shape``, of the start of each lane along ``ax``: lane
    coordinates run over ``lanes`` (1 at ``ax``); axes where ``shape`` is 1 broadcast (offset 0).
    Cached, so returned read-only."""
    nd = len(shape)
    strides = _strides(shape)
    base: Any = 0
    for k in range(nd):
        if k != ax and lanes[k] > 1 and shape[k] != 1:
            coord = np.arange(lanes[k], dtype=np.intp) * strides[k]
            base = base + coord.reshape((lanes[k],) + (1,) * (nd - 1 - k))
    if isinstance(base, np.ndarray):
        base.flags.writeable = False
    return base


def _along_error(e: Exception, where: str, shape: tuple[int, ...],
                 ishape: tuple[int, ...]) -> Exception:
    return type(e)(f"{where}: {e} (input shape {shape}, indices shape {ishape})")


def _along_ok(x: Any, idx: np.ndarray, axis: Any) -> bool:
    """Whether ``_along_index`` may stand in for NumPy's take/put_along_axis on ``x``."""
    return (type(x) is np.ndarray and axis is not None and idx.dtype.kind in "iu"
            and idx.ndim == x.ndim and -x.ndim <= axis < x.ndim)


def _along_index(shape: tuple[int, ...], idx: np.ndarray, ax: int) -> tuple:
    """The fancy index NumPy's take/put_along_axis build (``idx`` on axis ``ax``, an arange on
    every other axis), so indexing with it is their operation exactly; the aranges are cached per
    shape, which saves most of their ~3 us Python wrapper on a minibatch."""
    before, after = _along_aranges(shape, ax)
    return before + (idx,) + after


@functools.lru_cache(maxsize=64)
def _along_aranges(shape: tuple[int, ...], ax: int) -> tuple[tuple, tuple]:
    nd = len(shape)
    parts = []
    for k, n in enumerate(shape):
        r = np.arange(n).reshape((1,) * k + (-1,) + (1,) * (nd - 1 - k))
        r.flags.writeable = False  # cached: shared by every call
        parts.append(r)
    return tuple(parts[:ax]), tuple(parts[ax + 1:])


_FLAT_ALONG_MIN = 16384  # below this many elements NumPy's own take/put_along_axis is faster


def _take_along_axis(x: Any, indices: Any, axis: Any = -1) -> Any:
    idx = np.asarray(indices)
    if (isinstance(x, np.ndarray) and x.flags.c_contiguous and x.size >= _FLAT_ALONG_MIN
            and axis is not None
            and idx.dtype.kind in "iu" and idx.ndim == x.ndim):
        ax = axis % x.ndim
        S, I = x.shape, idx.shape
        if all(k == ax or S[k] == I[k] or 1 in (S[k], I[k]) for k in range(x.ndim)):
            i = _in_bounds(idx, S[ax], ax, S, "take_along_axis: ")
            out_shape = tuple(I[k] if k == ax else max(S[k], I[k]) for k in range(x.ndim))
            lanes = tuple(1 if k == ax else n for k, n in enumerate(out_shape))
            flat = _lane_offsets(S, lanes, ax) + i * _strides(S)[ax]
            if flat.shape != out_shape:
                flat = np.broadcast_to(flat, out_shape)
            return np.take(x.reshape(-1), flat)
    try:
        if _along_ok(x, idx, axis):
            return x[_along_index(x.shape, idx, axis % x.ndim)]
        return np.take_along_axis(x, indices, axis)
    except (IndexError, ValueError) as e:
        raise _along_error(e, "take_along_axis", _shape(x), idx.shape) from None


def _put_along_axis_add(g: Any, indices: Any, axis: int, shape: tuple[int, ...]) -> Any:
    """Adjoint of take_along_axis: scatter-add ``g`` into zeros of ``shape`` along ``axis``.

    ``g`` holds one lane per position of its non-axis dimensions; it may cover fewer lanes than
    ``shape`` (PyTorch's scatter_add allows it), and where ``shape`` has size 1 the lanes are
    summed into it (the adjoint of take_along_axis broadcasting its input).
    """
    g = np.asarray(g)
    idx = np.asarray(indices)
    shape = tuple(shape)
    nd = len(shape)
    ax = axis % nd
    G, I = g.shape, idx.shape
    if (G == I and G[ax] == 1 and G == shape[:ax] + (1,) + shape[ax + 1:]
            and math.prod(shape) < _FLAT_ALONG_MIN and _along_ok(g, idx, ax)):
        # one index per lane (an action per row), which the check below accepts; small: NumPy's
        out = np.zeros(shape, dtype=g.dtype)
        out[_along_index(shape, idx, ax)] = g
        return out
    if (idx.ndim != nd or g.ndim != nd or G[ax] != I[ax]
            or any(k != ax and not ((G[k] <= shape[k] or shape[k] == 1) and I[k] in (1, G[k]))
                   for k in range(nd))):
        raise ValueError(
            f"scatter along axis {ax}: values of shape {G} and indices of shape {I} do not fit "
            f"an output of shape {shape} (need the same number of dimensions, indices matching "
            "the values, and values no larger than the output outside the axis)"
        )
    out = np.zeros(shape, dtype=g.dtype)
    if g.size == 0:
        return out
    if (out.size < _FLAT_ALONG_MIN and G[ax] == 1 and I == G
            and all(G[k] == shape[k] for k in range(nd) if k != ax)):
        if _along_ok(out, idx, ax):  # one index per lane: no repeats; small: NumPy's own
            out[_along_index(shape, idx, ax)] = g
        else:
            np.put_along_axis(out, idx, g, ax)
        return out
    i = _in_bounds(idx, shape[ax], ax, shape, "scatter along axis: ")
    lanes = tuple(1 if k == ax else n for k, n in enumerate(G))
    flat = _lane_offsets(shape, lanes, ax) + i * _strides(shape)[ax]
    if flat.shape != G:
        flat = np.broadcast_to(flat, G)
    flat = flat.reshape(-1)
    unique = G[ax] == 1 and all(k == ax or shape[k] != 1 or G[k] == 1 for k in range(nd))
    if unique:  # one index per lane (an action per row): no position repeats, so a plain put
        out.reshape(-1)[flat] = g.reshape(-1)
    else:
        np.add.at(out.reshape(-1), flat, g.reshape(-1))  # repeated indices accumulate
    return out

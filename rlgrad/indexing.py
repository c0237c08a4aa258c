"""Selecting one value per row, and its adjoint: the operations policy-gradient and Q-learning
code uses to pick the probability or Q-value of the action taken.

They are compositions of the indexing primitives in ``ops.py`` (``getitem``/``untake`` and
``take_along_axis``/``scatter_along_axis``), so the gradient reaches the gathered values only, as
a scatter-add (repeated indices accumulate). Indices are integers and never differentiable.
Out-of-range indices raise an IndexError naming the shape and the index: never a wrong value.

Semantics follow the library each function comes from:

* ``gather(x, dim, index)``: PyTorch's ``torch.gather`` (``out[i][j] = x[i][index[i][j]]`` for
  ``dim=1``; ``index`` has ``x``'s number of dimensions and is no larger outside ``dim``);
* ``gather_nd(params, indices, batch_dims)``: TensorFlow's ``tf.gather_nd``;
* ``take_along_axis`` / ``put_along_axis``: NumPy's (negative indices count from the end);
* ``scatter_add(x, dim, index, src)``: PyTorch's out-of-place ``Tensor.scatter_add``;
* ``one_hot(indices, num_classes)``: PyTorch's ``torch.nn.functional.one_hot``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.batching import BatchedTensor, every_slice, index_put
from rlgrad.tensor import Tensor, _shape, _Trace, constant

__all__ = ["gather", "gather_nd", "take_along_axis", "one_hot", "scatter_add", "put_along_axis",
           "index_put"]


def _indices(index: Any, where: str) -> np.ndarray:
    """The index as an integer ndarray; anything else is refused with the reason."""
    if type(index) is BatchedTensor:  # inside vmap: kept batched (take_along_axis's rule gathers)
        idx = index
    elif isinstance(index, Tensor):
        index = index._value
    if type(index) is not BatchedTensor:
        idx = np.asarray(index)
    if idx.dtype.kind not in "iu":
        raise TypeError(
            f"{where}: indices must be integers, got {idx.dtype}; indices select values and are "
            "never differentiable (cast actions with .astype(np.int64))"
        )
    return idx


def _check_bounds(idx: np.ndarray, size: int, where: str, dim: int, shape: tuple[int, ...],
                  negative_ok: bool = False) -> None:
    """IndexError naming the first bad index, the dimension and the input shape."""
    if type(idx) is BatchedTensor:
        idx = every_slice(idx)  # the bounds hold for each slice: checked on all at once
    if not idx.size:
        return
    lo = -size if negative_ok else 0
    if idx.min() < lo or idx.max() >= size:
        bad = idx[(idx < lo) | (idx >= size)].flat[0]
        raise IndexError(
            f"{where}: index {int(bad)} is out of bounds for dimension {dim} with size {size} "
            f"(input shape {shape})"
        )


def gather(x: Any, dim: int, index: Any) -> Any:
    """PyTorch's ``torch.gather``: ``out[i][j] = x[i][index[i][j]]`` for ``dim=1``.

    ``index`` must have as many dimensions as ``x`` and be no larger than ``x`` outside ``dim``;
    the result has ``index``'s shape. Negative indices are errors, as in PyTorch.
    """
    idx = _indices(index, "gather")
    shape = _shape(x)
    nd = len(shape)
    if idx.ndim != nd:
        raise ValueError(
            f"gather: index has {idx.ndim} dimensions but input has {nd} (input shape {shape}, "
            f"index shape {idx.shape}); they must match, as in torch.gather"
        )
    if not -nd <= dim < nd:
        raise IndexError(f"gather: dim {dim} is out of range for an input of {nd} dimensions")
    d = dim % nd
    for k in range(nd):
        if k != d and idx.shape[k] > shape[k]:
            raise ValueError(
                f"gather: index shape {idx.shape} is larger than input shape {shape} at "
                f"dimension {k} (only dimension {d} may differ)"
            )
    _check_bounds(idx, shape[d], "gather", d, shape)
    if any(idx.shape[k] != shape[k] for k in range(nd) if k != d):
        x = x[tuple(slice(None) if k == d else slice(0, idx.shape[k]) for k in range(nd))]
    return ops.take_along_axis(x, idx, d)


def take_along_axis(x: Any, indices: Any, axis: int) -> Any:
    """NumPy's ``take_along_axis`` (negative indices count from the end; bounds are checked)."""
    idx = _indices(indices, "take_along_axis")
    return ops.take_along_axis(x, idx, axis)


def gather_nd(params: Any, indices: Any, batch_dims: int = 0) -> Any:
    """TensorFlow's ``tf.gather_nd``: each row ``indices[..., :]`` addresses a slice of ``params``.

    With ``K = indices.shape[-1]`` the result has shape
    ``indices.shape[:-1] + params.shape[batch_dims + K:]``; the first ``batch_dims`` axes of
    ``indices`` and ``params`` are matched element by element (``batch_dims=1``: one index row per
    batch entry addresses that entry). Negative indices are errors, as in TensorFlow on CPU.
    """
    idx = _indices(indices, "gather_nd")
    shape = _shape(params)
    b = int(batch_dims)
    if idx.ndim < 1:
        raise ValueError(
            "gather_nd: indices must have at least one dimension (the last holds the coordinates)"
        )
    k = idx.shape[-1]
    if b < 0 or b >= idx.ndim or b > len(shape):
        raise ValueError(
            f"gather_nd: batch_dims={b} must be in [0, indices.ndim - 1] = [0, {idx.ndim - 1}] "
            f"and at most params.ndim = {len(shape)}"
        )
    if idx.shape[:b] != tuple(shape[:b]):
        raise ValueError(
            f"gather_nd: the first {b} dimensions of indices {idx.shape} and params {shape} "
            "must match (batch_dims)"
        )
    if k > len(shape) - b:
        raise ValueError(
            f"gather_nd: index depth {k} is larger than the {len(shape) - b} non-batch "
            f"dimensions of params (shape {shape})"
        )
    lead = idx.shape[:-1]
    if idx.size and idx.min() < 0:  # TensorFlow refuses negative indices; NumPy would wrap them
        _gather_nd_bounds(idx, shape, b)
    parts: list[Any] = [
        np.arange(shape[j]).reshape((1,) * j + (shape[j],) + (1,) * (len(lead) - j - 1))
        for j in range(b)
    ]
    if isinstance(indices, Tensor):  # through recorded ops, so that rlgrad.jit can follow them
        parts += [ops.getitem(indices, (Ellipsis, c))._value for c in range(k)]
    else:
        parts += [idx[..., c] for c in range(k)]
    if not parts:  # K = 0 and no batch axes: every index row addresses all of params
        out_shape = lead + tuple(shape)
        return ops.broadcast_to(params[(None,) * len(lead)], out_shape)
    try:  # the upper bounds are checked by the indexing itself, so the common path scans once
        out = params[tuple(parts)]
    except IndexError:
        _gather_nd_bounds(idx, shape, b)
        raise
    if k == 0:  # only batch axes: their aranges cover the batch shape, not all of ``lead``
        out = ops.broadcast_to(out, lead + tuple(shape[b:]))
    return out


def _gather_nd_bounds(idx: np.ndarray, shape: tuple[int, ...], b: int) -> None:
    """Raise TensorFlow's kind of error for the first index row that does not fit ``shape``."""
    for c in range(idx.shape[-1]):
        n = shape[b + c]
        coord = idx[..., c]
        if coord.size and (coord.min() < 0 or coord.max() >= n):
            pos = np.argwhere((coord < 0) | (coord >= n))[0]
            row = idx[tuple(pos)]
            raise IndexError(
                f"gather_nd: indices{list(map(int, pos))} = {row.tolist()} does not index into "
                f"params of shape {shape}: index {int(row[c])} is out of bounds for dimension "
                f"{b + c} with size {n}"
            )


def one_hot(indices: Any, num_classes: int = -1, dtype: Any = np.int64) -> Any:
    """PyTorch's ``one_hot``: shape ``indices.shape + (num_classes,)``, int64 unless ``dtype``.

    ``num_classes=-1`` infers ``max(indices) + 1``. A Tensor in gives a Tensor out (never
    requiring grad: a one-hot encoding has no gradient w.r.t. the integer indices).
    """
    idx = _indices(indices, "one_hot")
    inferred = num_classes < 0
    if type(idx) is BatchedTensor:  # vmap: each slice's own; the checks see every slice's values
        if inferred:
            raise ValueError("vmap: one_hot with num_classes=-1 takes its size from the values, "
                             "which differ between slices; pass num_classes")
        _check_bounds(idx, num_classes, "one_hot", -1, tuple(idx.shape))
        return ops.astype(ops.equal(ops.expand_dims(idx, -1), np.arange(num_classes)), dtype)
    if inferred:
        if not idx.size:
            raise ValueError("one_hot: cannot infer num_classes from empty indices; pass it")
        num_classes = int(idx.max()) + 1
    if idx.size and (idx.min() < 0 or idx.max() >= num_classes):
        bad = idx[(idx < 0) | (idx >= num_classes)].flat[0]
        raise IndexError(
            f"one_hot: class index {int(bad)} is out of bounds for num_classes={num_classes} "
            f"(indices shape {idx.shape}); class values must be in [0, num_classes)"
        )
    if _Trace.compiling and isinstance(indices, Tensor):  # recorded: rlgrad.jit replays it
        if inferred:
            raise RuntimeError("rlgrad.jit: one_hot with num_classes=-1 takes its size from the "
                               "values; pass num_classes inside a compiled step")
        return ops.astype(ops.equal(ops.expand_dims(indices, -1), np.arange(num_classes)), dtype)
    out = (idx[..., None] == np.arange(num_classes)).astype(dtype)
    return constant(out) if isinstance(indices, Tensor) else out


def scatter_add(x: Any, dim: int, index: Any, src: Any) -> Any:
    """PyTorch's ``scatter_add`` as a pure function: ``x`` plus ``src`` added at ``index`` along
    ``dim`` (repeated indices accumulate), e.g. ``out[i][index[i][j]] += src[i][j]`` for dim 1.

    As in PyTorch, ``x``, ``index`` and ``src`` have the same number of dimensions,
    ``index.shape[d] <= src.shape[d]`` everywhere and ``index.shape[d] <= x.shape[d]`` for
    ``d != dim``; only the part of ``src`` that ``index`` covers is used. Differentiable in ``x``
    and ``src``.
    """
    idx = _indices(index, "scatter_add")
    shape = _shape(x)
    src_shape = _shape(src)
    nd = len(shape)
    if idx.ndim != nd or len(src_shape) != nd:
        raise ValueError(
            f"scatter_add: input {shape}, index {idx.shape} and src {src_shape} must have the "
            "same number of dimensions"
        )
    if not -nd <= dim < nd:
        raise IndexError(f"scatter_add: dim {dim} is out of range for an input of {nd} dimensions")
    d = dim % nd
    for k in range(nd):
        if idx.shape[k] > src_shape[k] or (k != d and idx.shape[k] > shape[k]):
            raise ValueError(
                f"scatter_add: index shape {idx.shape} must be no larger than src shape "
                f"{src_shape} in every dimension and than input shape {shape} outside dimension {d}"
            )
    _check_bounds(idx, shape[d], "scatter_add", d, shape)
    if tuple(src_shape) != idx.shape:
        src = src[tuple(slice(0, n) for n in idx.shape)]
    if isinstance(src, Tensor):
        scattered = ops.scatter_along_axis(src, idx, d, shape)
    else:  # keep x's dtype: a NumPy/Python src must not upcast a float32 x
        scattered = ops.scatter_along_axis(np.asarray(src, dtype=_dtype(x)), idx, d, shape)
    return x + scattered


def _dtype(x: Any) -> np.dtype:
    return x._value.dtype if isinstance(x, Tensor) else np.asarray(x).dtype


def put_along_axis(arr: Any, indices: Any, values: Any, axis: int) -> Any:
    """A pure ``np.put_along_axis``: a new array with ``values`` written at ``indices``.

    ``values`` broadcasts against ``indices``, and ``indices`` against ``arr`` outside ``axis``.
    The gradient w.r.t. ``arr`` is zero where a value was written; w.r.t. ``values`` it is the
    gradient read back at ``indices``. Repeated indices in one lane are refused (which write wins
    would be arbitrary): use ``scatter_add`` to sum them.
    """
    idx = _indices(indices, "put_along_axis")
    if _Trace.compiling and isinstance(indices, Tensor):
        raise RuntimeError(
            "rlgrad.jit: put_along_axis with indices that are traced values cannot check them for "
            "repeats at every call; write where(one_hot(indices, n) == 1, values, arr) (or "
            "scatter_add to sum repeats) inside a compiled step"
        )
    shape = _shape(arr)
    nd = len(shape)
    if idx.ndim != nd:
        raise ValueError(
            f"put_along_axis: indices have {idx.ndim} dimensions but arr has {nd} (shape {shape})"
        )
    ax = axis % nd
    _check_bounds(idx, shape[ax], "put_along_axis", ax, shape, negative_ok=True)
    idx = np.where(idx < 0, idx + shape[ax], idx)
    if idx.shape[ax] > 1:
        s = np.sort(idx, axis=ax)
        if np.any(np.diff(s, axis=ax) == 0):
            raise ValueError(
                "put_along_axis: repeated indices along the axis; use scatter_add to sum them"
            )
    full = tuple(n if k == ax else s for k, (n, s) in enumerate(zip(idx.shape, shape)))
    idx_full = np.broadcast_to(idx, full)
    written = np.zeros(shape, dtype=bool)
    np.put_along_axis(written, idx_full, True, ax)
    if not isinstance(values, Tensor):  # keep arr's dtype (np.float64 values must not upcast)
        values = np.asarray(values, dtype=_dtype(arr))
    vals = ops.broadcast_to(values, full) if _shape(values) != full else values
    return ops.where(written, 0, arr) + ops.scatter_along_axis(vals, idx_full, ax, shape)


def _is_int_index(i: Any) -> bool:
    """A Python or NumPy integer, or a 0-d integer array (a 0-d Tensor, unwrapped): torch selects
    with it first, as a basic index."""
    if isinstance(i, bool | np.bool_):
        return False
    if isinstance(i, int | np.integer):
        return True
    return isinstance(i, np.ndarray | BatchedTensor) and i.ndim == 0 and i.dtype.kind in "iu"


def _is_array_index(i: Any) -> bool:
    return isinstance(i, list) or (isinstance(i, np.ndarray | BatchedTensor) and i.ndim > 0)


def torch_index_steps(key: Any) -> tuple[Any, Any] | None:
    """PyTorch's rule where NumPy's differs: integers and advanced (array) indices that are not
    next to each other (``t[0, :, [1, 3]]``). NumPy counts the integer as an advanced index and
    puts the broadcast dimensions first, shape (2, 3) for a (2, 3, 4) tensor; torch selects with
    the integers first, leaving one advanced index in place: (3, 2). Returns the two keys to
    apply one after the other (a basic index: a view; then the rest), or None when NumPy's
    single indexing already gives torch's result."""
    if not isinstance(key, tuple):
        return None
    ints = [n for n, i in enumerate(key) if _is_int_index(i)]
    arrays = [n for n, i in enumerate(key) if _is_array_index(i)]
    if not ints or not arrays:
        return None
    places = sorted(ints + arrays)
    if places[-1] - places[0] + 1 == len(places):  # side by side: NumPy keeps them in place too
        return None
    first: list[Any] = []
    rest: list[Any] = []
    for i in key:
        if _is_int_index(i):
            first.append(i)
        elif i is None or i is Ellipsis:
            first.append(i)
            rest.append(slice(None) if i is None else i)
        else:
            bool_ = (i.dtype if isinstance(i, BatchedTensor) else np.asarray(i).dtype) == np.bool_
            n = len(i.shape) if bool_ else 1  # a mask spans its dims
            first.extend([slice(None)] * n)
            rest.append(i)
    return tuple(first), tuple(rest)

"""vmap's machinery: batched tensors and one batching rule per primitive, as JAX's batching
interpreter (``jax/_src/interpreters/batching.py``) has them.

A ``BatchedTensor`` of level ``L`` stands, inside the function being vmapped, for one slice of a
*physical* tensor (``_phys``) whose first dimension is the vmapped one. While a vmap level is open,
every primitive call goes through ``dispatch`` (``tracer.VMAP_LEVELS``): an argument batched at
the highest level among the arguments is replaced by its physical tensor, and the primitive's
batching rule (``defbatch`` beside its ``defvjp``/``defjvp``) computes the physical result with
other primitive calls. Those calls are recorded as usual, so the physical program is an ordinary
graph: a gradient of it is a gradient of every slice at once, and nested vmaps are levels whose
physical tensors are themselves batched at a lower level.

Rules keep the vmapped dimension at the front: ``rule(p, args, dims, level, **kwargs)`` gets
``dims[i]`` 0 for a batched argument (its physical tensor) and None for the others, and returns
the physical result with the batch first (``level.size`` is its length). ``RULES`` holds the
generic ones a declaration names ("elementwise" broadcasts, "reduce" shifts the reduced axes ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgrad import ops, tracer
from rlgrad import tensor as tensor_module
from rlgrad.tensor import Tensor, _new, constant
from rlgrad.tracer import NotBatchable, Primitive, defbatch, defjvp, defjvp_is_linear, defvjp, primitive


class VmapError(RuntimeError):
    """What vmap cannot batch, found while running the function (the message says what to do)."""


class Level:
    """One open vmap: its size (the length of the vmapped dimension) and depth (1: outermost)."""

    __slots__ = ("size", "depth", "randomness")

    def __init__(self, size: int, depth: int, randomness: str) -> None:
        self.size = size
        self.depth = depth
        self.randomness = randomness


class BatchedTensor(Tensor):
    """One slice, inside a vmapped function, of ``_phys`` (the vmapped dimension first).

    Its shape and dtype are the slice's; ``_value`` is a ``_Slice``, the slice's metadata for the
    code that reads it (shape checks, type promotion). Reading the values (``item()``,
    ``numpy()``, ``bool()``, a NumPy conversion, library code reading ``_value``'s data) raises:
    one slice's values would be a silently wrong answer for the others."""

    __slots__ = ("_phys", "_level")

    def backward(self, *args: Any, **kwargs: Any) -> None:
        raise VmapError("vmap: backward() inside a vmapped function is not batched; use "
                        "rlgrad.func.grad (or vjp) inside vmap for per-sample gradients")

    def numpy(self) -> np.ndarray:
        raise _value_error("numpy()")

    def item(self) -> Any:
        raise _value_error("item()")

    def tolist(self) -> Any:
        raise _value_error("tolist()")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise _value_error("a NumPy conversion (a batched tensor used as an index or array)")

    def __bool__(self) -> bool:
        raise _value_error("bool() (Python control flow on a batched value)")

    def __float__(self) -> float:
        raise _value_error("float()")

    def __int__(self) -> int:
        raise _value_error("int()")

    def __index__(self) -> int:
        raise _value_error("using it as a Python index")

    def __repr__(self) -> str:
        return f"BatchedTensor(level={self._level.depth}, bdim=0, value={self._phys!r})"

    # In-place operations: the out-of-place result becomes this tensor's physical tensor (every
    # reference to it sees the change; a view taken of it before does not, unlike torch).
    def _assign(self, new: Any) -> BatchedTensor:
        new = as_tensor(new)
        if type(new) is BatchedTensor and new._level.depth > self._level.depth:
            raise VmapError("vmap: an in-place operation would write values that differ between "
                            "the slices of an inner vmap into a tensor of an outer one; write "
                            "it out of place (x = x + y)")
        if tuple(new.shape) != tuple(self.shape):
            raise VmapError(f"vmap: an in-place operation cannot change the shape {tuple(self.shape)} "
                            f"to {tuple(new.shape)}")
        if new.dtype != self.dtype:
            new = ops.astype(new, self.dtype)
        phys = physical_at(new, self._level)
        self._phys, self._value = phys, batched(phys, self._level)._value
        return self

    def __iadd__(self, other: Any) -> BatchedTensor:
        return self._assign(self + other)

    def __isub__(self, other: Any) -> BatchedTensor:
        return self._assign(self - other)

    def __imul__(self, other: Any) -> BatchedTensor:
        return self._assign(self * other)

    def __itruediv__(self, other: Any) -> BatchedTensor:
        return self._assign(self / other)

    def add_(self, other: Any, *, alpha: Any = None) -> BatchedTensor:
        return self._assign(self + (other if alpha is None else other * alpha))

    def sub_(self, other: Any, *, alpha: Any = None) -> BatchedTensor:
        return self._assign(self - (other if alpha is None else other * alpha))

    def mul_(self, other: Any) -> BatchedTensor:
        return self._assign(self * other)

    def div_(self, other: Any) -> BatchedTensor:
        return self._assign(self / other)

    def copy_(self, src: Any, non_blocking: bool = False) -> BatchedTensor:
        return self._assign(ops.broadcast_to(as_tensor(src), tuple(self.shape)))

    def fill_(self, value: Any) -> BatchedTensor:
        return self._assign(ops.add(ops.multiply(self, 0), value))

    def zero_(self) -> BatchedTensor:
        return self._assign(ops.multiply(self, 0))

    def clamp_(self, min: Any = None, max: Any = None) -> BatchedTensor:  # noqa: A002
        return self._assign(ops.clip(self, min, max))

    clip_ = clamp_

    def lerp_(self, end: Any, weight: Any) -> BatchedTensor:
        return self._assign(self + (end - self) * weight)

    def __setitem__(self, idx: Any, value: Any) -> None:
        """``x[idx] = v``: ``indexing.index_put`` out of place (``idx`` may be batched too)."""
        key = tuple(i if type(i) is BatchedTensor or not isinstance(i, Tensor) else i._value
                    for i in (idx if isinstance(idx, tuple) else (idx,)))
        self._assign(index_put(self, key, ops.astype(as_tensor(value), self.dtype)))


def index_put(x: Any, key: Any, values: Any, accumulate: bool = False) -> Any:
    """``x`` with ``values`` (broadcast to ``x[key]``'s shape) written at the NumPy index
    ``key`` (added there with ``accumulate``, repeats adding up), out of place and
    differentiable in ``x`` and ``values``; ``key`` may hold batched tensors (vmap: each slice
    writes at its own positions). Without ``accumulate`` a position named twice gets the mean
    of its values (torch leaves which one wins undefined; equal values come out exact).
    ``Tensor.index_put`` and ``x[idx] = v`` on a batched tensor are this function."""
    dt = x.dtype if isinstance(x, Tensor) else np.asarray(x).dtype
    shape = tuple(x.shape) if isinstance(x, Tensor) else np.shape(x)
    part = tuple(ops.getitem(x, key).shape)
    if not isinstance(values, Tensor):  # keep x's dtype: a Python/NumPy value must not upcast it
        values = np.asarray(values, dtype=dt)
    placed = ops.untake(ops.broadcast_to(values, part), key, shape)
    if accumulate:
        return x + placed
    count = ops.untake(np.ones(part, dt), key, shape)
    written = ops.greater(count, 0)
    if dt.kind in "fc":
        placed = placed / ops.where(written, count, 1)
    elif dt.kind in "iu":
        placed = ops.floor_divide(placed, ops.where(written, count, 1))
    return ops.where(written, placed, x)


def _value_error(what: str) -> VmapError:
    return VmapError(f"vmap: {what} reads the values of a batched tensor, which differ from one "
                     "vmapped slice to the next; keep the values in tensors (rlgrad.where for a "
                     "choice) or take the data out after vmap")


class _Slice:
    """A BatchedTensor's ``_value``: one slice's metadata (``shape``, ``dtype``, ``ndim``,
    ``size``), which library code reads for shape checks and type promotion, and no values:
    any read of them (a NumPy conversion, indexing, arithmetic, ``.astype`` ...) raises one
    line, where a real slice would give every slice one slice's answer."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape = shape
        self.dtype = dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getattr__(self, name: str) -> Any:
        raise _value_error(f"library code reading .{name} of its array")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise _value_error("library code converting it to a NumPy array")

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise _value_error("library code computing with its array")

    __array_ufunc__ = None  # NumPy's ufuncs refuse it (np.size and np.shape read the metadata)
    __getitem__ = __setitem__ = __iter__ = __bool__ = __float__ = __int__ = __index__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __neg__ = __pow__ = __matmul__ = _refuse
    __eq__ = __ne__ = _refuse  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]


def batched(phys: Any, level: Level) -> BatchedTensor:
    """The BatchedTensor of ``level`` whose vmapped slices are ``phys``'s first dimension."""
    if not isinstance(phys, Tensor):
        phys = ops.identity(tensor_of(phys))
    t = _new(BatchedTensor)
    v = phys._value
    t._value = _Slice(v.shape[1:], v.dtype)
    t.requires_grad = False
    t.grad = t._op = t._args = t._kw = t._cut = None
    t._retain = False
    t._seq = 0
    t._written = 0
    t._phys = phys
    t._level = level
    return t


def every_slice(x: BatchedTensor) -> np.ndarray:
    """The values of all of ``x``'s slices (for checks that hold for each one, e.g. bounds)."""
    while type(x) is BatchedTensor:
        x = x._phys
    return x._value


def copy_of(data: Any, dtype: Any = None) -> Tensor:
    """``rlgrad.tensor(data)`` of a batched tensor (or a list holding some): a detached copy of
    each slice, still batched (``tensor.BATCHED_COPY``)."""
    if isinstance(data, list | tuple):
        if any(isinstance(d, list | tuple) for d in data):
            raise VmapError("vmap: rlgrad.tensor of nested lists holding batched tensors; use "
                            "rlgrad.stack")
        items = [ops.stop_gradient(d) if isinstance(d, Tensor) else np.asarray(d) for d in data]
        out = ops.stack(items, axis=0)
    else:
        out = ops.clone(ops.stop_gradient(data))
    return out if dtype is None else ops.astype(out, np.dtype(dtype))


def tensor_of(x: Any) -> Tensor:
    return constant(np.asarray(x))


# ---- dispatch ---------------------------------------------------------------------------------
def dispatch(p: Primitive, args: tuple, kwargs: dict) -> Any:
    """A primitive called while a vmap level is open: its batching rule at the highest level
    among its batched arguments, or the plain call when none is batched."""
    level = None
    for a in args:
        if type(a) is BatchedTensor and (level is None or a._level.depth > level.depth):
            level = a._level
        elif type(a) is tuple:  # an index (getitem, untake) may hold batched tensors
            for i in a:
                if type(i) is BatchedTensor and (level is None or i._level.depth > level.depth):
                    level = i._level
    if level is None:
        for v in kwargs.values() if kwargs else ():
            if type(v) is BatchedTensor:
                raise VmapError(f"vmap: {p.name} got a batched tensor as a keyword argument; "
                                "pass it by position")
        return tracer.apply_plain(p, args, kwargs)
    rule = rule_of(p)
    phys, dims = [], []
    for a in args:
        if type(a) is BatchedTensor and a._level is level:
            phys.append(a._phys)
            dims.append(0)
        elif type(a) is tuple and any(type(i) is BatchedTensor and i._level is level for i in a):
            phys.append(a)  # the rule reads the batched entries of the index itself
            dims.append(0)
        else:
            phys.append(a)
            dims.append(None)
    return batched(rule(p, phys, dims, level, **kwargs), level)


def rule_of(p: Primitive) -> Callable:
    rule = p.batch
    if isinstance(rule, str):
        rule = RULES[rule]
    if rule is None or isinstance(rule, NotBatchable):
        why = rule.reason if isinstance(rule, NotBatchable) else (
            "it has no batching rule; declare one with rlgrad.tracer.defbatch beside its defvjp")
        raise VmapError(f"vmap: primitive {p.name!r} cannot be batched: {why}")
    return rule


# ---- helpers for rules: shapes seen per slice -------------------------------------------------
_ARRAYS = (Tensor, BatchedTensor, np.ndarray)


def _shape(a: Any, d: int | None) -> tuple[int, ...]:
    if type(a) in _ARRAYS:  # the common case first: a rule runs on every batched call
        s = a._value.shape if type(a) is not np.ndarray else a.shape
    elif isinstance(a, Tensor | np.ndarray):
        s = a.shape
    else:  # a number or a nested list is an operand; a dtype, a string, None ... are not
        s = np.shape(a) if isinstance(a, int | float | complex | np.generic | list | tuple) else ()
    return tuple(s[1:]) if d is not None else tuple(s)


def _rank(a: Any, d: int | None) -> int:
    return len(_shape(a, d))


def align(a: Any, rank: int) -> Any:
    """Batched ``a`` (batch first) with ones inserted after the batch up to ``rank`` dimensions
    per slice, so it broadcasts against unbatched operands (which NumPy aligns on the right)."""
    s = _shape(a, 0)
    if len(s) >= rank:
        return a
    return ops.reshape(a, (a.shape[0],) + (1,) * (rank - len(s)) + s)


def bcast(a: Any, d: int | None, size: int) -> Any:
    """``a`` with the batch first: unbatched ``a`` broadcast along a new first dimension."""
    if d is not None:
        return a
    if not isinstance(a, Tensor):
        a = np.asarray(a)
        return np.broadcast_to(a, (size,) + a.shape)
    return expand(a, size)


def _axes(axis: Any, rank: int) -> tuple[int, ...]:
    """Per-slice axes (an int or a tuple, negative allowed) as physical ones (one more)."""
    if isinstance(axis, Sequence):
        return tuple(int(a) % max(rank, 1) + 1 for a in axis)
    return (int(axis) % max(rank, 1) + 1,)


def _arg(args: list, kwargs: dict, pos: int, name: str, default: Any) -> Any:
    return args[pos] if len(args) > pos else kwargs.get(name, default)


def _set(args: list, kwargs: dict, pos: int, name: str, value: Any) -> tuple[list, dict]:
    args, kwargs = list(args), dict(kwargs)
    if len(args) > pos:
        args[pos] = value
    else:
        kwargs[name] = value
    return args, kwargs


def _expand(x: Any, size: int) -> Any:
    """``size`` copies of ``x`` along a new first dimension, as a read-only view (stride 0):
    no copy, and ``bmatmul`` sees that every slice is the same."""
    if type(x) is np.ndarray and x.flags.c_contiguous:  # np.broadcast_to's result, made directly
        out = np.ndarray((size,) + x.shape, x.dtype, buffer=x, strides=(0,) + x.strides)
        out.flags.writeable = False
        return out
    return np.broadcast_to(x, (size,) + np.shape(x))


def _expand_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """Inside another vmap level: the new dimension goes after that level's."""
    x = args[0]
    return ops.broadcast_to(ops.reshape(x, (level.size, 1) + _shape(x, 0)),
                            (level.size, args[1]) + _shape(x, 0))


expand = primitive(_expand, "expand", arity=1)
defvjp(expand, lambda g, ans, x, size: ops.sum(g, axis=0))
defjvp_is_linear(expand)
defbatch(expand, _expand_rule)


# ---- generic rules ----------------------------------------------------------------------------
def elementwise(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """Broadcasting ops: each batched operand gets ones after its batch up to the result's rank."""
    rank = max(_rank(a, d) for a, d in zip(args, dims))
    new = [a if d is None else align(a, rank) for a, d in zip(args, dims)]
    return p.call(*new, **kwargs)


def reduce(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """Reductions ``f(x, axis=None, keepdims=False)``: the axes shifted past the batch (None:
    every axis of a slice)."""
    rank = _rank(args[0], dims[0])
    axis = _arg(args, kwargs, 1, "axis", None)
    new = tuple(range(1, rank + 1)) if axis is None else _axes(axis, rank)
    if not isinstance(axis, Sequence) and axis is not None:
        new = new[0]
    args, kwargs = _set(args, kwargs, 1, "axis", new)
    return p.call(*args, **kwargs)


def _flat(x: Any) -> Any:
    return ops.reshape(x, (x.shape[0], -1))


def along(default: Any, none: str) -> Callable:
    """Ops along one axis ``f(x, [static...], axis=default)`` at position 1 (cumsum, softmax,
    argsort ...): the axis shifted; ``axis=None`` means the flattened slice (``none="flat"``)
    or every axis (``none="all"``)."""
    def rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
        x = args[0]
        rank = _rank(x, dims[0])
        axis = _arg(args, kwargs, 1, "axis", default)
        if axis is None and none == "flat":
            args, kwargs = _set(args, kwargs, 1, "axis", 1)
            return p.call(_flat(x), *args[1:], **kwargs)
        new = tuple(range(1, rank + 1)) if axis is None else _axes(axis, rank)
        args, kwargs = _set(args, kwargs, 1, "axis", new if isinstance(axis, Sequence) or axis is None
                            else new[0])
        return p.call(*args, **kwargs)

    return rule


def argreduce(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """argmax/argmin: ``axis=None`` is the index in the flattened slice."""
    x = args[0]
    rank = _rank(x, dims[0])
    axis = _arg(args, kwargs, 1, "axis", None)
    if axis is not None:
        args, kwargs = _set(args, kwargs, 1, "axis", _axes(axis, rank)[0])
        return p.call(*args, **kwargs)
    keep = kwargs.pop("keepdims", False)
    out = p.call(_flat(x), 1, **kwargs)
    return ops.reshape(out, (level.size,) + (1,) * rank) if keep else out


def leading(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """Ops that already treat leading dimensions as a batch (NumPy's linalg, the fused cells):
    the operand batched (a broadcast copy for an unbatched one) and the op called as is."""
    rank = max(_rank(a, d) for a, d in zip(args, dims) if isinstance(a, Tensor | np.ndarray))
    new = [align(bcast(a, d, level.size), rank) if isinstance(a, Tensor | np.ndarray) else a
           for a, d in zip(args, dims)]
    return p.call(*new, **kwargs)


def decomposed(fn: Callable) -> Callable:
    """A rule written as the same computation on the slices, with other batched ops: ``fn``
    gets the BatchedTensors (and the unbatched arguments) and its result is unwrapped."""
    def rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
        logical = [batched(a, level) if d is not None else a for a, d in zip(args, dims)]
        out = fn(*logical, **kwargs)
        return physical_at(out, level)

    rule.__name__ = getattr(fn, "__name__", "decomposed")
    return rule


# ---- matrix products --------------------------------------------------------------------------
def _bmatmul(a: Any, b: Any) -> Any:
    """``np.matmul`` of stacks, with fast paths for what vmap makes: a stack that repeats one
    matrix (a broadcast view, stride 0: an unbatched weight under per-sample ``grad``) is one
    GEMM with the other stack's rows, and a contraction of length 1 (an outer product: a
    per-sample weight gradient) one einsum or broadcast multiplication. ``np.matmul`` is the
    reference (tests/engine/test_vmap.py)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0]:
        if b.strides[0] == 0 and a.flags.c_contiguous:  # every slice of b is b[0]
            return np.matmul(a.reshape(-1, a.shape[2]), b[0]).reshape(a.shape[:2] + b.shape[2:])
        if a.strides[0] == 0 and b.shape[1] > 1:  # a[0] @ each slice of b, as one GEMM
            n, k, m = b.shape
            wide = np.matmul(a[0], b.transpose(1, 0, 2).reshape(k, n * m))
            return wide.reshape(a.shape[1], n, m).transpose(1, 0, 2)
    if a.ndim >= 2 and b.ndim >= 2 and a.shape[-1] == 1 and b.shape[-2] == 1:
        if a.ndim == 3 and b.ndim == 3 and a.shape[0] == b.shape[0]:
            x, y = a[:, :, 0], b[:, 0, :]
            k = ops._kernels  # one C loop (rlgrad._kernels.outers: 5x einsum at (256, 64, 64))
            out = np.empty(x.shape + y.shape[1:], np.result_type(x, y))
            if k is not None and k.outers(x, y, out):
                return out
            # einsum writes it faster than matmul, with the longer side innermost (its loop is
            # per row: (256, 64, 8) 2.4x faster as a (256, 8, 64) transposed)
            if y.shape[1] < x.shape[1]:
                return np.einsum("bj,bi->bji", y, x).transpose(0, 2, 1)
            return np.einsum("bi,bj->bij", x, y)
        return np.multiply(a, b)
    return np.matmul(a, b)


def _swap(x: Any) -> Any:
    return ops.swapaxes(x, -1, -2)


def _sum_to_shape(g: Any, shape: tuple[int, ...]) -> Any:
    return g if tuple(g.shape) == tuple(shape) else ops.sum_to(g, tuple(shape))


bmatmul = primitive(_bmatmul, "bmatmul", arity=2)
defvjp(bmatmul, lambda g, ans, a, b: _sum_to_shape(bmatmul(g, _swap(b)), a.shape),
       lambda g, ans, a, b: _sum_to_shape(bmatmul(_swap(a), g), b.shape))
defjvp(bmatmul, lambda t, ans, a, b: bmatmul(t, b), lambda t, ans, a, b: bmatmul(a, t))


def matmul_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """``a @ b`` per slice: vectors made matrices, the batched operands padded to one rank so
    NumPy's broadcasting pairs the slices, then ``bmatmul`` and the vector dimensions dropped."""
    (a, b), (da, db) = args, dims
    ra, rb = _rank(a, da), _rank(b, db)
    if ra == 0 or rb == 0:
        raise VmapError("vmap: matmul of a 0-d tensor; use multiply")
    va, vb = ra == 1, rb == 1
    if va:
        a = ops.reshape(a, ((level.size,) if da is not None else ()) + (1,) + _shape(a, da))
    if vb:
        b = ops.reshape(b, ((level.size,) if db is not None else ()) + _shape(b, db) + (1,))
    rank = max(ra + va, rb + vb)
    a = align(a, rank) if da is not None else a
    b = align(b, rank) if db is not None else b
    out = bmatmul(a, b)
    s = tuple(out.shape)
    if va and vb:
        return ops.reshape(out, s[:-2])
    if va:
        return ops.reshape(out, s[:-2] + s[-1:])
    return ops.reshape(out, s[:-1]) if vb else out


def _linear_logical(x: Any, weight: Any, bias: Any = None) -> Any:
    out = ops.matmul(x, _swap(weight))
    return out if bias is None else ops.add(out, bias)


def linear_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """``x @ W.T + b``: a batched input alone is a batch of rows (the op as is); a batched
    weight (an ensemble, or a weight under per-sample ``grad``) is one ``bmatmul`` of each
    slice's rows with its weight, then the bias; anything else goes through matmul's rule."""
    if kwargs:
        return decomposed(_linear_logical)(p, args, dims, level, **kwargs)
    if dims[0] is not None and all(d is None for d in dims[1:]):
        return p.call(*args)
    x, w = args[0], args[1]
    if dims[0] is None or dims[1] is None:
        return decomposed(_linear_logical)(p, args, dims, level)
    lead = _shape(x, 0)[:-1]
    rows = ops.reshape(x, (level.size, math.prod(lead), _shape(x, 0)[-1]))
    out = bmatmul(rows, _swap(w))
    out = ops.reshape(out, (level.size,) + lead + _shape(w, 0)[:1])
    if len(args) < 3 or args[2] is None:
        return out
    b, db = args[2], dims[2]
    return ops.add(out, align(b, len(lead) + 1) if db is not None else b)


def _grad_input_logical(g: Any, weight: Any) -> Any:
    return ops.matmul(g, weight)


def _grad_weight_logical(g: Any, x: Any) -> Any:
    g2 = ops.reshape(g, (-1, g.shape[-1]))
    return ops.matmul(_swap(g2), ops.reshape(x, (-1, x.shape[-1])))


def linear_grad_input_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    if dims[1] is None:
        return p.call(*args, **kwargs)
    return decomposed(_grad_input_logical)(p, args, dims, level)


def einsum_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """A new subscript letter for the vmapped dimension, on the batched operands and the output."""
    spec, ops_ = args[0], args[1:]
    ins, out = ops._einsum_parse(spec, [_shape(o, d) for o, d in zip(ops_, dims[1:])])
    used = set("".join(ins) + out)
    letter = next(c for c in "ZYXWVUTSRQPONMLKJIHGFEDCBAzyxwvutsrqponmlkjihgfedcba" if c not in used)
    ins = [letter + s if d is not None else s for s, d in zip(ins, dims[1:])]
    return p.call(",".join(ins) + "->" + letter + out, *ops_, **kwargs)


def solve_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    (a, b), (da, db) = args, dims
    a, b = bcast(a, da, level.size), bcast(b, db, level.size)
    if _rank(b, 0) == 1:  # a vector right-hand side: NumPy would read (B, n) as one matrix
        return ops.reshape(p.call(a, ops.reshape(b, tuple(b.shape) + (1,))), tuple(b.shape))
    rank = max(_rank(a, 0), _rank(b, 0))
    return p.call(align(a, rank), align(b, rank), **kwargs)


# ---- shape ops ----------------------------------------------------------------------------------
def _dims_of(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, int | np.integer) else tuple(int(s) for s in shape)


def reshape_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    return p.call(args[0], (level.size,) + _dims_of(args[1]), **kwargs)


def transpose_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    rank = _rank(args[0], 0)
    axes = _arg(args, kwargs, 1, "axes", None)
    new = tuple(range(rank, 0, -1)) if axes is None else tuple(int(a) % rank + 1 for a in axes)
    return p.call(args[0], (0,) + new)


def broadcast_to_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    shape = _dims_of(args[1])
    return p.call(align(args[0], len(shape)), (level.size,) + shape)


def sum_to_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    g, shape = args[0], _dims_of(args[1])
    extra = _rank(g, 0) - len(shape)
    if extra > 0:  # the leading axes of a slice that the target does not have
        g = ops.sum(g, axis=tuple(range(1, extra + 1)))
    return p.call(g, (level.size,) + shape)


def joined(stacking: bool) -> Callable:
    """concatenate / stack ``f(*arrays, axis=0)``: every operand batched, the axis shifted."""
    def rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
        new = [bcast(a, d, level.size) for a, d in zip(args, dims)]
        rank = _rank(new[0], 0) + stacking
        axis = int(kwargs.get("axis", 0))
        return p.call(*new, **{**kwargs, "axis": axis % rank + 1})

    return rule


def roll_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    x, shift = args[0], args[1]
    axis = _arg(args, kwargs, 2, "axis", None)
    if axis is None:  # NumPy rolls the flattened array
        return ops.reshape(p.call(_flat(x), shift, 1), tuple(x.shape))
    axes = _axes(axis, _rank(x, 0))
    return p.call(x, shift, axes if isinstance(axis, Sequence) else axes[0])


def tile_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    x, reps = args[0], _dims_of(args[1])
    n = max(len(reps), _rank(x, 0))
    return p.call(align(x, n), (1,) + (1,) * (n - len(reps)) + reps)


def repeat_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    x, repeats = args[0], args[1]
    axis = _arg(args, kwargs, 2, "axis", None)
    if axis is None:
        return p.call(_flat(x), repeats, 1)
    return p.call(x, repeats, _axes(axis, _rank(x, 0))[0])


def pad_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    x = args[0]
    widths = np.broadcast_to(np.asarray(args[1]), (_rank(x, 0), 2))
    return p.call(x, ((0, 0),) + tuple(tuple(int(v) for v in w) for w in widths), *args[2:], **kwargs)


def _diag_logical(x: Any, k: int = 0) -> Any:
    n = x.shape[-1]
    if len(x.shape) == 2:  # the k-th diagonal, read with two index arrays
        m = x.shape[0]
        i = np.arange(max(0, -k), min(m, n - k))
        return ops.getitem(x, (i, i + k))
    size = n + abs(k)
    i = np.arange(n) + max(0, -k)
    return ops.untake(x, (i, i + k), (size, size))


def matrices(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """Ops on the last two axes (triu, tril): a batch is one more leading axis."""
    if _rank(args[0], 0) < 2:
        raise VmapError(f"vmap: {p.name} of a 1-d slice; make it a matrix first")
    return p.call(*args, **kwargs)


def merge_first(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """Ops on a batch of images (conv2d, images_to_float): the vmapped dimension merged into
    the op's own batch (only the first argument may be batched)."""
    if any(d is not None for d in dims[1:]):
        raise VmapError(f"vmap: {p.name} with a batched argument beyond the first is not "
                        "batched; vmap over the first only")
    x = args[0]
    s = tuple(x.shape)
    out = p.call(ops.reshape(x, (s[0] * s[1],) + s[2:]), *args[1:], **kwargs)
    return ops.reshape(out, s[:2] + tuple(out.shape[1:]))


def _two(v: Any) -> tuple[int, int]:
    return (int(v), int(v)) if isinstance(v, int | np.integer) else (int(v[0]), int(v[1]))


def _conv2d_logical(x: Any, w: Any, bias: Any = None, stride: Any = 1, padding: Any = 0) -> Any:
    """conv2d as the ops it is made of, on one slice: the receptive fields read by one index
    (im2col), then a matmul with the flattened kernels. The rule of a batched weight, whose
    slices are batched by getitem's and matmul's rules (an unbatched weight: one GEMM)."""
    (sh, sw), (ph, pw) = _two(stride), _two(padding)
    n, c, h, wd = tuple(x.shape)
    o, _, kh, kw = tuple(w.shape)
    if ph or pw:
        x = ops.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh, ow = (h + 2 * ph - kh) // sh + 1, (wd + 2 * pw - kw) // sw + 1
    rows = (np.arange(oh) * sh)[:, None, None, None] + np.arange(kh)[:, None]
    cols = (np.arange(ow) * sw)[:, None, None] + np.arange(kw)
    fields = ops.getitem(x, (slice(None), slice(None), rows, cols))  # (n, c, oh, ow, kh, kw)
    fields = ops.reshape(ops.transpose(fields, (0, 2, 3, 1, 4, 5)), (n * oh * ow, c * kh * kw))
    out = ops.matmul(fields, ops.transpose(ops.reshape(w, (o, c * kh * kw))))
    out = ops.transpose(ops.reshape(out, (n, oh, ow, o)), (0, 3, 1, 2))
    return out if bias is None else ops.add(out, ops.reshape(bias, (o, 1, 1)))


def conv2d_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """A batched input alone: the vmapped dimension merged into the images' (one conv2d); a
    batched weight (an ensemble of CNNs, a weight under per-sample ``grad``): conv2d of the
    stack of kernels (one GEMM over them all for an unbatched input, see
    ``nn.functional._stacked_fwd``). A batched bias alone, or slices that are not one image
    batch and one kernel each (an outer vmap's), take ``_conv2d_logical`` (the reference)."""
    if all(d is None for d in dims[1:]):
        return merge_first(p, args, dims, level, **kwargs)
    x, w = args[0], args[1]
    b = args[2] if len(args) > 2 else None
    if (dims[1] is None or _rank(x, dims[0]) != 4 or _rank(w, dims[1]) != 4
            or any(type(a) is BatchedTensor for a in (x, w, b))):  # (an outer vmap's slices)
        return decomposed(_conv2d_logical)(p, args, dims, level, **kwargs)
    if b is not None:
        b = bcast(b, dims[2], level.size)
    return p.call(x, w, b, *args[3:], **kwargs)


def conv2d_input_grad_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """The transposed convolution (``conv_transpose2d``) of a batched input: the vmapped
    dimension merged into the images, as ``merge_first``; a batched weight is refused."""
    if dims[1] is not None:
        raise VmapError("vmap: conv_transpose2d with a batched weight is not batched; vmap over "
                        "the input only")
    g, xs = args[0], _dims_of(args[4])
    s = tuple(g.shape)
    out = p.call(ops.reshape(g, (s[0] * s[1],) + s[2:]), args[1], args[2], args[3],
                 (s[0] * xs[0],) + xs[1:], **kwargs)
    return ops.reshape(out, (s[0], xs[0]) + xs[1:])


# ---- indexing ---------------------------------------------------------------------------------
def _is_advanced(i: Any) -> bool:
    return isinstance(i, np.ndarray | list | Tensor) and not isinstance(i, BatchedTensor)


def _advanced_front(idx: tuple) -> int:
    """How many dimensions NumPy puts first for ``(slice(None),) + idx``: those of the advanced
    indices when they are separated (by a slice, ``None`` or ``...``), else none (the batch
    stays first)."""
    if any(type(i) is BatchedTensor for i in idx):
        raise _value_error("an index")
    adv = [k for k, i in enumerate(idx) if _is_advanced(i)]
    if not adv:
        return 0
    adv = [k for k, i in enumerate(idx) if _is_advanced(i) or isinstance(i, int | np.integer)]
    if adv[-1] - adv[0] + 1 == len(adv):
        return 0
    parts = []
    for i in idx:
        if _is_advanced(i) or isinstance(i, int | np.integer):
            a = np.asarray(i._value if isinstance(i, Tensor) else i)
            parts.extend(np.nonzero(a) if a.dtype == bool else [a])
    return np.broadcast(*parts).ndim if len(parts) > 1 else parts[0].ndim


_BASIC = (slice, type(None), type(Ellipsis))


def getitem_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    x, idx = args[0], args[1]
    idx = idx if isinstance(idx, tuple) else (batched(idx, level) if dims[1] is not None else idx,)
    if dims[1] is not None:  # a batched index: each slice reads with its own
        key, perm = _batched_key(idx, level, _rank(x, dims[0]))
        out = p.call(bcast(x, dims[0], level.size), key)
        return ops.transpose(out, perm) if perm else out
    out = p.call(x, (slice(None),) + idx)
    front = 0 if all(type(i) in _BASIC or type(i) is int for i in idx) else _advanced_front(idx)
    return ops.moveaxis(out, front, 0) if front else out


def untake_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    g, idx, shape = args[0], args[1], _dims_of(args[2])
    idx = idx if isinstance(idx, tuple) else (batched(idx, level) if dims[1] is not None else idx,)
    if dims[1] is not None:  # the adjoint of getitem_rule's batched read
        key, perm = _batched_key(idx, level, len(shape))
        g = bcast(g, dims[0], level.size)
        g = ops.transpose(g, tuple(np.argsort(perm))) if perm else g
        return p.call(g, key, (level.size,) + shape)
    front = _advanced_front(idx)
    g = ops.moveaxis(g, 0, front) if front else g
    return p.call(g, (slice(None),) + idx, (level.size,) + shape)


def _batched_key(idx: tuple, level: Level, rank: int) -> tuple[tuple, tuple[int, ...] | None]:
    """NumPy index ``idx`` of one slice (of ``rank`` dimensions), some entries batched at
    ``level``, as one index of the physical tensor: ``arange(size)`` first, paired with each
    batched entry's physical tensor. NumPy then puts every advanced dimension first (the batch
    among them); ``perm`` (or None) moves them where the slice's own indexing puts them."""
    idx = tuple(e for i in idx for e in (np.nonzero(i) if _is_mask(i) else (i,)))
    shapes, places = [], []
    for k, i in enumerate(idx):
        if type(i) is BatchedTensor and i._level is level:
            if i.dtype == np.bool_:
                raise VmapError("vmap: indexing with a batched boolean mask has a shape that "
                                "differs between slices, which vmap cannot batch (torch.func "
                                "refuses it too); use rlgrad.where(mask, x, other)")
            shapes.append(_shape(i, None))
        elif isinstance(i, int | np.integer) or _is_advanced(i) or type(i) is BatchedTensor:
            shapes.append(tuple(np.shape(i)) if not isinstance(i, Tensor) else tuple(i.shape))
        else:
            continue
        places.append(k)
    nd = len(np.broadcast_shapes(*shapes))
    key: list[Any] = [np.arange(level.size).reshape((level.size,) + (1,) * nd)]
    for i in idx:
        if type(i) is BatchedTensor and i._level is level:
            s = _shape(i, None)
            i = ops.reshape(i._phys, (level.size,) + (1,) * (nd - len(s)) + s)
            i = i._value if type(i) is Tensor else i  # a plain index array for NumPy
        key.append(i)
    if not nd or places[-1] - places[0] + 1 != len(places):
        return tuple(key), None  # per slice too the advanced dimensions come first
    before = 0
    for i in idx[:places[0]]:
        before += rank - sum(j is not None and j is not Ellipsis for j in idx) if i is Ellipsis else 1
    if not before:
        return tuple(key), None
    out_rank = 1 + nd + rank - len(places) + sum(j is None for j in idx)
    rest = list(range(1 + nd, out_rank))
    return tuple(key), (0, *rest[:before], *range(1, 1 + nd), *rest[before:])


def _is_mask(i: Any) -> bool:
    return isinstance(i, np.ndarray) and i.dtype == np.bool_


def take_along_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    x, idx = bcast(args[0], dims[0], level.size), bcast(args[1], dims[1], level.size)
    axis = _arg(args, kwargs, 2, "axis", -1)
    if axis is None:
        return p.call(_flat(x), _flat(idx), 1)
    return p.call(x, idx, _axes(axis, _rank(x, 0))[0])


def scatter_along_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    src, idx = bcast(args[0], dims[0], level.size), bcast(args[1], dims[1], level.size)
    axis, shape = args[2], _dims_of(args[3])
    return p.call(src, idx, int(axis) % len(shape) + 1, (level.size,) + shape)


def rows_rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """``write_rows``/``written_rows``: the index's leading axes are batch axes already; the vmapped
    one joins them in front."""
    return p.call(*(bcast(a, d, level.size) for a, d in zip(args, dims)), **kwargs)


# ---- fused losses and the rest ------------------------------------------------------------------
def loss(pos: int) -> Callable:
    """A fused loss ``f(input, target, ..., reduction)`` (``reduction`` at position ``pos``):
    per element, then reduced over each slice."""
    def rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
        red = _arg(args, kwargs, pos, "reduction", "mean")
        args, kwargs = _set(args, kwargs, pos, "reduction", "none")
        out = elementwise(p, args, dims, level, **kwargs)
        if red == "none":
            return out
        axes = tuple(range(1, len(out.shape)))
        return ops.sum(out, axis=axes) if red == "sum" else ops.mean(out, axis=axes)

    return rule


def first_value(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
    """``f(v, *sources) = v`` (a marker on the graph): ``v`` batched, the sources as they are."""
    return p.call(bcast(args[0], dims[0], level.size), *args[1:], **kwargs)


def _pick_logical(table: Any, idx: Any) -> Any:
    col = ops.reshape(idx, (-1, 1))
    return ops.reshape(ops.take_along_axis(table, col, 1), (-1,))


def _unpick_logical(g: Any, idx: Any, k: int) -> Any:
    n = idx.shape[0]
    return ops.scatter_along_axis(ops.reshape(g, (-1, 1)), ops.reshape(idx, (-1, 1)), 1, (n, k))


def _surrogate_logical(log_prob: Any, old_log_prob: Any, adv: Any, clip: Any, w: Any) -> Any:
    ratio = ops.exp(ops.subtract(log_prob, old_log_prob))
    clipped = ops.clip(ratio, 1 - clip, 1 + clip)
    terms = ops.minimum(ops.multiply(adv, ratio), ops.multiply(adv, clipped))
    return ops.negative(ops.sum(ops.multiply(w, terms)))


#: the generic rules a declaration names (``defbatch(fn, "reduce")``), and the own rules of the
#: primitives declared before this module (ops.py, nn.functional ...), named after them
RULES: dict[str, Callable] = {
    "elementwise": elementwise,
    "reduce": reduce,
    "argreduce": argreduce,
    "scan": along(None, "flat"),  # cumsum, logcumsumexp: axis=None is the flattened slice
    "last_axis": along(-1, "flat"),  # softmax, log_softmax, argsort
    "flip": along(None, "all"),
    "leading": leading,
    "matrices": matrices,
    "merge_first": merge_first,
    "conv2d": conv2d_rule,
    "conv2d_input_grad": conv2d_input_grad_rule,
    "first_value": first_value,
    "matmul": matmul_rule,
    "linear": linear_rule,
    "linear_grad_input": linear_grad_input_rule,
    "linear_grad_weight": decomposed(_grad_weight_logical),
    "einsum": einsum_rule,
    "solve": solve_rule,
    "reshape": reshape_rule,
    "transpose": transpose_rule,
    "broadcast_to": broadcast_to_rule,
    "sum_to": sum_to_rule,
    "concatenate": joined(False),
    "stack": joined(True),
    "roll": roll_rule,
    "tile": tile_rule,
    "repeat": repeat_rule,
    "pad": pad_rule,
    "diag": decomposed(_diag_logical),
    "getitem": getitem_rule,
    "untake": untake_rule,
    "take_along_axis": take_along_rule,
    "scatter_along_axis": scatter_along_rule,
    "rows": rows_rule,
    "mse_loss": loss(2),
    "huber_loss": loss(3),
    "categorical_pick": decomposed(_pick_logical),
    "categorical_unpick": decomposed(_unpick_logical),
    "ppo_clipped_surrogate": decomposed(_surrogate_logical),
}
defbatch(bmatmul, "matmul")
tracer._batched[:] = [dispatch]
tensor_module.BATCHED_COPY[:] = [copy_of]


# ---- vmap itself --------------------------------------------------------------------------------
def open_level(size: int, randomness: str) -> Level:
    level = Level(size, len(tracer.VMAP_LEVELS) + 1, randomness)
    tracer.VMAP_LEVELS.append(level)
    return level


def close_level(level: Level) -> None:
    if not tracer.VMAP_LEVELS or tracer.VMAP_LEVELS[-1] is not level:
        raise VmapError("vmap: levels closed out of order (a batched tensor escaped its vmap?)")
    tracer.VMAP_LEVELS.pop()


def as_tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else tensor_of(x)


def to_front(x: Any, dim: int, level: Level) -> BatchedTensor:
    """Input ``x`` vmapped over its dimension ``dim``: a BatchedTensor of ``level``."""
    x = as_tensor(x)
    if dim != 0:
        x = ops.moveaxis(x, dim, 0)
    return batched(x, level)


def from_level(x: Any, level: Level, out_dim: int | None) -> Any:
    """Output ``x`` of the vmapped function: its slices stacked along ``out_dim`` (an output
    the vmapped dimension does not reach is repeated, as torch's and JAX's vmap do)."""
    if out_dim is None:
        if type(x) is BatchedTensor and x._level is level:
            raise VmapError("vmap: out_dims is None for an output that differs between slices; "
                            "give it an output dimension")
        return x
    phys = physical_at(x, level)
    return ops.moveaxis(phys, 0, out_dim) if out_dim != 0 else phys


def physical_at(x: Any, level: Level) -> Any:
    """``x``'s physical tensor at ``level`` (a broadcast copy if it is not batched there)."""
    if type(x) is BatchedTensor and x._level is level:
        return x._phys
    return bcast(as_tensor(x), None, level.size)


def to_physical(x: Any, levels: Sequence[Level]) -> Tensor:
    """``x`` as a plain tensor with one leading dimension per level of ``levels`` (outermost
    first): its own batches, and a broadcast copy along the levels it is not batched at."""
    x = as_tensor(x)
    for level in reversed(levels):
        x = physical_at(x, level)
    return x


def rewrap(x: Any, levels: Sequence[Level]) -> Any:
    """The inverse of ``to_physical``: a tensor whose leading dimensions are ``levels``'."""
    x = as_tensor(x)
    for level in levels:
        x = batched(x, level)
    return x


def batch_size(sizes: list[int], where: str) -> int:
    if not sizes:
        raise ValueError(f"{where}: no input is vmapped (every in_dims entry is None); map "
                         "over at least one tensor")
    if len(set(sizes)) > 1:
        raise ValueError(f"{where}: the vmapped dimensions have different sizes {sorted(set(sizes))}; "
                         "every mapped input must have the same size there")
    if sizes[0] == 0:
        raise ValueError(f"{where}: the vmapped dimension has size 0; vmap needs at least one slice")
    return sizes[0]


"""A differentiable NumPy namespace: ``import rlgrad.numpy as np`` and write NumPy.

On plain arrays every function returns NumPy's own result with no tracing; on Tensors it records
the operation.  The primitives (forward and gradient) live in ``rlgrad/ops.py``; the functions
defined here are compositions of them, so their gradients follow.
"""

from __future__ import annotations

import builtins as _builtins
import functools as _functools
import math as _math
from typing import TYPE_CHECKING, Any, cast, overload

import numpy as _np

# Constants, dtypes and array constructors are NumPy's own (creation is not differentiable).
from numpy import (  # noqa: E402,F401
    arange,
    bool_,
    broadcast_shapes,
    complex64,
    complex128,
    dtype,
    e,
    empty,
    empty_like,
    eye,
    finfo,
    float16,
    float32,
    float64,
    full_like,
    identity,
    iinfo,
    inf,
    int8,
    int16,
    int32,
    int64,
    ix_,
    nan,
    ndarray,
    newaxis,
    ones,
    ones_like,
    pi,
    ravel_multi_index,
    uint8,
    unravel_index,
    zeros,
    zeros_like,
)

from rlgrad import exports as _exports
from rlgrad import ops as _ops
from rlgrad import tracer as _tracer
from rlgrad.numpy import linalg  # noqa: E402,F401
from rlgrad.ops import array_from as _array_from
from rlgrad.ops import holds_tensor as _holds_tensor
from rlgrad.tensor import Tensor as _Tensor
from rlgrad.tensor import _Trace
from rlgrad.tensor import constant as _constant
from rlgrad.tracer import defbatch as _defbatch
from rlgrad.tracer import nobatch as _nobatch
from rlgrad.tracer import primitive as _primitive

# The primitives under NumPy's names: each declared once, beside its rules (``export`` in ops.py,
# or in a module imported later); this module's own definitions below are compositions of them.
_exports.on_export(lambda e: _exports.add_names(globals(), e.numpy, e.fn, "rlgrad.numpy"))
if TYPE_CHECKING:  # those names as the checker sees them (generated: rlgrad/_stubs.py)
    from collections.abc import Sequence

    from rlgrad.numpy._declared import *  # noqa: F403
    from rlgrad.typing import Array, ArrayLike, Axis, DTypeLike, PadMode, PadWidth, ShapeLike


def _numpy_on_arrays(np_fn: Any) -> Any:
    """Decorate a composition of primitives: with no Tensor among its arguments (nor inside a
    list or tuple of them) NumPy's own function runs, so plain arrays get NumPy's exact result
    (values, dtype, type, and every form of the signature)."""

    def decorate(fn: Any) -> Any:
        @_functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _has_tensor(args) or (kwargs and _has_tensor(kwargs.values())):
                return fn(*args, **kwargs)
            return np_fn(*args, **kwargs)

        return wrapper

    return decorate


def _has_tensor(xs: Any) -> bool:
    for x in xs:  # (not ``any``: this module defines NumPy's any)
        if isinstance(x, _Tensor) or (isinstance(x, list | tuple) and _has_tensor(x)):
            return True
    return False


def shape(a: ArrayLike) -> tuple[int, ...]:
    return a.shape if isinstance(a, _Tensor) else _np.shape(a)


def ndim(a: ArrayLike) -> int:
    return a.ndim if isinstance(a, _Tensor) else _np.ndim(a)


def size(a: ArrayLike, axis: int | None = None) -> int:
    if isinstance(a, _Tensor):
        return a._value.size if axis is None else a.shape[axis]
    return _np.size(a, axis)


def _is_traced(*xs: Any) -> bool:
    for x in xs:  # (not ``any``: this module defines NumPy's any)
        if isinstance(x, _Tensor):
            return True
    return False


@_numpy_on_arrays(_np.fabs)
def fabs(x: ArrayLike) -> Array:
    return _ops.absolute(x)


@_numpy_on_arrays(_np.positive)
def positive(x: ArrayLike) -> Array:
    return cast(_Tensor, x)  # (NumPy input took NumPy's path: a Tensor here, for the checker)


@_numpy_on_arrays(_np.sinc)
def sinc(x: ArrayLike) -> Array:
    y = pi * _ops.where(_ops.equal(x, 0), 1.0e-20, x)
    return _ops.sin(y) / y
_exports.export(sinc, torch="sinc()", top=True, promote="float")


def array(object: ArrayLike, *args: Any, **kwargs: Any) -> Array:  # noqa: A002 - NumPy's name
    """NumPy's array; of Tensors, or lists nesting Tensors with arrays and scalars, differentiable
    in each Tensor (autograd's and JAX's), as NumPy's dtype and shape."""
    if _holds_tensor(object):
        return _array_from(object, True, *args, **kwargs)
    return _np.array(object, *args, **kwargs)


def asarray(a: ArrayLike, *args: Any, **kwargs: Any) -> Array:
    """NumPy's asarray; a Tensor of the asked dtype is returned itself, lists holding Tensors
    are built as ``array`` builds them."""
    if isinstance(a, _Tensor) and len(args) <= 1 and set(kwargs) <= {"dtype"}:
        # without reading values (as jnp.asarray of a tracer): a vmapped tensor has none
        want = kwargs.get("dtype", args[0] if args else None)
        return a if want is None or a.dtype == _np.dtype(want) else _ops.astype(a, _np.dtype(want))
    if _holds_tensor(a):
        return _array_from(a, False, *args, **kwargs)
    return _np.asarray(a, *args, **kwargs)


def _listed(x: Any) -> Any:
    """A list or tuple holding Tensors as one array (autograd's mean/std/var of lists)."""
    return _array_from(x, False) if type(x) in (list, tuple) and _holds_tensor(x) else x


@_numpy_on_arrays(_np.var)
def var(x: ArrayLike, axis: Axis = None, dtype: DTypeLike = None, out: None = None, ddof: int = 0,
        keepdims: bool = False) -> Array:
    if out is not None:
        raise TypeError("rlgrad.numpy.var does not take out=")
    xs = _listed(x)
    if not _is_traced(xs):
        return _np.var(xs, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    shape = _np.shape(xs._value)  # n from the shape alone (a vmapped x has no values to sum)
    kept = () if axis is None else tuple(s for i, s in enumerate(shape) if i not in {
        a % len(shape) for a in ((axis,) if isinstance(axis, int) else axis)})
    n = _math.prod(shape) // (_math.prod(kept) or 1)  # (3, 0) over 0: n = 0
    centred = xs - _ops.mean(xs, axis=axis, keepdims=True)
    # a float: no n - ddof <= 0 ZeroDivisionError, NumPy's inf/nan instead (float32 stays so)
    return _ops.sum(centred * centred, axis=axis, keepdims=keepdims) / float(_builtins.max(n - ddof, 0))


@_numpy_on_arrays(_np.std)
def std(x: ArrayLike, axis: Axis = None, dtype: DTypeLike = None, out: None = None, ddof: int = 0,
        keepdims: bool = False) -> Array:
    xs = _listed(x)
    if not _is_traced(xs):
        return _np.std(xs, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
    return _std_from_var(var(xs, axis=axis, ddof=ddof, keepdims=keepdims))


def _std_from_var(v: Any) -> Any:
    """sqrt(v) with gradient 0 where v == 0 (as torch's std): there d sqrt = dv / 0, and dv is 0
    (one element, or all equal: a kink whose subgradient 0 is taken), which gave 0 * inf = NaN."""
    zero = _ops.equal(v, 0)
    return _ops.where(zero, 0.0, _ops.sqrt(_ops.where(zero, 1.0, v)))


@_numpy_on_arrays(_np.average)
def average(a: ArrayLike, axis: Axis = None, weights: ArrayLike | None = None) -> Array:
    if weights is None:
        return _ops.mean(a, axis=axis)
    dt = a.dtype if isinstance(a, _Tensor) else _np.result_type(a)  # (a vmapped a: no values)
    # (NumPy input took NumPy's path: a Tensor is among a and weights; the operators dispatch)
    full_weights = cast(_Tensor, weights) * _np.ones(_np.shape(_d(a)), dtype=dt)
    return _ops.sum(cast(_Tensor, a) * weights, axis=axis) / _ops.sum(full_weights, axis=axis)


@_numpy_on_arrays(_np.dot)
def dot(a: ArrayLike, b: ArrayLike) -> Array:
    """NumPy's dot for 0-, 1- and 2-D operands, and its N-D rule through tensordot."""
    if _np.ndim(_d(a)) == 0 or _np.ndim(_d(b)) == 0:
        return _ops.multiply(_strong(a), _strong(b))
    if _np.ndim(_d(b)) <= 2:
        return _ops.matmul(a, b)
    return tensordot(a, b, axes=([-1], [-2]))


def _strong(x: Any) -> Any:
    """A Python number as the 0-d array NumPy's dot and inner make of it (so float32 * 0.5 is
    float64 there, as in NumPy)."""
    return _np.asarray(x) if isinstance(x, int | float | complex) else x


def _d(x: Any) -> Any:
    return x._value if isinstance(x, _Tensor) else x


@_numpy_on_arrays(_np.vdot)
def vdot(a: ArrayLike, b: ArrayLike) -> Array:
    return _ops.sum(_ops.ravel(a) * _ops.ravel(b))


@_numpy_on_arrays(_np.inner)
def inner(a: ArrayLike, b: ArrayLike) -> Array:
    if _np.ndim(_d(a)) == 0 or _np.ndim(_d(b)) == 0:
        return _ops.multiply(_strong(a), _strong(b))
    return tensordot(a, b, axes=([-1], [-1]))
_exports.export(inner, torch="inner(other, /)", top=True)


@_numpy_on_arrays(_np.outer)
def outer(a: ArrayLike, b: ArrayLike) -> Array:
    return _ops.expand_dims(_ops.ravel(a), 1) * _ops.expand_dims(_ops.ravel(b), 0)
_exports.export(outer, torch="outer(vec2, /)", top=True)


@_numpy_on_arrays(_np.tensordot)
def tensordot(a: ArrayLike, b: ArrayLike,
              axes: int | tuple[int | Sequence[int], int | Sequence[int]] = 2) -> Array:
    na, nb = _np.ndim(_d(a)), _np.ndim(_d(b))
    if isinstance(axes, int):
        ax_a = list(range(na - axes, na))
        ax_b = list(range(axes))
    else:
        pair_a, pair_b = axes
        ax_a = [pair_a] if isinstance(pair_a, int) else list(pair_a)
        ax_b = [pair_b] if isinstance(pair_b, int) else list(pair_b)
    ax_a = [x % na for x in ax_a]
    ax_b = [x % nb for x in ax_b]
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    sa = [next(letters) for _ in range(na)]
    sb = [next(letters) for _ in range(nb)]
    for i, j in zip(ax_a, ax_b):
        sb[j] = sa[i]
    out = [c for i, c in enumerate(sa) if i not in ax_a] + [c for j, c in enumerate(sb) if j not in ax_b]
    return einsum(f"{''.join(sa)},{''.join(sb)}->{''.join(out)}", a, b)


@overload
def einsum(subscripts: str, /, *operands: _Tensor, **kwargs: Any) -> _Tensor: ...
@overload
def einsum(*operands: ArrayLike | str | Sequence[int], **kwargs: Any) -> Array: ...
def einsum(*operands: Any, **kwargs: Any) -> Array:
    """NumPy's einsum, in the subscripts form and the sublist form
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` (turned into subscripts, so both differentiate)."""
    if not _has_tensor(operands):
        return _np.einsum(*operands, **kwargs)
    kwargs.pop("optimize", None)  # (the primitive picks its own contraction order)
    if kwargs:
        raise TypeError(f"rlgrad.numpy.einsum on Tensors takes no {sorted(kwargs)}")
    if isinstance(operands[0], str):
        return _ops.einsum(*operands)
    arrays, subs = list(operands[0::2]), [list(s) for s in operands[1::2]]
    out = list(arrays.pop()) if len(operands) % 2 else None  # odd: the last is the output
    spec = ",".join(_einsum_letters(s) for s in subs)
    if out is not None:
        spec += "->" + _einsum_letters(out)
    return _ops.einsum(spec, *arrays)


def _einsum_letters(sublist: list[Any]) -> str:
    chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return "".join("..." if s is Ellipsis else chars[int(s)] for s in sublist)


@_numpy_on_arrays(_np.trace)
def trace(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
    if not _is_traced(a):
        return _np.trace(a, offset, axis1, axis2)
    return _ops.sum(diagonal(a, offset, axis1, axis2), axis=-1)
_exports.export(trace, torch="trace()", top=True, promote="int64")


@_numpy_on_arrays(_np.diagonal)
def diagonal(a: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
    """NumPy's diagonal: the diagonal of the (axis1, axis2) planes, as the last axis."""
    nd = _np.ndim(_d(a))
    if nd == 2 and (axis1 % 2, axis2 % 2) == (0, 1):
        return _ops.diag(a, offset)
    if not _is_traced(a):
        return _np.diagonal(a, offset, axis1, axis2)
    b = _ops.moveaxis(a, (axis1, axis2), (-2, -1))
    n, m = _np.shape(b._value)[-2:]
    length = _np.clip(_np.minimum(n, m - offset) if offset >= 0 else _np.minimum(n + offset, m), 0, None)
    k = _np.arange(length)
    return b[..., k + _np.maximum(-offset, 0), k + _np.maximum(offset, 0)]
_exports.export(diagonal, torch="diagonal(offset=0, dim1: axis1 = 0, dim2: axis2 = 1)", top=True)


@_numpy_on_arrays(_np.split)
def split(ary: ArrayLike, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Array]:
    n = _np.shape(_d(ary))[axis]
    if isinstance(indices_or_sections, int):
        if n % indices_or_sections:
            raise ValueError("array split does not result in an equal division")
        step = n // indices_or_sections
        bounds = list(range(0, n + 1, step))
    else:
        bounds = [0, *list(indices_or_sections), n]
    ax = axis % _np.ndim(_d(ary))
    pre = (slice(None),) * ax
    ary = cast(_Tensor, ary)  # (NumPy input took NumPy's path: a Tensor here, for the checker)
    return [ary[pre + (slice(lo, hi),)] for lo, hi in zip(bounds[:-1], bounds[1:])]


@_numpy_on_arrays(_np.array_split)
def array_split(ary: ArrayLike, sections: int | Sequence[int], axis: int = 0) -> list[Array]:
    if not isinstance(sections, int | _np.integer):  # split points: as split, without its check
        return split(ary, list(sections), axis)
    if sections <= 0:
        raise ValueError("number sections must be larger than 0.")
    n = _np.shape(_d(ary))[axis]
    sizes = [n // sections + (1 if i < n % sections else 0) for i in range(sections)]
    return split(ary, list(_np.cumsum(sizes)[:-1]), axis)


@_numpy_on_arrays(_np.hstack)
def hstack(tup: Sequence[ArrayLike]) -> Array:
    arrays = [atleast_1d(t) for t in tup]  # (a 1-D tensor's elements are 0-d: NumPy's rule)
    return _ops.concatenate(arrays, axis=0 if _np.ndim(_d(arrays[0])) == 1 else 1)


@_numpy_on_arrays(_np.vstack)
def vstack(tup: Sequence[ArrayLike]) -> Array:
    return _ops.concatenate([atleast_2d(t) for t in tup], axis=0)


@_numpy_on_arrays(_np.atleast_1d)
def atleast_1d(*arys: Any) -> Array | tuple[Array, ...]:
    out = tuple(_ops.reshape(x, (1,)) if _np.ndim(_d(x)) == 0 else x for x in arys)
    return out[0] if len(out) == 1 else out


@_numpy_on_arrays(_np.atleast_2d)
def atleast_2d(*arys: Any) -> Array | tuple[Array, ...]:
    out = tuple(_ops.reshape(x, (1,) * (2 - _np.ndim(_d(x))) + _np.shape(_d(x))) if _np.ndim(_d(x)) < 2
                else x for x in arys)
    return out[0] if len(out) == 1 else out


@_numpy_on_arrays(_np.take)
def take(a: ArrayLike, indices: ArrayLike, axis: int | None = None) -> Array:
    """``np.take``: like ``a[indices]`` along ``axis`` (the flattened array when None)."""
    idx = _np.asarray(_d(indices))
    if idx.dtype.kind not in "iu":
        raise TypeError(f"take: indices must be integers, got {idx.dtype}")
    if axis is None:
        n = _np.size(_d(a))
        if idx.size and (idx.min() < -n or idx.max() >= n):  # name the shape, not the raveled one
            bad = idx[(idx < -n) | (idx >= n)].flat[0]
            raise IndexError(f"take: index {int(bad)} is out of bounds for size {n} (flattened "
                             f"from a tensor of shape {_np.shape(_d(a))})")
    # index with the tensor: rlgrad.jit reads it at every call
    key = indices if isinstance(indices, _Tensor) else idx
    if axis is None:
        return _ops.ravel(a)[key]
    ax = axis % _np.ndim(_d(a))
    return cast(_Tensor, a)[(slice(None),) * ax + (key,)]  # (NumPy input took NumPy's path)


_REMAP_PAD_MODES = ("edge", "reflect", "symmetric", "wrap")  # each output copies an input element


@overload
def pad(array: _Tensor, pad_width: PadWidth, mode: PadMode = "constant",
        constant_values: ArrayLike = 0, **kwargs: Any) -> _Tensor: ...
@overload
def pad(array: ArrayLike, pad_width: PadWidth, mode: PadMode = "constant",
        constant_values: ArrayLike = 0, **kwargs: Any) -> Array: ...
def pad(array: ArrayLike, pad_width: PadWidth, mode: PadMode = "constant",
        constant_values: ArrayLike = 0, **kwargs: Any) -> Array:
    if not isinstance(array, _Tensor):
        extra = {"constant_values": constant_values} if mode == "constant" else {}
        return _np.pad(array, pad_width, mode=mode, **extra, **kwargs)  # type: ignore[call-overload]
    if mode in _REMAP_PAD_MODES and not kwargs:  # a gather: pad the indices, then index
        widths = _np.broadcast_to(_np.asarray(pad_width), (array.ndim, 2))
        idx = [_np.pad(_np.arange(n), (int(lo), int(hi)), mode=mode)
               for n, (lo, hi) in zip(array.shape, widths)]
        return array[_np.ix_(*idx)]
    if kwargs:
        raise NotImplementedError(f"rlgrad.numpy.pad on Tensors takes no {sorted(kwargs)}")
    return _ops.pad(array, pad_width, mode=mode, constant_values=constant_values)


def sort(a: ArrayLike, axis: int = -1) -> Array:
    if not _is_traced(a):
        return _np.sort(a, axis=axis)
    return _ops.take_along_axis(a, _ops.argsort(a, axis=axis), axis=axis)  # recorded: jit recomputes it


def cumprod(a: ArrayLike, axis: int | None = None) -> Array:
    if not isinstance(a, _Tensor):
        return _np.cumprod(_np.asarray(a), axis=axis)
    # (jit, vmap: no branch on the first values, or one slice's)
    if not _Trace.compiling and not _batched_arg(a) and _np.all(a._value > 0):
        return _ops.exp(_ops.cumsum(_ops.log(a), axis=axis))
    return _cumprod_general(a, axis)
_exports.export(cumprod, torch="cumprod(dim, *, dtype=None)", top=True, promote="int64")


def _cumprod_general(a: Any, axis: Any) -> Any:
    if axis is None:
        a, axis = _ops.ravel(a), 0
    parts = split(a, _np.shape(a._value)[axis], axis)
    acc = [parts[0]]
    for p in parts[1:]:
        acc.append(acc[-1] * p)
    return _ops.concatenate(acc, axis)


def diff(a: ArrayLike, n: int = 1, axis: int = -1) -> Array:
    """NumPy's n-th discrete difference along ``axis``."""
    if not isinstance(a, _Tensor):
        return _np.diff(a, n=n, axis=axis)
    ax = axis % a.ndim
    pre = (slice(None),) * ax
    for _ in range(n):
        a = a[pre + (slice(1, None),)] - a[pre + (slice(None, -1),)]
    return a
_exports.export(diff, torch="diff(n=1, dim=-1)", top=True)


def log2(x: ArrayLike) -> Array:
    # (math's log: a Python float, which does not make float32 float64)
    return _np.log2(x) if not _is_traced(x) else _ops.log(x) * (1 / _math.log(2))
_exports.export(log2, torch="log2()", top=True, promote="float")


def log10(x: ArrayLike) -> Array:
    return _np.log10(x) if not _is_traced(x) else _ops.log(x) * (1 / _math.log(10))
_exports.export(log10, torch="log10()", top=True, promote="float")


def exp2(x: ArrayLike) -> Array:
    return _np.exp2(x) if not isinstance(x, _Tensor) else _ops.exp(x * _math.log(2))
_exports.export(exp2, torch="exp2()", top=True, promote="float")


# Boolean- and index-valued functions: no gradient exists, so on Tensors they run on the values.
# While rlgrad.jit traces, a fixed-shape one is recorded (the step recomputes it from the live
# values, and bool() of it raises jit's error); one whose shape depends on the values is refused.
def _on_values(np_fn: Any, fixed_shape: bool = True, batch: str | None = "elementwise") -> Any:
    recorded = _primitive(np_fn, np_fn.__name__, nondiff=True) if fixed_shape else None
    if recorded is not None and batch is not None:
        _defbatch(recorded, batch)  # vmap: the values of a batched tensor go through its rule
    elif recorded is not None:
        _nobatch(recorded, f"{np_fn.__name__} is not batched; call it outside vmap")

    def fn(*args: Any, **kwargs: Any) -> Any:
        if _tracer.VMAP_LEVELS and _batched_arg(*args, *kwargs.values()):
            if recorded is None:
                from rlgrad.batching import VmapError

                raise VmapError(f"vmap: {np_fn.__name__} of a batched tensor gives a shape that "
                                "depends on the values; use rlgrad.where with a mask instead")
            return recorded(*args, **kwargs)
        if _Trace.compiling and _is_traced(*args, *kwargs.values()):
            if recorded is None or _is_traced(*kwargs.values()):
                raise RuntimeError(
                    f"rlgrad.jit: {np_fn.__name__} of a traced tensor"
                    + (" gives a result whose shape depends on the values, which" if recorded is
                       None else " with a tensor keyword argument") + " a compiled step cannot "
                    "replay; use rlgrad.numpy.where with a mask instead, or call it outside jit")
            return recorded(*args, **kwargs)
        return np_fn(*(_raw(x) for x in args), **{k: _raw(v) for k, v in kwargs.items()})

    fn.__name__ = fn.__qualname__ = np_fn.__name__
    fn.__doc__ = f"NumPy's ``{np_fn.__name__}`` (its result carries no gradient); Tensors accepted."
    return fn


def _batched_arg(*args: Any) -> bool:
    from rlgrad.batching import BatchedTensor

    return _builtins.any(type(a) is BatchedTensor for a in args)


all = _on_values(_np.all, batch="reduce")  # noqa: A001
any = _on_values(_np.any, batch="reduce")  # noqa: A001
count_nonzero = _on_values(_np.count_nonzero, batch="reduce")
nonzero = _on_values(_np.nonzero, fixed_shape=False)
flatnonzero = _on_values(_np.flatnonzero, fixed_shape=False)
argwhere = _on_values(_np.argwhere, fixed_shape=False)
searchsorted = _on_values(_np.searchsorted, batch=None)
signbit = _on_values(_np.signbit)
isposinf = _on_values(_np.isposinf)
isneginf = _on_values(_np.isneginf)


@_numpy_on_arrays(_np.nan_to_num)
def nan_to_num(x: ArrayLike, copy: bool = True, nan: float = 0.0, posinf: float | None = None,  # noqa: A002
               neginf: float | None = None) -> Array:
    """NumPy's: NaN becomes ``nan``, +-inf the largest finite numbers of the dtype (or
    ``posinf``/``neginf``); the gradient flows where the value is kept."""
    info = _np.finfo(_np.result_type(_d(x)))
    big = info.max if posinf is None else posinf
    small = info.min if neginf is None else neginf
    out = _ops.where(_ops.isnan(x), nan, x)
    return _ops.where(isposinf(x), big, _ops.where(isneginf(x), small, out))
_exports.export(nan_to_num, torch="nan_to_num(nan=0.0, posinf=None, neginf=None)", top=True)


@_numpy_on_arrays(_np.heaviside)
def heaviside(x: ArrayLike, h0: ArrayLike) -> Array:
    step = _ops.astype(_ops.greater(x, 0), _np.result_type(_d(x)))  # x's dtype: float32 stays float32
    # NaN stays NaN (NumPy's)
    return _ops.where(_ops.isnan(x), _np.nan, _ops.where(_ops.equal(x, 0), h0, step))
_exports.export(heaviside, torch="heaviside(values, /)", top=True)


def sigmoid(x: ArrayLike) -> Array:
    """Not NumPy's, but what every network needs (SciPy's ``expit``)."""
    return _ops.sigmoid(x)


expit = sigmoid


# ---- Constants shaped like an array, and predicates: no gradient to carry, Tensors accepted -------
# (autograd code writes np.zeros_like(x) on traced values all the time)
def _raw(x: Any) -> Any:
    return x._value if isinstance(x, _Tensor) else x


def _constant_like(np_fn: Any) -> Any:
    def fn(a: Any, *args: Any, **kwargs: Any) -> Any:
        out = np_fn(_raw(a), *args, **kwargs)
        return _constant(_np.asarray(out)) if isinstance(a, _Tensor) else out

    fn.__name__ = fn.__qualname__ = np_fn.__name__
    fn.__doc__ = f"NumPy's ``{np_fn.__name__}``; on a Tensor, a constant Tensor of its dtype."
    return fn


zeros_like = _constant_like(_np.zeros_like)
ones_like = _constant_like(_np.ones_like)
empty_like = _constant_like(_np.empty_like)
full_like = _constant_like(_np.full_like)


def result_type(*arrays_and_dtypes: Any) -> _np.dtype:
    return _np.result_type(*(_raw(x) for x in arrays_and_dtypes))


def allclose(a: ArrayLike, b: ArrayLike, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    return bool(_np.allclose(_raw(a), _raw(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


def array_equal(a1: ArrayLike, a2: ArrayLike, equal_nan: bool = False) -> bool:
    return bool(_np.array_equal(_raw(a1), _raw(a2), equal_nan=equal_nan))


def isclose(a: ArrayLike, b: ArrayLike, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Array:
    out = _np.isclose(_raw(a), _raw(b), rtol=rtol, atol=atol, equal_nan=equal_nan)
    return _constant(_np.asarray(out)) if _is_traced(a, b) else out


# ---- More of NumPy, as compositions of the primitives (HIPS autograd's coverage) ---------------
__version__ = _np.__version__


@_numpy_on_arrays(_np.append)
def append(arr: ArrayLike, values: ArrayLike, axis: int | None = None) -> Array:
    if axis is None:
        return _ops.concatenate([_ops.ravel(arr), _ops.ravel(values)], axis=0)
    return _ops.concatenate([arr, values], axis=axis)


def _split_along(name: str, ary: Any, indices_or_sections: Any, axis: int, min_ndim: int) -> list[Any]:
    if _np.ndim(_d(ary)) < min_ndim:
        raise ValueError(f"{name} only works on arrays of {min_ndim} or more dimensions")
    return split(ary, indices_or_sections, axis)


@_numpy_on_arrays(_np.hsplit)
def hsplit(ary: ArrayLike, indices_or_sections: int | Sequence[int]) -> list[Array]:
    axis = 1 if _np.ndim(_d(ary)) > 1 else 0
    return _split_along("hsplit", ary, indices_or_sections, axis, 1)


@_numpy_on_arrays(_np.vsplit)
def vsplit(ary: ArrayLike, indices_or_sections: int | Sequence[int]) -> list[Array]:
    return _split_along("vsplit", ary, indices_or_sections, 0, 2)


@_numpy_on_arrays(_np.dsplit)
def dsplit(ary: ArrayLike, indices_or_sections: int | Sequence[int]) -> list[Array]:
    return _split_along("dsplit", ary, indices_or_sections, 2, 3)


@_numpy_on_arrays(_np.column_stack)
def column_stack(tup: Sequence[ArrayLike]) -> Array:
    cols = [_ops.reshape(t, (-1, 1)) if _np.ndim(_d(t)) < 2 else t for t in tup]
    return _ops.concatenate(cols, axis=1)


row_stack = vstack


@_numpy_on_arrays(_np.atleast_3d)
def atleast_3d(*arys: ArrayLike) -> Array | tuple[Array, ...]:
    out = []
    for x in arys:
        shp = _np.shape(_d(x))
        out.append(_ops.reshape(x, {0: (1, 1, 1), 1: (1, *shp, 1), 2: (*shp, 1)}.get(len(shp), shp)))
    return out[0] if len(out) == 1 else tuple(out)


@_numpy_on_arrays(_np.radians)
def radians(x: ArrayLike) -> Array:
    return cast(_Tensor, x) * (_math.pi / 180)  # (NumPy input took NumPy's path)


@_numpy_on_arrays(_np.degrees)
def degrees(x: ArrayLike) -> Array:
    return cast(_Tensor, x) * (180 / _math.pi)  # (NumPy input took NumPy's path)


deg2rad = _numpy_on_arrays(_np.deg2rad)(radians.__wrapped__)
rad2deg = _numpy_on_arrays(_np.rad2deg)(degrees.__wrapped__)
_exports.export(deg2rad, numpy="deg2rad", torch="deg2rad()", top=True, promote="float")
_exports.export(rad2deg, numpy="rad2deg", torch="rad2deg()", top=True, promote="float")


@_numpy_on_arrays(_np.fmax)
def fmax(x1: ArrayLike, x2: ArrayLike) -> Array:
    """maximum, except that a NaN loses (the other argument is taken, with its gradient)."""
    return _ops.where(_ops.isnan(x2), x1, _ops.where(_ops.isnan(x1), x2, _ops.maximum(x1, x2)))
_exports.export(fmax, torch="fmax(other, /)", top=True, promote="binary")


@_numpy_on_arrays(_np.fmin)
def fmin(x1: ArrayLike, x2: ArrayLike) -> Array:
    return _ops.where(_ops.isnan(x2), x1, _ops.where(_ops.isnan(x1), x2, _ops.minimum(x1, x2)))
_exports.export(fmin, torch="fmin(other, /)", top=True, promote="binary")


@_numpy_on_arrays(_np.select)
def select(condlist: Sequence[ArrayLike], choicelist: Sequence[ArrayLike], default: ArrayLike = 0) -> Array:
    if len(condlist) != len(choicelist):
        raise ValueError("select: list of cases must be same length as list of conditions")
    out = default
    for cond, choice in zip(reversed(condlist), reversed(choicelist)):  # the first true one wins
        out = _ops.where(cond, choice, out)
    return cast(_Tensor, out)  # (NumPy input took NumPy's path)


@_numpy_on_arrays(_np.flipud)
def flipud(m: ArrayLike) -> Array:
    return _ops.flip(m, 0)


@_numpy_on_arrays(_np.fliplr)
def fliplr(m: ArrayLike) -> Array:
    if _np.ndim(_d(m)) < 2:
        raise ValueError("fliplr: input must be >= 2-d")
    return _ops.flip(m, 1)


@_numpy_on_arrays(_np.rot90)
def rot90(m: ArrayLike, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Array:
    """NumPy's rot90: flips and a swap of the two axes."""
    a0, a1 = axes
    k %= 4
    if k == 0:
        return cast(_Tensor, m)  # (NumPy input took NumPy's path)
    if k == 2:
        return _ops.flip(_ops.flip(m, a0), a1)
    order = list(range(_np.ndim(_d(m))))
    order[a0], order[a1] = order[a1], order[a0]
    return _ops.transpose(_ops.flip(m, a1), order) if k == 1 else _ops.flip(_ops.transpose(m, order), a1)


@_numpy_on_arrays(_np.rollaxis)
def rollaxis(a: ArrayLike, axis: int, start: int = 0) -> Array:
    n = _np.ndim(_d(a))
    axis %= n
    start = start + n if start < 0 else start
    if not 0 <= start <= n:
        raise ValueError(f"rollaxis: start {start} is out of range for {n} dimensions")
    if axis < start:
        start -= 1
    return cast(_Tensor, a) if axis == start else _ops.moveaxis(a, axis, start)


@_numpy_on_arrays(_np.kron)
def kron(a: ArrayLike, b: ArrayLike) -> Array:
    sa, sb = _np.shape(_d(a)), _np.shape(_d(b))
    nd = _builtins.max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    inter_a = tuple(v for s in sa for v in (s, 1))  # a's axes interleaved with b's
    inter_b = tuple(v for s in sb for v in (1, s))
    prod = _ops.reshape(a, inter_a) * _ops.reshape(b, inter_b)
    return _ops.reshape(prod, tuple(x * y for x, y in zip(sa, sb)))
_exports.export(kron, torch="kron(other, /)", top=True)


@_numpy_on_arrays(_np.cross)
def cross(a: ArrayLike, b: ArrayLike, axisa: int = -1, axisb: int = -1, axisc: int = -1,
          axis: int | None = None) -> Array:
    """NumPy's cross product of 3-vectors (and of 2-vectors: the z component) along the axes."""
    if axis is not None:
        axisa = axisb = axisc = axis
    ta, tb = _ops.moveaxis(a, axisa, -1), _ops.moveaxis(b, axisb, -1)
    na, nb = _np.shape(_d(ta))[-1], _np.shape(_d(tb))[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product (dimension must be 2 or 3)")
    a0, a1, a2 = ta[..., 0], ta[..., 1], ta[..., 2] if na == 3 else 0.0
    b0, b1, b2 = tb[..., 0], tb[..., 1], tb[..., 2] if nb == 3 else 0.0
    z = a0 * b1 - a1 * b0
    if na == 2 and nb == 2:
        return z
    out = _ops.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, z], axis=-1)
    return _ops.moveaxis(out, -1, axisc)


@_numpy_on_arrays(_np.linspace)
def linspace(start: ArrayLike, stop: ArrayLike, num: int = 50, endpoint: bool = True,
             retstep: bool = False, dtype: DTypeLike = None, axis: int = 0
             ) -> Array | tuple[Array, Array | float]:
    """NumPy's linspace, differentiable in ``start`` and ``stop``."""
    if dtype is not None and _np.dtype(dtype).kind not in "fc":
        raise TypeError("rlgrad.numpy.linspace on Tensors: an integer dtype has no gradient")
    div = (num - 1) if endpoint else num
    span = cast(_Tensor, stop) - start  # (NumPy input took NumPy's path)
    nd = _np.ndim(_d(span))
    frac = _np.arange(num, dtype=_np.result_type(_d(span), 1.0)).reshape((-1,) + (1,) * nd)
    begin = cast(_Tensor, start)
    y = begin + frac * (span / div) if div > 0 else begin + frac * span
    if endpoint and num > 1:  # NumPy puts stop itself last
        last = (_np.arange(num) == num - 1).reshape((-1,) + (1,) * nd)
        y = _ops.where(last, stop, y)
    y = _ops.moveaxis(y, 0, axis) if nd and axis != 0 else y
    y = _ops.astype(y, dtype) if dtype is not None else y
    return (y, span / div if div > 0 else _np.nan) if retstep else y


def make_diagonal(D: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Array:
    """autograd's make_diagonal: the last axis of ``D`` made into diagonal matrices (the inverse
    of ``diagonal(.., axis1=-1, axis2=-2)``); only offset=0, axis1=-1, axis2=-2, as autograd."""
    if not (offset == 0 and axis1 == -1 and axis2 == -2):
        raise NotImplementedError("make_diagonal only supports offset=0, axis1=-1, axis2=-2")
    n = _np.shape(_d(D))[-1]
    return _ops.expand_dims(D, -1) * _np.eye(n, dtype=_np.result_type(_d(D)))


class _Concatenator:
    """``r_`` / ``c_``: NumPy's index tricks; with Tensors among the items, a concatenation."""

    def __init__(self, np_obj: Any, columns: bool) -> None:
        self._np, self._columns = np_obj, columns

    def __getitem__(self, key: Any) -> Any:
        items = key if isinstance(key, tuple) else (key,)
        if not _has_tensor(items):
            return self._np[key]
        if isinstance(items[0], str):
            raise NotImplementedError("rlgrad.numpy r_/c_ take no string directive with Tensors; "
                                      "use concatenate")
        parts = [_np.r_[k] if isinstance(k, slice) else k for k in items]
        if self._columns:
            parts = [_ops.reshape(p, (-1, 1)) if _np.ndim(_d(p)) < 2 else p for p in parts]
            return _ops.concatenate(parts, axis=-1)
        return _ops.concatenate([atleast_1d(p) for p in parts], axis=0)

    def __len__(self) -> int:
        return 0


r_ = _Concatenator(_np.r_, columns=False)
c_ = _Concatenator(_np.c_, columns=True)


# Complex numbers: rlgrad's rules are written for real values, so on a complex Tensor these refuse
# (a clear error, never a wrong number); on a real Tensor they are what NumPy gives, exactly.
def _real_only(name: str, x: Any) -> None:
    if isinstance(x, _Tensor) and x.dtype.kind == "c":
        raise TypeError(f"rlgrad.numpy.{name} of a complex Tensor: rlgrad does not differentiate "
                        "complex values; keep real and imaginary parts as two real tensors")


@_numpy_on_arrays(_np.real)
def real(val: ArrayLike) -> Array:
    _real_only("real", val)
    return cast(_Tensor, val)  # (NumPy input took NumPy's path)


@_numpy_on_arrays(_np.imag)
def imag(val: ArrayLike) -> Array:
    _real_only("imag", val)
    return zeros_like(val)  # a constant: the imaginary part of a real number does not move


@_numpy_on_arrays(_np.conjugate)
def conjugate(x: ArrayLike) -> Array:
    _real_only("conjugate", x)
    return cast(_Tensor, x)  # (NumPy input took NumPy's path)


conj = conjugate


_angle_values = _on_values(_np.angle)


def angle(z: ArrayLike, deg: bool = False) -> Array:
    """NumPy's angle; of a real Tensor it is piecewise constant (0 or pi), so no gradient."""
    _real_only("angle", z)
    return _angle_values(z, deg)


@_numpy_on_arrays(_np.real_if_close)
def real_if_close(a: ArrayLike, tol: float = 100) -> Array:
    _real_only("real_if_close", a)
    return cast(_Tensor, a)  # (NumPy input took NumPy's path)


argpartition = _on_values(_np.argpartition)


@_numpy_on_arrays(_np.partition)
def partition(a: ArrayLike, kth: int | Sequence[int], axis: int | None = -1, kind: str = "introselect",
              order: str | Sequence[str] | None = None) -> Array:
    """NumPy's partition: the elements moved where NumPy moves them (recorded: jit recomputes)."""
    if order is not None:
        raise TypeError("rlgrad.numpy.partition takes no order= (structured arrays)")
    if axis is None:
        a, axis = _ops.ravel(a), 0
    return _ops.take_along_axis(a, argpartition(a, kth, axis=axis, kind=kind), axis=axis)


@_numpy_on_arrays(_np.gradient)
def gradient(f: ArrayLike, *varargs: float, axis: Axis = None, edge_order: int = 1
             ) -> Array | tuple[Array, ...]:
    """NumPy's gradient with uniform (scalar) spacings: central differences inside, one-sided
    (edge_order 1 or 2) at the edges."""
    nd = _np.ndim(_d(f))
    axes = tuple(range(nd)) if axis is None else tuple(int(a) % nd for a in _np.atleast_1d(axis))
    hs = list(varargs) or [1.0]
    if len(hs) == 1:
        hs = hs * len(axes)
    if len(hs) != len(axes) or _builtins.any(_np.ndim(_d(h)) for h in hs):
        raise NotImplementedError("rlgrad.numpy.gradient on Tensors takes scalar spacings only")
    outs = [_gradient_1d(f, ax, float(h), edge_order) for ax, h in zip(axes, hs)]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _gradient_1d(f: Any, ax: int, h: float, edge_order: int) -> Any:
    n = _np.shape(_d(f))[ax]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                         "(edge_order + 1) elements are required.")
    pre = (slice(None),) * ax

    def at(lo: Any, hi: Any = None) -> Any:
        return f[pre + (slice(lo, hi),)]

    mid = (at(2) - at(None, -2)) / (2.0 * h)
    if edge_order == 1:
        first, last = (at(1, 2) - at(0, 1)) / h, (at(-1) - at(-2, -1)) / h
    else:
        first = (-1.5 * at(0, 1) + 2.0 * at(1, 2) - 0.5 * at(2, 3)) / h
        last = (0.5 * at(-3, -2) - 2.0 * at(-2, -1) + 1.5 * at(-1)) / h
    return _ops.concatenate([first, mid, last], axis=ax)




@_numpy_on_arrays(_np.permute_dims)
def permute_dims(a: ArrayLike, axes: Sequence[int] | None = None) -> Array:
    return _ops.transpose(a, axes)


@_numpy_on_arrays(_np.full)
def full(shape: ShapeLike, fill_value: ArrayLike, dtype: DTypeLike = None, order: str = "C") -> Array:
    """NumPy's full, differentiable in ``fill_value`` (as autograd's)."""
    out = _ops.broadcast_to(fill_value, (shape,) if isinstance(shape, int) else tuple(shape))
    return _ops.astype(out, dtype) if dtype is not None else out * 1  # (a copy, as NumPy's)

# ---- NumPy's own functions called on a Tensor ---------------------------------------------------
# numpy.exp(t), numpy.sum(t), numpy.linalg.inv(t) ... dispatch here through NumPy's protocols.
# Where rlgrad has no differentiable version the call fails loudly: a gradient is never dropped.
_UFUNC_ALIASES = {"true_divide": "divide"}


def _lookup(name: str, module: str) -> Any:
    ns = linalg if module.endswith("linalg") else globals()
    fn = getattr(ns, name, None) if ns is linalg else ns.get(name)
    return fn if callable(fn) else None


def _array_ufunc(self: _Tensor, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    name = _UFUNC_ALIASES.get(ufunc.__name__, ufunc.__name__)
    fn = _lookup(name, "numpy") if name else None
    if method != "__call__" or fn is None or kwargs.get("out") is not None:
        what = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
        if kwargs.get("out") is not None:
            what += " with out="
        raise TypeError(
            f"{what} has no differentiable rlgrad version for Tensors; use rlgrad.numpy's "
            "functions, or call it on t.detach().numpy() if you do not need the gradient"
        )
    kwargs.pop("out", None)
    return fn(*inputs, **kwargs)


def _array_function(self: _Tensor, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    module = getattr(func, "__module__", "numpy") or "numpy"
    fn = _lookup(func.__name__, module)
    if fn is None or fn is func:
        raise TypeError(
            f"{module}.{func.__name__} has no differentiable rlgrad version for Tensors; use "
            "rlgrad.numpy's functions, or call it on t.detach().numpy() if you do not need the "
            "gradient"
        )
    return fn(*args, **kwargs)


# installed on the class (the checker reads their types from rlgrad/_tensor_api.pyi)
setattr(_Tensor, "__array_ufunc__", _array_ufunc)  # noqa: B010
setattr(_Tensor, "__array_function__", _array_function)  # noqa: B010


# The index halves of torch's cummax/cummin (their values are take_along_axis at these): recorded
# as any gradient-free function, so a compiled step recomputes them and vmap batches them.
def _running_index(x: Any, axis: int, better: Any) -> Any:
    x = _np.moveaxis(_np.asarray(x), axis, -1)
    run = better.accumulate(x, axis=-1)  # NaN propagates in both, as torch's
    hit = (x == run) | _np.isnan(x)  # the last of equal extremes, as torch's
    idx = _np.maximum.accumulate(_np.where(hit, _np.arange(x.shape[-1]), 0), axis=-1)
    return _np.moveaxis(idx.astype(_np.int64), -1, axis)


def cummax_indices(x: ArrayLike, axis: int = 0) -> ArrayLike:
    return _running_index(x, axis, _np.maximum)


def cummin_indices(x: ArrayLike, axis: int = 0) -> ArrayLike:
    return _running_index(x, axis, _np.minimum)


cummax_indices = _on_values(cummax_indices, batch="scan")
cummin_indices = _on_values(cummin_indices, batch="scan")

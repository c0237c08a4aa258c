"""The Tensor's operators and methods (NumPy's names, with PyTorch's aliases where they differ).

Each one calls a primitive of ``rlgrad/ops.py`` (or a composition in ``rlgrad.numpy``), so its
gradient is the primitive's; nothing here has a VJP rule of its own. Attached to ``Tensor`` when
this module is imported (``import rlgrad`` does it). It sits above both ``ops`` and
``rlgrad.numpy``, as HIPS autograd's ``numpy_boxes.py`` sits above its ``numpy_vjps.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.device import check_device, is_device
from rlgrad.indexing import gather
from rlgrad.numpy import _std_from_var, var
from rlgrad.ops import (
    absolute,
    add,
    argmax,
    argmin,
    astype,
    broadcast_to,
    clip,
    clone,
    divide,
    equal,
    expand_dims,
    floor_divide,
    getitem,
    greater,
    greater_equal,
    less,
    less_equal,
    log_softmax,
    logical_and,
    logical_not,
    logical_or,
    matmul,
    multiply,
    negative,
    not_equal,
    power,
    remainder,
    reshape,
    softmax,
    sqrt,  # noqa: F401 - installed as a method by name below
    squeeze,
    stop_gradient,
    subtract,
    swapaxes,
    transpose,
)
from rlgrad.tensor import Tensor, _set_data, constant, mark_written, tensor
from rlgrad.tracer import _GradMode, replayed


def _axis(axis: Any, dim: Any) -> Any:
    return dim if axis is None else axis


def _index_key(idx: Any) -> Any:
    """Unwrap Tensors inside an index; an index is never differentiable."""
    if isinstance(idx, Tensor):
        if idx.requires_grad:
            raise TypeError("an index tensor cannot require grad: indices are never differentiable")
        return idx._value
    if isinstance(idx, tuple):
        for i in idx:  # the usual (rows, actions) or slices: nothing to unwrap, no new tuple
            if isinstance(i, Tensor | list | tuple):
                return tuple(_index_key(i) for i in idx)
        return idx
    if isinstance(idx, list) and any(isinstance(i, Tensor) for i in idx):
        return [_index_key(i) for i in idx]
    return idx


def _reduction(fn: Any, floats_only: bool = False) -> Any:
    """A reduction method with torch's keywords; ``floats_only``: an integer or bool tensor
    raises, as torch's ``mean()`` does (NumPy's would give a float)."""
    def method(self: Tensor, axis: Any = None, keepdims: bool = False, *, dim: Any = None,
               keepdim: bool = False, dtype: Any = None) -> Any:
        if dtype is not None:  # torch casts the input first
            self = _cast(self, dtype)
        elif floats_only and self._value.dtype.kind not in "fc":
            raise RuntimeError(f"{fn.__name__}(): could not infer output dtype: the input is "
                               f"{self.dtype}, a floating or complex dtype is needed; call "
                               ".float() first or pass dtype=")
        return fn(self, axis=_axis(axis, dim), keepdims=keepdims or keepdim)

    method.__name__ = fn.__name__
    return method


class MaxMinResult(tuple):
    """``(values, indices)``, as PyTorch's ``max(dim)`` / ``min(dim)`` return."""

    __slots__ = ()

    def __new__(cls, values: Any, indices: Any) -> MaxMinResult:
        return tuple.__new__(cls, (values, indices))

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])


def _extremum_method(fn: Any, arg_fn: Any, elementwise: Any) -> Any:
    def method(self: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None,
               keepdims: bool = False) -> Any:
        if isinstance(dim, Tensor | np.ndarray):  # torch's t.max(other): elementwise
            return elementwise(self, dim)
        # PyTorch: t.max(dim) is (values, indices), so `q.max(1)[0]` means what it does in torch;
        # NumPy: t.max(axis=1) is the values. Without either, the maximum of all elements.
        if dim is None or axis is not None:
            return fn(self, axis=axis, keepdims=keepdims or keepdim)
        # the values gathered at the indices: the gradient goes to that one element, as in torch
        # (with ties or several NaNs, the first), not shared as NumPy-style max(axis=) does
        idx = arg_fn(self, axis=dim, keepdims=True)
        values = ops.take_along_axis(self, idx, dim)
        if not (keepdim or keepdims):
            values, idx = squeeze(values, dim), squeeze(idx, dim)
        return MaxMinResult(values, idx)

    method.__name__ = fn.__name__
    return method


def _method_reshape(self: Tensor, *shape: Any) -> Any:
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        shape = tuple(shape[0])
    return reshape(self, shape)


def _method_transpose(self: Tensor, *axes: Any) -> Any:
    if len(axes) == 1 and isinstance(axes[0], tuple | list):
        axes = tuple(axes[0])
    if len(axes) == 2:  # torch's transpose(dim0, dim1); on 2-D the same as NumPy's
        return swapaxes(self, axes[0], axes[1])
    return transpose(self, axes or None)


def _method_permute(self: Tensor, *axes: Any) -> Any:
    if len(axes) == 1 and isinstance(axes[0], tuple | list):
        axes = tuple(axes[0])
    return transpose(self, axes)


def _method_squeeze(self: Tensor, dim: Any = None, *, axis: Any = None) -> Any:
    """PyTorch's: a named dimension whose size is not 1 is left alone (NumPy's raises)."""
    d = _axis(axis, dim)
    if d is None:
        return squeeze(self, None)
    dims = tuple(d) if isinstance(d, tuple | list) else (d,)
    keep = tuple(i for i in dims if self.shape[i] == 1)
    return squeeze(self, keep) if keep else self


def _method_unsqueeze(self: Tensor, dim: int) -> Any:
    return expand_dims(self, dim)


def _method_softmax(self: Tensor, dim: int = -1) -> Any:
    return softmax(self, axis=dim)


def _method_log_softmax(self: Tensor, dim: int = -1) -> Any:
    return log_softmax(self, axis=dim)


def _correction(unbiased: Any, correction: Any, ddof: Any) -> Any:
    if isinstance(unbiased, int | np.integer) and not isinstance(unbiased, bool):
        raise TypeError("var/std's second positional argument is PyTorch's `unbiased` (a bool); "
                        "pass the number of degrees of freedom as correction= (or ddof=)")
    given = [c for c in (correction, ddof) if c is not None]
    if given:
        return given[0]
    return 1 if unbiased is None or unbiased else 0


def _method_var(self: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
                correction: Any = None, ddof: Any = None, axis: Any = None,
                keepdims: bool = False) -> Any:
    """PyTorch's: the unbiased estimate (``correction=1``) unless ``unbiased=False`` or
    ``correction=0`` (``ddof=`` is accepted as a synonym). ``rlgrad.numpy.var`` is NumPy's
    (``ddof=0``)."""
    return var(self, axis=_axis(axis, dim), ddof=_correction(unbiased, correction, ddof),
               keepdims=keepdims or keepdim)


def _method_std(self: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
                correction: Any = None, ddof: Any = None, axis: Any = None,
                keepdims: bool = False) -> Any:
    """PyTorch's, as ``var``: unbiased by default."""
    return _std_from_var(_method_var(self, dim, unbiased, keepdim, correction=correction,
                                     ddof=ddof, axis=axis, keepdims=keepdims))


def _method_argmax(self: Tensor, axis: Any = None, *, dim: Any = None, keepdims: bool = False,
                   keepdim: bool = False) -> Any:
    return argmax(self, axis=_axis(axis, dim), keepdims=keepdims or keepdim)


def _method_argmin(self: Tensor, axis: Any = None, *, dim: Any = None, keepdims: bool = False,
                   keepdim: bool = False) -> Any:
    return argmin(self, axis=_axis(axis, dim), keepdims=keepdims or keepdim)


def _method_clip(self: Tensor, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    return clip(self, min, max)


@replayed
def _method_setitem(self: Tensor, idx: Any, value: Any) -> None:
    if self.requires_grad:
        raise RuntimeError(
            "in-place assignment into a tensor that requires grad would corrupt its gradient; "
            "build a new tensor instead (rlgrad.numpy.where, put_along_axis or concatenate)"
        )
    self._value[_index_key(idx)] = value._value if isinstance(value, Tensor) else value
    mark_written(self)


def _sizes(sizes: tuple) -> tuple:
    return tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], tuple | list) else sizes


def _method_flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Any:
    shape = self.shape
    if not shape:
        return reshape(self, (1,))
    s, e = start_dim % len(shape), end_dim % len(shape)
    return reshape(self, shape[:s] + (-1,) + shape[e + 1:]) if s <= e else self


def _method_expand(self: Tensor, *sizes: Any) -> Any:
    """PyTorch's: ``-1`` keeps a dimension's size."""
    sizes = _sizes(sizes)
    lead = len(sizes) - self.ndim
    full = tuple(self.shape[i - lead] if n == -1 else n for i, n in enumerate(sizes))
    return broadcast_to(self, full)


def _method_t(self: Tensor) -> Any:
    if self.ndim > 2:
        raise ValueError(f"t() expects a tensor with at most 2 dimensions, got {self.ndim}; use "
                         "transpose(dim0, dim1)")
    return transpose(self) if self.ndim == 2 else self


def _nondiff_reduce(fn: Any, self: Tensor, dim: Any, keepdim: bool) -> Tensor:
    return constant(np.asarray(fn(self._value, axis=dim, keepdims=keepdim)))


def _cast(self: Tensor, dtype: Any) -> Any:
    """A cast that returns ``self`` when the dtype is already right (PyTorch's ``.float()``,
    ``.to(dtype)``)."""
    return self if self.dtype == np.dtype(dtype) else astype(self, dtype)


# torch's legacy type names (``t.type()`` -> 'torch.FloatTensor'), for scripts that compare them
_TYPE_NAMES = {np.dtype(np.float32): "FloatTensor", np.dtype(np.float64): "DoubleTensor",
               np.dtype(np.float16): "HalfTensor", np.dtype(np.int64): "LongTensor",
               np.dtype(np.int32): "IntTensor", np.dtype(np.int16): "ShortTensor",
               np.dtype(np.int8): "CharTensor", np.dtype(np.uint8): "ByteTensor",
               np.dtype(np.bool_): "BoolTensor"}


def _method_type(self: Tensor, dtype: Any = None) -> Any:
    """``t.type()``: torch's type name; ``t.type(dtype)`` or ``t.type('torch.DoubleTensor')``: a
    cast."""
    if dtype is None:
        return "torch." + _TYPE_NAMES.get(self.dtype, f"{self.dtype.name}Tensor")
    if isinstance(dtype, str):
        name = dtype.rsplit(".", 1)[-1]
        by_name = {v: k for k, v in _TYPE_NAMES.items()}
        if name not in by_name:
            raise ValueError(f"unknown tensor type {dtype!r}; use one of "
                             f"{', '.join('torch.' + n for n in by_name)} or a dtype")
        dtype = by_name[name]
    return _cast(self, dtype)


def _method_to(self: Tensor, *args: Any, dtype: Any = None, device: Any = None,
               non_blocking: bool = False, copy: bool = False, **_kw: Any) -> Any:
    """``t.to(device)``, ``t.to(dtype)``, ``t.to(device, dtype)``, ``t.to(other)``: CPU devices
    are accepted (rlgrad computes on the CPU), another device raises."""
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif is_device(a):
            device = a
        else:
            dtype = a
    check_device(device)
    out = self if dtype is None else _cast(self, dtype)
    return clone(out) if copy and out is self else out


def _reflected(fn: Any) -> Any:
    """``other <op> self`` for the Tensor's ``__rOP__`` (NumPy scalars and arrays defer to it)."""
    return lambda self, other: fn(other, self)


def _install_tensor_methods() -> None:
    T = Tensor
    for name, fn in (("add", add), ("sub", subtract), ("mul", multiply), ("truediv", divide),
                     ("pow", power), ("matmul", matmul)):
        setattr(T, f"__{name}__", fn)
        setattr(T, f"__r{name}__", _reflected(fn))
    T.__neg__ = negative
    T.__pos__ = lambda self: self
    T.__abs__ = absolute
    T.__floordiv__ = floor_divide
    T.__mod__ = remainder
    T.__rmod__ = lambda self, other: remainder(other, self)
    T.__lt__ = less
    T.__le__ = less_equal
    T.__gt__ = greater
    T.__ge__ = greater_equal
    T.__eq__ = equal
    T.__ne__ = not_equal
    T.__and__ = logical_and
    T.__or__ = logical_or
    T.__invert__ = logical_not
    T.__getitem__ = lambda self, idx: getitem(self, _index_key(idx))
    T.__setitem__ = _method_setitem
    T.T = property(lambda self: transpose(self))
    T.mT = property(lambda self: swapaxes(self, -1, -2))
    for name in ("exp", "log", "log1p", "expm1", "sqrt", "square", "tanh", "sin", "cos", "sigmoid",
                 "relu", "softplus", "sign", "floor", "ceil", "reciprocal", "abs", "cumsum", "flip"):
        setattr(T, name, getattr(ops, name))
    T.neg = negative
    for name in ("sum", "mean", "prod", "logsumexp"):
        setattr(T, name, _reduction(getattr(ops, name), floats_only=name == "mean"))
    T.amax, T.amin = _reduction(ops.max), _reduction(ops.min)  # values only, as torch.amax/np.amax
    T.max = _extremum_method(ops.max, argmax, ops.maximum)
    T.min = _extremum_method(ops.min, argmin, ops.minimum)
    T.var = _method_var
    T.std = _method_std
    T.argmax = _method_argmax
    T.argmin = _method_argmin
    T.reshape = T.view = _method_reshape
    T.flatten = _method_flatten
    T.ravel = lambda self: reshape(self, (-1,))
    T.transpose = _method_transpose
    T.permute = _method_permute
    T.swapaxes = swapaxes
    T.squeeze = _method_squeeze
    T.unsqueeze = _method_unsqueeze
    T.expand_dims = expand_dims
    T.broadcast_to = broadcast_to
    T.expand = _method_expand
    T.clip = T.clamp = _method_clip
    T.pow = power
    T.matmul = T.dot = matmul
    T.softmax = _method_softmax
    T.log_softmax = _method_log_softmax
    T.clone = clone
    T.detach = stop_gradient
    T.astype = astype


_install_tensor_methods()


def _method_new_tensor(self: Tensor, data: Any, dtype: Any = None) -> Tensor:
    """PyTorch's: a copy of ``data`` with this tensor's dtype (a traced copy under rlgrad.jit)."""
    return tensor(data, dtype=dtype or self.dtype)


def _install_torch_methods() -> None:
    """PyTorch's devices, casts and the methods it has beyond NumPy's."""
    T = Tensor
    T.to = _method_to
    T.cpu = lambda self: self
    T.cuda = lambda self, *a, **k: check_device("cuda")
    T.float = lambda self: _cast(self, np.float32)
    T.double = lambda self: _cast(self, np.float64)
    T.half = lambda self: _cast(self, np.float16)
    T.long = lambda self: _cast(self, np.int64)
    T.int = lambda self: _cast(self, np.int32)
    T.bool = lambda self: _cast(self, np.bool_)
    T.type = _method_type
    T.type_as = lambda self, other: _cast(self, other.dtype)
    T.gather = gather
    T.contiguous = lambda self, *a, **k: self
    T.t = _method_t
    T.view_as = T.reshape_as = lambda self, other: reshape(self, other.shape)
    T.expand_as = lambda self, other: broadcast_to(self, other.shape)
    T.nelement = T.numel
    T.ndimension = T.dim
    T.is_floating_point = lambda self: self.dtype.kind == "f"
    T.masked_fill = lambda self, mask, value: ops.where(mask, value, self)
    T.all = lambda self, dim=None, keepdim=False: _nondiff_reduce(np.all, self, dim, keepdim)
    T.any = lambda self, dim=None, keepdim=False: _nondiff_reduce(np.any, self, dim, keepdim)
    T.repeat = lambda self, *sizes: ops.tile(self, _sizes(sizes))
    T.new_zeros = lambda self, *size, dtype=None: constant(np.zeros(_sizes(size), dtype or self.dtype))
    T.new_ones = lambda self, *size, dtype=None: constant(np.ones(_sizes(size), dtype or self.dtype))
    T.new_full = lambda self, size, value, dtype=None: constant(
        np.full(tuple(size), value, dtype or self.dtype))
    T.new_tensor = _method_new_tensor


_install_torch_methods()


@replayed
def _write_inplace(self: Tensor, other: Any, ufunc: Any, sym: str) -> Tensor:
    """``self <sym>= other`` into ``self``'s array (a 0-d or read-only one is replaced)."""
    o = other._value if isinstance(other, Tensor) else other
    d = self._value
    mark_written(self)
    if isinstance(d, np.ndarray) and d.flags.writeable and d.ndim >= np.ndim(o):
        ufunc(d, o, out=d, casting="same_kind")
    else:
        new = np.asarray(ufunc(d, o))
        if new.shape != np.shape(d):
            raise ValueError(f"in-place {sym}= cannot change the shape {np.shape(d)} to "
                             f"{new.shape}")
        self._value = new.astype(np.result_type(d), copy=False)
    return self


def _install_inplace_operators() -> None:
    """``+= -= *= /=`` as torch has them: in place under ``no_grad`` or on tensors that need no
    gradient (``with no_grad(): p -= lr * p.grad`` updates the parameter); on a leaf that requires
    grad with recording on, an error (torch's); on a computed tensor, a new recorded tensor
    (``loss += term`` keeps accumulating the graph)."""
    def make(fn: Any, ufunc: Any, sym: str) -> Any:
        def method(self: Tensor, other: Any) -> Any:
            if self.requires_grad and _GradMode.enabled:
                if self._op is None:
                    raise RuntimeError(
                        f"a leaf tensor that requires grad is used in an in-place operation "
                        f"({sym}=): update parameters inside `with rlgrad.no_grad():` (or through "
                        f".data), or write `x = x {sym} y` for a new tensor"
                    )
                return fn(self, other)
            return _write_inplace(self, other, ufunc, sym)

        method.__name__ = f"__i{fn.__name__}__"
        return method

    Tensor.__iadd__ = make(add, np.add, "+")
    Tensor.__isub__ = make(subtract, np.subtract, "-")
    Tensor.__imul__ = make(multiply, np.multiply, "*")
    Tensor.__itruediv__ = make(divide, np.divide, "/")


_install_inplace_operators()


def _writable(self: Tensor, name: str) -> np.ndarray:
    """The array an in-place method writes into; refused where PyTorch would refuse (a leaf
    that requires grad while recording), and for a graph node (rlgrad records no in-place ops)."""
    if self.requires_grad and _GradMode.enabled:
        if self._op is None:
            raise RuntimeError(
                f"a leaf tensor that requires grad is used in an in-place operation ({name}): "
                "update it inside `with rlgrad.no_grad():` or through `.data`"
            )
        raise RuntimeError(f"{name} on a tensor computed in the graph is not supported by rlgrad; "
                           "write the out-of-place form (e.g. x = x + y)")
    mark_written(self)
    return self._value


def _value(x: Any) -> Any:
    return x._value if isinstance(x, Tensor) else x


def _install_inplace_methods() -> None:
    """PyTorch's ``copy_``, ``fill_``, ``zero_``, ``add_``, ``sub_``, ``mul_``, ``div_``,
    ``clamp_``, ``lerp_``: they write into the tensor's array (casting to its dtype) and return
    it. Through ``p.data`` (or under ``no_grad``) they are how target networks are updated."""
    def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
        _writable(self, "copy_")[...] = _value(src)
        return self

    def fill_(self: Tensor, value: Any) -> Tensor:
        _writable(self, "fill_")[...] = _value(value)
        return self

    def zero_(self: Tensor) -> Tensor:
        _writable(self, "zero_")[...] = 0
        return self

    def binary(ufunc: Any, name: str) -> Any:
        def method(self: Tensor, other: Any, *, alpha: Any = None) -> Tensor:
            o = _value(other)
            if alpha is not None:
                o = o * alpha
            d = _writable(self, name)
            ufunc(d, o, out=d, casting="unsafe" if d.dtype.kind in "iub" and ufunc is np.divide
                  else "same_kind")
            return self

        method.__name__ = name
        return method

    def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
        d = _writable(self, "clamp_")
        np.clip(d, _value(min), _value(max), out=d)
        return self

    def lerp_(self: Tensor, end: Any, weight: Any) -> Tensor:
        d = _writable(self, "lerp_")
        d += _value(weight) * (_value(end) - d)
        return self

    T = Tensor  # each replayed by a compiled step (rlgrad.jit) at its place
    data = vars(T)["data"]  # the property: its setter replayed too
    setattr(T, "data", property(data.fget, replayed(_set_data), doc=data.__doc__))  # noqa: B010
    T.copy_, T.fill_, T.zero_ = replayed(copy_), replayed(fill_), replayed(zero_)
    T.clamp_ = T.clip_ = replayed(clamp_)
    T.lerp_ = replayed(lerp_)
    for ufunc, name in ((np.add, "add_"), (np.subtract, "sub_"), (np.multiply, "mul_"),
                        (np.divide, "div_")):
        setattr(T, name, replayed(binary(ufunc, name)))


_install_inplace_methods()

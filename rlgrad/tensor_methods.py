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
from rlgrad.tensor import Tensor, mark_written
from rlgrad.tracer import _GradMode


def _axis(axis: Any, dim: Any) -> Any:
    return dim if axis is None else axis


def _index_key(idx: Any) -> Any:
    """Unwrap Tensors inside an index; an index is never differentiable."""
    if isinstance(idx, Tensor):
        if idx.requires_grad:
            raise TypeError("an index tensor cannot require grad: indices are never differentiable")
        return idx.data
    if isinstance(idx, tuple):
        for i in idx:  # the usual (rows, actions) or slices: nothing to unwrap, no new tuple
            if isinstance(i, Tensor | list | tuple):
                return tuple(_index_key(i) for i in idx)
        return idx
    if isinstance(idx, list) and any(isinstance(i, Tensor) for i in idx):
        return [_index_key(i) for i in idx]
    return idx


def _reduction(fn: Any) -> Any:
    def method(self: Tensor, axis: Any = None, keepdims: bool = False, *, dim: Any = None,
               keepdim: bool = False) -> Any:
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


def _extremum_method(fn: Any, arg_fn: Any) -> Any:
    def method(self: Tensor, dim: Any = None, keepdim: bool = False, *, axis: Any = None,
               keepdims: bool = False) -> Any:
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


def _method_squeeze(self: Tensor, axis: Any = None, *, dim: Any = None) -> Any:
    return squeeze(self, _axis(axis, dim))


def _method_unsqueeze(self: Tensor, dim: int) -> Any:
    return expand_dims(self, dim)


def _method_softmax(self: Tensor, dim: int = -1) -> Any:
    return softmax(self, axis=dim)


def _method_log_softmax(self: Tensor, dim: int = -1) -> Any:
    return log_softmax(self, axis=dim)


def _method_var(self: Tensor, axis: Any = None, ddof: int = 0, keepdims: bool = False, *,
                dim: Any = None, correction: Any = None, keepdim: bool = False) -> Any:
    return var(self, axis=_axis(axis, dim), ddof=ddof if correction is None else correction,
               keepdims=keepdims or keepdim)


def _method_std(self: Tensor, axis: Any = None, ddof: int = 0, keepdims: bool = False, *,
                dim: Any = None, correction: Any = None, keepdim: bool = False) -> Any:
    return _std_from_var(_method_var(self, axis, ddof, keepdims, dim=dim, correction=correction,
                                     keepdim=keepdim))


def _method_argmax(self: Tensor, axis: Any = None, *, dim: Any = None, keepdims: bool = False,
                   keepdim: bool = False) -> Any:
    return argmax(self, axis=_axis(axis, dim), keepdims=keepdims or keepdim)


def _method_argmin(self: Tensor, axis: Any = None, *, dim: Any = None, keepdims: bool = False,
                   keepdim: bool = False) -> Any:
    return argmin(self, axis=_axis(axis, dim), keepdims=keepdims or keepdim)


def _method_clip(self: Tensor, min: Any = None, max: Any = None) -> Any:  # noqa: A002
    return clip(self, min, max)


def _method_setitem(self: Tensor, idx: Any, value: Any) -> None:
    if self.requires_grad:
        raise RuntimeError(
            "in-place assignment into a tensor that requires grad would corrupt its gradient; "
            "build a new tensor instead (rlgrad.numpy.where, put_along_axis or concatenate)"
        )
    self.data[_index_key(idx)] = value.data if isinstance(value, Tensor) else value
    mark_written(self)


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
        setattr(T, name, _reduction(getattr(ops, name)))
    T.amax, T.amin = _reduction(ops.max), _reduction(ops.min)  # values only, as torch.amax/np.amax
    T.max = _extremum_method(ops.max, argmax)
    T.min = _extremum_method(ops.min, argmin)
    T.var = _method_var
    T.std = _method_std
    T.argmax = _method_argmax
    T.argmin = _method_argmin
    T.reshape = T.view = _method_reshape
    T.flatten = lambda self, start_dim=0: reshape(self, self.shape[:start_dim] + (-1,))
    T.ravel = lambda self: reshape(self, (-1,))
    T.transpose = _method_transpose
    T.permute = _method_permute
    T.swapaxes = swapaxes
    T.squeeze = _method_squeeze
    T.unsqueeze = _method_unsqueeze
    T.expand_dims = expand_dims
    T.broadcast_to = broadcast_to
    T.expand = lambda self, *shape: broadcast_to(
        self, tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple | list) else shape)
    T.clip = T.clamp = _method_clip
    T.pow = power
    T.matmul = T.dot = matmul
    T.softmax = _method_softmax
    T.log_softmax = _method_log_softmax
    T.clone = clone
    T.detach = stop_gradient
    T.astype = astype
    T.to = lambda self, dtype: astype(self, dtype)
    T.float = lambda self: astype(self, np.float32)
    T.double = lambda self: astype(self, np.float64)
    T.long = lambda self: astype(self, np.int64)
    T.int = lambda self: astype(self, np.int32)
    T.bool = lambda self: astype(self, np.bool_)
    T.type = lambda self, dtype=None: self.dtype if dtype is None else astype(self, dtype)


_install_tensor_methods()


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
            o = other.data if isinstance(other, Tensor) else other
            d = self.data
            mark_written(self)
            if isinstance(d, np.ndarray) and d.flags.writeable and d.ndim >= np.ndim(o):
                ufunc(d, o, out=d, casting="same_kind")
            else:
                new = np.asarray(ufunc(d, o))
                if new.shape != np.shape(d):
                    raise ValueError(f"in-place {sym}= cannot change the shape {np.shape(d)} to "
                                     f"{new.shape}")
                self.data = new.astype(np.result_type(d), copy=False)
            return self

        method.__name__ = f"__i{fn.__name__}__"
        return method

    Tensor.__iadd__ = make(add, np.add, "+")
    Tensor.__isub__ = make(subtract, np.subtract, "-")
    Tensor.__imul__ = make(multiply, np.multiply, "*")
    Tensor.__itruediv__ = make(divide, np.divide, "/")


_install_inplace_operators()

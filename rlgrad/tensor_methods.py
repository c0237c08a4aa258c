"""The Tensor's operators and methods, with PyTorch's names and arguments.

The methods that are one primitive (``t.cumsum(dim=1)``, ``t.sum(1, keepdim=True)``, ``t.exp()``)
are made here by ``declared_method`` from the primitive's ``export(..., torch=...)`` in
``rlgrad/ops.py``; the rest (operators, ``max(dim)``, ``var``, ``reshape``, ``to`` ...) are written
below. Each one calls a primitive (or a composition in ``rlgrad.numpy``), so its gradient is the
primitive's; nothing here has a VJP rule of its own. PyTorch's type promotion comes from the
declaration too (``export(..., promote="binary")``: ``promotion.rule``), for the method, the
operator (``a + b`` is ``add``'s rule) and ``rlgrad.<name>`` alike. Attached to ``Tensor`` when
this module is imported (``import rlgrad`` does it). It sits above both ``ops`` and
``rlgrad.numpy``, as HIPS autograd's ``numpy_boxes.py`` sits above its ``numpy_vjps.py``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad import inplace, ops
from rlgrad import numpy as rnp
from rlgrad.batching import BatchedTensor, every_slice, index_put
from rlgrad.device import check_device, is_device
from rlgrad.exports import EXPORTS, REQUIRED, Export, Method, Param, on_export
from rlgrad.indexing import gather, scatter_add, take_along_axis, torch_index_steps
from rlgrad.numpy import _std_from_var, var
from rlgrad.ops import (
    absolute,
    add,
    argmax,
    argmin,
    astype,
    broadcast_to,
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
    squeeze,
    subtract,
    swapaxes,
    transpose,
)
from rlgrad.promotion import binary, cast_to, result_type, rule
from rlgrad.tensor import Tensor, _Depth, _set_data, _Trace, constant, mark_written, tensor
from rlgrad.tracer import _GradMode, replayed


def _axis(axis: Any, dim: Any) -> Any:
    return dim if axis is None else axis


def _index_key(idx: Any) -> Any:
    """Unwrap Tensors inside an index; an index is never differentiable."""
    if isinstance(idx, Tensor):
        if idx.requires_grad:
            raise TypeError("an index tensor cannot require grad: indices are never differentiable")
        return idx if type(idx) is BatchedTensor else idx._value  # vmap batches a batched one
    if isinstance(idx, tuple):
        for i in idx:  # the usual (rows, actions) or slices: nothing to unwrap, no new tuple
            if isinstance(i, Tensor | list | tuple):
                return tuple(_index_key(i) for i in idx)
        return idx
    if isinstance(idx, list) and any(isinstance(i, Tensor) for i in idx):
        return [_index_key(i) for i in idx]
    return idx


def _passed_through(fn: Callable, positional: list[Param]) -> int:
    """How many leading positional parameters of the method ``fn`` takes at the same places (its
    forward's signature names them alike, or they are ``/`` operands): a call giving no more
    than those, by position, goes to ``fn`` as it is, with no keyword translated."""
    fwd = getattr(getattr(fn, "primitive", None), "fwd", fn)
    try:
        names = [q.name for q in inspect.signature(fwd).parameters.values()
                 if q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD)][1:]
    except (TypeError, ValueError):  # a ufunc: its operands only
        names = []
    n = 0
    while n < len(positional) and (positional[n].positional or
                                   (n < len(names) and names[n] == positional[n].numpy)):
        n += 1
    return n


def _refuse_integers(name: str, x: Any) -> None:
    """torch's mean() of an integer tensor raises (NumPy's would give a float)."""
    dtype = (x._value if isinstance(x, Tensor) else np.asarray(x)).dtype
    if dtype.kind not in "fc":
        raise RuntimeError(f"{name}(): could not infer output dtype: the input is {dtype}, a "
                           "floating or complex dtype is needed; call .float() first or pass dtype=")


def _bad_arguments(name: str, sig: str, args: tuple, kwargs: dict, kw: dict) -> TypeError:
    """The one-line TypeError of a call that does not fit torch's signature ``sig``."""
    m = Method.parse(sig)
    n_pos = sum(not p.kwonly for p in m.params)
    if len(args) > n_pos:
        return TypeError(f"{name}() takes {n_pos} positional argument(s) after the tensor but "
                         f"{len(args)} were given; torch's signature: {sig}")
    names = {p.torch: p for p in m.params} | {p.numpy: p for p in m.params}
    for k in kwargs:
        if k not in names:
            return TypeError(f"{name}() got an unexpected keyword argument {k!r}; torch's "
                             f"signature: {sig}")
    for k in kwargs:
        if names[k].numpy in kw or sum(names[j].numpy == names[k].numpy for j in kwargs) > 1:
            return TypeError(f"{name}() got multiple values for argument {names[k].torch!r}")
    missing = [p.torch for p in m.params if p.default is REQUIRED and p.numpy not in kw]
    return TypeError(f"{name}() missing required argument {', '.join(map(repr, missing))}; "
                     f"torch's signature: {sig}")


def declared_method(fn: Callable, method: Method, floats_only: bool = False,
                    promote: str | None = None) -> Callable:
    """The Tensor method of an ``export(..., torch=spec)`` declaration: torch's argument names
    (and NumPy's, where they do not clash) turned into ``fn``'s NumPy keywords. A keyword-only
    ``dtype`` casts the input first, as torch's reductions do; parameters before ``/`` are handed
    to ``fn`` by position (NumPy's ufuncs take no keywords). ``promote``: the declaration's
    type-promotion rule (``promotion.rule``), applied unless ``dtype=`` casts the input (torch
    then computes in that dtype). Loops, not comprehensions: each of those would be one more
    Python call on every method call."""
    params = method.params
    run = rule(promote, fn)  # fn under torch's promotion (fn itself without a rule)
    if not params and not floats_only:
        return run  # exp(), neg(), ...: the primitive (or its promotion) itself, no wrapper call
    numpy_of = {p.numpy: p.numpy for p in params} | {p.torch: p.numpy for p in params}
    pos_names = tuple(p.numpy for p in params if not p.kwonly)
    by_position = tuple(p.numpy for p in params if p.positional)
    required = tuple(p.numpy for p in params if p.default is REQUIRED)
    n_required = len(required) if all(not p.kwonly for p in params if p.default is REQUIRED) \
        else len(params) + 1  # a required keyword: never the direct call
    n_direct = _passed_through(fn, [p for p in params if not p.kwonly])
    casts = any(p.torch == "dtype" and p.kwonly for p in params)
    name, sig = method.name, method.signature()

    def call(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002 - torch's name
        if not kwargs and n_required <= len(args) <= n_direct and \
                (not args or type(args[0]) is not list):  # t.sum(), t.sum(1), t.pow(2)
            if floats_only and (input._value if isinstance(input, Tensor) else
                                np.asarray(input)).dtype.kind not in "fc":
                _refuse_integers(name, input)
            return run(input, *args)
        kw: dict[str, Any] = {}
        if len(args) > len(pos_names):
            raise _bad_arguments(name, sig, args, kwargs, kw)
        for i, a in enumerate(args):
            kw[pos_names[i]] = a
        for k, v in kwargs.items():
            n = numpy_of.get(k)
            if n is None or n in kw:
                raise _bad_arguments(name, sig, args, kwargs, kw)
            kw[n] = v
        if type(kw.get("axis")) is list:  # torch's dim=[0, 1]: NumPy wants a tuple
            kw["axis"] = tuple(kw["axis"])
        for n in required:
            if n not in kw:
                raise _bad_arguments(name, sig, args, kwargs, kw)
        dtype = kw.pop("dtype", None) if casts else None
        operands = [kw.pop(n) for n in by_position]
        if dtype is not None:  # computed in dtype, no promotion rule, as torch's; NumPy sums
            # int32 in int64: cast back (the same bits as torch's wrapping int32 sum)
            return _cast(fn(_cast(input, dtype), *operands, **kw), dtype)
        if floats_only:
            _refuse_integers(name, input)
        return run(input, *operands, **kw)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``Tensor.{sig}`` (torch's names; ``{getattr(fn, '__name__', name)}``'s NumPy " \
        "keywords are accepted too)."
    return call


#: every declared Tensor method by name: the functions installed on Tensor, and the ones
#: rlgrad's top level calls (``rlgrad.cumsum(x, 1)`` is ``Tensor.cumsum``, the same function)
DECLARED: dict[str, Callable] = {}


def _install_declared(e: Export) -> None:
    for m in e.methods:
        if m.name in vars(Tensor) and vars(Tensor)[m.name] is not DECLARED.get(m.name):
            raise ValueError(f"export({getattr(e.fn, '__name__', e.fn)!r}): Tensor already has a "
                             f"method {m.name!r}; declare another name or remove that one")
        DECLARED[m.name] = declared_method(e.fn, m, e.floats_only, e.promote)
        setattr(Tensor, m.name, DECLARED[m.name])


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
    d = _axis(axis, dim)
    return var(self, axis=tuple(d) if isinstance(d, list) else d,
               ddof=_correction(unbiased, correction, ddof),
               keepdims=keepdims or keepdim)


def _method_std(self: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
                correction: Any = None, ddof: Any = None, axis: Any = None,
                keepdims: bool = False) -> Any:
    """PyTorch's, as ``var``: unbiased by default."""
    return _std_from_var(_method_var(self, dim, unbiased, keepdim, correction=correction,
                                     ddof=ddof, axis=axis, keepdims=keepdims))


def _method_masked_fill(self: Tensor, mask: Any, value: Any) -> Any:
    """torch's: the value is cast to self's dtype (the result keeps it)."""
    return ops.where(mask, cast_to(value, self.dtype), self)


def _torch_steps(key: Any) -> tuple[Any, Any] | None:
    """``indexing.torch_index_steps`` where it can apply: a tuple of three entries or more (an
    integer, something between, an array: ``(rows, actions)`` skips it at once), outside a
    transform given NumPy arrays (NumPy code: NumPy's rule)."""
    if type(key) is tuple and len(key) > 2 and not _Depth.numpy:
        return torch_index_steps(key)
    return None


def _method_getitem(self: Tensor, idx: Any) -> Any:
    """``t[idx]`` with torch's placement of advanced indices (``indexing.torch_index_steps``)."""
    key = _index_key(idx)
    steps = _torch_steps(key)
    if steps is None:
        return getitem(self, key)
    return getitem(getitem(self, steps[0]), steps[1])


def _method_setitem(self: Tensor, idx: Any, value: Any) -> None:
    key = _index_key(idx)
    steps = _torch_steps(key)
    if inplace.needs_graph(self, "index assignment", value, view=True):  # recorded, as torch's
        inplace.setitem(self, (key,) if steps is None else steps, value)
        return
    target = self._value
    if steps is not None:  # the integers first: a view, written through
        target, key = target[steps[0]], steps[1]
    target[key] = value._value if isinstance(value, Tensor) else value
    mark_written(self)


_method_setitem = replayed(_method_setitem, inplace.refuse_in_jit("index assignment"))


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
    if isinstance(getattr(dtype, "dtype", None), np.dtype) and isinstance(dtype, type):
        dtype = dtype.dtype  # t.type(rlgrad.FloatTensor)
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


def _operators(fn: Callable) -> tuple[Callable, Callable]:
    """``self <op> other`` and ``other <op> self`` of a declared primitive, under its
    declaration's promotion rule: ``a + b`` promotes as ``a.add(b)`` does, without the method's
    argument handling (an operator is the hottest call)."""
    tag = next(e.promote for e in EXPORTS if e.fn is fn)
    if tag in ("binary", "binary_float"):  # their fast paths, reflected without a lambda
        return binary(fn, tag == "binary_float"), binary(fn, tag == "binary_float", True)
    return rule(tag, fn), _reflected(fn)


def _install_tensor_methods() -> None:
    """The operators and methods, each through torch's type promotion (``rlgrad/promotion.py``)."""
    T = Tensor
    for name, fn in (("add", add), ("sub", subtract), ("mul", multiply), ("truediv", divide),
                     ("pow", power), ("floordiv", floor_divide), ("mod", remainder),
                     ("matmul", matmul)):
        forward, reflected = _operators(fn)
        setattr(T, f"__{name}__", forward)
        setattr(T, f"__r{name}__", reflected)
    T.__neg__ = negative
    T.__pos__ = lambda self: self
    T.__abs__ = absolute
    for name, fn in (("lt", less), ("le", less_equal), ("gt", greater), ("ge", greater_equal),
                     ("eq", equal), ("ne", not_equal)):
        setattr(T, f"__{name}__", _operators(fn)[0])
    T.__and__ = logical_and
    T.__or__ = logical_or
    T.__invert__ = logical_not
    T.__getitem__ = _method_getitem
    T.__setitem__ = _method_setitem
    T.T = property(lambda self: transpose(self))
    T.mT = property(lambda self: swapaxes(self, -1, -2))
    on_export(_install_declared)  # the export(...) declarations, ops.py's and any later one
    T.max = _extremum_method(ops.max, argmax, DECLARED["maximum"])  # t.max(other): promoted
    T.min = _extremum_method(ops.min, argmin, DECLARED["minimum"])
    T.var = _method_var
    T.std = _method_std
    T.reshape = T.view = _method_reshape
    T.flatten = _method_flatten
    T.transpose = _method_transpose
    T.permute = _method_permute
    T.squeeze = _method_squeeze
    T.unsqueeze = _method_unsqueeze
    T.expand = _method_expand


_install_tensor_methods()

_numpy_array_ufunc = Tensor.__array_ufunc__  # rlgrad.numpy's: np.exp(t) is rlgrad.numpy.exp(t)
_OPERATOR_UFUNCS = {np.add: "add", np.subtract: "sub", np.multiply: "mul", np.true_divide: "truediv",
                    np.power: "pow", np.floor_divide: "floordiv", np.remainder: "mod",
                    np.less: "gt", np.less_equal: "ge", np.greater: "lt", np.greater_equal: "le",
                    np.equal: "eq", np.not_equal: "ne"}


def _array_ufunc(self: Tensor, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """``np.float64(0.99) * t`` reaches the Tensor as NumPy's ufunc with the NumPy operand first
    (a Tensor first is its own operator): that is the operator, with torch's promotion (the
    comparisons mirrored: ``a < t`` is ``t > a``). Other ufunc calls are rlgrad.numpy's."""
    if method == "__call__" and len(inputs) == 2 and not kwargs \
            and not isinstance(inputs[0], Tensor) and ufunc in _OPERATOR_UFUNCS:
        name = _OPERATOR_UFUNCS[ufunc]
        mirrored = f"__{name}__" if ufunc in (np.less, np.less_equal, np.greater,
                                               np.greater_equal, np.equal, np.not_equal) \
            else f"__r{name}__"
        return getattr(inputs[1], mirrored)(inputs[0])
    return _numpy_array_ufunc(self, ufunc, method, *inputs, **kwargs)


Tensor.__array_ufunc__ = _array_ufunc


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
    T.masked_fill = _method_masked_fill
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
    grad with recording on, an error (torch's); on a computed tensor, in place and recorded
    (``inplace.rebase``: ``loss += term`` keeps accumulating the graph)."""
    def make(fn: Any, ufunc: Any, sym: str) -> Any:
        def method(self: Tensor, other: Any) -> Any:
            if _GradMode.enabled:  # recorded (rlgrad/inplace.py) when self or other needs grad
                out = inplace.recorded_operator(self, other, fn, sym)
                if out is not None:
                    return out
            return _write_inplace(self, other, ufunc, sym)

        method.__name__ = f"__i{fn.__name__}__"
        return method

    Tensor.__iadd__ = make(Tensor.__add__, np.add, "+")
    Tensor.__isub__ = make(Tensor.__sub__, np.subtract, "-")
    Tensor.__imul__ = make(Tensor.__mul__, np.multiply, "*")
    Tensor.__itruediv__ = make(Tensor.__truediv__, np.divide, "/")


_install_inplace_operators()


def _writable(self: Tensor, name: str) -> np.ndarray:
    """The array an in-place method writes into when nothing is recorded; refused where PyTorch
    would refuse (a leaf that requires grad while recording), and for a graph node: methods that
    support one check ``inplace.needs_graph`` first and record through ``inplace.rebase``."""
    if self.requires_grad and _GradMode.enabled:
        if self._op is None:
            raise RuntimeError(f"{inplace.LEAF_ERROR} ({name}: update it inside `with "
                               "rlgrad.no_grad():` or through `.data`)")
        raise RuntimeError(f"{name} on a tensor computed in the graph is not supported by rlgrad; "
                           "write the out-of-place form (e.g. x = x + y)")
    mark_written(self)
    return self._value


def _value(x: Any) -> Any:
    return x._value if isinstance(x, Tensor) else x


# the out-of-place operators of the in-place methods, for the recorded form (inplace.rebase)
_TENSOR_OPS = {np.add: Tensor.__add__, np.subtract: Tensor.__sub__, np.multiply: Tensor.__mul__,
               np.divide: Tensor.__truediv__}


def _filled(old: Tensor, src: Any) -> Any:
    """``src`` broadcast to ``old``'s shape and cast to its dtype: what copy_ / fill_ write; old
    stays in the graph with a zero gradient (torch's CopyBackwards gives it zeros, not None)."""
    v = src if isinstance(src, Tensor) else constant(np.asarray(src, dtype=old.dtype))
    if v.dtype != old.dtype:
        v = astype(v, old.dtype)
    return ops.where(constant(np.zeros(old.shape, dtype=bool)), old, v)


def _install_inplace_methods() -> None:
    """PyTorch's ``copy_``, ``fill_``, ``zero_``, ``add_``, ``sub_``, ``mul_``, ``div_``,
    ``clamp_``, ``lerp_``: they write into the tensor's array (casting to its dtype) and return
    it. Through ``p.data`` (or under ``no_grad``) they are how target networks are updated."""
    def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
        if inplace.needs_graph(self, "copy_", src):
            return inplace.rebase(self, "copy_", lambda old: _filled(old, src))
        _writable(self, "copy_")[...] = _value(src)
        return self

    def fill_(self: Tensor, value: Any) -> Tensor:
        if inplace.needs_graph(self, "fill_", value):
            return inplace.rebase(self, "fill_", lambda old: _filled(old, value))
        _writable(self, "fill_")[...] = _value(value)
        return self

    def zero_(self: Tensor) -> Tensor:
        if inplace.needs_graph(self, "zero_"):
            return inplace.rebase(self, "zero_", lambda old: _filled(old, 0))
        _writable(self, "zero_")[...] = 0
        return self

    def binary(ufunc: Any, name: str) -> Any:
        op = _TENSOR_OPS[ufunc]

        def method(self: Tensor, other: Any, *, alpha: Any = None) -> Tensor:
            if inplace.needs_graph(self, name, other):
                return inplace.rebase(self, name, lambda old: op(
                    old, other if alpha is None else other * alpha))
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
        if inplace.needs_graph(self, "clamp_", min, max):
            return inplace.rebase(self, "clamp_", lambda old: old.clamp(min, max))
        d = _writable(self, "clamp_")
        np.clip(d, _value(min), _value(max), out=d)
        return self

    def lerp_(self: Tensor, end: Any, weight: Any) -> Tensor:
        if inplace.needs_graph(self, "lerp_", end, weight):
            return inplace.rebase(self, "lerp_", lambda old: old + weight * (end - old))
        d = _writable(self, "lerp_")
        d += _value(weight) * (_value(end) - d)
        return self

    T = Tensor  # each replayed by a compiled step (rlgrad.jit) at its place
    data = vars(T)["data"]  # the property: its setter replayed too
    setattr(T, "data", property(data.fget, replayed(_set_data), doc=data.__doc__))  # noqa: B010
    checked = lambda fn: replayed(fn, inplace.refuse_in_jit(fn.__name__))  # noqa: E731
    T.copy_, T.fill_, T.zero_ = checked(copy_), checked(fill_), checked(zero_)
    T.clamp_ = T.clip_ = checked(clamp_)
    T.lerp_ = checked(lerp_)
    for ufunc, name in ((np.add, "add_"), (np.subtract, "sub_"), (np.multiply, "mul_"),
                        (np.divide, "div_")):
        setattr(T, name, checked(binary(ufunc, name)))


_install_inplace_methods()


# ---- torch's methods beyond one primitive: compositions, so their gradients are the primitives'
def _dim_of(self: Any, dim: Any) -> int:
    """``dim`` as a non-negative axis of ``self``, or torch's IndexError (a 0-d tensor has one)."""
    nd = max(self.ndim, 1)
    if not isinstance(dim, int | np.integer) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                         f"but got {dim})")
    return int(dim) % nd


def _along(self: Any, d: int, key: Any) -> Any:
    """``self[:, ..., key]`` with ``key`` at axis ``d``."""
    return self[(slice(None),) * d + (key,)]


def _sort_indices(self: Tensor, d: int, descending: bool) -> Any:
    """torch's order (stable; NaN counts as the largest): through the recorded argsort, so a
    compiled step sorts again at every call. Descending: the stable ascending order of the
    reversed lane, reversed, which keeps equal values in their first-come order."""
    if not descending:
        return ops.argsort(self, axis=d, kind="stable")
    n = self.shape[d]
    return (n - 1) - ops.flip(ops.argsort(ops.flip(self, d), axis=d, kind="stable"), d)


def _method_sort(self: Tensor, dim: int = -1, descending: bool = False, stable: bool = False
                 ) -> MaxMinResult:
    """``(values, indices)``; the values are gathered, so the gradient reaches the sorted input."""
    if self.ndim == 0:
        return MaxMinResult(self * 1, constant(np.zeros((), np.int64)))
    d = _dim_of(self, dim)
    idx = _sort_indices(self, d, descending)
    return MaxMinResult(ops.take_along_axis(self, idx, d), idx)


def _method_argsort(self: Tensor, dim: int = -1, descending: bool = False, stable: bool = False
                    ) -> Any:
    return _method_sort(self, dim, descending)[1]


def _method_topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
                 ) -> MaxMinResult:  # noqa: A002 - torch's name
    d = _dim_of(self, dim)
    n = self.shape[d] if self.ndim else 1
    if not 0 <= k <= n:
        raise RuntimeError(f"topk: selected index k={k} is out of range for dimension {d} of "
                           f"size {n}")
    values, idx = _method_sort(self, dim, descending=largest)
    return MaxMinResult(_along(values, d, slice(0, k)), _along(idx, d, slice(0, k))) \
        if self.ndim else MaxMinResult(values, idx)


def _median_index(self: Tensor, d: int) -> Any:
    """torch's median: the lower of the two middle values, or the first NaN of a lane with one."""
    n = self.shape[d]
    idx = _along(ops.argsort(self, axis=d, kind="stable"), d, slice((n - 1) // 2, (n + 1) // 2))
    if self.dtype.kind == "f":
        nan = ops.isnan(self)
        first_nan = argmax(nan, axis=d, keepdims=True)
        idx = ops.where(ops.take_along_axis(nan, first_nan, d), first_nan, idx)
    return idx


def _method_median(self: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """``median()``: the lower median of all elements; ``median(dim)``: ``(values, indices)``."""
    if dim is None:
        flat = reshape(self, (-1,))
        if not flat.shape[0]:  # torch: NaN
            return constant(np.array(np.nan, self.dtype if self.dtype.kind == "f" else np.float32))
        return reshape(ops.take_along_axis(flat, _median_index(flat, 0), 0), ())
    if self.ndim == 0:
        return MaxMinResult(self * 1, constant(np.zeros((), np.int64)))
    d = _dim_of(self, dim)
    idx = _median_index(self, d)
    values = ops.take_along_axis(self, idx, d)
    if not keepdim:
        values, idx = squeeze(values, d), squeeze(idx, d)
    return MaxMinResult(values, idx)


def _method_split(self: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple:
    d = _dim_of(self, dim)
    n = self.shape[d]
    s = split_size_or_sections
    if isinstance(s, int | np.integer):
        if s <= 0 and n:
            raise RuntimeError(f"split expects split_size be non-negative and non-zero for a "
                               f"dimension of size {n}, but got split_size={s}")
        sizes = [s] * (n // s) + ([n % s] if n % s else []) if n else [0]
    else:
        sizes = [int(k) for k in s]
        if sum(sizes) != n or any(k < 0 for k in sizes):
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} "
                               f"(input tensor's size at dimension {d}), but got "
                               f"split_sizes={sizes}")
    starts = np.cumsum([0] + sizes[:-1])
    return tuple(_along(self, d, slice(int(a), int(a) + k)) for a, k in zip(starts, sizes))



def _method_chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple:
    """torch's: pieces of ``ceil(n / chunks)`` (so fewer than ``chunks`` may come back)."""
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = self.shape[_dim_of(self, dim)]
    return _method_split(self, max(-(-n // chunks), 1), dim)


def _method_unbind(self: Tensor, dim: int = 0) -> tuple:
    d = _dim_of(self, dim)
    return tuple(_along(self, d, i) for i in range(self.shape[d]))


def _method_narrow(self: Tensor, dim: int, start: Any, length: int) -> Any:
    d = _dim_of(self, dim)
    n = self.shape[d]
    start = int(start._value if isinstance(start, Tensor) else start)
    if not -n <= start <= n:
        raise IndexError(f"narrow: start ({start}) is out of range for dimension {d} of size {n}")
    start = start + n if start < 0 else start
    if length < 0 or start + length > n:
        raise RuntimeError(f"narrow: start ({start}) + length ({length}) exceeds dimension size "
                           f"({n}).")
    return _along(self, d, slice(start, start + length))


def _index_vector(index: Any, name: str) -> Any:
    """The index as a vector; a batched one (vmap) stays a tensor, each slice its own."""
    idx = index if type(index) is BatchedTensor else \
        index._value if isinstance(index, Tensor) else np.asarray(index)
    if idx.dtype.kind not in "iu" or idx.ndim > 1:
        raise TypeError(f"{name}(): index must be a 1-D (or 0-d) integer tensor, got {idx.ndim}-D "
                        f"{idx.dtype}")
    return reshape(idx, (-1,)) if type(idx) is BatchedTensor else idx.reshape(-1)


def _check_in(idx: Any, n: int, name: str, d: int) -> None:
    idx = every_slice(idx) if type(idx) is BatchedTensor else idx  # the bounds of every slice
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = idx[(idx < -n) | (idx >= n)][0]
        raise IndexError(f"{name}(): index {int(bad)} is out of bounds for dimension {d} with "
                         f"size {n}")


def _method_index_select(self: Tensor, dim: int, index: Any) -> Any:
    d = _dim_of(self, dim)
    idx = _index_vector(index, "index_select")
    _check_in(idx, self.shape[d] if self.ndim else 1, "index_select", d)
    return _along(self if self.ndim else reshape(self, (1,)), d, idx)


def _method_index_put(self: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Any:
    """torch's: ``values`` written (or added, ``accumulate=True``) at ``self[indices]``, out of
    place (``batching.index_put``; under vmap the indices may differ between slices)."""
    if not isinstance(indices, tuple | list):
        raise TypeError(f"index_put(): indices must be a tuple of tensors, got "
                        f"{type(indices).__name__}; write (idx,) for one")
    _same_dtype("index_put", self, values, "values")
    return index_put(self, _index_key(tuple(indices)), values, accumulate)


def _method_take_along_dim(self: Tensor, indices: Any, dim: Any = None) -> Any:
    """torch's: ``take_along_axis`` on the flattened tensor when ``dim`` is None."""
    if dim is None:
        return ops.take_along_axis(reshape(self, (-1,)), _index_key(reshape(indices, (-1,))), 0)
    return take_along_axis(self, _index_key(indices), _dim_of(self, dim))


def _same_dtype(name: str, self: Tensor, other: Any, what: str) -> None:
    if isinstance(other, Tensor) and other.dtype != self.dtype:
        raise RuntimeError(f"{name}(): self ({self.dtype}) and {what} ({other.dtype}) must have "
                           f"the same dtype; cast one with .to(dtype)")


def _method_index_add(self: Tensor, dim: int, index: Any, source: Any, *, alpha: Any = 1) -> Any:
    """``out = self`` with ``alpha * source``'s slices added at ``index`` along ``dim`` (repeats
    accumulate): one scatter-add, differentiable in self and source."""
    _same_dtype("index_add", self, source, "source")
    d = _dim_of(self, dim)
    idx = _index_vector(index, "index_add")
    src = source if isinstance(source, Tensor) else constant(np.asarray(source, self.dtype))
    k = idx.shape[0]
    want = self.shape[:d] + (k,) + self.shape[d + 1:]
    if tuple(src.shape) != want and not (self.ndim == 0 and src.numel() == k):
        raise RuntimeError(f"index_add(): source has shape {tuple(src.shape)}; with index of "
                           f"length {k} along dim {d} of {tuple(self.shape)} it must be "
                           f"{want}")
    n = self.shape[d] if self.ndim else 1
    _check_in(idx, n, "index_add", d)
    if self.ndim == 0:
        return self + (src * alpha if alpha != 1 else src).sum()
    lane = idx % n
    full = broadcast_to(reshape(lane, (1,) * d + (-1,) + (1,) * (self.ndim - d - 1)), want)
    return self + ops.scatter_along_axis(src * alpha if alpha != 1 else src, full, d, self.shape)


def _scatter_winners(idx: np.ndarray, d: int, shape: tuple) -> np.ndarray:
    """The entries of ``idx`` whose write lands last at its position (torch writes in order, so
    of repeated targets the last one stays): True where an entry's value is kept."""
    coords = list(np.indices(idx.shape, sparse=True))
    coords[d] = idx
    flat = np.ravel_multi_index(np.broadcast_arrays(*coords), shape).reshape(-1)
    keep = np.zeros(flat.size, bool)
    keep[flat.size - 1 - np.unique(flat[::-1], return_index=True)[1]] = True
    return keep.reshape(idx.shape)


def _method_scatter(self: Tensor, dim: int, index: Any, src: Any = None, value: Any = None, *,
                    reduce: Any = None) -> Any:
    """torch's out-of-place scatter: ``src``'s entries (or the number ``value``) written at
    ``index`` along ``dim``; of repeated targets the last write stays (torch's CPU order), and
    the gradient reaches the entries that were kept."""
    if reduce is not None:
        if reduce != "add":
            raise NotImplementedError(f"scatter(reduce={reduce!r}) is not supported: use "
                                      "reduce='add' (scatter_add) or scatter_reduce's forms")
        return _method_scatter_add(self, dim, index, src if src is not None else
                                   _method_new_full_like(index, value, self.dtype))
    if src is None and value is None:
        raise TypeError("scatter() needs src (a tensor) or value (a number)")
    if src is not None and not isinstance(src, Tensor):
        src, value = None, src  # scatter(dim, index, 1.0): torch's value overload
    idx = _indices(index, "scatter")
    d = _dim_of(self, dim)
    _scatter_shapes(self, idx, src, d)
    if type(idx) is BatchedTensor:  # vmap: each slice scatters at its own positions
        return _scatter_batched(self, d, idx, src, value)
    written = np.zeros(self.shape, bool)
    if idx.size:
        np.put_along_axis(written, idx, True, d)
    if src is None:
        return ops.where(written, cast_to(value, self.dtype), self)
    _same_dtype("scatter", self, src, "src")
    part = src[tuple(slice(0, k) for k in idx.shape)] if tuple(src.shape) != idx.shape else src
    kept = ops.where(_scatter_winners(idx, d, self.shape), part, 0)
    return ops.where(written, 0, self) + ops.scatter_along_axis(kept, idx, d, self.shape)


def _scatter_batched(self: Tensor, d: int, idx: Any, src: Any, value: Any) -> Any:
    """``scatter`` with an index batched by vmap, whose values no Python code may read: the
    positions written come from a scatter-add of ones. Of repeated targets the mean of the
    values stays (torch's CPU keeps the last; equal values, e.g. ``value=``, agree)."""
    shape = tuple(self.shape)
    count = ops.scatter_along_axis(np.ones(tuple(idx.shape), self.dtype), idx, d, shape)
    written = ops.greater(count, 0)
    if src is None:
        return ops.where(written, cast_to(value, self.dtype), self)
    _same_dtype("scatter", self, src, "src")
    part = src[tuple(slice(0, k) for k in idx.shape)] if tuple(src.shape) != tuple(idx.shape) else src
    placed = ops.scatter_along_axis(part, idx, d, shape)
    return ops.where(written, placed / ops.where(written, count, 1), self)


def _method_new_full_like(index: Any, value: Any, dtype: Any) -> Tensor:
    return constant(np.full(np.shape(_value(index)), value, dtype))


def _indices(index: Any, name: str) -> Any:
    idx = index if type(index) is BatchedTensor else np.asarray(_value(index))  # vmap: batched
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{name}(): index must be an integer (int64) tensor, got {idx.dtype}")
    return idx


def _scatter_shapes(self: Tensor, idx: np.ndarray, src: Any, d: int) -> None:
    """torch's checks: index, self (and src) of one rank; index no larger than src anywhere nor
    than self outside ``dim``; indices inside self's dimension."""
    if idx.ndim != self.ndim or (src is not None and src.ndim != self.ndim):
        raise RuntimeError(f"scatter(): index ({idx.ndim}-D), self ({self.ndim}-D) and src must "
                           "have the same number of dimensions")
    for k in range(idx.ndim):
        if (src is not None and idx.shape[k] > src.shape[k]) or \
                (k != d and idx.shape[k] > self.shape[k]):
            raise RuntimeError(f"scatter(): index shape {idx.shape} must be no larger than src "
                               f"{None if src is None else tuple(src.shape)} in every dimension "
                               f"and than self {tuple(self.shape)} outside dimension {d}")
    n = self.shape[d]
    idx = every_slice(idx) if type(idx) is BatchedTensor else idx  # vmap: every slice's bounds
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx[(idx < 0) | (idx >= n)][0]
        raise RuntimeError(f"scatter(): index {int(bad)} is out of bounds for dimension {d} with "
                           f"size {n}")


def _method_scatter_add(self: Tensor, dim: int, index: Any, src: Any) -> Any:
    _same_dtype("scatter_add", self, src, "src")
    return scatter_add(self, dim, index, src)


def _method_repeat_interleave(self: Tensor, repeats: Any, dim: Any = None, *,
                              output_size: Any = None) -> Any:
    r = repeats._value if isinstance(repeats, Tensor) else repeats
    r = int(r) if np.ndim(r) == 0 else np.asarray(r)
    x = reshape(self, (-1,)) if dim is None else self
    d = 0 if dim is None else _dim_of(self, dim)
    if isinstance(r, np.ndarray) and r.size not in (1, x.shape[d]):
        raise RuntimeError(f"repeat_interleave: repeats must have the same size as input along "
                           f"dim {d} ({x.shape[d]}), got {r.size}")
    return ops.repeat(x, int(r.reshape(-1)[0]) if isinstance(r, np.ndarray) and r.size == 1
                      else r, axis=d)


def _method_norm(self: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False,
                 dtype: Any = None) -> Any:
    """torch's ``Tensor.norm``: a vector p-norm over ``dim`` (all elements by default; 'fro' is
    the 2-norm of the elements), 'nuc' the nuclear norm of the matrices over two dims."""
    x = self if dtype is None else _cast(self, dtype)
    if isinstance(dim, list):
        dim = tuple(dim)
    if p == "nuc":
        if dim is None:
            dim = (-2, -1)
        return rnp.linalg.norm(x, "nuc", axis=dim, keepdims=keepdim)
    return rnp.linalg.vector_norm(x, axis=dim, keepdims=keepdim,
                                  ord=2 if p in ("fro", None) else p)


_where = rule("where", ops.where)


def _method_where(self: Tensor, condition: Any, y: Any) -> Any:
    """``x.where(condition, y)`` is ``torch.where(condition, x, y)``."""
    return _where(condition, self, y)


def _method_mm(self: Tensor, mat2: Any) -> Any:
    if self.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"mm(): both arguments must be matrices (2-D), got {self.ndim}-D and "
                           f"{mat2.ndim}-D; use matmul for batches")
    return self @ mat2


def _method_bmm(self: Tensor, mat2: Any) -> Any:
    if self.ndim != 3 or mat2.ndim != 3 or self.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"bmm(): both arguments must be 3-D with the same batch size, got "
                           f"{tuple(self.shape)} and {tuple(mat2.shape)}")
    return self @ mat2


def _method_addcmul(self: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Any:
    return self + value * (tensor1 * tensor2) if value != 1 else self + tensor1 * tensor2


def _method_addcdiv(self: Tensor, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Any:
    return self + value * (tensor1 / tensor2) if value != 1 else self + tensor1 / tensor2


def _method_lerp(self: Tensor, end: Any, weight: Any) -> Any:
    """``self + weight * (end - self)``; torch wants ``end`` of self's dtype."""
    _same_dtype("lerp", self, end, "end")
    return self + weight * (end - self)


def _with_alpha(name: str, plain: Callable) -> Callable:
    """torch's ``add(other, *, alpha=1)`` / ``sub``: ``self + alpha * other``. Without ``alpha``
    the declared method itself (one check more)."""
    def method(self: Any, other: Any, *, alpha: Any = None) -> Any:
        if alpha is None:
            return plain(self, other)
        return plain(self, other * alpha if isinstance(other, Tensor) else
                     constant(np.asarray(other) * alpha) if isinstance(other, np.ndarray)
                     else other * alpha)

    method.__name__ = method.__qualname__ = name
    sign = "+" if name == "add" else "-"
    method.__doc__ = f"``Tensor.{name}(other, *, alpha=1)``: torch's ``self {sign} alpha * other``."
    return method


def _with_rounding(name: str, plain: Callable) -> Callable:
    """torch's ``div(other, *, rounding_mode=None)``: 'trunc' or 'floor' round the quotient, in
    the operands' promoted dtype (integers stay integers); their gradient is 0, as torch's."""
    def method(self: Any, other: Any, *, rounding_mode: Any = None) -> Any:
        if rounding_mode is None:
            return plain(self, other)
        if rounding_mode not in ("trunc", "floor"):
            raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                             f"but found {rounding_mode!r}")
        dtype = result_type(self, other)
        if dtype.kind in "iu" and rounding_mode == "floor":
            return _cast(floor_divide(*(_cast(o, dtype) if isinstance(o, Tensor) else o
                                        for o in (self, other))), dtype)
        q = plain(self, other)
        return _cast(ops.trunc(q) if rounding_mode == "trunc" else ops.floor(q), dtype)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``Tensor.{name}(other, *, rounding_mode=None)``: torch's."
    return method


# ---- torch's in-place methods of the compositions above: through the one in-place mechanism
def _write_result(self: Tensor, name: str, result: Any) -> Tensor:
    """``self`` overwritten with ``result`` (its out-of-place form's value) where nothing is
    recorded, through ``_writable``: refused as torch refuses on a leaf that requires grad."""
    if isinstance(result, Tensor) and result.requires_grad and not self.requires_grad:
        raise RuntimeError(f"{name}: an operand requires grad, and writing it into a tensor "
                           f"outside the graph would lose its gradient; use the out-of-place "
                           f"form (x = x.{name.rstrip('_')}(...))")
    value = _value(result)
    dst = _writable(self, name)
    if not np.can_cast(np.result_type(value), dst.dtype, "same_kind"):
        raise RuntimeError(f"{name}: result type {np.result_type(value)} can't be cast to the "
                           f"desired output type {dst.dtype}")
    dst[...] = value
    return self


def _inplace_of(method: Callable, name: str) -> Callable:
    """torch's ``name`` (``masked_fill_``, ``index_add_`` ...): ``method``'s result written into
    the tensor, which is returned; on a tensor in the graph recorded as torch records it
    (``inplace.rebase``); replayed in its place by a compiled step (rlgrad.jit)."""
    def write(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if type(self) is BatchedTensor:  # vmap: the result becomes its physical tensor
            return self._assign(method(self, *args, **kwargs))
        if inplace.needs_graph(self, name, *args, *kwargs.values()):
            return inplace.rebase(self, name, lambda old: method(old, *args, **kwargs))
        return _write_result(self, name, method(self, *args, **kwargs))

    write.__name__ = write.__qualname__ = name
    write.__doc__ = f"torch's in-place ``{name}``: ``{method.__name__}``'s result, written in."
    return replayed(write, inplace.refuse_in_jit(name))


# ---- torch's legacy tensor types: FloatTensor(3, 4), LongTensor([1, 2]), isinstance checks
class _LegacyTensorType(type):
    """``rlgrad.FloatTensor`` and its kin: a constructor (sizes give a zero-filled tensor of that
    shape, where torch's is uninitialised; data is copied) and a type test (``isinstance(t,
    rlgrad.FloatTensor)`` holds for float32 Tensors, as in torch)."""

    dtype: np.dtype

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype

    def __call__(cls, *args: Any, device: Any = None) -> Tensor:
        check_device(device)
        if len(args) == 1 and type(args[0]).__name__ == "Size":
            args = tuple(args[0])
        if all(isinstance(a, int | np.integer) and not isinstance(a, bool) for a in args):
            return tensor(np.zeros(args or (0,), cls.dtype))
        if len(args) != 1:
            raise TypeError(f"{cls.__name__}() takes sizes (ints) or one sequence of data, got "
                            f"{args!r}")
        if isinstance(args[0], Tensor) and args[0].dtype != cls.dtype:
            raise TypeError(f"{cls.__name__}(): expected a {cls.dtype} tensor, got "
                            f"{args[0].dtype}; use .to({cls.dtype})")
        return tensor(_value(args[0]), dtype=cls.dtype)


def _legacy_types() -> dict[str, type]:
    return {name: _LegacyTensorType(name, (), {"dtype": dtype, "__module__": "rlgrad",
                                               "__doc__": f"torch.{name}: {dtype} tensors."})
            for dtype, name in _TYPE_NAMES.items()}


#: ``FloatTensor``, ``LongTensor``, ``BoolTensor`` ... by name (rlgrad's top level has them)
LEGACY_TYPES: dict[str, type] = _legacy_types()


def _install_composed_methods() -> None:
    """torch's methods written above as compositions of primitives, and their in-place forms."""
    T = Tensor
    for name, fn in (("sort", _method_sort), ("argsort", _method_argsort), ("topk", _method_topk),
                     ("median", _method_median), ("split", _method_split),
                     ("chunk", _method_chunk), ("unbind", _method_unbind),
                     ("narrow", _method_narrow), ("index_select", _method_index_select),
                     ("index_add", _method_index_add), ("scatter", _method_scatter),
                     ("scatter_add", _method_scatter_add),
                     ("repeat_interleave", _method_repeat_interleave), ("norm", _method_norm),
                     ("where", _method_where), ("mm", _method_mm), ("bmm", _method_bmm),
                     ("addcmul", _method_addcmul), ("addcdiv", _method_addcdiv),
                     ("lerp", _method_lerp), ("index_put", _method_index_put),
                     ("take_along_dim", _method_take_along_dim)):
        fn.__name__ = fn.__qualname__ = name
        setattr(T, name, fn)
    for name in ("masked_fill", "index_add", "scatter", "scatter_add", "addcmul", "addcdiv",
                 "index_put"):
        setattr(T, name + "_", _inplace_of(getattr(T, name), name + "_"))
    for name in ("add", "sub"):  # alpha=: the declared method wrapped, here and at the top level
        DECLARED[name] = _with_alpha(name, DECLARED[name])
        setattr(T, name, DECLARED[name])
    for name in ("div", "divide"):
        DECLARED[name] = _with_rounding(name, DECLARED[name])
        setattr(T, name, DECLARED[name])


_install_composed_methods()


# ---- more of torch's methods: order statistics, selections, closeness, matrix functions
def _method_kthvalue(self: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> MaxMinResult:
    """The k-th smallest along ``dim`` (1-based), ``(values, indices)``; the gradient reaches it."""
    d = _dim_of(self, dim)
    n = self.shape[d] if self.ndim else 1
    if not 1 <= k <= n:
        raise RuntimeError(f"kthvalue(): selected number k={k} out of range for dimension {d} "
                           f"of size {n}")
    x = self if self.ndim else reshape(self, (1,))
    idx = _along(ops.argsort(x, axis=d, kind="stable"), d, slice(k - 1, k))
    values = ops.take_along_axis(x, idx, d)
    if not keepdim or not self.ndim:
        values, idx = squeeze(values, d), squeeze(idx, d)
    return MaxMinResult(values, idx)


def _method_masked_select(self: Tensor, mask: Any) -> Any:
    """The elements where ``mask`` (broadcast with self) holds, as a 1-D tensor."""
    m = np.asarray(_value(mask))
    if m.dtype != np.bool_:
        raise RuntimeError(f"masked_select: expected a boolean mask, got {m.dtype}")
    shape = np.broadcast_shapes(self.shape, m.shape)
    x = self if tuple(self.shape) == shape else broadcast_to(self, shape)
    return x[np.broadcast_to(m, shape)]


def _method_nonzero(self: Tensor, *, as_tuple: bool = False) -> Any:
    """The indices of the non-zero elements: an (n, ndim) int64 tensor, or one per dimension."""
    idx = np.nonzero(np.atleast_1d(self._value) if as_tuple else self._value)
    if as_tuple:
        return tuple(constant(i.astype(np.int64)) for i in idx)
    return constant(np.stack(idx, -1).astype(np.int64).reshape(-1, self.ndim))


def _method_isclose(self: Tensor, other: Any, rtol: float = 1e-05, atol: float = 1e-08,
                    equal_nan: bool = False) -> Any:
    """``|self - other| <= atol + rtol * |other|`` through recorded comparisons (a compiled step
    compares again); infinities equal where they are the same."""
    with np.errstate(invalid="ignore"):  # inf - inf: NaN, not close (the equality decides)
        close = ops.logical_or(ops.equal(self, other), ops.less_equal(
            absolute(self - other), atol + rtol * absolute(other)))
    if equal_nan:
        close = ops.logical_or(close, ops.logical_and(ops.isnan(self), ops.isnan(other)))
    return close


def _method_frac(self: Tensor) -> Any:
    return self - ops.trunc(self)


def _method_rsqrt(self: Tensor) -> Any:
    return ops.reciprocal(DECLARED["sqrt"](self))


def _method_logdet(self: Tensor) -> Any:
    """``log(det)``: NaN for a negative determinant, -inf for a singular matrix, as torch."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return ops.log(ops.det(self))


def _install_more_methods() -> None:
    T = Tensor
    for name, fn in (("kthvalue", _method_kthvalue), ("masked_select", _method_masked_select),
                     ("nonzero", _method_nonzero), ("isclose", _method_isclose),
                     ("frac", _method_frac), ("rsqrt", _method_rsqrt), ("logdet", _method_logdet)):
        fn.__name__ = fn.__qualname__ = name
        setattr(T, name, fn)
    T.msort = lambda self: _method_sort(self, 0)[0]
    T.tile = lambda self, dims: ops.tile(self, tuple(dims))
    T.allclose = lambda self, other, rtol=1e-05, atol=1e-08, equal_nan=False: bool(np.all(
        _method_isclose(self, other, rtol, atol, equal_nan)._value))
    T.equal = lambda self, other: tuple(self.shape) == tuple(other.shape) and bool(
        np.all(self._value == other._value))
    T.slogdet = lambda self: rnp.linalg.slogdet(self)
    T.matrix_exp = lambda self: rnp.linalg.expm(self)
    T.swapdims = T.swapaxes
    T.fliplr = lambda self: ops.flip(self, 1)
    T.flipud = lambda self: ops.flip(self, 0)
    T.new_empty = lambda self, *size, dtype=None: constant(np.zeros(_sizes(size), dtype or self.dtype))
    for name in ("abs", "neg", "exp", "log", "sqrt", "sigmoid", "tanh", "relu", "square", "floor",
                 "ceil", "round", "trunc", "sign", "reciprocal", "frac", "rsqrt", "tril", "triu"):
        setattr(T, name + "_", _inplace_of(getattr(T, name), name + "_"))


_install_more_methods()


# ---- more of torch's Tensor API (issue 29): compositions of primitives; the gradient-free ones
# (unique, bincount, histc, searchsorted, bucketize) on the values, as torch gives no gradient
def _cumulative_extreme(self: Tensor, dim: int, indices_of: Callable) -> MaxMinResult:
    """``(values, indices)`` of the running max/min along ``dim``: the indices recorded (a
    compiled step recomputes them), the values gathered at them (the gradient reaches them)."""
    x = self if self.ndim else reshape(self, (1,))
    d = _dim_of(self, dim)
    idx = indices_of(x, d)
    idx = idx if isinstance(idx, Tensor) else constant(idx)
    values = ops.take_along_axis(x, idx, d)
    return MaxMinResult(*(reshape(v, ()) for v in (values, idx))) if not self.ndim else \
        MaxMinResult(values, idx)


def _method_cummax(self: Tensor, dim: int) -> MaxMinResult:
    return _cumulative_extreme(self, dim, rnp.cummax_indices)


def _method_cummin(self: Tensor, dim: int) -> MaxMinResult:
    return _cumulative_extreme(self, dim, rnp.cummin_indices)


def _method_aminmax(self: Tensor, *, dim: Any = None, keepdim: bool = False) -> MaxMinResult:
    """torch's ``(min, max)`` (named ``min``/``max``): ``amin`` and ``amax`` together."""
    res = MaxMinResult(self.amin(dim, keepdim) if dim is not None else self.amin(),
                       self.amax(dim, keepdim) if dim is not None else self.amax())
    return _MinMax(res)


class _MinMax(tuple):
    """``aminmax``'s ``(min, max)``."""

    __slots__ = ()

    def __new__(cls, pair: Any) -> _MinMax:
        return tuple.__new__(cls, tuple(pair))

    min = property(lambda self: self[0])
    max = property(lambda self: self[1])


def _method_index_fill(self: Tensor, dim: int, index: Any, value: Any) -> Any:
    """``value`` written at ``index`` along ``dim``; the gradient reaches the other entries."""
    d = _dim_of(self, dim)
    idx = _index_vector(index, "index_fill")
    _check_in(idx, self.shape[d] if self.ndim else 1, "index_fill", d)
    n = self.shape[d] if self.ndim else 1
    hit = ops.not_equal(ops.sum(ops.astype(ops.equal(
        reshape(idx % n, (-1, 1)), np.arange(n)), np.int64), axis=0), 0)
    shape = (1,) * d + (n,) + (1,) * (self.ndim - d - 1)
    return ops.where(reshape(hit, shape if self.ndim else ()), cast_to(value, self.dtype), self)


def _method_take(self: Tensor, index: Any) -> Any:
    """torch's ``take``: ``self.flatten()[index]`` with ``index``'s shape."""
    idx = _index_key(index)
    _check_in(idx, max(self.numel(), 1), "take", 0)
    return getitem(reshape(self, (-1,)), idx)


def _method_renorm(self: Tensor, p: float, dim: int, maxnorm: float) -> Any:
    """Each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` scaled to norm ``maxnorm``
    (torch's ``maxnorm / (norm + 1e-7)``), the others as they are."""
    d = _dim_of(self, dim)
    others = tuple(k for k in range(self.ndim) if k != d)
    norm = ops.power(ops.sum(ops.power(absolute(self), p), axis=others, keepdims=True), 1.0 / p)
    scale = ops.where(ops.greater(norm, maxnorm), maxnorm / (norm + 1e-7), 1.0)
    return self * ops.astype(scale, self.dtype)


def _method_count_nonzero(self: Tensor, dim: Any = None) -> Any:
    out = rnp.count_nonzero(self, axis=tuple(dim) if isinstance(dim, list | tuple) else dim)
    return out if isinstance(out, Tensor) else constant(np.asarray(out, np.int64))


def _method_as_strided(self: Tensor, size: Any, stride: Any, storage_offset: int = 0) -> Any:
    """torch's ``as_strided`` on the tensor's elements in row-major order (rlgrad's tensors are
    laid out as if contiguous): one index read, so overlapping windows add their gradients."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"as_strided: size {size} and stride {stride} must have the same length")
    flat = np.full(size, int(storage_offset), np.int64)
    for k, (n, s) in enumerate(zip(size, stride)):
        flat = flat + (np.arange(n) * s).reshape((1,) * k + (n,) + (1,) * (len(size) - k - 1))
    if flat.size and (flat.min() < 0 or flat.max() >= self.numel()):
        raise RuntimeError(f"as_strided: size {size}, stride {stride} and offset {storage_offset} "
                           f"reach outside the tensor's {self.numel()} elements")
    return getitem(reshape(self, (-1,)), flat)


def _method_unique(self: Tensor, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
                   return_counts: bool = False, dim: Any = None) -> Any:
    """torch's (always sorted): the distinct values (or sub-tensors along ``dim``), with the
    inverse indices and counts if asked; no gradient, as torch's."""
    x = _unique_values(self, "unique")
    axis = None if dim is None else _dim_of(self, dim)
    vals, inv, counts = np.unique(x, return_inverse=True, return_counts=True, axis=axis)
    inv = inv.reshape(x.shape if axis is None else (x.shape[axis],)).astype(np.int64)
    out = (constant(vals),) + ((constant(inv),) if return_inverse else ()) + (
        (constant(counts.astype(np.int64)),) if return_counts else ())
    return out[0] if len(out) == 1 else out


def _method_unique_consecutive(self: Tensor, return_inverse: bool = False,
                               return_counts: bool = False, dim: Any = None) -> Any:
    """Each run of equal values (or sub-tensors along ``dim``) collapsed to one."""
    x = _unique_values(self, "unique_consecutive")
    axis = 0 if dim is None else _dim_of(self, dim)
    lanes = np.moveaxis(x.reshape(-1) if dim is None else x, axis, 0)
    new = np.ones(lanes.shape[0], bool)
    if lanes.shape[0] > 1:
        new[1:] = (lanes[1:] != lanes[:-1]).reshape(lanes.shape[0] - 1, -1).any(axis=1)
    inv = np.cumsum(new) - 1
    vals = np.moveaxis(lanes[new], 0, axis)
    counts = np.diff(np.append(np.flatnonzero(new), lanes.shape[0]))
    out = (constant(vals),) + ((constant(inv.reshape(x.shape if dim is None else -1)),)
                               if return_inverse else ()) + (
        (constant(counts.astype(np.int64)),) if return_counts else ())
    return out[0] if len(out) == 1 else out


def _unique_values(x: Any, name: str) -> np.ndarray:
    """The values of a tensor whose result's shape they decide: refused where they are not
    known (inside vmap, torch.func refuses it too; while rlgrad.jit traces)."""
    if type(x) is BatchedTensor:
        raise RuntimeError(f"vmap: {name} gives a shape that depends on each slice's values; "
                           "call it outside vmap")
    if _Trace.compiling:
        raise RuntimeError(f"rlgrad.jit: {name} gives a shape that depends on the values, which "
                           "a compiled step cannot replay; call it outside jit")
    return x._value


def _method_bincount(self: Tensor, weights: Any = None, minlength: int = 0) -> Any:
    """torch's: how often each value of a 1-D non-negative int tensor occurs (summing
    ``weights`` instead if given: float64 unless they are float32/float16, as torch's)."""
    x = _unique_values(self, "bincount")
    if x.ndim != 1 or x.dtype.kind not in "iu" or (x.size and x.min() < 0):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs")
    if weights is None:
        return constant(np.bincount(x, minlength=minlength).astype(np.int64))
    w = np.asarray(_value(weights))
    dt = w.dtype if w.dtype in (np.float32, np.float16) else np.dtype(np.float64)
    return constant(np.bincount(x, weights=w, minlength=minlength).astype(dt))


def _method_histc(self: Tensor, bins: int = 100, min: float = 0, max: float = 0) -> Any:  # noqa: A002
    """torch's: a histogram of ``bins`` equal bins over [min, max] (the data's range when both
    are 0), elements outside ignored; float, no gradient."""
    x = _unique_values(self, "histc")
    if x.dtype.kind != "f":
        raise RuntimeError(f"histc: input must be floating point, got {x.dtype}")
    lo, hi = (float(min), float(max)) if (min, max) != (0, 0) or not x.size else (
        float(x.min()), float(x.max()))
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError(f"histc: max must be larger than min, got min={lo}, max={hi}")
    return constant(np.histogram(x, bins=bins, range=(lo, hi))[0].astype(x.dtype))


def _searchsorted(sorted_sequence: Any, values: Any, *, out_int32: bool = False,
                  right: bool = False, side: Any = None, sorter: Any = None) -> Tensor:
    """``torch.searchsorted``: for each value, the index where it would go in the (last axis
    of the) sorted sequence; rows of an N-D sequence pair with the rows of ``values``."""
    if side is not None:
        right = side == "right"
    seq = np.asarray(_value(sorted_sequence))
    vals = np.asarray(_value(values))
    if sorter is not None:
        seq = np.take_along_axis(seq, np.asarray(_value(sorter)), -1)
    kind = "right" if right else "left"
    if seq.ndim <= 1:
        out = np.searchsorted(seq, vals, side=kind)
    else:
        if seq.shape[:-1] != vals.shape[:-1]:
            raise RuntimeError(f"searchsorted: boundaries {seq.shape} and input {vals.shape} must "
                               "share their leading dimensions")
        rows = seq.reshape(-1, seq.shape[-1])
        out = np.stack([np.searchsorted(r, v, side=kind) for r, v in
                        zip(rows, vals.reshape(len(rows), -1))]).reshape(vals.shape)
    return constant(np.asarray(out, np.int32 if out_int32 else np.int64))


def _bucketize(input: Any, boundaries: Any, *, out_int32: bool = False,  # noqa: A002
               right: bool = False) -> Tensor:
    """``torch.bucketize``: the bucket of each input among 1-D ``boundaries``."""
    if np.ndim(_value(boundaries)) != 1:
        raise RuntimeError("bucketize: boundaries must be 1-D")
    return _searchsorted(boundaries, input, out_int32=out_int32, right=right)


def _clamp_side(side: str) -> Callable:
    def method(self: Tensor, bound: Any) -> Any:
        return self.clamp(**{side: bound})

    method.__name__ = method.__qualname__ = f"clamp_{side}"
    return method


def _install_issue29_methods() -> None:
    T = Tensor
    for name, fn in (("cummax", _method_cummax), ("cummin", _method_cummin),
                     ("aminmax", _method_aminmax), ("index_fill", _method_index_fill),
                     ("take", _method_take), ("renorm", _method_renorm),
                     ("count_nonzero", _method_count_nonzero), ("as_strided", _method_as_strided),
                     ("unique", _method_unique), ("unique_consecutive", _method_unique_consecutive),
                     ("bincount", _method_bincount), ("histc", _method_histc),
                     ("clamp_min", _clamp_side("min")), ("clamp_max", _clamp_side("max"))):
        fn.__name__ = fn.__qualname__ = name
        setattr(T, name, fn)
    for name in ("index_fill", "clamp_min", "clamp_max", "nan_to_num", "renorm"):
        setattr(T, name + "_", _inplace_of(getattr(T, name), name + "_"))


_install_issue29_methods()


# ---- the last of issue 29's survey: windows, modes, shape-changing in-place methods ---------
def _method_unfold(self: Tensor, dimension: int, size: int, step: int) -> Any:
    """torch's: every window of ``size`` elements ``step`` apart along ``dimension``, as a new
    last dimension; one index read, so overlapping windows add their gradients."""
    d = _dim_of(self, dimension)
    n = self.shape[d] if self.ndim else 1
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if not 0 <= size <= n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if self.ndim == 0:
        return reshape(self, (1,))
    windows = (np.arange((n - size) // step + 1) * step)[:, None] + np.arange(size)[None, :]
    return ops.moveaxis(_along(self, d, windows), d + 1, -1)


def _lanes(self: Tensor, dim: int, name: str) -> tuple[int, np.ndarray]:
    """``dim`` as an axis and the values with it moved last, flattened to (lanes, n)."""
    d = _dim_of(self, dim)
    x = np.moveaxis(np.atleast_1d(_unique_values(self, name)), d, -1)
    return d, x.reshape(-1, x.shape[-1])


def _lane_index(self: Tensor, d: int, keepdim: bool, idx: np.ndarray) -> MaxMinResult:
    """``(values, indices)`` from one index per lane: the values gathered (differentiable)."""
    shape = tuple(np.moveaxis(np.atleast_1d(self._value), d, -1).shape[:-1]) + (1,)
    idx = constant(np.moveaxis(idx.reshape(shape), -1, d).astype(np.int64))
    if self.ndim == 0:
        return MaxMinResult(self * 1, constant(np.zeros((), np.int64)))
    values = ops.take_along_axis(self, idx, d)
    return MaxMinResult(values, idx) if keepdim else MaxMinResult(squeeze(values, d), squeeze(idx, d))


def _method_mode(self: Tensor, dim: int = -1, keepdim: bool = False) -> MaxMinResult:
    """torch's: the most frequent value of each lane (the smallest of the most frequent; each
    NaN counts once) and the index of its last occurrence."""
    d, lanes = _lanes(self, dim, "mode")
    out = np.zeros(len(lanes), np.int64)
    for r, lane in enumerate(lanes):
        order = np.argsort(lane, kind="stable")
        s = lane[order]
        starts = np.flatnonzero(np.r_[True, ~(s[1:] == s[:-1])]) if s.size else np.zeros(0, int)
        counts = np.diff(np.r_[starts, s.size])
        best = int(np.argmax(counts)) if counts.size else 0
        out[r] = order[starts[best] + counts[best] - 1] if counts.size else 0
    return _lane_index(self, d, keepdim, out)


def _method_nanmedian(self: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """``median`` ignoring NaN: the lower middle of each lane's numbers (NaN where a lane has
    none); ``(values, indices)`` with ``dim``."""
    if dim is None:
        flat = reshape(self, (-1,))
        if not flat.shape[0]:
            return _method_median(self)
        return reshape(_method_nanmedian(flat, 0).values, ())
    d, lanes = _lanes(self, dim, "nanmedian")
    order = np.argsort(lanes, axis=-1, kind="stable")  # NaN sorts last
    k = (~np.isnan(lanes)).sum(-1) if lanes.dtype.kind == "f" else np.full(len(lanes), lanes.shape[-1])
    pos = np.maximum((k - 1) // 2, 0)
    return _lane_index(self, d, keepdim, np.take_along_axis(order, pos[:, None], -1)[:, 0])


def _shape_inplace(name: str, fn: Callable) -> Callable:
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if type(self) is BatchedTensor:
            raise RuntimeError(f"vmap: {name} changes the shape in place; use the out-of-place "
                               f"{name.rstrip('_')} inside vmap")
        return inplace.reshape_in_place(self, name, lambda t: fn(t, *args, **kwargs))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"torch's in-place ``{name}``: the tensor takes ``{name.rstrip('_')}``'s shape."
    return replayed(method, inplace.refuse_in_jit(name))


def _t_checked(self: Tensor) -> Any:
    if self.ndim > 2:
        raise RuntimeError(f"t_() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
    return self.t()


def _method_resize_(self: Tensor, *sizes: Any) -> Tensor:
    """torch's: the tensor takes the shape ``sizes``, keeping its first elements in row-major
    order; new elements are zeros (torch leaves them uninitialised). No gradient, as torch's."""
    if self.requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    shape = tuple(int(s) for s in _sizes(sizes))
    flat = self._value.reshape(-1)
    n = int(np.prod(shape, dtype=np.int64))
    data = flat[:n] if n <= flat.size else np.concatenate([flat, np.zeros(n - flat.size, flat.dtype)])
    mark_written(self)
    self._value = np.ascontiguousarray(data).reshape(shape)
    return self


def _python_inplace(name: str) -> Callable:
    """``apply_(fn)`` / ``map_(other, fn)``: a Python callable on each element (torch's: CPU
    only, slow by design, refused on a tensor that requires grad)."""
    def method(self: Tensor, *args: Any) -> Tensor:
        if self.requires_grad:
            raise RuntimeError(f"Can't call {name}() on Variable that requires grad. Use "
                               f"var.detach().{name}() instead.")
        fn, others = args[-1], [np.broadcast_to(_value(o), self.shape) for o in args[:-1]]
        out = np.frompyfunc(fn, 1 + len(others), 1)(self._value, *others)
        dst = _writable(self, name)
        dst[...] = np.asarray(out, dtype=object).astype(dst.dtype)
        return self

    method.__name__ = method.__qualname__ = name
    return method


def _install_last_survey_methods() -> None:
    T = Tensor
    for name, fn in (("unfold", _method_unfold), ("mode", _method_mode),
                     ("nanmedian", _method_nanmedian), ("resize_", _method_resize_),
                     ("apply_", _python_inplace("apply_")), ("map_", _python_inplace("map_"))):
        fn.__name__ = fn.__qualname__ = name
        setattr(T, name, fn)
    for name, fn in (("unsqueeze_", T.unsqueeze), ("squeeze_", T.squeeze), ("t_", _t_checked),
                     ("transpose_", T.transpose), ("swapaxes_", T.swapaxes),
                     ("swapdims_", T.swapaxes)):
        setattr(T, name, _shape_inplace(name, fn))


_install_last_survey_methods()


# ---- the rest of what RL code calls (issue 29's survey), compositions of primitives ----------
def _method_logit(self: Tensor, eps: Any = None) -> Any:
    """``log(p / (1 - p))``, ``p`` clamped to [eps, 1 - eps] first when ``eps`` is given."""
    p = self if eps is None else ops.clip(self, eps, 1 - eps)
    return ops.log(p) - ops.log1p(-p)


def _method_float_power(self: Tensor, exponent: Any) -> Any:
    """``pow`` in float64, as torch's."""
    other = _cast(exponent, np.float64) if isinstance(exponent, Tensor) else exponent
    return ops.power(_cast(self, np.float64), other)


def _method_copysign(self: Tensor, other: Any) -> Any:
    """``|self|`` with ``other``'s sign (of -0.0 too); the gradient is ``sign`` times that."""
    neg = rnp.signbit(other)
    neg = neg if isinstance(neg, Tensor) else constant(np.asarray(neg))
    x = self if self.dtype.kind == "f" else _cast(self, np.float32)
    return ops.where(neg, -absolute(x), absolute(x))


def _method_sum_to_size(self: Tensor, *size: Any) -> Any:
    return ops.sum_to(self, _sizes(size))


def _method_nansum(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    x = self if dtype is None else _cast(self, dtype)
    zero = ops.where(ops.isnan(x), 0, x)
    return zero.sum(dim, keepdim) if dim is not None else zero.sum()


def _method_nanmean(self: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    x = self if dtype is None else _cast(self, dtype)
    kept = ops.astype(logical_not(ops.isnan(x)), x.dtype)
    total = _method_nansum(x, dim, keepdim)
    return total / (kept.sum(dim, keepdim) if dim is not None else kept.sum())


def _method_quantile(self: Tensor, q: Any, dim: Any = None, keepdim: bool = False, *,
                     interpolation: str = "linear") -> Any:
    """torch's: the ``q``-quantiles (a number or a 1-D tensor: a leading dimension) along
    ``dim`` (of the flattened tensor when None), through the sorted values (the gradient
    reaches the two neighbours of each quantile, weighted as the interpolation)."""
    if interpolation not in ("linear", "lower", "higher", "midpoint", "nearest"):
        raise ValueError(f"quantile(): interpolation must be linear, lower, higher, midpoint or "
                         f"nearest, got {interpolation!r}")
    qs = np.asarray(_value(q), np.float64)
    if qs.ndim > 1 or np.any((qs < 0) | (qs > 1)):
        raise RuntimeError("quantile() q must be a scalar or 1-D tensor with values in [0, 1]")
    x = reshape(self, (-1,)) if dim is None else self
    d = 0 if dim is None else _dim_of(self, dim)
    s = _method_sort(x, d)[0]
    pos = qs * (x.shape[d] - 1)
    lo, hi = np.floor(pos).astype(np.int64), np.ceil(pos).astype(np.int64)
    frac = {"linear": pos - lo, "lower": 0 * pos, "higher": (hi > lo) * 1.0,
            "midpoint": (hi > lo) * 0.5, "nearest": (np.round(pos) > lo) * 1.0}[interpolation]
    shape = (-1,) + (1,) * (x.ndim - d - 1)
    a, b = _along(s, d, lo.reshape(-1)), _along(s, d, hi.reshape(-1))
    out = a + (b - a) * constant(frac.reshape(shape).astype(s.dtype))
    out = ops.moveaxis(out, d, 0)  # torch puts the quantiles first
    if keepdim:
        out = ops.expand_dims(out, d + 1) if dim is not None else reshape(out, (-1,) + (1,) * self.ndim)
    return reshape(out, tuple(out.shape)[1:]) if qs.ndim == 0 else out


def _method_nanquantile(self: Tensor, q: Any, dim: Any = None, keepdim: bool = False, *,
                        interpolation: str = "linear") -> Any:
    if dim is None and not bool(np.any(np.isnan(self._value))):
        return _method_quantile(self, q, None, keepdim, interpolation=interpolation)
    if bool(np.any(np.isnan(self._value))):
        raise NotImplementedError("nanquantile() of a tensor holding NaN is not supported by "
                                  "rlgrad; drop the NaNs (x[~x.isnan()]) and call quantile")
    return _method_quantile(self, q, dim, keepdim, interpolation=interpolation)


def _method_unflatten(self: Tensor, dim: int, sizes: Any) -> Any:
    d = _dim_of(self, dim)
    return reshape(self, tuple(self.shape[:d]) + tuple(sizes) + tuple(self.shape[d + 1:]))


def _method_addmm(self: Tensor, mat1: Any, mat2: Any, *, beta: float = 1, alpha: float = 1) -> Any:
    """``beta * self + alpha * mat1 @ mat2`` (``self`` ignored when ``beta`` is 0, as torch)."""
    prod = matmul(mat1, mat2)
    prod = prod * alpha if alpha != 1 else prod
    return prod if beta == 0 else (self * beta if beta != 1 else self) + prod


def _method_masked_scatter(self: Tensor, mask: Any, source: Any) -> Any:
    """torch's: ``source``'s first elements, in order, written where ``mask`` (broadcast to
    self) holds; differentiable in both."""
    m = np.broadcast_to(np.asarray(_value(mask), bool), tuple(self.shape))
    n = int(m.sum())
    if source.numel() < n:
        raise RuntimeError(f"masked_scatter: the mask selects {n} elements but source has only "
                           f"{source.numel()}")
    taken = getitem(reshape(source, (-1,)), slice(0, n))
    return ops.where(m, ops.untake(taken, m, tuple(self.shape)), self)


def _method_index_copy(self: Tensor, dim: int, index: Any, source: Any) -> Any:
    """``source``'s slices written at ``index`` along ``dim`` (``index_put`` along one axis)."""
    d = _dim_of(self, dim)
    idx = _index_vector(index, "index_copy")
    _check_in(idx, self.shape[d] if self.ndim else 1, "index_copy", d)
    return index_put(self, (slice(None),) * d + (idx,), source)


def _method_put(self: Tensor, index: Any, source: Any, accumulate: bool = False) -> Any:
    """torch's ``put``: ``source`` written (or added) at ``index`` of the flattened tensor."""
    idx = _index_key(index)
    _check_in(idx, max(self.numel(), 1), "put", 0)
    flat = index_put(reshape(self, (-1,)), (reshape(idx, (-1,)) if isinstance(idx, Tensor) else
                                            np.reshape(idx, -1),),
                     reshape(source, (-1,)), accumulate)
    return reshape(flat, tuple(self.shape))


def _method_scatter_reduce(self: Tensor, dim: int, index: Any, src: Any, reduce: str, *,
                           include_self: bool = True) -> Any:
    """torch's ``scatter_reduce`` with ``reduce`` sum, prod, mean, amax or amin: positions no
    index names keep ``self``; ``include_self=False`` leaves ``self`` out where they do."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise RuntimeError(f"scatter_reduce(): reduce must be sum, prod, mean, amax or amin, got "
                           f"{reduce!r}")
    idx = _indices(index, "scatter_reduce")
    d = _dim_of(self, dim)
    _scatter_shapes(self, idx, src, d)
    part = src[tuple(slice(0, k) for k in idx.shape)] if tuple(src.shape) != idx.shape else src
    shape = tuple(self.shape)
    count = ops.scatter_along_axis(np.ones(idx.shape, self.dtype), idx, d, shape)
    hit = ops.greater(count, 0)
    base = self if include_self else ops.where(hit, 0, self)
    if reduce in ("sum", "mean"):
        out = base + ops.scatter_along_axis(part, idx, d, shape)
        return out if reduce == "sum" else out / (count + (1 if include_self else ops.where(hit, 0, 1)))
    if reduce == "prod":
        logs = ops.scatter_along_axis(ops.log(absolute(part)), idx, d, shape)
        negs = ops.scatter_along_axis(ops.astype(ops.less(part, 0), self.dtype), idx, d, shape)
        sign = 1 - 2 * ops.remainder(negs, 2)
        return ops.where(hit, (base if include_self else 1) * sign * ops.exp(logs), self)
    return _scatter_extreme(self, d, idx, part, reduce, include_self, hit)


def _scatter_extreme(self: Tensor, d: int, idx: np.ndarray, part: Any, reduce: str,
                     include_self: bool, hit: Any) -> Any:
    """amax/amin: the extreme of each position's values through a sort-free fold: NumPy's
    ``maximum.at`` on the values, then the gradient shared by the entries equal to it."""
    ufunc = np.maximum if reduce == "amax" else np.minimum
    fill = -np.inf if reduce == "amax" else np.inf
    best = np.full(tuple(self.shape), fill, self.dtype)
    full = np.indices(idx.shape)
    full[d] = idx
    ufunc.at(best, tuple(full), _value(part))
    if include_self:
        best = ufunc(best, self._value)
    wins = ops.equal(part, ops.take_along_axis(constant(best), idx, d))
    ties = ops.scatter_along_axis(ops.astype(wins, self.dtype), idx, d, tuple(self.shape))
    self_wins = ops.equal(self, constant(best)) if include_self else constant(np.zeros(best.shape, bool))
    n = ties + ops.astype(self_wins, self.dtype)
    picked = ops.scatter_along_axis(ops.where(wins, part, 0), idx, d, tuple(self.shape))
    picked = picked + ops.where(self_wins, self, 0)
    return ops.where(hit, picked / ops.where(hit, n, 1), self)


def _method_stride(self: Tensor, dim: Any = None) -> Any:
    """The strides (in elements) of a contiguous tensor of this shape: rlgrad has no storage."""
    out, acc = [], 1
    for n in reversed(tuple(self.shape)):
        out.append(acc)
        acc *= max(n, 1)
    strides = tuple(reversed(out))
    return strides if dim is None else strides[_dim_of(self, dim)]


def _tensor_format(self: Tensor, spec: str) -> str:
    """``f"{loss:.3f}"``: a 0-d tensor formats as its number, as torch's."""
    if self.ndim == 0 and type(self) is Tensor:
        return self.item().__format__(spec)
    return object.__format__(self, spec)


def _bits(name: str, fn: Any, swap: bool = False) -> Callable:
    """``a ^ b``, ``a << b`` ... on integer and bool tensors (no gradient exists)."""
    def op(self: Tensor, other: Any) -> Any:
        a, b = (_value(other), self._value) if swap else (self._value, _value(other))
        if np.result_type(a, b).kind not in "biu":
            raise TypeError(f"{name}: only integer and bool tensors, got {np.result_type(a, b)}")
        return constant(np.asarray(fn(a, b)))

    op.__name__ = op.__qualname__ = name
    return op


def _numpy_force(plain: Callable) -> Callable:
    def numpy(self: Tensor, *, force: bool = False) -> np.ndarray:
        """The values as an ndarray; ``force=True`` detaches first (torch's)."""
        return plain(self.detach() if force else self)

    return numpy


def _install_survey_methods() -> None:
    T = Tensor
    for name, fn, swap in (("__xor__", np.bitwise_xor, False), ("__rxor__", np.bitwise_xor, True),
                           ("__lshift__", np.left_shift, False), ("__rshift__", np.right_shift, False),
                           ("__rlshift__", np.left_shift, True), ("__rrshift__", np.right_shift, True)):
        setattr(T, name, _bits(name, fn, swap))
    T.bitwise_left_shift, T.bitwise_right_shift = T.__lshift__, T.__rshift__
    T.numpy = _numpy_force(T.numpy)
    T.mH = property(lambda self: self.mT)  # real tensors: the conjugate is the tensor itself
    T.H = property(lambda self: self.T)
    for name, fn in (("logit", _method_logit), ("float_power", _method_float_power),
                     ("copysign", _method_copysign), ("sum_to_size", _method_sum_to_size),
                     ("nansum", _method_nansum), ("nanmean", _method_nanmean),
                     ("quantile", _method_quantile), ("nanquantile", _method_nanquantile),
                     ("unflatten", _method_unflatten), ("addmm", _method_addmm),
                     ("masked_scatter", _method_masked_scatter), ("index_copy", _method_index_copy),
                     ("put", _method_put), ("scatter_reduce", _method_scatter_reduce),
                     ("stride", _method_stride)):
        fn.__name__ = fn.__qualname__ = name
        setattr(T, name, fn)
    T.__format__ = _tensor_format
    T.sgn = lambda self: self.sign()  # (real tensors: sign)
    T.fix = lambda self: self.trunc()
    T.signbit = lambda self: rnp.signbit(self) if not isinstance(self._value, np.ndarray) else \
        constant(np.signbit(self._value))
    T.byte = lambda self: _cast(self, np.uint8)
    T.char = lambda self: _cast(self, np.int8)
    T.short = lambda self: _cast(self, np.int16)
    T.is_contiguous = lambda self, memory_format=None: True
    T.storage_offset = lambda self: 0
    T.element_size = lambda self: self.dtype.itemsize
    T.data_ptr = lambda self: int(self._value.ctypes.data)
    T.share_memory_ = lambda self: self
    T.is_shared = lambda self: False
    for name in ("pow", "cumsum", "copysign", "masked_scatter", "index_copy", "put",
                 "scatter_reduce", "addmm", "logit"):
        setattr(T, name + "_", _inplace_of(getattr(T, name), name + "_"))


_install_survey_methods()

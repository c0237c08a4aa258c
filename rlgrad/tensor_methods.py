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
from rlgrad.device import check_device, is_device
from rlgrad.exports import EXPORTS, REQUIRED, Export, Method, Param, on_export
from rlgrad.indexing import gather, torch_index_steps
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
from rlgrad.promotion import binary, cast_to, rule
from rlgrad.tensor import Tensor, _Depth, _set_data, constant, mark_written, tensor
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
        if not kwargs and n_required <= len(args) <= n_direct:  # t.sum(), t.sum(1), t.pow(2)
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
    return var(self, axis=_axis(axis, dim), ddof=_correction(unbiased, correction, ddof),
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

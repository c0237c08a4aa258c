"""PyTorch's type promotion, for the Tensor's operators and methods and ``rlgrad.<fn>``.

``rlgrad.numpy`` keeps NumPy's rules (its functions call the primitives directly); the Tensor API
follows PyTorch's ("Type promotion" in torch's docs; ``at::native::result_type``): operands fall
in three priority groups, dimensioned tensors > 0-d tensors > numbers (Python and NumPy scalars),
and a lower group decides the dtype only when its category (bool < integer < float < complex) is
higher, then giving that category's default (a float number: the default float dtype, float32
unless ``set_default_dtype``; an int: int64). Within a group, ``promote_types``, where a float
always beats an integer (int64 + float16 is float16; NumPy gives float64).

The operands are cast to the result dtype before the primitive runs (as torch computes in it), a
Tensor through the recorded ``astype`` so its gradient comes back in its own dtype.

A function that a transform (``rlgrad.grad``, ``vjp``, ``jit`` ...) is given NumPy arrays is NumPy
code (called on the arrays themselves it is plain NumPy): while it runs, the operators on its
traced values keep NumPy's rules, so the transform computes what the function computes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.ops import astype
from rlgrad.tensor import Tensor, _Depth, get_default_dtype

_BOOL = np.dtype(np.bool_)
_INT64 = np.dtype(np.int64)
_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}
_promoted: dict[tuple[np.dtype, np.dtype], np.dtype] = {}


def _to_dtype(d: Any) -> np.dtype:
    return d if isinstance(d, np.dtype) else np.dtype(d)


def promote_types(type1: Any, type2: Any) -> np.dtype:
    """``torch.promote_types``: the smallest dtype both cast to safely, where a floating dtype
    always beats an integer one (NumPy widens int32 + float16 to float64, torch keeps float16)."""
    a, b = _to_dtype(type1), _to_dtype(type2)
    key = (a, b)
    out = _promoted.get(key)
    if out is None:
        ca, cb = _CATEGORY.get(a.kind), _CATEGORY.get(b.kind)
        if ca is None or cb is None:
            raise TypeError(f"promote_types: no PyTorch promotion for {a} and {b} (bool, integer, "
                            "float and complex dtypes only)")
        if ca != cb and min(ca, cb) <= 1:  # bool or integer against a higher category
            out = a if ca > cb else b
        else:
            out = np.promote_types(a, b)
        _promoted[key] = out
    return out


def _number_dtype(x: Any) -> np.dtype | None:
    """The dtype torch gives a Python or NumPy scalar operand (a "wrapped number"), or None."""
    if isinstance(x, bool | np.bool_):
        return _BOOL
    if isinstance(x, int | np.integer):
        return _INT64
    if isinstance(x, float | np.floating):
        return get_default_dtype()
    if isinstance(x, complex | np.complexfloating):
        return np.dtype(np.complex64 if get_default_dtype().itemsize <= 4 else np.complex128)
    return None


def _combine(higher: np.dtype | None, lower: np.dtype | None) -> np.dtype | None:
    """torch's combine_categories: ``lower`` (a lower priority group) counts only when its
    category is higher than ``higher``'s."""
    if higher is None:
        return lower
    if lower is None or _CATEGORY[higher.kind] >= _CATEGORY[lower.kind]:
        return higher
    if higher.kind == "f" and lower.kind == "c":
        return promote_types(higher, lower)  # the complex dtype of the float's width
    return lower


def _result_type(operands: tuple) -> np.dtype | None:
    """torch's result dtype of the operands it knows (Tensors, arrays, numbers; others, such as
    a list or None, are skipped), or None when there is none."""
    dim = zero = number = None
    for x in operands:
        if isinstance(x, Tensor | np.ndarray):
            arr = x._value if isinstance(x, Tensor) else x
            d = arr.dtype
            if arr.ndim:
                dim = d if dim is None else promote_types(dim, d)
            else:
                zero = d if zero is None else promote_types(zero, d)
            continue
        d = _number_dtype(x)
        if d is not None:
            number = d if number is None else promote_types(number, d)
    return _combine(dim, _combine(zero, number))


def result_type(*operands: Any) -> np.dtype:
    """``torch.result_type``: the dtype an operation on ``operands`` (Tensors, NumPy arrays,
    Python or NumPy scalars) computes in and returns."""
    for x in operands:
        if not isinstance(x, Tensor | np.ndarray) and _number_dtype(x) is None:
            raise TypeError(f"result_type: expected Tensors or numbers, got {type(x).__name__}")
    out = _result_type(operands)
    if out is None:
        raise TypeError("result_type: needs at least one operand")
    return out


def cast_to(x: Any, dt: np.dtype) -> Any:
    """``x`` in dtype ``dt``: a Tensor through the recorded cast, an array or NumPy scalar by
    NumPy's, a Python number as a NumPy scalar of ``dt`` (``where(c, 1.0, 0.0)`` has no array to
    follow); anything else (None, a list) as it is."""
    if isinstance(x, Tensor):
        return x if x._value.dtype == dt else astype(x, dt)  # recorded: jit and the gradient see it
    if isinstance(x, np.ndarray | np.generic):
        return x if x.dtype == dt else x.astype(dt)
    if isinstance(x, bool | int | float | complex):
        return dt.type(x)
    return x


def promote(*operands: Any, to_float: bool = False) -> tuple:
    """``operands`` cast to their ``result_type`` (``None``, an absent bound, is kept); ``to_float``:
    an integer or bool result becomes the default float dtype (true division, exp, ...).
    Unchanged inside a transform given NumPy arrays (its function is NumPy code)."""
    dt = None if _Depth.numpy else _result_type(operands)
    if dt is None:  # nothing torch would promote (e.g. a list): NumPy's rule decides
        return operands
    if to_float and dt.kind in "biu":
        dt = get_default_dtype()
    return tuple(cast_to(x, dt) for x in operands)


_INEXACT = frozenset(np.dtype(c) for c in "efdgFDG")  # float16 ... complex256
INTEGRAL = frozenset(np.dtype(c) for c in "?bhilqBHILQ")  # bool and the integers
_NUMERIC = _INEXACT | INTEGRAL - {_BOOL}


def binary(fn: Callable, to_float: bool = False, reflected: bool = False) -> Callable:
    """``fn(self, other)`` (``reflected``: ``fn(other, self)``) with torch's promotion. The hot
    cases (one dtype on both sides; a float tensor and a Python number; an integer tensor and a
    Python int) call ``fn`` directly: NumPy's own rule gives torch's dtype there. (A frozenset
    lookup: cheaper than ``dtype.kind``.)"""
    same_ok = _INEXACT if to_float else None  # None: any dtype met by itself keeps it
    int_ok = _INEXACT if to_float else _NUMERIC

    def method(self: Tensor, other: Any) -> Any:
        try:
            dt = self._value.dtype
        except AttributeError:  # rlgrad.add(2.0, t): a number or an array first
            return fn(*promote(self, other, to_float=to_float))
        if isinstance(other, Tensor):
            if other._value.dtype is dt and (same_ok is None or dt in same_ok):
                return fn(self, other)
        elif (other.__class__ is float and dt in _INEXACT) or (other.__class__ is int
                                                               and dt in int_ok):
            return fn(self, other)  # (bool is not int here: True + True stays bool)
        return fn(*promote(self, other, to_float=to_float))

    def reflected_method(self: Tensor, other: Any) -> Any:
        dt = self._value.dtype  # (an operator's: self is the Tensor)
        if isinstance(other, Tensor):
            if other._value.dtype is dt and (same_ok is None or dt in same_ok):
                return fn(other, self)
        elif (other.__class__ is float and dt in _INEXACT) or (other.__class__ is int
                                                               and dt in int_ok):
            return fn(other, self)
        return fn(*promote(other, self, to_float=to_float))

    out = reflected_method if reflected else method
    out.__name__ = getattr(fn, "__name__", "op")
    return out


def default_float(x: Any) -> Any:
    """An integer or bool Tensor cast to the default float dtype (torch's ``exp``, ``sqrt``,
    ``logsumexp`` ... of an int64 tensor are float32); anything else as it is."""
    if isinstance(x, Tensor) and x._value.dtype in INTEGRAL and not _Depth.numpy:
        return astype(x, get_default_dtype())
    return x


def float_unary(fn: Callable) -> Callable:
    """``fn(x, ...)`` on ``default_float(x)``."""
    def method(x: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(x, Tensor) and x._value.dtype in INTEGRAL:  # (no call on the hot path)
            x = default_float(x)
        return fn(x, *args, **kwargs) if args or kwargs else fn(x)

    method.__name__ = getattr(fn, "__name__", "op")
    method.__doc__ = getattr(fn, "__doc__", None)
    return method


def int64_accumulator(x: Any) -> Any:
    """torch's ``sum``, ``prod``, ``cumsum`` of a bool or integer tensor accumulate in int64
    (anything but a Tensor as it is)."""
    if isinstance(x, Tensor):
        dt = x._value.dtype
        if dt in INTEGRAL and dt != _INT64 and not _Depth.numpy:
            return astype(x, _INT64)
    return x


def int64_sum(fn: Callable) -> Callable:
    """``fn(x, ...)`` on ``int64_accumulator(x)``: torch's sum, prod, cumsum, cumprod."""
    def method(x: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(x, Tensor) and x._value.dtype in INTEGRAL:  # (no call on the hot path)
            x = int64_accumulator(x)
        return fn(x, *args, **kwargs)

    return method


def operands(fn: Callable) -> Callable:
    """``fn`` with all its operands (by position and keyword) promoted together: ``clamp(x,
    min, max)``'s result dtype is that of the three (an absent bound, None, is kept)."""
    def method(*args: Any, **kwargs: Any) -> Any:
        both = promote(*args, *kwargs.values())
        return fn(*both[:len(args)], **dict(zip(kwargs, both[len(args):])))

    return method


def after_condition(fn: Callable) -> Callable:
    """``fn(condition, input, other)`` with ``input`` and ``other`` promoted: torch.where."""
    def method(condition: Any, input: Any = None, other: Any = None) -> Any:  # noqa: A002
        if input is None and other is None:  # torch.where(condition): nonzero(as_tuple=True)
            if not isinstance(condition, Tensor):
                raise TypeError("where(condition): condition must be a Tensor, got "
                                f"{type(condition).__name__}")
            return condition.nonzero(as_tuple=True)
        if input is None or other is None:
            raise TypeError("where() takes a condition alone, or a condition, input and other")
        return fn(condition, *promote(input, other))

    return method


def same_dtype(fn: Callable) -> Callable:
    """``fn(self, other)`` that refuses operands of two dtypes, as torch's matmul and dot do
    (they do not promote); NumPy code under a transform keeps NumPy's rule."""
    def method(self: Any, other: Any) -> Any:
        if isinstance(other, Tensor) and isinstance(self, Tensor) and \
                other._value.dtype != self._value.dtype and not _Depth.numpy:
            raise RuntimeError(f"{getattr(fn, '__name__', 'matmul')}: expected both operands to "
                               f"have the same dtype, got {self.dtype} and {other.dtype} (PyTorch "
                               "does not promote here); cast one with .to(dtype)")
        return fn(self, other)

    return method


#: the rules an ``export(..., promote=TAG)`` names (``exports.PROMOTIONS`` says what each means)
RULES: dict[str, Callable[[Callable], Callable]] = {
    "binary": binary,
    "binary_float": lambda fn: binary(fn, to_float=True),
    "float": float_unary,
    "int64": int64_sum,
    "operands": operands,
    "where": after_condition,
    "same_dtype": same_dtype,
}


def rule(tag: str | None, fn: Callable) -> Callable:
    """``fn`` under the promotion rule ``tag`` (None: ``fn`` itself), named as ``fn``."""
    if tag is None:
        return fn
    out = RULES[tag](fn)
    out.__name__ = out.__qualname__ = getattr(fn, "__name__", tag)
    out.__doc__ = getattr(fn, "__doc__", None)
    out.__wrapped__ = fn  # type: ignore[attr-defined]
    return out

"""The primitive table: NumPy's functions as primitives, each forward next to its VJP and JVP
rules and its ``export(...)``, the one declaration of where it is reachable (its ``rlgrad.numpy``
name, its Tensor method with torch's argument names, its ``rlgrad.`` name: ``exports.py``).

Besides the primitives, only what the table's names need: the compositions of them NumPy names
(``swapaxes``, ``squeeze``, ``concatenate``, ``clip`` ...), ``array_from`` and the rules' helpers.
The Tensor's operators and hand-written methods are in ``tensor_methods.py``; the NumPy forwards
of the indexing fast paths in ``indexing_kernels.py``.
Primitives of one domain stay with their domain, as HIPS autograd keeps ``scipy.special`` apart:
fused layers and losses in ``nn/functional.py``, ``gammaln``/``digamma`` in ``special.py``, the
straight-through estimator in ``estimators.py`` (see docs/engine.md, "Where primitives live").

Rules have the form ``rule(g, ans, *args, **kwargs)``: ``g`` is the gradient of the output, ``ans``
the output, ``args`` the forward's arguments.  They are written only with functions from this
table (and Tensor/ndarray operators), so the same rule runs on plain arrays in the fast backward
pass and on Tensors when ``create_graph=True`` records it for higher-order gradients.
Broadcasting is undone by the backward pass itself (``core.unbroadcast``), not by the rules.
"""

from __future__ import annotations

import builtins
import math
import os
from typing import Any

import numpy as np

from rlgrad.exports import export
from rlgrad.indexing_kernels import _put_along_axis_add, _take_along_axis, _untake
from rlgrad.tensor import Tensor, _ndim, _shape, _size, constant
from rlgrad.tracer import (
    defbatch,
    defjvp,
    defjvp_argnum,
    defjvp_elementwise,
    defjvp_is_linear,
    defvjp,
    defvjp_argnum,
    pass_through,
    primitive,
)

try:  # an MLP's elementwise loops and GAE in one C pass each (setup.py builds it when it can): same bits
    from rlgrad import _kernels
except ImportError:  # pragma: no cover - depends on the install
    _kernels = None
if os.environ.get("RLGRAD_KERNELS", "1") == "0":
    _kernels = None


def _zero(g: Any, ans: Any, *args: Any, **kw: Any) -> Any:
    return g * 0


def _norm_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int | np.integer):
        axis = (axis,)
    return tuple(int(a) % ndim if ndim else 0 for a in axis)


def _keepdims_shape(shape: tuple[int, ...], axis: Any) -> tuple[int, ...]:
    axes = _norm_axes(axis, len(shape))
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def _regrow(g: Any, x: Any, axis: Any, keepdims: bool) -> Any:
    """Reshape a reduction's gradient so it broadcasts against the reduced input ``x``."""
    if keepdims or _ndim(x) == 0:
        return g
    return g.reshape(_keepdims_shape(_shape(x), axis))


# ---------------------------------------------------------------------------------------------
# Elementwise binary (NumPy broadcasting; the backward pass sums gradients back to each shape)
# ---------------------------------------------------------------------------------------------
add = primitive(np.add, "add", arity=2)
defvjp(add, pass_through, pass_through)
defjvp_elementwise(add)  # per argument: a lone tangent passes through, no zeros added
export(add, torch="add(other, /)", top=True, promote="binary")

subtract = primitive(np.subtract, "subtract", arity=2)
defvjp(subtract, pass_through, lambda g, ans, a, b: -g)
defjvp_elementwise(subtract)
export(subtract, torch=("sub(other, /)", "subtract(other, /)"), top=True, promote="binary")

multiply = primitive(np.multiply, "multiply", arity=2)
defvjp(multiply, lambda g, ans, a, b: g * b, lambda g, ans, a, b: g * a)
defjvp_elementwise(multiply)
export(multiply, torch=("mul(other, /)", "multiply(other, /)"), top=True, promote="binary")

divide = primitive(np.divide, "divide", arity=2)
defvjp(divide, lambda g, ans, a, b: g / b, lambda g, ans, a, b: -g * ans / b)
defjvp_elementwise(divide)
export(divide, numpy=("divide", "true_divide"),
       torch=("div(other, /)", "divide(other, /)", "true_divide(other, /)"), top=True, promote="binary_float")
true_divide = divide

power = primitive(np.power, "power", arity=2)
defvjp(
    power,
    lambda g, ans, a, b: _pow_vjp_base(g, a, b),
    lambda g, ans, a, b: g * ans * _log_base(a, ans),
)
defjvp_elementwise(power)
export(power, numpy=("power", "pow"), torch="pow(exponent, /)", top=True, promote="binary")


def _pow_vjp_base(g: Any, a: Any, b: Any) -> Any:
    """b * a ** (b - 1), exactly (so its derivatives in b are right too: d/db at b == 0 is 1/a),
    except at a == b == 0, where it is 0 * inf: there x ** 0 is constant, so 0. The derivatives of
    this 0 are 0 as well, although the mixed one (1/a) is infinite there: torch also says 0."""
    if isinstance(b, int | float):  # a constant exponent, a Python number: stays one (no upcast)
        return g * b * a ** (b - 1) if b != 0 else g * 0
    both = logical_and(equal(a, 0), equal(b, 0))
    safe_a = where(both, 1, a)  # so the masked branch is finite and its gradients are 0, not nan
    return where(both, 0, g * b * safe_a ** (b - 1))


def _log_base(a: Any, ans: Any) -> Any:
    """log(a) where a > 0, in the output's dtype (a Python-number base would give float64)."""
    la = log(where(a > 0, a, 1))
    return la if la.dtype == ans.dtype else la.astype(ans.dtype)

# Ties split the gradient evenly between the two sides, as autograd and PyTorch do. A NaN result
# came from a NaN operand (the first one if both are), which takes the gradient, as in max().
maximum = primitive(np.maximum, "maximum", arity=2)
defvjp(
    maximum,
    lambda g, ans, a, b: _nan_to_a(g, ans, a, g * (a > b) + (g * 0.5) * (a == b)),
    lambda g, ans, a, b: _nan_to_b(g, ans, a, b, g * (b > a) + (g * 0.5) * (a == b)),
)
defjvp_elementwise(maximum)
export(maximum, torch="maximum(other, /)", top=True, promote="binary")
minimum = primitive(np.minimum, "minimum", arity=2)
defvjp(
    minimum,
    lambda g, ans, a, b: _nan_to_a(g, ans, a, g * (a < b) + (g * 0.5) * (a == b)),
    lambda g, ans, a, b: _nan_to_b(g, ans, a, b, g * (b < a) + (g * 0.5) * (a == b)),
)
defjvp_elementwise(minimum)
export(minimum, torch="minimum(other, /)", top=True, promote="binary")


def _may_be_nan(ans: Any) -> bool:
    """Whether a NaN term is needed: recorded (Tensor), it must not depend on the values; on plain
    arrays only when the result may hold a NaN (its sum is NaN: one reduction, ~1 us)."""
    if ans.dtype.kind != "f":
        return False
    return isinstance(ans, Tensor) or math.isnan(np.add.reduce(ans, axis=None))


def _nan_to_a(g: Any, ans: Any, a: Any, grad: Any) -> Any:
    return grad + where(isnan(a), g, 0) if _may_be_nan(ans) else grad


def _nan_to_b(g: Any, ans: Any, a: Any, b: Any, grad: Any) -> Any:
    if not _may_be_nan(ans):
        return grad
    return grad + where(logical_and(isnan(b), logical_not(isnan(a))), g, 0)

logaddexp2 = primitive(np.logaddexp2, "logaddexp2", arity=2)
defvjp(
    logaddexp2,
    lambda g, ans, a, b: g * exp((a - ans) * math.log(2)),
    lambda g, ans, a, b: g * exp((b - ans) * math.log(2)),
)
defjvp_elementwise(logaddexp2)
export(logaddexp2, torch="logaddexp2(other, /)", top=True, promote="binary_float")
# hypot's gradient is x / hypot: at (0, 0) a kink, where it is 0 / 0 (as autograd's)
hypot = primitive(np.hypot, "hypot", arity=2)
defvjp(hypot, lambda g, ans, a, b: g * a / ans, lambda g, ans, a, b: g * b / ans)
defjvp_elementwise(hypot)
export(hypot, torch="hypot(other, /)", top=True, promote="binary_float")

logaddexp = primitive(np.logaddexp, "logaddexp", arity=2)
defvjp(
    logaddexp,
    lambda g, ans, a, b: g * exp(a - ans),
    lambda g, ans, a, b: g * exp(b - ans),
)
defjvp_elementwise(logaddexp)
export(logaddexp, torch="logaddexp(other, /)", top=True, promote="binary_float")

arctan2 = primitive(np.arctan2, "arctan2", arity=2)
defvjp(
    arctan2,
    lambda g, ans, y, x: g * x / (x * x + y * y),
    lambda g, ans, y, x: -g * y / (x * x + y * y),
)
defjvp_elementwise(arctan2)
export(arctan2, numpy=("arctan2", "atan2"), torch=("atan2(other, /)", "arctan2(other, /)"), top=True,
       promote="binary_float")

# ---------------------------------------------------------------------------------------------
# Elementwise unary
# ---------------------------------------------------------------------------------------------
negative = primitive(np.negative, "negative", arity=1)
defbatch(negative, "elementwise")
defvjp(negative, lambda g, ans, x: -g)
defjvp_is_linear(negative)
export(negative, torch=("neg()", "negative()"), top=True)

exp = primitive(np.exp, "exp", arity=1)
defvjp(exp, lambda g, ans, x: g * ans)
defjvp_elementwise(exp)
export(exp, torch="exp()", top=True, promote="float")

log = primitive(np.log, "log", arity=1)
defvjp(log, lambda g, ans, x: g / x)
defjvp_elementwise(log)
export(log, torch="log()", top=True, promote="float")

log1p = primitive(np.log1p, "log1p", arity=1)
defvjp(log1p, lambda g, ans, x: g / (x + 1))
defjvp_elementwise(log1p)
export(log1p, torch="log1p()", top=True, promote="float")

expm1 = primitive(np.expm1, "expm1", arity=1)
defvjp(expm1, lambda g, ans, x: g * (ans + 1))
defjvp_elementwise(expm1)
export(expm1, torch="expm1()", top=True, promote="float")

sqrt = primitive(np.sqrt, "sqrt", arity=1)
defvjp(sqrt, lambda g, ans, x: g / (ans * 2))
defjvp_elementwise(sqrt)
export(sqrt, torch="sqrt()", top=True, promote="float")

square = primitive(np.square, "square", arity=1)
defvjp(square, lambda g, ans, x: g * (x * 2))
defjvp_elementwise(square)
export(square, torch="square()", top=True)

reciprocal = primitive(np.reciprocal, "reciprocal", arity=1)
defvjp(reciprocal, lambda g, ans, x: -g * ans * ans)
defjvp_elementwise(reciprocal)
export(reciprocal, torch="reciprocal()", top=True, promote="float")

absolute = primitive(np.abs, "absolute", arity=1)
defvjp(absolute, lambda g, ans, x: g * sign(x))
defjvp_elementwise(absolute)
export(absolute, numpy=("absolute", "abs"), torch=("abs()", "absolute()"), top=True)
abs = absolute  # noqa: A001 - NumPy's name

sign = primitive(np.sign, "sign", arity=1)
defvjp(sign, _zero)
defjvp_elementwise(sign)
export(sign, torch="sign()", top=True)
floor = primitive(np.floor, "floor", arity=1)
defvjp(floor, _zero)
defjvp_elementwise(floor)
export(floor, torch="floor()", top=True)
ceil = primitive(np.ceil, "ceil", arity=1)
defvjp(ceil, _zero)
defjvp_elementwise(ceil)
export(ceil, torch="ceil()", top=True)
round = primitive(np.round, "round", arity=1)  # noqa: A001
defvjp(round, _zero)
defjvp_elementwise(round)
export(round, torch="round(*, decimals=0)", top=True)
trunc = primitive(np.trunc, "trunc", arity=1)
defvjp(trunc, _zero)
defjvp_elementwise(trunc)
export(trunc, torch="trunc()", top=True)


def _tanh_grad(g: Any, y: Any, out: Any = None) -> Any:
    """``g * (1 - y * y)``, tanh's backward (``y = tanh(x)``): one C pass over same-shape arrays
    (``_kernels.tanh_grad``, NumPy's three operations in the same order: the same bits)."""
    if (_kernels is not None and type(g) is np.ndarray and type(y) is np.ndarray
            and g.shape == y.shape and g.dtype == y.dtype):
        res = np.empty_like(g) if out is None else out
        if _kernels.tanh_grad(g, y, res):
            return res
    return np.multiply(g, 1 - y * y, out=out)


def _tanh_grad_y(c: Any, ans: Any, g: Any, y: Any) -> Any:
    t = -(c * g) * y  # what the two factors of y * y each receive: their sum, exactly 2t
    return t + t


tanh_grad = primitive(_tanh_grad, "tanh_grad", arity=2, writes_out=True)
defbatch(tanh_grad, "elementwise")
defvjp(tanh_grad, lambda c, ans, g, y: tanh_grad(c, y), _tanh_grad_y)
defjvp(tanh_grad, lambda t, ans, g, y: tanh_grad(t, y), lambda t, ans, g, y: _tanh_grad_y(t, ans, g, y))

tanh = primitive(np.tanh, "tanh", arity=1)
defvjp(tanh, lambda g, ans, x: tanh_grad(g, ans))
defjvp_elementwise(tanh)
export(tanh, torch="tanh()", top=True, promote="float")

sin = primitive(np.sin, "sin", arity=1)
defvjp(sin, lambda g, ans, x: g * cos(x))
defjvp_elementwise(sin)
export(sin, torch="sin()", top=True, promote="float")
cos = primitive(np.cos, "cos", arity=1)
defvjp(cos, lambda g, ans, x: -g * sin(x))
defjvp_elementwise(cos)
export(cos, torch="cos()", top=True, promote="float")
tan = primitive(np.tan, "tan", arity=1)
defvjp(tan, lambda g, ans, x: g * (1 + ans * ans))
defjvp_elementwise(tan)
export(tan, torch="tan()", top=True, promote="float")
arcsin = primitive(np.arcsin, "arcsin", arity=1)
defvjp(arcsin, lambda g, ans, x: g / sqrt(1 - x * x))
defjvp_elementwise(arcsin)
export(arcsin, numpy=("arcsin", "asin"), torch=("asin()", "arcsin()"), top=True, promote="float")
arccos = primitive(np.arccos, "arccos", arity=1)
defvjp(arccos, lambda g, ans, x: -g / sqrt(1 - x * x))
defjvp_elementwise(arccos)
export(arccos, numpy=("arccos", "acos"), torch=("acos()", "arccos()"), top=True, promote="float")
arctan = primitive(np.arctan, "arctan", arity=1)
defvjp(arctan, lambda g, ans, x: g / (1 + x * x))
defjvp_elementwise(arctan)
export(arctan, numpy=("arctan", "atan"), torch=("atan()", "arctan()"), top=True, promote="float")
sinh = primitive(np.sinh, "sinh", arity=1)
defvjp(sinh, lambda g, ans, x: g * cosh(x))
defjvp_elementwise(sinh)
export(sinh, torch="sinh()", top=True, promote="float")
cosh = primitive(np.cosh, "cosh", arity=1)
defvjp(cosh, lambda g, ans, x: g * sinh(x))
defjvp_elementwise(cosh)
export(cosh, torch="cosh()", top=True, promote="float")
arcsinh = primitive(np.arcsinh, "arcsinh", arity=1)
defvjp(arcsinh, lambda g, ans, x: g / sqrt(x * x + 1))
defjvp_elementwise(arcsinh)
export(arcsinh, numpy=("arcsinh", "asinh"), torch=("asinh()", "arcsinh()"), top=True, promote="float")
arctanh = primitive(np.arctanh, "arctanh", arity=1)
defvjp(arctanh, lambda g, ans, x: g / (1 - x * x))
defjvp_elementwise(arctanh)
export(arctanh, numpy=("arctanh", "atanh"), torch=("atanh()", "arctanh()"), top=True, promote="float")
arccosh = primitive(np.arccosh, "arccosh", arity=1)
defvjp(arccosh, lambda g, ans, x: g / sqrt(x * x - 1))
defjvp_elementwise(arccosh)
export(arccosh, numpy=("arccosh", "acosh"), torch=("acosh()", "arccosh()"), top=True, promote="float")


def _sigmoid(x: Any) -> Any:
    # exp(-log(1 + e^-x)): no overflow, and relative accuracy in the lower tail (sigmoid(-40) is
    # 4.2e-18, where 0.5 * tanh(x / 2) + 0.5 rounds to exactly 0)
    return np.exp(-np.logaddexp(0, -x))


sigmoid = primitive(_sigmoid, "sigmoid", arity=1)
defvjp(sigmoid, lambda g, ans, x: g * ans * (1 - ans))
defjvp_elementwise(sigmoid)
export(sigmoid, numpy=False, torch="sigmoid()", top=True, promote="float")


def _softplus(x: Any) -> Any:
    return np.logaddexp(0, x)


softplus = primitive(_softplus, "softplus", arity=1)
defvjp(softplus, lambda g, ans, x: g * sigmoid(x))
defjvp_elementwise(softplus)
export(softplus, numpy=False, torch="softplus()", promote="float")


def _relu(x: Any, out: Any = None) -> Any:
    """``np.maximum(x, 0)``; one C pass for a float array (``_kernels.relu``, the same bits:
    NumPy's maximum with a scalar runs ~2x slower)."""
    if _kernels is not None and type(x) is np.ndarray and x.dtype.char in "fd":
        res = np.empty_like(x) if out is None else out  # (keeps x's memory order)
        if x.flags.c_contiguous and _kernels.relu(x, res):
            return res
        # a conv's output: an NCHW view of channels-last memory, as it is
        if x.ndim == 4 and _kernels.relu(x.transpose(0, 2, 3, 1), res.transpose(0, 2, 3, 1)):
            return res
        return np.maximum(x, 0, out=res)  # the array made above, not a second one
    return np.maximum(x, 0, out=out)


def _relu_grad(g: Any, x: Any, out: Any = None) -> Any:
    """ReLU's backward as torch's ``threshold_backward``: ``0 if x <= 0 else g``, a select (so a
    NaN or infinite ``g`` where the unit is off gives +0, and a NaN ``x`` passes ``g``); one C
    pass over same-shape float arrays (``_kernels.relu_grad``, the same bits), else NumPy."""
    if (_kernels is not None and type(g) is np.ndarray and type(x) is np.ndarray
            and g.shape == x.shape and g.dtype == x.dtype and g.dtype.char in "fd"):
        if out is None:  # g's memory order (empty_like keeps it), or a conv output's (x's)
            res = np.empty_like(x if _channels_last(x) and not _channels_last(g) else g)
        else:
            res = out
        # C order, or a conv's output and its gradient: NCHW views of channels-last memory
        for axes in ((None, (0, 2, 3, 1)) if g.ndim == 4 else (None,)):
            gv, xv, rv = (a if axes is None else a.transpose(axes) for a in (g, x, res))
            if not (xv.flags.c_contiguous and rv.flags.c_contiguous):
                continue
            if not gv.flags.c_contiguous and not (np.may_share_memory(res, g)
                                                  or np.may_share_memory(res, x)):
                # g laid out otherwise (a slice; a flattened conv output's gradient, NCHW):
                # copied into the result's memory first, the select then in place
                np.copyto(rv, gv)
                gv = rv
            if _kernels.relu_grad(gv, xv, rv):
                return res
        out = res  # the array made above
    return _relu_grad_numpy(g, x, out)


def _channels_last(a: np.ndarray) -> bool:
    """Whether ``a`` is a 4-D NCHW view of C-contiguous NHWC memory (a conv's output)."""
    return a.ndim == 4 and a.transpose(0, 2, 3, 1).flags.c_contiguous


def _relu_grad_numpy(g: Any, x: Any, out: Any = None) -> Any:
    """The reference: NumPy's select, broadcast, in ``g``'s dtype (written into ``out``, which
    may be ``g`` or ``x`` itself: the select is made first)."""
    res = np.where(np.less_equal(x, 0), np.zeros((), np.result_type(g)), g)
    if out is None:
        return res
    np.copyto(out, res)
    return out


def _zeros_for_mask(c: Any, ans: Any, *args: Any, **kw: Any) -> Any:
    """The gradient into a mask's source (ReLU's backward, ``x`` of ``relu_grad``): zeros, as
    torch's ``threshold_backward`` gives, so a parameter reached only through it (a gradient
    penalty's first-layer bias) gets zeros, not None. Never NaN: not ``c * 0``."""
    return constant(np.zeros_like(c._value)) if isinstance(c, Tensor) else np.zeros_like(c)


# torch's threshold_backward (0 where x <= 0, else g) as one primitive, linear in g; x only
# selects: its gradient is zero
relu_grad = primitive(_relu_grad, "relu_grad", arity=2, writes_out=True)
defbatch(relu_grad, "elementwise")
defvjp(relu_grad, lambda c, ans, g, x: relu_grad(c, x), _zeros_for_mask)
defjvp(relu_grad, lambda t, ans, g, x: relu_grad(t, x), None)


def _leaky_relu(x: Any, slope: float) -> Any:
    return np.where(x > 0, x, x * slope)


def _leaky_relu_grad(g: Any, x: Any, slope: float) -> Any:
    return np.where(x > 0, g, g * slope)


# LeakyReLU and its backward as primitives (as ReLU's): the backward's gradient into x is zero
# (torch's leaky_relu_backward), so double backward reaches the parameters before it
leaky_relu_grad = primitive(_leaky_relu_grad, "leaky_relu_grad")
defbatch(leaky_relu_grad, "elementwise")
defvjp(leaky_relu_grad, lambda c, ans, g, x, slope: leaky_relu_grad(c, x, slope), _zeros_for_mask)
defjvp(leaky_relu_grad, lambda t, ans, g, x, slope: leaky_relu_grad(t, x, slope), None)
leaky_relu = primitive(_leaky_relu, "leaky_relu")
defbatch(leaky_relu, "elementwise")
defvjp(leaky_relu, lambda g, ans, x, slope: leaky_relu_grad(g, x, slope))
defjvp(leaky_relu, lambda t, ans, x, slope: leaky_relu_grad(t, x, slope))

relu = primitive(_relu, "relu", arity=1, writes_out=True)
defbatch(relu, "elementwise")
export(relu, numpy=False, torch="relu()", top=True)
# the mask from the output, as PyTorch's: relu(x) > 0 exactly where x > 0 (NaN in neither), and
# then nothing but the ReLU reads its input (a compiled step fuses it with the linear layer
# that makes it, see nn.functional._linear_relu)
defvjp(relu, lambda g, ans, x: relu_grad(g, ans))
defjvp(relu, lambda t, ans, x: relu_grad(t, ans))


def _clip(x: Any, a_min: Any = None, a_max: Any = None, out: Any = None) -> Any:
    # np.clip is defined as minimum(maximum(x, a_min), a_max); its Python wrapper costs ~5 us,
    # more than the work on a minibatch, so float arrays take the two ufuncs directly
    if type(x) is np.ndarray and x.dtype.kind == "f" and (a_min is not None or a_max is not None):
        if a_min is not None:
            x = np.maximum(x, a_min, out=out)
        if a_max is not None:
            x = np.minimum(x, a_max, out=out)
        return x
    return np.clip(x, a_min, a_max, out=out)


_clip_p = primitive(_clip, "clip", writes_out=True)
defvjp(
    _clip_p,
    lambda g, ans, x, lo=None, hi=None: g * _inside(x, lo, hi),
    lambda g, ans, x, lo=None, hi=None: g * (x < lo),
    lambda g, ans, x, lo=None, hi=None: g * (x > hi),
)
defjvp_elementwise(_clip_p)


def clip(a: Any, a_min: Any = None, a_max: Any = None, *, min: Any = None,  # noqa: A002
         max: Any = None) -> Any:  # noqa: A002
    """NumPy's clip, bounds by position, as ``a_min``/``a_max`` or NumPy 2.1's ``min``/``max``
    (positional in the primitive, so Tensor bounds get their gradient too)."""
    return _clip_p(a, a_min if min is None else min, a_max if max is None else max)
export(clip, torch=("clamp(min: a_min = None, max: a_max = None)",
                    "clip(min: a_min = None, max: a_max = None)"), top=True, promote="operands")


def _inside(x: Any, lo: Any, hi: Any) -> Any:
    if lo is None:
        return x <= hi
    if hi is None:
        return x >= lo
    return (x >= lo) & (x <= hi)


def _where(cond: Any, x: Any, y: Any) -> Any:
    return np.where(cond, x, y)


where = primitive(_where, "where")
defbatch(where, "elementwise")
defvjp(where, None, lambda g, ans, c, x, y: where(c, g, 0), lambda g, ans, c, x, y: where(c, 0, g))
defjvp_is_linear(where, (1, 2))  # linear in x and y together; the condition is static
export(where, top=True, promote="where")


# Comparisons and other integer/boolean-valued functions: no gradient ever flows through them.
def _nondiff(fn: Any, name: str) -> Any:
    p = primitive(fn, name, nondiff=True)
    defbatch(p, "elementwise")  # most are; argmax, argmin and argsort name their own rule below
    return p


greater = _nondiff(np.greater, "greater")
export(greater, torch=("gt(other, /)", "greater(other, /)"), top=True, promote="binary")
greater_equal = _nondiff(np.greater_equal, "greater_equal")
export(greater_equal, torch=("ge(other, /)", "greater_equal(other, /)"), top=True, promote="binary")
less = _nondiff(np.less, "less")
export(less, torch=("lt(other, /)", "less(other, /)"), top=True, promote="binary")
less_equal = _nondiff(np.less_equal, "less_equal")
export(less_equal, torch=("le(other, /)", "less_equal(other, /)"), top=True, promote="binary")
equal = _nondiff(np.equal, "equal")
export(equal, torch="eq(other, /)", top=True, promote="binary")
not_equal = _nondiff(np.not_equal, "not_equal")
export(not_equal, torch=("ne(other, /)", "not_equal(other, /)"), top=True, promote="binary")
logical_and = _nondiff(np.logical_and, "logical_and")
export(logical_and, torch="logical_and(other, /)", top=True)
logical_or = _nondiff(np.logical_or, "logical_or")
export(logical_or, torch="logical_or(other, /)", top=True)
logical_not = _nondiff(np.logical_not, "logical_not")
export(logical_not, torch="logical_not()", top=True)
isfinite = _nondiff(np.isfinite, "isfinite")
export(isfinite, torch="isfinite()", top=True)
isnan = _nondiff(np.isnan, "isnan")
export(isnan, torch="isnan()", top=True)
isinf = _nondiff(np.isinf, "isinf")
export(isinf, torch="isinf()", top=True)
argmax = _nondiff(np.argmax, "argmax")
defbatch(argmax, "argreduce")
export(argmax, torch="argmax(dim=None, keepdim=False)", top=True)
argmin = _nondiff(np.argmin, "argmin")
defbatch(argmin, "argreduce")
export(argmin, torch="argmin(dim=None, keepdim=False)", top=True)
argsort = _nondiff(np.argsort, "argsort")
defbatch(argsort, "last_axis")
export(argsort)
bitwise_and = _nondiff(np.bitwise_and, "bitwise_and")
export(bitwise_and)
bitwise_or = _nondiff(np.bitwise_or, "bitwise_or")
export(bitwise_or)
bitwise_xor = _nondiff(np.bitwise_xor, "bitwise_xor")
export(bitwise_xor)
invert = _nondiff(np.invert, "invert")
export(invert)
floor_divide = _nondiff(np.floor_divide, "floor_divide")
export(floor_divide, promote="binary")


# x mod y = x - k*y with k = floor(x / y) (trunc for fmod) piecewise constant: d/dx = 1,
# d/dy = -k (the jumps, where k changes, are measure zero; NumPy's value is kept there).
remainder = primitive(np.remainder, "remainder", arity=2)
defvjp(remainder, pass_through, lambda g, ans, a, b: -g * floor(a / b))
defjvp_elementwise(remainder)
export(remainder, numpy=("remainder", "mod"), torch="remainder(other, /)", top=True, promote="binary")
mod = remainder
fmod = primitive(np.fmod, "fmod", arity=2)
defvjp(fmod, pass_through, lambda g, ans, a, b: -g * trunc(a / b))
defjvp_elementwise(fmod)
export(fmod, torch="fmod(other, /)", top=True, promote="binary")


def _astype(x: Any, dtype: Any) -> Any:
    return x.astype(dtype, copy=False)


def _astype_vjp(g: Any, ans: Any, x: Any, dtype: Any) -> Any:
    if g.dtype.kind == "c" and x.dtype.kind != "c":  # the cast back would keep a wrong real part
        raise TypeError(
            "the gradient reached a real input through complex values (a cast to a complex "
            "dtype), which rlgrad does not differentiate; keep the real and imaginary parts as "
            "two real tensors")
    return g.astype(x.dtype)


_astype_p = primitive(_astype, "astype", arity=1)
defbatch(_astype_p, "elementwise")
defvjp(_astype_p, _astype_vjp)
defjvp_is_linear(_astype_p)


_astype_nondiff = primitive(_astype, "astype", nondiff=True, arity=1)
defbatch(_astype_nondiff, "elementwise")


def astype(x: Any, dtype: Any) -> Any:
    """Cast; a cast to an integer or boolean dtype leaves the graph (its gradient is zero)."""
    if np.dtype(dtype).kind not in "fc":
        return _astype_nondiff(x, dtype)
    return _astype_p(x, dtype)
export(astype, torch="astype(dtype)")


# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------
def _short_last_axis(x: Any, axis: Any) -> bool:
    """Whether ``_reduce_short_last`` may stand in for a reduction of ``x`` over ``axis``."""
    return (type(x) is np.ndarray and x.ndim >= 2 and 1 < x.shape[-1] < 8 and x.dtype.kind == "f"
            and axis in (-1, x.ndim - 1) and x.flags.c_contiguous)


def _reduce_short_last(ufunc: Any, x: np.ndarray, keepdims: bool,
                       out: np.ndarray | None = None) -> np.ndarray:
    """``ufunc.reduce(x, axis=-1)`` when the last axis has 2 to 7 entries (the actions of a small
    discrete space), as one ufunc call per column. NumPy reduces so few elements one after
    another in this same order, so the result has the same bits (tested), but it sets up a loop
    per row: on (256, 2) this is ~15x faster."""
    if out is not None and keepdims:  # (1-d column views: a ufunc on (..., 1) slices costs 2x)
        out = out[..., 0]
    out = ufunc(x[..., 0], x[..., 1], out=out)
    for i in range(2, x.shape[-1]):
        ufunc(out, x[..., i], out=out)
    return out[..., None] if keepdims else out


def _sum(x: Any, axis: Any = None, keepdims: bool = False, out: Any = None) -> Any:
    if type(x) is not np.ndarray:
        if type(x) in (list, tuple) and holds_tensor(x):  # autograd's sum of a list of boxes
            return sum(array_from(x, False), axis=axis, keepdims=keepdims)
        x = np.asarray(x)
    if _short_last_axis(x, axis):
        return _reduce_short_last(np.add, x, keepdims, out)
    if axis == 0 and not keepdims and x.ndim == 2 and _kernels is not None:  # a bias gradient
        res = _sum_rows(x, out)
        if res is not None:
            return res
    elif type(axis) is tuple and not keepdims and _kernels is not None:  # a conv's bias gradient
        rows = _rows_over(x, axis)
        res = None if rows is None else _sum_rows(rows, out)
        if res is not None:
            return res
    return x.sum(axis=axis, keepdims=keepdims, out=out)  # the method skips np.sum's dispatch


def _rows_over(x: np.ndarray, axis: tuple) -> np.ndarray | None:
    """``x`` as the (rows, n) matrix whose column sums are its sum over ``axis``, when that
    leaves one axis and it is innermost in memory with the others in memory order before it (a
    conv output's (N, C, H, W) view of NHWC memory over (0, 2, 3)): NumPy's reduction then adds
    those rows one after another, as ``_sum_rows`` does (the same bits, ~5x faster on a conv's
    bias gradient). None otherwise."""
    nd = x.ndim
    if nd < 3 or len(axis) != nd - 1 or not all(type(a) is int and -nd <= a < nd for a in axis):
        return None
    reduced = sorted(a % nd for a in axis)
    kept = next((k for k in range(nd) if k not in reduced), None)
    if kept is None or len(set(reduced)) != nd - 1:
        return None
    y = x.transpose(*reduced, kept)
    return y.reshape(-1, x.shape[kept]) if y.flags.c_contiguous else None


def _sum_rows(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """``x.sum(axis=0)`` of a 2-D float array in one C loop, or None where it does not apply.

    NumPy adds the rows one after another from 0 (for two columns or more), one inner-loop call
    per row: on a (256, 64) gradient mostly that call's setup. ``_kernels.sum_rows`` makes the
    same additions in the same order in one loop: the same bits, ~5x faster."""
    if x.dtype.char not in "fd" or x.shape[1] < 2:  # one column: NumPy sums it pairwise
        return None
    res = np.empty(x.shape[1], x.dtype) if out is None else out
    return res if _kernels.sum_rows(x, res) else None


def _sum_vjp(g: Any, ans: Any, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    if isinstance(g, Tensor):
        return broadcast_to(_regrow(g, x, axis, keepdims), _shape(x))
    # plain arrays (the first-order backward pass): the kernel, without the primitive's frame
    if keepdims and type(axis) is int and type(g) is np.ndarray:  # (a softmax's denominator)
        return g.repeat(x.shape[axis], axis)
    return _expand_over(_regrow(g, x, axis, keepdims), x.shape, axis)


def _expand_over(g: np.ndarray, shape: tuple[int, ...], axis: Any) -> np.ndarray:
    """``g`` (a reduction's gradient with the reduced axes kept) broadcast to ``shape`` as a new
    writable array: over one int axis a ``repeat``, one C call (a copy plus fill is two)."""
    if type(axis) is int and type(g) is np.ndarray and g.ndim:
        return g.repeat(shape[axis], axis)
    return _broadcast_to(g, shape)


sum = primitive(_sum, "sum", arity=1, writes_out=True)  # noqa: A001
defbatch(sum, "reduce")
defvjp(sum, _sum_vjp)
defjvp_is_linear(sum)
export(sum, torch="sum(dim=None, keepdim=False, *, dtype=None)", top=True, promote="int64")


def _mean(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    if type(x) is not np.ndarray:
        if type(x) in (list, tuple) and holds_tensor(x):  # autograd's mean of a list of boxes
            return mean(array_from(x, False), axis=axis, keepdims=keepdims)
        x = np.asarray(x)
    # NumPy's own: the mean of nothing (NaN, with its warning); float16 (summed in float32)
    if x.dtype.kind not in "fc" or x.size == 0 or x.dtype == np.float16:
        return np.mean(x, axis=axis, keepdims=keepdims)
    total = np.add.reduce(x, axis=axis, keepdims=keepdims)  # same pairwise sum np.mean uses
    return total / (x.size // builtins.max(total.size, 1) if x.size else 1)


def _mean_vjp(g: Any, ans: Any, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    # x is the differentiated argument, so an array or a Tensor: attributes, not helpers
    if not isinstance(g, Tensor):  # plain arrays: no wrapper frames
        n = x.size // (ans.size or 1) or 1  # 0 only for an empty x, whose gradient is empty
        if axis is None:  # g / n broadcast in the same pass: one call, the same quotients
            out = np.empty(x.shape, g.dtype)
            np.divide(g, n, out=out)
            return out
        return _expand_over(_regrow(g, x, axis, keepdims) / n, x.shape, axis)
    n = _size(x) // (_size(ans) or 1) or 1
    if axis is None:  # a 0-d gradient broadcasts as it is
        return broadcast_to(g / n, x.shape)
    return broadcast_to(_regrow(g, x, axis, keepdims) / n, x.shape)


mean = primitive(_mean, "mean", arity=1)
defbatch(mean, "reduce")
defvjp(mean, _mean_vjp)
defjvp_is_linear(mean)
export(mean, torch="mean(dim=None, keepdim=False, *, dtype=None)", top=True, floats_only=True)


def _prod(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return np.prod(x, axis=axis, keepdims=keepdims)


def _prod_vjp(g: Any, ans: Any, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    # d prod / d x_i is the product of the other elements: no division, so exact with zeros
    # (g * ans / x is 0/0 there), and a product of x's elements again, so every order follows
    return _regrow(g, x, axis, keepdims) * _prod_of_others(x, axis)


def _prod_of_others(x: Any, axis: Any) -> Any:
    """For each element of ``x``, the product of the other elements of its group along ``axis``."""
    shape, nd = _shape(x), _ndim(x)
    red = _norm_axes(axis, nd)
    kept = tuple(a for a in range(nd) if a not in red)
    n = int(np.prod([shape[a] for a in red]))
    if n <= 1 or _size(x) == 0:  # no other element: an empty product, 1
        return x * 0 + 1
    perm = kept + red
    y = reshape(transpose(x, perm), tuple(shape[a] for a in kept) + (n,))
    if isinstance(y, Tensor):
        others = _exclusive_prod(y) * flip(_exclusive_prod(flip(y, -1)), -1)
    else:  # plain arrays (the first-order backward pass): NumPy's cumprod, no graph needed
        one = np.ones(y.shape[:-1] + (1,), dtype=y.dtype)
        left = np.cumprod(np.concatenate([one, y[..., :-1]], -1), -1)
        right = np.cumprod(np.concatenate([one, y[..., :0:-1]], -1), -1)[..., ::-1]
        others = left * right
    back = reshape(others, tuple(shape[a] for a in perm))
    return transpose(back, tuple(np.argsort(perm)))


def _exclusive_prod(y: Tensor) -> Any:
    """``[1, y0, y0*y1, ...]`` along the last axis, by doubling steps of recorded multiplies
    (log2(n) of them): differentiable at every order, zeros included."""
    n = y.shape[-1]
    one = np.ones(y.shape[:-1] + (1,), dtype=y.dtype)
    acc = concatenate([one, y[..., :-1]], -1)
    k = 1
    while k < n:  # Hillis-Steele scan: acc[i] *= acc[i - k]
        pad = np.ones(y.shape[:-1] + (k,), dtype=y.dtype)
        acc = acc * concatenate([pad, acc[..., :-k]], -1)
        k *= 2
    return acc


prod = primitive(_prod, "prod", arity=1)
defbatch(prod, "reduce")
defvjp(prod, _prod_vjp)
defjvp(prod, lambda g, ans, x, axis=None, keepdims=False:
       sum(g * _prod_of_others(x, axis), axis=axis, keepdims=keepdims))
export(prod, torch="prod(dim=None, keepdim=False, *, dtype=None)", top=True, promote="int64")


def _extremum_vjp(g: Any, ans: Any, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    if type(x) is np.ndarray and x.dtype.kind == "f" and x.size < 1 << 24:
        # plain arrays (the first-order backward pass): the lines below without their helpers'
        # frames or reductions of ans; ties counted in g's dtype (small whole numbers, exact).
        # Every group holds its extremum unless that is a NaN (equal to nothing): only then is
        # x != x, the NaN the group's extremum came from, marked as well
        if keepdims or x.ndim == 0:
            ans_kd = ans
        else:
            kd = _keepdims_shape(x.shape, axis)
            g, ans_kd = g.reshape(kd), ans.reshape(kd)
        hit = x == ans_kd
        # (the max, not the sum: NaN only from a NaN, while inf + -inf would warn)
        if math.isnan(ans.item() if ans.size == 1 else np.maximum.reduce(ans, axis=None)):
            hit |= x != x  # a NaN extremum came from the NaN(s) of its group: they take g
        hit = hit.astype(g.dtype)  # one dtype below: mixed-dtype ufuncs cost ~3x more
        if np.add.reduce(hit, axis=None) == ans.size:  # one hit per group (no ties): / 1 is exact
            return g * hit
        return g * hit / _sum(hit, axis, True)
    ans_kd = _regrow(ans, x, axis, keepdims)
    hit = x == ans_kd  # ties share the gradient evenly
    # A NaN is the extremum (NumPy's), so it takes the gradient (torch's); on plain arrays (no
    # graph, no trace) only when there is one, recorded it must not depend on the values
    if _may_be_nan(ans):
        hit = logical_or(hit, logical_and(isnan(x), isnan(ans_kd)))
    if isinstance(hit, Tensor) or _size(x) >= 1 << 24:
        count = sum(hit, axis=axis, keepdims=True).astype(g.dtype)  # not int64: no float64 upcast
    else:  # counted in g's dtype directly: small whole numbers, exact, so the same values
        count = np.add.reduce(hit, axis=axis, keepdims=True, dtype=g.dtype)
    return _regrow(g, x, axis, keepdims) * hit / count


def _extremum_jvp(g: Any, ans: Any, x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    # the same shares as the VJP's (ties and NaN split evenly), summed against the tangent
    share = _extremum_vjp(np.ones(_shape(ans), dtype=ans.dtype), ans, x, axis, keepdims)
    return sum(g * share, axis=axis, keepdims=keepdims)


def _amax(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return _extremum(np.maximum, x, axis, keepdims)


def _amin(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    return _extremum(np.minimum, x, axis, keepdims)


def _extremum(ufunc: Any, x: Any, axis: Any, keepdims: bool) -> Any:
    """np.max / np.min: on an array, the ufunc's reduce they call, without their ~1.5 us
    wrapper (column by column over a few actions, as in log_softmax)."""
    if type(x) is not np.ndarray:
        return (np.max if ufunc is np.maximum else np.min)(x, axis=axis, keepdims=keepdims)
    if _short_last_axis(x, axis):
        return _reduce_short_last(ufunc, x, keepdims)
    return ufunc.reduce(x, axis=axis, keepdims=keepdims)


max = primitive(_amax, "max", arity=1)  # noqa: A001
defbatch(max, "reduce")
defvjp(max, _extremum_vjp)
defjvp(max, _extremum_jvp)
export(max, numpy=("max", "amax"), torch="amax(dim=None, keepdim=False)", top=True)
min = primitive(_amin, "min", arity=1)  # noqa: A001
defbatch(min, "reduce")
defvjp(min, _extremum_vjp)
defjvp(min, _extremum_jvp)
export(min, numpy=("min", "amin"), torch="amin(dim=None, keepdim=False)", top=True)
amax, amin = max, min


def _cumsum(x: Any, axis: Any = None) -> Any:
    return np.cumsum(x, axis=axis)


def _cumsum_vjp(g: Any, ans: Any, x: Any, axis: Any = None) -> Any:
    if axis is None:
        return flip(cumsum(flip(g, 0), 0), 0).reshape(_shape(x))
    return flip(cumsum(flip(g, axis), axis), axis)


cumsum = primitive(_cumsum, "cumsum", arity=1)
defbatch(cumsum, "scan")
defvjp(cumsum, _cumsum_vjp)
defjvp_is_linear(cumsum)
export(cumsum, torch="cumsum(dim, *, dtype=None)", top=True, promote="int64")


def _logcumsumexp(x: Any, axis: Any = None) -> Any:
    """log(cumsum(exp(x))) along ``axis`` (None: of the flattened array, as cumsum), each step a
    logaddexp, so nothing overflows or underflows (torch.logcumsumexp, jax.lax.cumlogsumexp)."""
    if axis is None:
        x, axis = np.ravel(x), 0
    return np.logaddexp.accumulate(x, axis=axis)


def _log_weighted_cumsums(w: Any, z: Any, axis: int, reverse: bool) -> tuple[Any, Any]:
    """(log P, log N) with P - N = the cumulative sum (reversed: from the end) of w * exp(z): the
    positive and the negative parts of w summed in the log domain, as torch's rule does, so the
    terms exp(x_i - y_j) of the rules below never overflow. Where w has no such part, -inf (a
    masked log: its derivatives are 0, never 0 * inf)."""
    parts = []
    for v in (w, -w):
        pos = v > 0
        lv = where(pos, log(where(pos, v, 1)) + z, -np.inf)
        parts.append(flip(logcumsumexp(flip(lv, axis), axis), axis) if reverse
                     else logcumsumexp(lv, axis))
    return parts[0], parts[1]


def _logcumsumexp_vjp(g: Any, ans: Any, x: Any, axis: Any = None) -> Any:
    # dx_i = sum_{j >= i} g_j exp(x_i - y_j)
    flat = axis is None
    xs, ax = (reshape(x, (-1,)), 0) if flat else (x, axis)
    p, n = _log_weighted_cumsums(g, -_finite_or_0(ans), ax, reverse=True)
    out = exp(xs + p) - exp(xs + n)
    return reshape(out, _shape(x)) if flat else out


def _logcumsumexp_jvp(t: Any, ans: Any, x: Any, axis: Any = None) -> Any:
    # dy_j = sum_{i <= j} t_i exp(x_i - y_j)
    flat = axis is None
    ts, xs, ax = (reshape(t, (-1,)), reshape(x, (-1,)), 0) if flat else (t, x, axis)
    p, n = _log_weighted_cumsums(ts, xs, ax, reverse=False)
    y = _finite_or_0(ans)
    return exp(p - y) - exp(n - y)


def _finite_or_0(y: Any) -> Any:
    """y, with 0 where it is -inf: there every input so far is -inf (P and N are -inf too), and
    -inf - -inf would make the rules' zero terms NaN."""
    return where(equal(y, -np.inf), 0.0, y)


logcumsumexp = primitive(_logcumsumexp, "logcumsumexp", arity=1)
defbatch(logcumsumexp, "scan")
defvjp(logcumsumexp, _logcumsumexp_vjp)
defjvp(logcumsumexp, _logcumsumexp_jvp)
export(logcumsumexp, torch="logcumsumexp(dim)", top=True, promote="float")


def _logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Any:
    m = np.max(x, axis=axis, keepdims=True, initial=-np.inf)  # (nothing: log(0) = -inf, torch's)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


logsumexp = primitive(_logsumexp, "logsumexp", arity=1)
defbatch(logsumexp, "reduce")
defvjp(logsumexp, lambda g, ans, x, axis=None, keepdims=False:
       _regrow(g, x, axis, keepdims) * exp(x - _regrow(ans, x, axis, keepdims)))
defjvp(logsumexp, lambda g, ans, x, axis=None, keepdims=False:
       sum(g * exp(x - _regrow(ans, x, axis, keepdims)), axis=axis, keepdims=keepdims))
export(logsumexp, torch="logsumexp(dim, keepdim=False)", top=True, promote="float")


def _log_softmax(x: Any, axis: int = -1) -> Any:
    if _short_last_axis(x, axis):  # a few actions: column by column, the same bits
        shifted = x - _reduce_short_last(np.maximum, x, True)
        return shifted - np.log(_reduce_short_last(np.add, np.exp(shifted), True))
    if not x.size:  # an empty result, as torch's (and no log(0) warning from the empty sum)
        return np.asarray(x) * 1.0
    # ufunc reduce: no wrapper cost
    shifted = x - np.maximum.reduce(x, axis=axis, keepdims=True, initial=-np.inf)
    return shifted - np.log(np.add.reduce(np.exp(shifted), axis=axis, keepdims=True))


log_softmax = primitive(_log_softmax, "log_softmax", arity=1)
defbatch(log_softmax, "last_axis")
# np.exp on a Tensor dispatches to rlgrad's exp (__array_ufunc__), and .sum is a method of both:
# these rules stay differentiable at every order and cost no wrapper call on plain arrays.
defvjp(log_softmax, lambda g, ans, x, axis=-1: g - np.exp(ans) * g.sum(axis=axis, keepdims=True))
defjvp(log_softmax, lambda g, ans, x, axis=-1: g - (g * exp(ans)).sum(axis=axis, keepdims=True))
export(log_softmax, torch="log_softmax(dim, *, dtype=None)", top=True, promote="float")


def _softmax(x: Any, axis: int = -1) -> Any:
    e = np.exp(x - np.maximum.reduce(x, axis=axis, keepdims=True, initial=-np.inf))
    return e / np.add.reduce(e, axis=axis, keepdims=True)


def _softmax_rule(g: Any, ans: Any, x: Any, axis: int = -1) -> Any:
    return ans * (g - (g * ans).sum(axis=axis, keepdims=True))


softmax = primitive(_softmax, "softmax", arity=1)
defbatch(softmax, "last_axis")
defvjp(softmax, _softmax_rule)
defjvp(softmax, _softmax_rule)  # the Jacobian diag(p) - p p^T is symmetric: one rule
export(softmax, torch="softmax(dim, *, dtype=None)", top=True, promote="float")


# ---------------------------------------------------------------------------------------------
# Shape
# ---------------------------------------------------------------------------------------------
def _reshape(x: Any, shape: Any) -> Any:
    if type(x) is np.ndarray:
        return x.reshape(shape)  # the method: np.reshape adds ~1 us of Python-level wrapper
    return np.reshape(x, shape)


reshape = primitive(_reshape, "reshape", arity=1)
defbatch(reshape, "reshape")
defvjp(reshape, lambda g, ans, x, shape: g.reshape(x.shape))
defjvp_is_linear(reshape)
export(reshape)


def _transpose(x: Any, axes: Any = None) -> Any:
    return np.asarray(x).transpose(axes)  # the method: np.transpose adds a Python-level wrapper


def _transpose_vjp(g: Any, ans: Any, x: Any, axes: Any = None) -> Any:
    if axes is None:
        return transpose(g)
    return transpose(g, tuple(np.argsort([a % _ndim(x) for a in axes])))


transpose = primitive(_transpose, "transpose", arity=1)
defbatch(transpose, "transpose")
defvjp(transpose, _transpose_vjp)
defjvp_is_linear(transpose)
export(transpose)


def _broadcast_to(x: Any, shape: Any) -> Any:
    x = np.asarray(x)
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)  # NumPy takes an int
    if x.shape == shape:
        return x
    if x.ndim > len(shape):  # NumPy's error (the copy below would squeeze (1,) into ())
        np.broadcast_to(x, shape)
    out = np.empty(shape, dtype=x.dtype)  # a writable copy: several times faster than np.broadcast_to
    out[...] = x
    return out


broadcast_to = primitive(_broadcast_to, "broadcast_to", arity=1)
defbatch(broadcast_to, "broadcast_to")
defvjp(broadcast_to, lambda g, ans, x, shape: sum_to(g, x.shape))
defjvp_is_linear(broadcast_to)
export(broadcast_to, torch="broadcast_to(size: shape)")


def _sum_to(g: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``g`` over the axes that broadcasting added or stretched, giving ``shape``."""
    gs = g.shape  # a new tuple at each read: read once
    if gs == shape:
        return g
    lead = len(gs) - len(shape)
    if lead == 1 and gs[1:] == shape:  # a bias broadcast over the batch: the common case
        if gs[0] == 1:
            return g.reshape(shape)
        return _sum(g, axis=0) if type(g) is np.ndarray else g.sum(axis=0)
    if (lead == 0 and len(gs) >= 2 and shape[-1] == 1 and 1 < gs[-1] < 8 and gs[:-1] == shape[:-1]
            and type(g) is np.ndarray and g.dtype.kind == "f" and g.flags.c_contiguous):
        return _reduce_short_last(np.add, g, True)  # a keepdims reduction over a few actions
    axes = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and gs[i + lead] != 1
    )
    out = g.sum(axis=axes, keepdims=True) if axes else g
    return out.reshape(shape)


sum_to = primitive(_sum_to, "sum_to", arity=1)
defbatch(sum_to, "sum_to")
defvjp(sum_to, lambda g, ans, x, shape: broadcast_to(g, _shape(x)))
defjvp_is_linear(sum_to)


def _concatenate(*arrays: Any, axis: int = 0) -> Any:
    return np.concatenate(arrays, axis=axis)


def _concatenate_vjp(i: int, g: Any, ans: Any, *arrays: Any, axis: int = 0) -> Any:
    ax = axis % _ndim(ans)
    start = builtins.sum(_shape(a)[ax] for a in arrays[:i])
    idx = (slice(None),) * ax + (slice(start, start + _shape(arrays[i])[ax]),)
    return g[idx]


_concatenate_p = primitive(_concatenate, "concatenate")
defbatch(_concatenate_p, "concatenate")
defvjp_argnum(_concatenate_p, _concatenate_vjp)
defjvp_is_linear(_concatenate_p, None)


def concatenate(arrays: Any, axis: int = 0) -> Any:
    return _concatenate_p(*arrays, axis=axis)
export(concatenate)


def _stack(*arrays: Any, axis: int = 0) -> Any:
    return np.stack(arrays, axis=axis)


def _stack_vjp(i: int, g: Any, ans: Any, *arrays: Any, axis: int = 0) -> Any:
    ax = axis % _ndim(ans)
    return g[(slice(None),) * ax + (i,)]


_stack_p = primitive(_stack, "stack")
defbatch(_stack_p, "stack")
defvjp_argnum(_stack_p, _stack_vjp)
defjvp_is_linear(_stack_p, None)


def stack(arrays: Any, axis: int = 0) -> Any:
    return _stack_p(*arrays, axis=axis)
export(stack)


def _flip(x: Any, axis: Any = None) -> Any:
    return np.flip(x, axis)


flip = primitive(_flip, "flip", arity=1)
defbatch(flip, "flip")
defvjp(flip, lambda g, ans, x, axis=None: flip(g, axis))
defjvp_is_linear(flip)
export(flip, torch="flip(dims)", top=True)


def _roll(x: Any, shift: Any, axis: Any = None) -> Any:
    return np.roll(x, shift, axis)


roll = primitive(_roll, "roll", arity=1)
defbatch(roll, "roll")
defvjp(roll, lambda g, ans, x, shift, axis=None: roll(g, _neg(shift), axis))
defjvp_is_linear(roll)
export(roll, torch="roll(shifts: shift, dims=None)", top=True)


def _neg(shift: Any) -> Any:
    return tuple(-s for s in shift) if isinstance(shift, tuple | list) else -shift


def _tile(x: Any, reps: Any) -> Any:
    return np.tile(x, reps)


def _tile_vjp(g: Any, ans: Any, x: Any, reps: Any) -> Any:
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    xshape = _shape(x)
    nd = _ndim(ans)
    reps = (1,) * (nd - len(reps)) + reps
    full = (1,) * (nd - len(xshape)) + xshape
    split = [d for pair in zip(reps, full) for d in pair]  # (r0, d0, r1, d1, ...)
    return sum(g.reshape(split), axis=tuple(range(0, 2 * nd, 2))).reshape(xshape)


tile = primitive(_tile, "tile", arity=1)
defbatch(tile, "tile")
defvjp(tile, _tile_vjp)
defjvp_is_linear(tile)
export(tile)


def _repeat(x: Any, repeats: Any, axis: Any = None) -> Any:
    return np.repeat(x, repeats, axis)


def _repeat_vjp(g: Any, ans: Any, x: Any, repeats: Any, axis: Any = None) -> Any:
    if not isinstance(repeats, int | np.integer):  # per-element counts: a gather; its adjoint
        n = _size(x) if axis is None else _shape(x)[axis % _ndim(x)]
        src = np.repeat(np.arange(n), repeats)  # the element each output position came from
        if axis is None:
            return untake(g, src, (n,)).reshape(_shape(x))
        return untake(g, (slice(None),) * (axis % _ndim(x)) + (src,), _shape(x))
    if axis is None:
        return sum(g.reshape((-1, int(repeats))), axis=1).reshape(_shape(x))
    ax = axis % _ndim(x)
    shape = _shape(x)
    return sum(g.reshape(shape[:ax] + (shape[ax], int(repeats)) + shape[ax + 1:]), axis=ax + 1)


repeat = primitive(_repeat, "repeat", arity=1)
defbatch(repeat, "repeat")
defvjp(repeat, _repeat_vjp)
defjvp_is_linear(repeat)
export(repeat)


def _pad(x: Any, pad_width: Any, mode: str = "constant", constant_values: Any = 0) -> Any:
    if mode != "constant":
        raise NotImplementedError(f"pad mode {mode!r} is not differentiable in rlgrad; use 'constant'")
    return np.pad(x, pad_width, mode="constant", constant_values=constant_values)


def _pad_vjp(g: Any, ans: Any, x: Any, pad_width: Any, mode: str = "constant",
             constant_values: Any = 0) -> Any:
    widths = np.broadcast_to(np.asarray(pad_width), (_ndim(x), 2))
    return g[tuple(slice(int(lo), int(lo) + n) for (lo, _), n in zip(widths, _shape(x)))]


pad = primitive(_pad, "pad", arity=1)
defbatch(pad, "pad")
defvjp(pad, _pad_vjp)
defjvp(pad, lambda g, ans, x, pad_width, mode="constant", constant_values=0: pad(g, pad_width))


def _diag(x: Any, k: int = 0) -> Any:
    return np.diag(x, k)


def _diag_vjp(g: Any, ans: Any, x: Any, k: int = 0) -> Any:
    if _ndim(x) == 1:
        return diag(g, k)
    d = np.arange(_size(ans))  # x is 2-D (maybe not square): put g back on its k-th diagonal
    return untake(g, (d + builtins.max(-k, 0), d + builtins.max(k, 0)), _shape(x))


diag = primitive(_diag, "diag", arity=1)
defbatch(diag, "diag")
defvjp(diag, _diag_vjp)
defjvp_is_linear(diag)
export(diag, torch="diag(diagonal: k = 0)", top=True)


def _triu(x: Any, k: int = 0) -> Any:
    return np.triu(x, k)


def _tril(x: Any, k: int = 0) -> Any:
    return np.tril(x, k)


triu = primitive(_triu, "triu", arity=1)
defbatch(triu, "matrices")
defvjp(triu, lambda g, ans, x, k=0: triu(g, k))
defjvp_is_linear(triu)
export(triu, torch="triu(diagonal: k = 0)", top=True)
tril = primitive(_tril, "tril", arity=1)
defbatch(tril, "matrices")
defvjp(tril, lambda g, ans, x, k=0: tril(g, k))
defjvp_is_linear(tril)
export(tril, torch="tril(diagonal: k = 0)", top=True)


# ---------------------------------------------------------------------------------------------
# Indexing: the gradient of a gather is a scatter-add (duplicates accumulate, never overwrite)
# ---------------------------------------------------------------------------------------------
# The scatters' and take_along_axis's NumPy forwards, with their fast paths, are in
# rlgrad/indexing_kernels.py; the public gather/scatter API built on these is rlgrad/indexing.py.
def _getitem(x: Any, idx: Any) -> Any:
    try:
        return x[idx]  # NumPy checks the bounds in C: cheaper than any check written here
    except IndexError as e:
        raise IndexError(f"{e} (indexing a tensor of shape {_shape(x)})") from None


getitem = primitive(_getitem, "getitem", arity=1)
defbatch(getitem, "getitem")
untake = primitive(_untake, "untake", arity=1)
defbatch(untake, "untake")
defvjp(getitem, lambda g, ans, x, idx: untake(g, idx, x.shape))
defjvp_is_linear(getitem)
defvjp(untake, lambda g, ans, gx, idx, shape: getitem(g, idx))
defjvp_is_linear(untake)


def _take_lanes(g: Any, src: Any, indices: Any, axis: int) -> Any:
    """Adjoint of the scatter: ``g`` read back at ``indices``, shaped like the scattered ``src``."""
    lanes, S = _shape(src), _shape(g)
    ax = axis % len(S)
    cut = tuple(slice(None) if k == ax or S[k] in (lanes[k], 1) else slice(0, lanes[k])
                for k in range(len(S)))
    if any(c != slice(None) for c in cut):
        g = getitem(g, cut)
    out = take_along_axis(g, indices, ax)
    return out if _shape(out) == tuple(lanes) else broadcast_to(out, tuple(lanes))


take_along_axis = primitive(_take_along_axis, "take_along_axis")
defbatch(take_along_axis, "take_along_axis")
scatter_along_axis = primitive(_put_along_axis_add, "scatter_along_axis")  # its index may be a Tensor
defbatch(scatter_along_axis, "scatter_along_axis")


def _take_along_axis_vjp(g: Any, ans: Any, x: Any, indices: Any, axis: Any = -1) -> Any:
    if axis is None:  # NumPy's flattened form
        return scatter_along_axis(g, indices, 0, (_size(x),)).reshape(_shape(x))
    if type(g) is np.ndarray and type(indices) is np.ndarray:  # plain arrays: the kernel itself
        return _put_along_axis_add(g, indices, axis, x.shape)
    return scatter_along_axis(g, indices, axis, _shape(x))


defvjp(take_along_axis, _take_along_axis_vjp)
defjvp_is_linear(take_along_axis)
export(take_along_axis)
defvjp(scatter_along_axis, lambda g, ans, src, idx, axis, shape: _take_lanes(g, src, idx, axis))
defjvp_is_linear(scatter_along_axis)


def _rows_check(x: Any, idx: Any, rows_shape: tuple[int, ...] | None, name: str) -> int:
    """The length of ``x``'s row axis (the one after the index's leading axes), after checking
    that ``idx`` is integers and ``rows`` (when given) has the index's shape, then x's rows'."""
    idx = np.asarray(idx)
    lead = idx.ndim - 1
    shape = np.shape(x)
    if idx.dtype.kind not in "iu" or idx.ndim < 1 or len(shape) <= lead or shape[:lead] != idx.shape[:-1]:
        raise ValueError(f"{name}: the index must be integers of shape (*batch, R) with x of shape "
                         f"(*batch, N, ...); got index {idx.dtype}{list(idx.shape)}, x {list(shape)}")
    want = idx.shape + tuple(shape[lead + 1:])
    if rows_shape is not None and tuple(rows_shape) != want:
        raise ValueError(f"{name}: rows must have the index's shape then a row of x: {list(want)}, "
                         f"got {list(rows_shape)}")
    return int(shape[lead])


def _write_rows(x: Any, idx: Any, rows: Any) -> np.ndarray:
    """``x`` with ``rows[..., r, :]`` written at row ``idx[..., r]`` of x's axis ``idx.ndim - 1``
    for r in order (a row written twice keeps the later one); an index outside ``[0, N)`` writes
    nothing (JAX's ``mode="drop"``: a ring's skipped rows)."""
    idx = np.asarray(idx)
    if idx.ndim == 1:  # no lead dimensions: as one lead row of size 1
        return _write_rows(np.asarray(x)[None], idx[None], np.asarray(rows)[None])[0]
    n = _rows_check(x, idx, np.shape(rows), "write_rows")
    out = np.array(x, copy=True)
    rows = np.asarray(rows, dtype=out.dtype)
    for r in range(idx.shape[-1]):
        j = idx[..., r]
        ok = (j >= 0) & (j < n)
        at = np.nonzero(ok)
        out[at + (j[ok],)] = rows[at + (r,)]
    return out


def _written_rows(g: Any, idx: Any) -> np.ndarray:
    """``write_rows``'s adjoint for its rows: row ``idx[..., r]`` of ``g`` where row r of the
    index wrote it (in range, and no later r wrote the same row), else zeros."""
    idx = np.asarray(idx)
    if idx.ndim == 1:  # no lead dimensions: as one lead row of size 1
        return _written_rows(np.asarray(g)[None], idx[None])[0]
    n = _rows_check(g, idx, None, "written_rows")
    g = np.asarray(g)
    lead = idx.ndim - 1
    out = np.zeros(idx.shape + g.shape[lead + 1:], dtype=g.dtype)
    for r in range(idx.shape[-1]):
        j = idx[..., r]
        won = (j >= 0) & (j < n) & ~np.any(idx[..., r + 1:] == j[..., None], axis=-1)
        at = np.nonzero(won)
        out[at + (r,)] = g[at + (j[won],)]
    return out


# A ring buffer's write: O(rows) in place on the native backend when x is a loop's carry that
# nothing reads after the write (rlgrad/native, "donation"); a copy of x on the NumPy replay
write_rows = primitive(_write_rows, "write_rows")
written_rows = primitive(_written_rows, "written_rows")
defbatch(write_rows, "rows")
defbatch(written_rows, "rows")
defvjp(write_rows, lambda g, ans, x, idx, rows: write_rows(g, idx, np.zeros(np.shape(rows), _dtype_of(g))),
       None, lambda g, ans, x, idx, rows: written_rows(g, idx))
defjvp_is_linear(write_rows, (0, 2))
defvjp(written_rows, lambda h, ans, g, idx: write_rows(np.zeros(np.shape(g), _dtype_of(h)), idx, h))
defjvp_is_linear(written_rows)


def _dtype_of(x: Any) -> np.dtype:
    return x._value.dtype if isinstance(x, Tensor) else np.asarray(x).dtype


# ---------------------------------------------------------------------------------------------
# Linear algebra
# ---------------------------------------------------------------------------------------------
def _T(x: Any) -> Any:
    return x.mT  # the last two axes swapped (ndarray and Tensor both have it; no copy)


def _matmul_vjp_a(g: Any, ans: Any, a: Any, b: Any) -> Any:
    if b.ndim == 1:
        if a.ndim == 1:
            return g * b
        return expand_dims(g, -1) * b  # (..., m, 1) * (k,)
    if a.ndim == 1:
        return sum_to(matmul(b, expand_dims(g, -1))[..., 0], _shape(a))
    bt = b.mT  # operators and .mT: no wrapper frame on arrays, recorded on Tensors
    # A contracted axis of length 1 makes the product an outer product, which as a broadcast
    # multiply is the same numbers 2-3x faster than NumPy's matmul (batch-1 weight gradients).
    return g * bt if g.shape[-1] == 1 else g @ bt


def _matmul_vjp_b(g: Any, ans: Any, a: Any, b: Any) -> Any:
    if a.ndim == 1:
        if b.ndim == 1:
            return g * a
        return expand_dims(a, -1) * expand_dims(g, -2)  # (k, 1) * (..., 1, n)
    if b.ndim == 1:
        return sum_to(matmul(_T(a), expand_dims(g, -1))[..., 0], _shape(b))
    at = a.mT
    return at * g if at.shape[-1] == 1 else at @ g  # outer products: see _matmul_vjp_a


matmul = primitive(np.matmul, "matmul", arity=2)
defbatch(matmul, "matmul")
defvjp(matmul, _matmul_vjp_a, _matmul_vjp_b)
defjvp(matmul, lambda g, ans, a, b: matmul(g, b), lambda g, ans, a, b: matmul(a, g))
export(matmul, torch=("matmul(other, /)", "dot(tensor, /)"), top=True, promote="same_dtype")


def _einsum(subscripts: str, *operands: Any) -> Any:
    return np.einsum(subscripts, *operands, optimize=len(operands) > 2)


def _einsum_parse(subscripts: str, shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:
    sub = subscripts.replace(" ", "")
    lhs, arrow, out = sub.partition("->")
    ins = lhs.split(",")
    used = set(c for c in sub if c.isalpha())
    free = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" if c not in used]
    n_ell = builtins.max(
        [len(shp) - len(s.replace("...", "")) for s, shp in zip(ins, shapes) if "..." in s],
        default=0,
    )
    ell = "".join(free[:n_ell])
    new_ins = []
    for s, shp in zip(ins, shapes):
        if "..." in s:
            k = len(shp) - len(s.replace("...", ""))
            s = s.replace("...", ell[n_ell - k:])
        new_ins.append(s)
    if not arrow:
        letters = "".join(new_ins)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell))
        out = ell + out
    else:
        out = out.replace("...", ell)
    return new_ins, out


def _einsum_vjp(i: int, g: Any, ans: Any, subscripts: str, *operands: Any) -> Any:
    if i == 0:
        return None
    k = i - 1
    ins, out = _einsum_parse(subscripts, [_shape(o) for o in operands])
    mine = ins[k]
    size = dict(zip(mine, _shape(operands[k])))
    uniq = "".join(dict.fromkeys(mine))  # a repeated letter ("ii": a diagonal) counted once
    others = [s for j, s in enumerate(ins) if j != k]
    other_ops = [o for j, o in enumerate(operands) if j != k]
    seen = set(out).union(*others) if others else set(out)
    kept = "".join(c for c in uniq if c in seen)
    res = einsum(f"{out}," + ",".join(others) + f"->{kept}" if others else f"{out}->{kept}", g, *other_ops)
    if kept != uniq:  # letters summed only inside this operand: broadcast the gradient back
        res = broadcast_to(res.reshape(tuple(size[c] if c in seen else 1 for c in uniq)),
                           tuple(size[c] for c in uniq))
    if uniq != mine:  # put the gradient back on the diagonal: "i" -> "ia" times eye("ia")
        used = set("".join(ins) + out)
        free = iter(c for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in used)
        full, eye_subs, eyes = "", [], []
        for c in mine:
            if c in full:
                d = next(free)
                eye_subs.append(c + d)
                eyes.append(np.eye(size[c], dtype=g.dtype))
                c = d
            full += c
        res = einsum(f"{uniq}," + ",".join(eye_subs) + f"->{full}", res, *eyes)
    return res


def _einsum_jvp(i: int, g: Any, ans: Any, subscripts: str, *operands: Any) -> Any:
    # multilinear: the same contraction with operand i replaced by its tangent
    if i == 0:
        return None
    return einsum(subscripts, *operands[:i - 1], g, *operands[i:])


einsum = primitive(_einsum, "einsum")
defbatch(einsum, "einsum")
defvjp_argnum(einsum, _einsum_vjp)
defjvp_argnum(einsum, _einsum_jvp)


inv = primitive(np.linalg.inv, "inv", arity=1)
defbatch(inv, "leading")
defvjp(inv, lambda g, ans, a: -matmul(matmul(_T(ans), g), _T(ans)))
defjvp(inv, lambda g, ans, a: -matmul(matmul(ans, g), ans))
export(inv, numpy=False, torch="inverse()", top=True)

def _cofactors(ans: Any, a: Any) -> Any:
    """det's derivative, the cofactor matrix: ``det(A) A^-T`` where A is well conditioned, and
    from the minors where it is (nearly) singular (there ``A^-1`` does not exist, the derivative
    does: at a rank n-1 matrix it is not 0)."""
    n = _shape(a)[-1]
    av, dv = (x._value if isinstance(x, Tensor) else np.asarray(x) for x in (a, ans))
    hadamard = np.prod(np.linalg.norm(av, axis=-2), axis=-1)  # |det| is at most this
    if n > 1 and np.all(np.abs(dv) > 1e-8 * hadamard):
        return expand_dims(expand_dims(ans, -1), -1) * _T(inv(a))
    if n == 1:
        return a * 0 + 1
    keep = np.array([[k for k in range(n) if k != i] for i in range(n)])  # (n, n - 1)
    rows = keep[:, None, :, None]  # minor (i, j): rows keep[i], columns keep[j]
    cols = keep[None, :, None, :]
    sign = (-1.0) ** np.add.outer(np.arange(n), np.arange(n))
    return det(a[..., rows, cols]) * sign.astype(av.dtype)


det = primitive(np.linalg.det, "det", arity=1)
defbatch(det, "leading")
defvjp(det, lambda g, ans, a: expand_dims(expand_dims(g, -1), -1) * _cofactors(ans, a))
defjvp(det, lambda g, ans, a: sum(_cofactors(ans, a) * g, axis=(-2, -1)))  # tr(adj(A) dA)
export(det, numpy=False, torch="det()", top=True)


def _logabsdet(a: Any) -> Any:
    return np.linalg.slogdet(a)[1]


logabsdet = primitive(_logabsdet, "logabsdet", arity=1)
defbatch(logabsdet, "leading")
defvjp(logabsdet, lambda g, ans, a: expand_dims(expand_dims(g, -1), -1) * _T(inv(a)))
defjvp(logabsdet, lambda g, ans, a: sum(_T(inv(a)) * g, axis=(-2, -1)))


def _solve_vjp_b(g: Any, ans: Any, a: Any, b: Any) -> Any:
    if _ndim(b) == 1:  # one vector for every matrix (NumPy 2): solve it as an (n, 1) matrix
        return solve(_T(a), expand_dims(g, -1))[..., 0]
    return solve(_T(a), g)


def _solve_vjp_a(g: Any, ans: Any, a: Any, b: Any) -> Any:
    if _ndim(b) == 1:
        gb = solve(_T(a), expand_dims(g, -1))  # (..., n, 1)
        return -gb * expand_dims(ans, -2)  # outer product with x, per batch element
    gb = solve(_T(a), g)
    return -matmul(gb, _T(ans))


def _solve_jvp_a(g: Any, ans: Any, a: Any, b: Any) -> Any:
    # d(A^-1 b) = -A^-1 dA x
    if _ndim(b) == 1:
        return -solve(a, matmul(g, expand_dims(ans, -1)))[..., 0]
    return -solve(a, matmul(g, ans))


solve = primitive(np.linalg.solve, "solve", arity=2)
defbatch(solve, "solve")
defvjp(solve, _solve_vjp_a, _solve_vjp_b)
defjvp(solve, _solve_jvp_a, lambda g, ans, a, b: solve(a, g))


def _cholesky_vjp(g: Any, ans: Any, a: Any) -> Any:
    # Murray (2016): with S = L^T G, P = tril(S) with halved diagonal, X = L^-T P L^-1,
    # the gradient for the symmetric input is (X + X^T) / 2.
    n = _shape(a)[-1]
    s = matmul(_T(ans), g)
    p = tril(s) * (1 - 0.5 * np.eye(n, dtype=a.dtype))
    linv = inv(ans)
    x = matmul(matmul(_T(linv), p), linv)
    return (x + _T(x)) * 0.5


def _cholesky_jvp(g: Any, ans: Any, a: Any) -> Any:
    # dL = L Phi(L^-1 dA L^-T), Phi: the lower triangle with the diagonal halved; dA symmetrised
    # as the VJP's gradient is (cholesky reads one triangle of a symmetric input)
    n = _shape(a)[-1]
    linv = inv(ans)
    s = matmul(matmul(linv, (g + _T(g)) * 0.5), _T(linv))
    return matmul(ans, tril(s) * (1 - 0.5 * np.eye(n, dtype=a.dtype)))


cholesky = primitive(np.linalg.cholesky, "cholesky", arity=1)
defbatch(cholesky, "leading")
defvjp(cholesky, _cholesky_vjp)
defjvp(cholesky, _cholesky_jvp)
export(cholesky)


# ---------------------------------------------------------------------------------------------
# Cutting the graph
# ---------------------------------------------------------------------------------------------
def _identity(x: Any) -> Any:  # the forward of both stop_gradient and identity
    return x


# A primitive (not a bare constructor) so that rlgrad.jit sees it; nondiff: the output is a leaf.
stop_gradient = primitive(_identity, "stop_gradient", nondiff=True, arity=1)
defbatch(stop_gradient, "elementwise")
export(stop_gradient, torch="detach()")
stop_gradient.__doc__ = """The value of ``x`` with no gradient flowing back through it, at every
nesting level (JAX's ``lax.stop_gradient``, PyTorch's ``detach``). Plain arrays pass through."""


# ---------------------------------------------------------------------------------------------
# Compositions of primitives (their gradients follow from the table above)
# ---------------------------------------------------------------------------------------------
def swapaxes(x: Any, axis1: int, axis2: int) -> Any:
    nd = _ndim(x)
    axes = list(range(nd))
    a1, a2 = axis1 % nd, axis2 % nd
    axes[a1], axes[a2] = axes[a2], axes[a1]
    return transpose(x, tuple(axes))
export(swapaxes, torch="swapaxes(axis0: axis1, axis1: axis2)", top=True)


def moveaxis(x: Any, source: Any, destination: Any) -> Any:
    nd = _ndim(x)
    src_axes = _norm_axes(source, nd)
    dst_axes = _norm_axes(destination, nd)
    perm = [a for a in range(nd) if a not in src_axes]
    for d, s in sorted(zip(dst_axes, src_axes)):
        perm.insert(d, s)
    return transpose(x, tuple(perm))
export(moveaxis, torch=("moveaxis(source, destination)", "movedim(source, destination)"), top=True)


def expand_dims(x: Any, axis: Any) -> Any:
    return reshape(x, np.expand_dims(np.empty(_shape(x), dtype=bool), axis).shape)
export(expand_dims, torch="expand_dims(axis)")


def squeeze(x: Any, axis: Any = None) -> Any:
    return reshape(x, np.squeeze(np.empty(_shape(x), dtype=bool), axis).shape)
export(squeeze)


def ravel(x: Any) -> Any:
    return reshape(x, (-1,))
export(ravel, torch="ravel()", top=True)


identity = primitive(_identity, "identity", arity=1)
defbatch(identity, "elementwise")
defvjp(identity, pass_through)
defjvp_is_linear(identity)


def _copy(x: Any) -> Any:
    return np.array(x, copy=True)


clone = primitive(_copy, "clone", arity=1)
defbatch(clone, "elementwise")
defvjp(clone, pass_through)
defjvp_is_linear(clone)
export(clone, numpy=False, torch="clone()", top=True)


# Arrays built from Tensors: rnp.array([x, y]) and nested lists mixing Tensors, arrays and
# scalars, differentiable as in autograd and JAX (one stack per level of nesting).
def holds_tensor(obj: Any) -> bool:
    if isinstance(obj, Tensor):
        return True
    if type(obj) in (list, tuple):
        for o in obj:  # (no generator: this is on the call path of rnp.array)
            if holds_tensor(o):
                return True
    return False


def _values(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj._value
    if type(obj) in (list, tuple):
        return [_values(o) for o in obj]
    return obj


def _assemble(obj: Any, dtype: np.dtype) -> Any:
    if type(obj) in (list, tuple):
        return stack([_assemble(o, dtype) for o in obj])
    if isinstance(obj, Tensor):
        return obj if obj.dtype == dtype else astype(obj, dtype)
    return np.asarray(obj, dtype=dtype)


def array_from(obj: Any, copy: bool, *args: Any, **kwargs: Any) -> Any:
    """NumPy's array/asarray of ``obj``, which holds Tensors: NumPy's dtype and shape (found by
    NumPy on the values, so its errors too), the values differentiable in every Tensor."""
    ref = np.array(_values(obj), *args, **kwargs)
    if isinstance(obj, Tensor):
        out = obj if obj.dtype == ref.dtype else astype(obj, ref.dtype)
        out = clone(out) if copy and out is obj else out
    else:
        out = _assemble(obj, ref.dtype)
    return out if out.shape == ref.shape else reshape(out, ref.shape)  # ndmin

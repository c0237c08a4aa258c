"""``rlgrad.numpy.linalg``: differentiable counterparts of ``numpy.linalg``."""

from __future__ import annotations

from typing import Any

import numpy as _np

from rlgrad.ops import (  # noqa: F401
    absolute,
    cholesky,
    det,
    inv,
    logabsdet,
    matmul,
    max,
    min,
    solve,
    sqrt,
    sum,
)
from rlgrad.tensor import Tensor as _Tensor
from rlgrad.tensor import _Trace
from rlgrad.tracer import primitive as _primitive


def slogdet(a: Any) -> tuple[Any, Any]:
    """(sign, log|det|); the sign is piecewise constant, so only the second carries a gradient."""
    sign = _slogdet_sign(a)  # a primitive, so rlgrad.jit recomputes it at every call
    return (sign._value if isinstance(sign, _Tensor) and not _Trace.compiling else sign), logabsdet(a)


def _sign_of_det(a: Any) -> Any:
    return _np.linalg.slogdet(a)[0]


_slogdet_sign = _primitive(_sign_of_det, "slogdet_sign", nondiff=True, arity=1)


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Any:  # noqa: A002
    """Vector p-norms and the Frobenius norm (the default), as in ``numpy.linalg.norm``."""
    if not isinstance(x, _Tensor):
        return _np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    nd = x.ndim
    vector = (axis is None and nd == 1) or isinstance(axis, int)
    if ord in (None, "fro") and (vector or axis is None or len(axis) == 2):
        return sqrt(sum(x * x, axis=axis, keepdims=keepdims))
    if not vector:
        raise NotImplementedError(f"matrix norm ord={ord!r} is not differentiable in rlgrad")
    if ord == _np.inf:
        return max(absolute(x), axis=axis, keepdims=keepdims)
    if ord == -_np.inf:
        return min(absolute(x), axis=axis, keepdims=keepdims)
    if ord == 0:
        return sum(x != 0, axis=axis, keepdims=keepdims)
    if ord == 1:
        return sum(absolute(x), axis=axis, keepdims=keepdims)
    return sum(absolute(x) ** ord, axis=axis, keepdims=keepdims) ** (1.0 / ord)

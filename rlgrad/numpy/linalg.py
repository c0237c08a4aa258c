"""``rlgrad.numpy.linalg``: differentiable counterparts of ``numpy.linalg``, as HIPS autograd's.

``inv``, ``det``, ``solve`` and ``cholesky`` are primitives of ``rlgrad/ops.py``. The
decompositions with several outputs (``eigh``, ``eig``, ``svd``) are primitives here: each returns
its outputs packed into one array that the public function unpacks by indexing, so one
decomposition serves every output and its VJP rule sees the gradients of all of them at once
(zeros for an output that is not used), and its JVP rule gives their tangents packed the same
way (forward mode). On plain arrays every function is NumPy's own.

The rules are the ones autograd uses (M. Giles, "An extended collection of matrix derivative
results", 2008; J. Townsend, "Differentiating the singular value decomposition", 2016), written
with rlgrad functions so that every order works. Where a rule divides by a difference of
eigenvalues (singular values) that is exactly 0, a gradient reaching the eigenvectors there is
undefined: it raises, as a gradient that cannot be computed must.
"""

from __future__ import annotations

import builtins as _builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast, overload

import numpy as _np

from rlgrad.ops import (  # noqa: F401
    _T,
    absolute,
    astype,
    cholesky,
    concatenate,
    det,
    equal,
    inv,
    logabsdet,
    logical_and,
    matmul,
    max,
    min,
    moveaxis,
    not_equal,
    reshape,
    solve,
    sqrt,
    sum,
    tril,
    triu,
    where,
)
from rlgrad.ops import array_from as _array_from
from rlgrad.ops import holds_tensor as _holds_tensor
from rlgrad.tensor import Tensor as _Tensor
from rlgrad.tensor import _shape, _Trace, constant
from rlgrad.tracer import defbatch, defjvp, defvjp, pass_through, primitive

LinAlgError = _np.linalg.LinAlgError
if TYPE_CHECKING:
    from rlgrad.typing import Array, ArrayLike, FloatArrayLike, NormOrd


# (the results of a Tensor; an array gets NumPy's own)
class EighResult(NamedTuple):
    eigenvalues: _Tensor
    eigenvectors: _Tensor


class EigResult(NamedTuple):
    eigenvalues: _Tensor
    eigenvectors: _Tensor


class SVDResult(NamedTuple):
    U: _Tensor
    S: _Tensor
    Vh: _Tensor


def _data(x: Any) -> Any:
    return x._value if isinstance(x, _Tensor) else x


def _real_only(a: Any, name: str) -> None:
    if _np.iscomplexobj(_data(a)):
        raise TypeError(f"rlgrad.numpy.linalg.{name} of a complex Tensor: rlgrad differentiates "
                        "real values only; call numpy.linalg on t.detach().numpy() if you do not "
                        "need the gradient")


def _inverse_gaps(diff: Any) -> Any:
    """1 / diff, and 0 where diff == 0: on the diagonal, and at exactly repeated values, where
    ``_refuse_at_repeated`` has checked that no gradient couples the two vectors."""
    nz = diff != 0
    return where(nz, 1 / where(nz, diff, 1), 0)


def _refuse_fwd(x: Any, bad: Any, message: str = "") -> Any:
    if _np.any(bad):
        raise ValueError(message)
    return _np.array(x)  # a new array: a compiled step may reuse ``x``'s buffer after this op


# ``x`` unchanged, or a ValueError where ``bad`` holds. A primitive on the value's path, so a
# compiled step (``rlgrad.jit``) runs the check at every call instead of dropping it.
_refuse = primitive(_refuse_fwd, "refuse_where")
defbatch(_refuse, "elementwise")
defvjp(_refuse, pass_through, None)
defjvp(_refuse, pass_through, None)


def _refuse_at_repeated(diff: Any, coupling: Any, name: str) -> Any:
    """``diff``, checked: where two eigenvalues (singular values) are equal and the gradient
    couples their vectors, that derivative does not exist, and this raises."""
    off = ~_np.eye(_shape(diff)[-1], dtype=bool)
    bad = logical_and(logical_and(equal(diff, 0), not_equal(coupling, 0)), off)
    return _refuse(diff, bad, message=(
        f"rlgrad.numpy.linalg.{name}: the gradient through the vectors is undefined at "
        "repeated values (the matrix has two equal ones); differentiate only the values, or "
        "perturb the matrix"))


# ---- eigh --------------------------------------------------------------------------------------
def _eigh_packed(a: Any, UPLO: Literal["L", "U"] = "L") -> Any:  # noqa: N803 - NumPy's name
    w, v = _np.linalg.eigh(a, UPLO)
    return _np.concatenate([w[..., None, :], v], axis=-2)  # (..., n + 1, n)


def _eigh_vjp(g: Any, ans: Any, a: Any, UPLO: str = "L") -> Any:  # noqa: N803
    n = _shape(a)[-1]
    eye = _np.eye(n, dtype=ans.dtype)
    w, v = ans[..., 0, :], ans[..., 1:, :]
    gw, gv = g[..., 0, :], g[..., 1:, :]
    out = matmul(v * gw[..., None, :], _T(v))
    diff = w[..., None, :] - w[..., :, None]  # [i, j]: w_j - w_i
    vtgv = matmul(_T(v), gv)
    diff = _refuse_at_repeated(diff, vtgv - _T(vtgv), "eigh")
    out = out + matmul(matmul(v, _inverse_gaps(diff) * vtgv), _T(v))
    # eigh reads one triangle only: the gradient lives there (the diagonal counted once)
    both = (out + _T(out)) * (1 - 0.5 * eye)
    return tril(both) if UPLO.upper() == "L" else triu(both)


def _eigh_jvp(t: Any, ans: Any, a: Any, UPLO: str = "L") -> Any:  # noqa: N803
    # the symmetric matrix eigh sees: the triangle it reads, mirrored
    low = tril(t) if UPLO.upper() == "L" else _T(triu(t))
    ts = low + _T(tril(low, -1))
    w, v = ans[..., 0, :], ans[..., 1:, :]
    m = matmul(matmul(_T(v), ts), v)  # V^T dA V
    diff = w[..., None, :] - w[..., :, None]  # [i, j]: w_j - w_i
    diff = _refuse_at_repeated(diff, m, "eigh")
    dw = sum(m * _np.eye(_shape(a)[-1], dtype=ans.dtype), axis=-1)
    dv = matmul(v, _inverse_gaps(diff) * m)
    return concatenate([dw[..., None, :], dv], axis=-2)


_eigh_p = primitive(_eigh_packed, "eigh", arity=1)
defbatch(_eigh_p, "leading")
defvjp(_eigh_p, _eigh_vjp)
defjvp(_eigh_p, _eigh_jvp)


@overload
def eigh(a: _Tensor, UPLO: Literal["L", "U"] = "L") -> EighResult: ...
@overload
def eigh(a: ArrayLike, UPLO: Literal["L", "U"] = "L") -> tuple[Array, Array]: ...
def eigh(a: ArrayLike, UPLO: Literal["L", "U"] = "L") -> EighResult | tuple[Array, Array]:
    """NumPy's eigh; differentiable in the triangle it reads (``UPLO``)."""
    if not isinstance(a, _Tensor):
        return _np.linalg.eigh(_np.asanyarray(a), UPLO)
    _real_only(a, "eigh")
    p = _eigh_p(a, UPLO)
    return EighResult(p[..., 0, :], p[..., 1:, :])


@overload
def eigvalsh(a: _Tensor, UPLO: Literal["L", "U"] = "L") -> _Tensor: ...
@overload
def eigvalsh(a: ArrayLike, UPLO: Literal["L", "U"] = "L") -> Array: ...
def eigvalsh(a: ArrayLike, UPLO: Literal["L", "U"] = "L") -> _Tensor | Array:
    if not isinstance(a, _Tensor):
        return _np.linalg.eigvalsh(_np.asanyarray(a), UPLO)
    return eigh(a, UPLO)[0]


# ---- eig (real eigenvalues) --------------------------------------------------------------------
def _eig_packed(a: Any) -> Any:
    w, v = _np.linalg.eig(a)
    if w.dtype.kind == "c":
        raise ValueError("rlgrad.numpy.linalg.eig: this matrix has complex eigenvalues; rlgrad "
                         "differentiates eig where every eigenvalue is real (eigh for symmetric "
                         "matrices), or call numpy.linalg.eig on t.detach().numpy()")
    return _np.concatenate([w[..., None, :], v], axis=-2)


def _eig_vjp(g: Any, ans: Any, a: Any) -> Any:
    # arXiv:1701.00392 eq. 4.77 (autograd's), for real eigenvalues and unit eigenvectors
    n = _shape(a)[-1]
    eye = _np.eye(n, dtype=ans.dtype)
    e, u = ans[..., 0, :], ans[..., 1:, :]
    ge, gu = g[..., 0, :], g[..., 1:, :]
    diff = e[..., None, :] - e[..., :, None]
    ut = _T(u)
    utgu = matmul(ut, gu)
    p = utgu - matmul(matmul(ut, u), utgu * eye)  # the second term: the unit-norm constraint
    diff = _refuse_at_repeated(diff, p, "eig")
    return matmul(matmul(inv(ut), ge[..., None, :] * eye + _inverse_gaps(diff) * p), ut)


def _eig_jvp(t: Any, ans: Any, a: Any) -> Any:
    # A = U diag(e) U^-1: de = diag(U^-1 dA U), dU = U (F o U^-1 dA U), each column then kept
    # at unit norm (NumPy's normalisation)
    n = _shape(a)[-1]
    e, u = ans[..., 0, :], ans[..., 1:, :]
    p = matmul(matmul(inv(u), t), u)
    diff = e[..., None, :] - e[..., :, None]
    diff = _refuse_at_repeated(diff, p, "eig")
    de = sum(p * _np.eye(n, dtype=ans.dtype), axis=-1)
    du = matmul(u, _inverse_gaps(diff) * p)
    du = du - u * sum(u * du, axis=-2, keepdims=True)
    return concatenate([de[..., None, :], du], axis=-2)


_eig_p = primitive(_eig_packed, "eig", arity=1)
defbatch(_eig_p, "leading")
defvjp(_eig_p, _eig_vjp)
defjvp(_eig_p, _eig_jvp)


@overload
def eig(a: _Tensor) -> EigResult: ...
@overload
def eig(a: ArrayLike) -> tuple[Array, Array]: ...
def eig(a: ArrayLike) -> EigResult | tuple[Array, Array]:
    """NumPy's eig; on a Tensor every eigenvalue must be real (else a ValueError)."""
    if not isinstance(a, _Tensor):
        return _np.linalg.eig(_np.asanyarray(a))
    _real_only(a, "eig")
    p = _eig_p(a)
    return EigResult(p[..., 0, :], p[..., 1:, :])


@overload
def eigvals(a: _Tensor) -> _Tensor: ...
@overload
def eigvals(a: ArrayLike) -> Array: ...
def eigvals(a: ArrayLike) -> _Tensor | Array:
    if not isinstance(a, _Tensor):
        return _np.linalg.eigvals(_np.asanyarray(a))
    return eig(a)[0]


# ---- svd ---------------------------------------------------------------------------------------
def _svd_sizes(shape: tuple, full: bool) -> tuple[int, int, int, int, int]:
    m, n = shape[-2:]
    k = _builtins.min(m, n)
    return m, n, k, (m if full else k), (n if full else k)


def _svd_packed(a: Any, full_matrices: bool = True) -> Any:
    u, s, vh = _np.linalg.svd(a, full_matrices=full_matrices)
    b = s.shape[:-1]
    parts = [u.reshape(b + (u.shape[-2] * u.shape[-1],)), s, vh.reshape(b + (vh.shape[-2] * vh.shape[-1],))]
    return _np.concatenate(parts, axis=-1)


def _svd_unpack(p: Any, shape: tuple, full: bool) -> tuple[Any, Any, Any]:
    m, n, k, ku, kv = _svd_sizes(shape, full)
    b = tuple(shape[:-2])
    u = reshape(p[..., : m * ku], b + (m, ku))
    s = p[..., m * ku: m * ku + k]
    vh = reshape(p[..., m * ku + k:], b + (kv, n))
    return u, s, vh


def _svd_vjp(g: Any, ans: Any, a: Any, full_matrices: bool = True) -> Any:
    shape = _shape(a)
    m, n, k, ku, kv = _svd_sizes(shape, full_matrices)
    u, s, vh = _svd_unpack(ans, shape, full_matrices)
    gu, gs, gvh = _svd_unpack(g, shape, full_matrices)
    if ku > k or kv > k:  # full_matrices: the extra columns are any basis of a complement
        message = ("rlgrad.numpy.linalg.svd: the gradient through the extra columns of U or "
                   "rows of Vh (full_matrices=True) is undefined (they are any basis of a "
                   "complement); use full_matrices=False")
        u = _refuse(u[..., :k], not_equal(gu[..., k:], 0), message=message)
        vh = _refuse(vh[..., :k, :], not_equal(gvh[..., k:, :], 0), message=message)
        gu, gvh = gu[..., :k], gvh[..., :k, :]
    return _svd_reduced_vjp(gu, gs, gvh, u, s, vh)


def _svd_reduced_vjp(gu: Any, gs: Any, gvh: Any, u: Any, s: Any, vh: Any) -> Any:
    # Townsend (2016), autograd's rule, for real matrices with distinct singular values
    m, k, n = _shape(u)[-2], _shape(s)[-1], _shape(vh)[-1]
    eye = _np.eye(k, dtype=s.dtype)
    s2 = s * s
    diff = s2[..., None, :] - s2[..., :, None]  # [i, j]: s_j^2 - s_i^2
    utgu = matmul(_T(u), gu)
    vtgv = matmul(vh, _T(gvh))
    ju, jv = utgu - _T(utgu), vtgv - _T(vtgv)
    diff = _refuse_at_repeated(_refuse_at_repeated(diff, ju, "svd"), jv, "svd")
    f = _inverse_gaps(diff)
    t = f * ju * s[..., None, :] + eye * gs[..., :, None] + s[..., :, None] * (f * jv)
    out = matmul(matmul(u, t), vh)
    if m == n:
        return out
    # a non-square matrix: the columns of U (rows of Vh) also turn out of their span, by 1 / s
    g_out = gvh if m < n else _T(gu)
    # undefined where a singular value is 0 and the gradient reaches its vector's turning
    s_safe = _refuse(where(s == 0, 1, s), logical_and(equal(s, 0)[..., :, None],
                                                      not_equal(g_out, 0)), message=(
        "rlgrad.numpy.linalg.svd: the gradient through U and Vh of a rank-deficient non-square "
        "matrix is undefined (a singular value is 0)"))
    if m < n:
        return out + matmul(matmul(u / s_safe[..., None, :], gvh),
                            _np.eye(n, dtype=s.dtype) - matmul(_T(vh), vh))
    return out + _T(matmul(matmul(_T(vh) / s_safe[..., None, :], _T(gu)),
                           _np.eye(m, dtype=s.dtype) - matmul(u, _T(u))))


def _svd_jvp(t: Any, ans: Any, a: Any, full_matrices: bool = True) -> Any:
    shape = _shape(a)
    m, n, k, ku, kv = _svd_sizes(shape, full_matrices)
    if ku > k or kv > k:
        raise NotImplementedError("rlgrad.numpy.linalg.svd: forward mode through "
                                  "full_matrices=True of a non-square matrix is undefined (the "
                                  "extra columns are any basis of a complement); use "
                                  "full_matrices=False")
    u, s, vh = _svd_unpack(ans, shape, full_matrices)
    du, ds, dvh = _svd_reduced_jvp(t, u, s, vh)
    b = tuple(shape[:-2])
    return concatenate([reshape(du, b + (m * k,)), ds, reshape(dvh, b + (k * n,))], axis=-1)


def _svd_reduced_jvp(t: Any, u: Any, s: Any, vh: Any) -> tuple[Any, Any, Any]:
    # Townsend (2016): dP = U^T dA V, F_ij = 1 / (s_j^2 - s_i^2); the columns of U (V) also
    # turn out of their span by (I - U U^T) dA V / s
    m, k, n = _shape(u)[-2], _shape(s)[-1], _shape(vh)[-1]
    v = _T(vh)
    dp = matmul(matmul(_T(u), t), v)
    s2 = s * s
    diff = s2[..., None, :] - s2[..., :, None]
    sym_u = dp * s[..., None, :] + s[..., :, None] * _T(dp)  # dP S + S dP^T
    sym_v = s[..., :, None] * dp + _T(dp) * s[..., None, :]  # S dP + dP^T S
    diff = _refuse_at_repeated(diff, sym_u - _T(sym_u), "svd")
    f = _inverse_gaps(diff)
    ds = sum(dp * _np.eye(k, dtype=s.dtype), axis=-1)
    du = matmul(u, f * sym_u)
    dv = matmul(v, f * sym_v)
    if m > k or n > k:
        s_safe = where(s == 0, 1, s)
        if m > k:
            out_u = matmul(matmul(_np.eye(m, dtype=s.dtype) - matmul(u, _T(u)), t), v)
            du = du + out_u / s_safe[..., None, :]
        if n > k:
            out_v = matmul(matmul(_np.eye(n, dtype=s.dtype) - matmul(v, vh), _T(t)), u)
            dv = dv + out_v / s_safe[..., None, :]
    return du, ds, _T(dv)


_svd_p = primitive(_svd_packed, "svd", arity=1)
defbatch(_svd_p, "leading")
defvjp(_svd_p, _svd_vjp)
defjvp(_svd_p, _svd_jvp)


def _singular_values(a: Any) -> Any:
    return _np.linalg.svd(a, compute_uv=False)


def _svdvals_vjp(g: Any, ans: Any, a: Any) -> Any:
    u, _, vh = svd(a, full_matrices=False)  # differentiable: the 2nd order goes through U, Vh
    return matmul(u * g[..., None, :], vh)


_svdvals_p = primitive(_singular_values, "svdvals", arity=1)
defbatch(_svdvals_p, "leading")
defvjp(_svdvals_p, _svdvals_vjp)
defjvp(_svdvals_p, lambda t, ans, a: _svdvals_jvp(t, a))


def _svdvals_jvp(t: Any, a: Any) -> Any:
    u, _, vh = svd(a, full_matrices=False)  # ds = diag(U^T dA V)
    return sum(u * matmul(t, _T(vh)), axis=-2)


@overload
def svd(a: _Tensor, full_matrices: bool = True, compute_uv: Literal[True] = True,
        hermitian: bool = False) -> SVDResult: ...
@overload
def svd(a: _Tensor, full_matrices: bool = True, *, compute_uv: Literal[False],
        hermitian: bool = False) -> _Tensor: ...
@overload
def svd(a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True,
        hermitian: bool = False) -> tuple[Array, Array, Array] | Array: ...
def svd(a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True,
        hermitian: bool = False) -> SVDResult | _Tensor | tuple[Array, Array, Array] | Array:
    """NumPy's svd; on a Tensor ``hermitian=True`` is refused (use eigh, or hermitian=False)."""
    if not isinstance(a, _Tensor):
        if not compute_uv:  # (NumPy's overloads: the values alone)
            return _np.linalg.svd(_np.asanyarray(a), full_matrices, False, hermitian)
        return _np.linalg.svd(_np.asanyarray(a), full_matrices, True, hermitian)
    _real_only(a, "svd")
    if hermitian:
        raise NotImplementedError("rlgrad.numpy.linalg.svd(hermitian=True) of a Tensor: use "
                                  "hermitian=False (the same singular values) or eigh")
    if not compute_uv:
        return _svdvals_p(a)
    return SVDResult(*_svd_unpack(_svd_p(a, bool(full_matrices)), a.shape, bool(full_matrices)))


@overload
def svdvals(x: _Tensor) -> _Tensor: ...
@overload
def svdvals(x: ArrayLike) -> Array: ...
def svdvals(x: ArrayLike) -> _Tensor | Array:
    if not isinstance(x, _Tensor):
        return _np.linalg.svdvals(_np.asanyarray(x))
    return svd(x, compute_uv=False)


# ---- pinv --------------------------------------------------------------------------------------
def _pinv_vjp(g: Any, ans: Any, a: Any, *args: Any, **kwargs: Any) -> Any:
    # Golub & Pereyra (1973), autograd's: exact where the rank does not change
    m, n = _shape(a)[-2:]
    em, en = _np.eye(m, dtype=ans.dtype), _np.eye(n, dtype=ans.dtype)
    ans_t = _T(ans)
    return _T(-matmul(matmul(ans, _T(g)), ans)
              + matmul(matmul(matmul(ans, ans_t), g), em - matmul(a, ans))
              + matmul(matmul(matmul(en - matmul(ans, a), g), ans_t), ans))


def _pinv_jvp(t: Any, ans: Any, a: Any, *args: Any, **kwargs: Any) -> Any:
    # Golub & Pereyra (1973): -A+ dA A+ + A+ A+^T dA^T (I - A A+) + (I - A+ A) dA^T A+^T A+
    m, n = _shape(a)[-2:]
    em, en = _np.eye(m, dtype=ans.dtype), _np.eye(n, dtype=ans.dtype)
    ans_t, tt = _T(ans), _T(t)
    return (-matmul(matmul(ans, t), ans)
            + matmul(matmul(matmul(ans, ans_t), tt), em - matmul(a, ans))
            + matmul(matmul(matmul(en - matmul(ans, a), tt), ans_t), ans))


_pinv_p = primitive(_np.linalg.pinv, "pinv", arity=1)
defbatch(_pinv_p, "leading")
defvjp(_pinv_p, _pinv_vjp)
defjvp(_pinv_p, _pinv_jvp)


@overload
def pinv(a: _Tensor, rcond: FloatArrayLike | None = None, hermitian: bool = False,
         **kwargs: Any) -> _Tensor: ...
@overload
def pinv(a: ArrayLike, rcond: FloatArrayLike | None = None, hermitian: bool = False,
         **kwargs: Any) -> Array: ...
def pinv(a: ArrayLike, rcond: FloatArrayLike | None = None, hermitian: bool = False,
         **kwargs: Any) -> _Tensor | Array:
    """NumPy's pinv (``rcond``/``rtol`` as NumPy's); on a Tensor ``hermitian=True`` is refused."""
    if not isinstance(a, _Tensor):
        return _np.linalg.pinv(_np.asanyarray(a), rcond, hermitian, **kwargs)
    _real_only(a, "pinv")
    if hermitian:
        raise NotImplementedError("rlgrad.numpy.linalg.pinv(hermitian=True) of a Tensor: use "
                                  "hermitian=False (the same result for a symmetric matrix)")
    return _pinv_p(a, rcond, **kwargs)


# ---- slogdet, matrix_power ---------------------------------------------------------------------
class SlogdetResult(NamedTuple):
    sign: Array  # (an array of the values outside rlgrad.jit: it carries no gradient)
    logabsdet: _Tensor


def _sign_of_det(a: Any) -> Any:
    return _np.linalg.slogdet(a)[0]


_slogdet_sign = primitive(_sign_of_det, "slogdet_sign", nondiff=True, arity=1)
defbatch(_slogdet_sign, "leading")


@overload
def slogdet(a: _Tensor) -> SlogdetResult: ...
@overload
def slogdet(a: ArrayLike) -> tuple[Array, Array]: ...
def slogdet(a: ArrayLike) -> SlogdetResult | tuple[Array, Array]:
    """(sign, log|det|); the sign is piecewise constant, so only the second carries a gradient."""
    if not isinstance(a, _Tensor):
        return _np.linalg.slogdet(_np.asanyarray(a))
    sign = _slogdet_sign(a)  # a primitive, so rlgrad.jit recomputes it at every call
    return SlogdetResult(sign._value if not _Trace.compiling else sign, logabsdet(a))


@overload
def matrix_power(a: _Tensor, n: int) -> _Tensor: ...
@overload
def matrix_power(a: ArrayLike, n: int) -> Array: ...
def matrix_power(a: ArrayLike, n: int) -> _Tensor | Array:
    """NumPy's matrix_power: products of ``a`` (of ``inv(a)`` for n < 0), NumPy's order."""
    if not isinstance(a, _Tensor):
        return _np.linalg.matrix_power(_np.asanyarray(a), n)
    n = int(_np.asarray(n).__index__())  # NumPy's TypeError for a non-integer power
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        _np.linalg.matrix_power(a._value, n)  # NumPy's error for a non-square input
    if n == 0:
        return constant(_np.linalg.matrix_power(a._value, 0))  # the identity: no gradient
    if n < 0:
        a, n = inv(a), -n
    result = z = None
    while n > 0:  # binary powers: z = a, a^2, a^4 ...; result the product of those n has
        z = a if z is None else matmul(z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else matmul(result, z)
    return cast(_Tensor, result)


# ---- norm --------------------------------------------------------------------------------------
def _root(s: Any, p: Any = 2) -> Any:
    """s ** (1 / p) of a sum of |x| ** p, with gradient 0 where s == 0 (all of x is 0): the
    norm's subgradient there (PyTorch's, and std's), not 0 / 0 = NaN."""
    zero = s == 0
    safe = where(zero, 1, s)
    return where(zero, 0, sqrt(safe) if p == 2 else safe ** (1 / p))


def _vector_norm(x: Any, ord: Any, axis: Any, keepdims: bool) -> Any:  # noqa: A002
    if ord is None or ord == 2:
        return _root(sum(x * x, axis=axis, keepdims=keepdims))
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    if ord == _np.inf:
        return max(absolute(x), axis=axis, keepdims=keepdims)
    if ord == -_np.inf:
        return min(absolute(x), axis=axis, keepdims=keepdims)
    if ord == 0:  # the count of non-zeros: piecewise constant
        return sum(astype(x != 0, x.dtype), axis=axis, keepdims=keepdims)
    if ord == 1:
        return sum(absolute(x), axis=axis, keepdims=keepdims)
    p = _np.asarray(ord, dtype=x.dtype)[()]  # NumPy raises in x's dtype
    return _root(sum(absolute(x) ** p, axis=axis, keepdims=keepdims), p)


def _matrix_norm(x: Any, ord: Any, row: int, col: int) -> Any:  # noqa: A002
    """The norm over axes (row, col), those axes removed."""
    if ord in (2, -2, "nuc"):
        s = svd(moveaxis(x, (row, col), (-2, -1)), compute_uv=False)
        return max(s, axis=-1) if ord == 2 else min(s, axis=-1) if ord == -2 else sum(s, axis=-1)
    if ord in (1, -1):  # the largest (smallest) column sum of |x|
        sums, rest = sum(absolute(x), axis=row), col - (col > row)
    elif ord in (_np.inf, -_np.inf):  # the largest (smallest) row sum
        sums, rest = sum(absolute(x), axis=col), row - (row > col)
    elif ord in (None, "fro", "f"):
        return _root(sum(x * x, axis=(row, col)))
    else:
        raise ValueError("Invalid norm order for matrices.")
    return max(sums, axis=rest) if ord in (1, _np.inf) else min(sums, axis=rest)


@overload
def norm(x: _Tensor, ord: NormOrd = None,  # noqa: A002
         axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> _Tensor: ...
@overload
def norm(x: ArrayLike, ord: NormOrd = None,  # noqa: A002
         axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Array: ...
def norm(x: ArrayLike, ord: NormOrd = None,  # noqa: A002
         axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> _Tensor | Array:
    """NumPy's norm, every ``ord`` it takes: vector p-norms (any p, 0, +-inf), and for matrices
    Frobenius, nuclear, +-2 (extreme singular values), +-1 and +-inf (column/row sums)."""
    if type(x) in (list, tuple) and _holds_tensor(x):  # (autograd's norm takes lists too)
        x = _array_from(x, False)
    if not isinstance(x, _Tensor):
        return _np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    _real_only(x, "norm")
    if x.dtype.kind not in "fc":
        x = cast(_Tensor, astype(x, float))
    nd = x.ndim
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            out = _root(sum(x * x))
            return reshape(out, (1,) * nd) if keepdims else out
        axis = tuple(range(nd))
    elif not isinstance(axis, tuple):
        axis = (_np.asarray(axis).__index__(),)
    if len(axis) == 1:
        return _vector_norm(x, ord, axis[0], keepdims)
    if len(axis) != 2:
        raise ValueError("Improper number of dimensions to norm.")
    row, col = (_np.lib.array_utils.normalize_axis_index(a, nd) for a in axis)
    if row == col:
        raise ValueError("Duplicate axes given.")
    out = _matrix_norm(x, ord, row, col)
    if keepdims:
        shape = list(x.shape)
        shape[row] = shape[col] = 1
        out = reshape(out, tuple(shape))
    return out


@overload
def vector_norm(x: _Tensor, /, *, axis: int | tuple[int, ...] | None = None,
                keepdims: bool = False, ord: float = 2) -> _Tensor: ...
@overload
def vector_norm(x: ArrayLike, /, *, axis: int | tuple[int, ...] | None = None,
                keepdims: bool = False, ord: float = 2) -> Array: ...
def vector_norm(x: ArrayLike, /, *, axis: int | tuple[int, ...] | None = None,
                keepdims: bool = False, ord: float = 2) -> _Tensor | Array:
    """NumPy 2's vector_norm: over all axes (None) or several, flattened together."""
    if not isinstance(x, _Tensor):
        # (NumPy's stub leaves out axis=None, which NumPy takes: its default)
        return _np.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)  # type: ignore[arg-type]
    shape = x.shape
    axes = tuple(range(x.ndim)) if axis is None else (axis,) if not isinstance(axis, tuple) else axis
    axes = tuple(_np.lib.array_utils.normalize_axis_index(a, x.ndim) for a in axes)
    rest = tuple(s for i, s in enumerate(shape) if i not in axes)
    flat = reshape(moveaxis(x, axes, tuple(range(-len(axes), 0))), rest + (-1,))
    out = norm(flat, ord, axis=-1)
    return reshape(out, tuple(1 if i in axes else s for i, s in enumerate(shape))) if keepdims else out


@overload
def matrix_norm(x: _Tensor, /, *, keepdims: bool = False, ord: NormOrd = "fro") -> _Tensor: ...
@overload
def matrix_norm(x: ArrayLike, /, *, keepdims: bool = False, ord: NormOrd = "fro") -> Array: ...
def matrix_norm(x: ArrayLike, /, *, keepdims: bool = False, ord: NormOrd = "fro") -> _Tensor | Array:
    """NumPy 2's matrix_norm: the norm of each matrix over the last two axes."""
    if not isinstance(x, _Tensor):
        return _np.linalg.matrix_norm(x, keepdims=keepdims, ord=ord)
    return norm(x, ord, axis=(-2, -1), keepdims=keepdims)


@overload
def matrix_transpose(x: _Tensor, /) -> _Tensor: ...
@overload
def matrix_transpose(x: ArrayLike, /) -> Array: ...
def matrix_transpose(x: ArrayLike, /) -> _Tensor | Array:
    return _T(x) if isinstance(x, _Tensor) else _np.linalg.matrix_transpose(x)


@overload
def multi_dot(arrays: Sequence[_Tensor], *, out: None = None) -> _Tensor: ...
@overload
def multi_dot(arrays: Sequence[ArrayLike], *, out: None = None) -> Array: ...
def multi_dot(arrays: Sequence[ArrayLike], *, out: None = None) -> _Tensor | Array:
    """NumPy's multi_dot as a chain of matmuls, left to right (NumPy may choose another order:
    the same product up to rounding)."""
    if out is not None or not any(isinstance(a, _Tensor) for a in arrays):
        return _np.linalg.multi_dot([_np.asanyarray(a) for a in arrays], out=out)
    if len(arrays) < 2:
        raise ValueError("Expecting at least two arrays.")
    result = arrays[0]
    for a in arrays[1:]:
        result = matmul(result, a)
    return cast(_Tensor, result)


# ---- qr (reduced, m >= n) ----------------------------------------------------------------------
def _qr_packed(a: Any) -> Any:
    q, r = _np.linalg.qr(a, mode="reduced")
    return _np.concatenate([q, r], axis=-2)  # (..., m + n, n): Q over R


def _qr_parts(p: Any, m: int) -> tuple[Any, Any]:
    return p[..., :m, :], p[..., m:, :]


def _right_rinv(x: Any, r: Any) -> Any:
    """``x R^-1`` for an upper-triangular ``R``: the triangular solve from the right."""
    return _T(_solve_triangular_p(_T(r), _T(x), False, False))


def _qr_vjp(g: Any, ans: Any, a: Any) -> Any:
    # A = QR, dA = dQ R + Q dR: with C = Q^T dA R^-1 and Omega its skew part from the strict
    # lower triangle, dR = (C - Omega) R and dQ = dA R^-1 - Q (C - Omega); transposed:
    # gA = (gQ + Q N) R^-T with M = gR R^T - Q^T gQ and N its upper triangle copied below
    m = _shape(a)[-2]
    q, r = _qr_parts(ans, m)
    gq, gr = _qr_parts(g, m)
    mm = matmul(gr, _T(r)) - matmul(_T(q), gq)
    n = triu(mm) + _T(triu(mm, 1))
    return _T(_solve_triangular_p(r, _T(gq + matmul(q, n)), True, False))


def _qr_jvp(t: Any, ans: Any, a: Any) -> Any:
    m = _shape(a)[-2]
    q, r = _qr_parts(ans, m)
    ar = _right_rinv(t, r)  # dA R^-1
    c = matmul(_T(q), ar)
    low = tril(c, -1)
    upper = c - low + _T(low)  # C - Omega: upper triangular
    return concatenate([ar - matmul(q, upper), matmul(upper, r)], axis=-2)


_qr_p = primitive(_qr_packed, "qr", arity=1)
defbatch(_qr_p, "leading")  # NumPy's qr takes stacks
defvjp(_qr_p, _qr_vjp)
defjvp(_qr_p, _qr_jvp)


class QRResult(NamedTuple):
    Q: _Tensor
    R: _Tensor


@overload
def qr(a: _Tensor, mode: Literal["reduced", "complete", "r", "raw"] = "reduced"
       ) -> QRResult | _Tensor: ...
@overload
def qr(a: ArrayLike, mode: Literal["reduced", "complete", "r", "raw"] = "reduced"
       ) -> tuple[Array, Array] | Array: ...
def qr(a: ArrayLike, mode: Literal["reduced", "complete", "r", "raw"] = "reduced"
       ) -> QRResult | _Tensor | tuple[Array, Array] | Array:
    """NumPy's qr; on a Tensor differentiable for ``mode='reduced'`` with rows >= columns (the
    other shapes and modes give values without a gradient path, or raise if one is needed)."""
    if not isinstance(a, _Tensor):
        return _np.linalg.qr(_np.asanyarray(a), mode)
    _real_only(a, "qr")
    m, n = a.shape[-2:]
    if mode == "reduced" and m >= n:
        p = _qr_p(a)
        return QRResult(p[..., :m, :], p[..., m:, :])
    if a.requires_grad and _grad_enabled():
        raise NotImplementedError(
            f"rlgrad: the gradient of qr is implemented for mode='reduced' with rows >= columns; "
            f"got mode={mode!r} on a {m}x{n} matrix (torch's is undefined for 'complete' with "
            "more rows, and for mode='r'); detach the input or use mode='reduced'")
    res = _np.linalg.qr(a._value, "complete" if mode == "r" else mode)
    return QRResult(constant(res[0]), constant(res[1]))


def _grad_enabled() -> bool:
    from rlgrad.tracer import is_grad_enabled

    return is_grad_enabled()


# ---- solve_triangular ----------------------------------------------------------------------------
def _triangle(a: Any, upper: bool, unit: bool) -> Any:
    """The triangle of ``a`` a triangular solve reads (its diagonal taken as ones if ``unit``)."""
    if unit:
        n = _shape(a)[-1]
        return (triu(a, 1) if upper else tril(a, -1)) + _np.eye(n, dtype=_dtype_of(a))
    return triu(a) if upper else tril(a)


def _dtype_of(a: Any) -> Any:
    return a._value.dtype if isinstance(a, _Tensor) else _np.asarray(a).dtype


def _solve_triangular_fwd(a: Any, b: Any, upper: bool, unit: bool) -> Any:
    # NumPy has no triangular solver: a general solve on the triangle (O(n^3), exact the same
    # system; scipy is not a dependency of the engine)
    return _np.linalg.solve(_triangle(_np.asarray(a), upper, unit), b)


def _solve_triangular_vjp_a(g: Any, ans: Any, a: Any, b: Any, upper: bool, unit: bool) -> Any:
    gb = _solve_triangular_p(_T(a), g, not upper, unit)
    ga = -matmul(gb, _T(ans))
    return (triu(ga, 1 if unit else 0) if upper else tril(ga, -1 if unit else 0))


def _solve_triangular_jvp_a(t: Any, ans: Any, a: Any, b: Any, upper: bool, unit: bool) -> Any:
    dt = triu(t, 1 if unit else 0) if upper else tril(t, -1 if unit else 0)
    return -_solve_triangular_p(a, matmul(dt, ans), upper, unit)


_solve_triangular_p = primitive(_solve_triangular_fwd, "solve_triangular")
defbatch(_solve_triangular_p, "leading")  # stacks of matrices, as NumPy's solve
defvjp(_solve_triangular_p, _solve_triangular_vjp_a,
       lambda g, ans, a, b, upper, unit: _solve_triangular_p(_T(a), g, not upper, unit))
defjvp(_solve_triangular_p, _solve_triangular_jvp_a,
       lambda t, ans, a, b, upper, unit: _solve_triangular_p(a, t, upper, unit))


def solve_triangular(a: ArrayLike, b: ArrayLike, lower: bool = False, unit_diagonal: bool = False
                     ) -> _Tensor:
    """SciPy's ``solve_triangular(a, b, lower=False)`` on matrices ``b`` (the triangle of ``a``
    named by ``lower`` is read, the rest ignored); differentiable in ``a`` and ``b``."""
    return _solve_triangular_p(a, b, not lower, bool(unit_diagonal))


# ---- expm --------------------------------------------------------------------------------------
_PADE6 = (1.0, 1 / 2, 5 / 44, 1 / 66, 1 / 792, 1 / 15840, 1 / 665280)  # exp's [6/6] Pade


def _expm_fwd(a: Any) -> Any:
    """Scaling and squaring: ``exp(A / 2^s)`` by the [6/6] Pade approximant where the 1-norm of
    ``A / 2^s`` is at most 1/2 (error below float64's rounding), then squared ``s`` times."""
    a = _np.asarray(a)
    norm1 = _np.abs(a).sum(axis=-2).max() if a.size else 0.0
    s = _builtins.max(0, int(_np.ceil(_np.log2(norm1 / 0.5))) if norm1 > 0.5 else 0)
    x = a / (2.0 ** s)
    eye = _np.broadcast_to(_np.eye(a.shape[-1], dtype=a.dtype), a.shape)
    num, den, p = eye * _PADE6[0], eye * _PADE6[0], eye
    for k, c in enumerate(_PADE6[1:], start=1):
        p = p @ x
        num = num + c * p
        den = den + (-1) ** k * c * p
    r = _np.linalg.solve(den, num)
    for _ in range(s):
        r = r @ r
    return r.astype(a.dtype, copy=False)


def _expm_frechet(a: Any, e: Any) -> Any:
    """The derivative of expm at ``a`` in the direction ``e``: the upper-right block of the
    exponential of ``[[a, e], [0, a]]`` (Mathias 1996), through the primitive, so every order
    works."""
    n = _shape(a)[-1]
    zero = a * 0
    block = concatenate([concatenate([a, e], axis=-1), concatenate([zero, a], axis=-1)], axis=-2)
    return _expm_p(block)[..., :n, n:]


_expm_p = primitive(_expm_fwd, "expm", arity=1)
defbatch(_expm_p, "leading")  # (one scaling for the stack: more squarings, same accuracy)
defvjp(_expm_p, lambda g, ans, a: _expm_frechet(_T(a), g))  # L(A)^* = L(A^T)
defjvp(_expm_p, lambda t, ans, a: _expm_frechet(a, t))


@overload
def expm(a: _Tensor) -> _Tensor: ...
@overload
def expm(a: ArrayLike) -> Array: ...
def expm(a: ArrayLike) -> _Tensor | Array:
    """The matrix exponential (SciPy's ``expm``) of a matrix or a batch of them."""
    if not isinstance(a, _Tensor):
        return _expm_fwd(a)
    _real_only(a, "expm")
    return _expm_p(a)

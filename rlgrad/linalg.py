"""``rlgrad.linalg``: ``torch.linalg``'s names and signatures (``dim=``, ``keepdim=``, ``UPLO=``,
``upper=``/``left=``, named results), so ``torch.linalg.qr(A)`` runs after the import swap.

Nothing here has a gradient rule: each function is a primitive of ``rlgrad/ops.py`` (``inv``,
``det``, ``solve``, ``cholesky``) or of ``rlgrad/numpy/linalg.py`` (``qr``, ``eigh``, ``svd``,
``solve_triangular``, ``expm`` ...), or a composition of them. ``rlgrad.numpy.linalg`` keeps
NumPy's names and conventions. Where rlgrad's result differs from torch's on purpose it is said
in the function's docstring (``lstsq``: the minimum-norm solution, as the ``gelsd`` driver).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from rlgrad import ops
from rlgrad.numpy import linalg as _la
from rlgrad.tensor import Tensor, constant
from rlgrad.typing import ArrayLike, DTypeLike, NormOrd

LinAlgError = np.linalg.LinAlgError
SlogdetResult, EighResult, SVDResult, QRResult = (_la.SlogdetResult, _la.EighResult, _la.SVDResult,
                                                   _la.QRResult)


class LstsqResult(NamedTuple):
    solution: Any
    residuals: Any
    rank: Any
    singular_values: Any


def _t(x: Any, name: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"linalg.{name}(): expected a Tensor, got {type(x).__name__}; wrap data "
                        "with rlgrad.tensor()")
    return x


def _square(a: Any, name: str) -> Tensor:
    a = _t(a, name)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"linalg.{name}: A must be batches of square matrices, but they are "
                           f"{' by '.join(map(str, a.shape[-2:]))} matrices")
    return a


def _is_vector_rhs(a: Tensor, b: Tensor) -> bool:
    """torch's rule: B is a (batch of) vector(s) if it is 1-D or has one dimension fewer than A
    with A's batch shape."""
    return b.ndim == 1 or (b.ndim == a.ndim - 1 and tuple(b.shape) == tuple(a.shape[:-1]))


def det(A: Tensor) -> Tensor:  # noqa: N803 - torch's names
    """The determinant; its gradient is the cofactor matrix, also at a singular matrix (torch's
    first-order backward gives 0 there, its double backward the cofactors)."""
    return ops.det(_square(A, "det"))


def slogdet(A: Tensor) -> _la.SlogdetResult:  # noqa: N803
    return _la.slogdet(_square(A, "slogdet"))


def inv(A: Tensor) -> Tensor:  # noqa: N803
    return ops.inv(_square(A, "inv"))


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:  # noqa: N803
    """``X`` with ``A X = B`` (``X A = B`` if not ``left``); B a vector or a matrix, by torch's
    rule."""
    a, b = _square(A, "solve"), _t(B, "solve")
    if not left:
        return solve(a.mT, b.mT).mT
    if _is_vector_rhs(a, b):
        return ops.solve(a, b.unsqueeze(-1))[..., 0]
    return ops.solve(a, b)


def cholesky(A: Tensor, *, upper: bool = False) -> Tensor:  # noqa: N803
    low = ops.cholesky(_symmetric_as_torch(_square(A, "cholesky"), False))
    return low.mT if upper else low


def qr(A: Tensor, mode: Literal["reduced", "complete", "r"] = "reduced") -> _la.QRResult:  # noqa: N803
    """``(Q, R)``; differentiable for ``mode='reduced'`` with rows >= columns. ``mode='r'`` gives
    an empty Q, as torch's."""
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' "
                           "(default), 'r', or 'complete'")
    q, r = _la.qr(_t(A, "qr"), mode)
    if mode == "r":
        k = min(A.shape[-2:])
        return QRResult(constant(np.zeros((0,), A.dtype)), r[..., :k, :])
    return QRResult(q, r)


def _symmetric_as_torch(a: Tensor, upper: bool) -> Tensor:
    """The symmetric matrix torch's eigh and cholesky see (one triangle, mirrored), with torch's
    symmetric gradient: the value of the mirrored triangle, the gradient of ``(A + A^T) / 2``
    (``rlgrad.numpy.linalg`` puts the gradient in the triangle read, as HIPS autograd)."""
    half = (a + a.mT) * 0.5
    tri = a.triu() if upper else a.tril()
    mirrored = tri + (tri.triu(1) if upper else tri.tril(-1)).mT
    return half + ops.stop_gradient(mirrored - half)


def eigh(A: Tensor, UPLO: str = "L") -> _la.EighResult:  # noqa: N803
    """``(eigenvalues, eigenvectors)`` of the symmetric matrix that the ``UPLO`` triangle of A
    gives, with torch's symmetric gradient."""
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return _la.eigh(_symmetric_as_torch(_square(A, "eigh"), UPLO == "U"))


def eigvalsh(A: Tensor, UPLO: str = "L") -> Tensor:  # noqa: N803
    return eigh(A, UPLO)[0]


def svd(A: Tensor, full_matrices: bool = True) -> _la.SVDResult:  # noqa: N803
    return _la.svd(_t(A, "svd"), full_matrices=full_matrices)


def svdvals(A: Tensor) -> Tensor:  # noqa: N803
    return _la.svd(_t(A, "svdvals"), compute_uv=False)


def pinv(A: Tensor, *, atol: float | None = None, rtol: float | None = None,  # noqa: N803
         hermitian: bool = False) -> Tensor:
    if atol is not None:
        raise NotImplementedError("linalg.pinv(atol=) is not supported; pass rtol= (relative "
                                  "to the largest singular value)")
    return _la.pinv(_t(A, "pinv"), hermitian=hermitian, **({} if rtol is None else {"rtol": rtol}))


def matrix_power(A: Tensor, n: int) -> Tensor:  # noqa: N803
    return _la.matrix_power(_square(A, "matrix_power"), n)


def matrix_exp(A: Tensor) -> Tensor:  # noqa: N803
    """``exp(A)`` of square matrices; its gradient (reverse and forward) is the Frechet
    derivative, through the exponential of a block matrix, so every order works."""
    return _la.expm(_square(A, "matrix_exp"))


def solve_triangular(A: Tensor, B: Tensor, *, upper: bool, left: bool = True,  # noqa: N803
                     unitriangular: bool = False) -> Tensor:
    """``X`` with ``A X = B`` (``X A = B`` if not ``left``), reading only the triangle of A that
    ``upper`` names (its diagonal taken as ones if ``unitriangular``)."""
    a, b = _square(A, "solve_triangular"), _t(B, "solve_triangular")
    if b.ndim < 2:
        raise RuntimeError("linalg.solve_triangular: B must be a matrix or a batch of them, got "
                           f"{b.ndim}-D; add a column dimension with B.unsqueeze(-1)")
    if not left:  # X A = B  <=>  A^T X^T = B^T, A^T the other triangle
        return _la.solve_triangular(a.mT, b.mT, lower=upper, unit_diagonal=unitriangular).mT
    return _la.solve_triangular(a, b, lower=not upper, unit_diagonal=unitriangular)


def lstsq(A: Tensor, B: Tensor, rcond: float | None = None, *, driver: str | None = None) -> LstsqResult:  # noqa: N803
    """The least-squares solution of ``A X = B``: ``pinv(A) @ B``, whose gradient is torch's
    (torch differentiates lstsq through the pseudo-inverse too). The solution is the
    minimum-norm one, as torch's ``gelsd`` driver gives; the residuals (squared, per column of
    B) are returned for a tall full-rank A, as torch's ``gelsd``; rank and singular values too."""
    a, b = _t(A, "lstsq"), _t(B, "lstsq")
    vector = b.ndim == a.ndim - 1
    bm = b.unsqueeze(-1) if vector else b
    x = ops.matmul(_la.pinv(a, rcond), bm) if rcond is not None else ops.matmul(_la.pinv(a), bm)
    m, n = a.shape[-2:]
    s = np.linalg.svd(a._value, compute_uv=False)
    rank = (s > s[..., :1] * max(m, n) * np.finfo(a.dtype).eps).sum(-1)
    if m > n and np.all(rank == n):
        res = ((ops.matmul(a, x) - bm) ** 2).sum(-2)
    else:
        res = constant(np.zeros((0,), a.dtype))
    x = x[..., 0] if vector else x
    return LstsqResult(x, res[..., 0] if vector and res.ndim else res, constant(rank), constant(s))


def norm(A: Tensor, ord: NormOrd = None,  # noqa: A002, N803
         dim: int | tuple[int, ...] | list[int] | None = None, keepdim: bool = False, *,
         dtype: DTypeLike = None) -> Tensor:
    a = _t(A, "norm") if dtype is None else _t(A, "norm").to(dtype)
    if isinstance(dim, list):
        dim = tuple(dim)
    return _la.norm(a, ord, axis=dim, keepdims=keepdim)


def vector_norm(x: Tensor, ord: float = 2,  # noqa: A002
                dim: int | tuple[int, ...] | list[int] | None = None, keepdim: bool = False, *,
                dtype: DTypeLike = None) -> Tensor:
    t = _t(x, "vector_norm") if dtype is None else _t(x, "vector_norm").to(dtype)
    return _la.vector_norm(t, axis=tuple(dim) if isinstance(dim, list) else dim,
                           keepdims=keepdim, ord=ord)


def matrix_norm(A: Tensor, ord: NormOrd = "fro", dim: Sequence[int] = (-2, -1), keepdim: bool = False, *,  # noqa: A002, N803
                dtype: DTypeLike = None) -> Tensor:
    a = _t(A, "matrix_norm") if dtype is None else _t(A, "matrix_norm").to(dtype)
    return _la.norm(a, ord, axis=tuple(dim), keepdims=keepdim)


def multi_dot(tensors: Sequence[Tensor]) -> Tensor:
    return _la.multi_dot(list(tensors))


def matmul(input: Tensor, other: ArrayLike) -> Tensor:  # noqa: A002
    return _t(input, "matmul") @ other


def vecdot(x: Tensor, y: ArrayLike, *, dim: int = -1) -> Tensor:
    return (x * y).sum(dim)


def cross(input: Tensor, other: ArrayLike, *, dim: int = -1) -> Tensor:  # noqa: A002
    """The cross product of 3-vectors along ``dim``."""
    a, b = _t(input, "cross"), _t(other, "cross")
    if a.shape[dim] != 3 or b.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{a.shape[dim]} and {b.shape[dim]}")
    a, b = a.movedim(dim, -1), b.movedim(dim, -1)
    parts = [a[..., (k + 1) % 3] * b[..., (k + 2) % 3] - a[..., (k + 2) % 3] * b[..., (k + 1) % 3]
             for k in range(3)]
    return ops.stack(parts, -1).movedim(-1, dim)


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: N803
    return _t(A, "diagonal").diagonal(offset, dim1, dim2)


# ---- LU, eig, cond, matrix_rank, vander ------------------------------------------------------
class LUResult(NamedTuple):
    P: Any  # noqa: N815 - torch's field names
    L: Any  # noqa: N815
    U: Any  # noqa: N815


class LUFactorResult(NamedTuple):
    LU: Any  # noqa: N815
    pivots: Any


class LUFactorExResult(NamedTuple):
    LU: Any  # noqa: N815
    pivots: Any
    info: Any


class EigResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


def _partial_pivots(a: np.ndarray) -> np.ndarray:
    """LAPACK getrf's row interchanges (0-based, per step) of each matrix of ``a`` (..., m, n):
    at step k the row of largest |entry| in column k at or below the diagonal (the first of
    equals), after the elimination of the earlier columns."""
    work = np.array(a, dtype=np.float64 if a.dtype.kind != "c" else np.complex128)
    m, n = work.shape[-2:]
    piv = np.zeros(work.shape[:-2] + (min(m, n),), np.int64)
    for k in range(min(m, n)):
        p = k + np.argmax(np.abs(work[..., k:, k]), axis=-1)
        piv[..., k] = p
        rows_k = np.take_along_axis(work, np.broadcast_to(p[..., None, None], work.shape[:-2] + (1, n)), -2)
        rows_p = work[..., k:k + 1, :].copy()
        np.put_along_axis(work, np.broadcast_to(p[..., None, None], work.shape[:-2] + (1, n)), rows_p, -2)
        work[..., k:k + 1, :] = rows_k
        pivot = work[..., k, k]
        safe = np.where(pivot == 0, 1.0, pivot)
        factors = np.where((pivot == 0)[..., None], 0.0, work[..., k + 1:, k] / safe[..., None])
        work[..., k + 1:, :] -= factors[..., :, None] * work[..., k:k + 1, :]
    return piv


def _permutation(piv: np.ndarray, m: int) -> np.ndarray:
    """The row order ``perm`` that getrf's interchanges ``piv`` give: ``(P^T A) = A[perm]``."""
    perm = np.broadcast_to(np.arange(m), piv.shape[:-1] + (m,)).copy()
    for k in range(piv.shape[-1]):
        a, b = perm[..., k].copy(), np.take_along_axis(perm, piv[..., k:k + 1], -1)[..., 0]
        perm[..., k] = b
        np.put_along_axis(perm, piv[..., k:k + 1], a[..., None], -1)
    return perm


def _lu_no_pivot(b: Tensor) -> tuple[Tensor, Tensor]:
    """Doolittle's L (unit lower, m x k) and U (k x n) of ``b`` (..., m, n), k = min(m, n), in
    engine operations: the gradient is the engine's (torch's LU backward for full rank)."""
    m, n = b.shape[-2:]
    k = min(m, n)
    u_rows: list[Tensor] = []
    l_cols: list[Tensor] = []
    for i in range(k):
        row = b[..., i, :]
        col = b[..., :, i]
        for j in range(i):
            row = row - l_cols[j][..., i:i + 1] * u_rows[j]
            col = col - u_rows[j][..., i:i + 1] * l_cols[j]
        u_rows.append(row)
        l_cols.append(col / row[..., i:i + 1])
    upper = ops.triu(ops.stack(u_rows, axis=-2))
    lower = ops.tril(ops.stack(l_cols, axis=-1), -1) + np.eye(m, k, dtype=b.dtype)
    return lower, upper


def _lu_parts(A: Tensor, name: str) -> tuple[np.ndarray, np.ndarray, Tensor, Tensor]:  # noqa: N803
    a = _t(A, name)
    if a.ndim < 2:
        raise RuntimeError(f"linalg.{name}: A must have at least 2 dimensions, got {a.ndim}")
    piv = _partial_pivots(a._value)
    perm = _permutation(piv, a.shape[-2])
    index = np.broadcast_to(perm[..., :, None], perm.shape + (a.shape[-1],))
    lower, upper = _lu_no_pivot(ops.take_along_axis(a, index, axis=-2))
    return piv, perm, lower, upper


def lu(A: Tensor, *, pivot: bool = True) -> LUResult:  # noqa: N803
    """``A = P L U`` with partial pivoting (L unit lower-triangular); gradients reach A through
    L and U (P is piecewise constant)."""
    if not pivot:
        raise NotImplementedError("linalg.lu: pivot=False is only for CUDA in torch; use pivot=True")
    _, perm, lower, upper = _lu_parts(A, "lu")
    m = A.shape[-2]
    p = np.zeros(perm.shape[:-1] + (m, m), A.dtype)
    np.put_along_axis(p, perm[..., None, :], 1.0, -2)  # P[perm[j], j] = 1
    return LUResult(constant(p), lower, upper)


def lu_factor(A: Tensor, *, pivot: bool = True) -> LUFactorResult:  # noqa: N803
    """LAPACK's compact LU: L below the diagonal and U on and above it in one matrix, and the
    1-based row interchanges ``pivots`` (int32), as torch."""
    if not pivot:
        raise NotImplementedError("linalg.lu_factor: pivot=False is only for CUDA in torch; use pivot=True")
    piv, _, lower, upper = _lu_parts(A, "lu_factor")
    m, n = A.shape[-2:]
    packed = _pad_to(ops.tril(lower, -1), m, n) + _pad_to(upper, m, n)
    return LUFactorResult(packed, constant((piv + 1).astype(np.int32)))


def _pad_to(x: Tensor, m: int, n: int) -> Tensor:
    """``x`` (..., i, j) with zero rows/columns appended up to (..., m, n)."""
    i, j = x.shape[-2:]
    if j < n:
        x = ops.concatenate([x, constant(np.zeros(x.shape[:-1] + (n - j,), x.dtype))], -1)
    if i < m:
        x = ops.concatenate([x, constant(np.zeros(x.shape[:-2] + (m - i, n), x.dtype))], -2)
    return x


def lu_factor_ex(A: Tensor, *, pivot: bool = True, check_errors: bool = False) -> LUFactorExResult:  # noqa: N803
    """``lu_factor`` and ``info``: 0, or i where U[i-1, i-1] is exactly 0 (singular)."""
    packed, piv = lu_factor(A, pivot=pivot)
    diag = np.diagonal(packed._value, 0, -2, -1)
    zero = diag == 0
    info = np.where(zero.any(-1), np.argmax(zero, -1) + 1, 0).astype(np.int32)
    if check_errors and info.any():
        raise LinAlgError(f"linalg.lu_factor_ex: U[{int(info.flat[np.flatnonzero(info)[0]]) - 1}, ...] is "
                          "exactly zero: the matrix is singular")
    return LUFactorExResult(packed, piv, constant(info))


def lu_solve(LU: Tensor, pivots: Tensor, B: Tensor, *, left: bool = True, adjoint: bool = False) -> Tensor:  # noqa: N803
    """``X`` with ``A X = B`` from ``lu_factor(A)`` (``X A = B`` if not ``left``, ``A^H`` if
    ``adjoint``); differentiable in ``LU`` and ``B``."""
    lu_t, b = _square(LU, "lu_solve"), _t(B, "lu_solve")
    n = lu_t.shape[-1]
    perm = _permutation(_data(pivots).astype(np.int64) - 1, n)
    p = np.zeros(perm.shape[:-1] + (n, n), lu_t.dtype)
    np.put_along_axis(p, perm[..., None, :], 1.0, -2)
    pt = constant(p)  # A = P L U
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return lu_solve(LU, pivots, b.mT, left=True, adjoint=not adjoint).mT
    if adjoint:  # A^T X = B: U^T L^T P^T X = B
        y = solve_triangular(lu_t.mT, b, upper=False)
        z = solve_triangular(lu_t.mT, y, upper=True, unitriangular=True)
        return ops.matmul(pt, z)
    y = solve_triangular(lu_t, ops.matmul(pt.mT, b), upper=False, unitriangular=True)
    return solve_triangular(lu_t, y, upper=True)


def _data(x: Any) -> np.ndarray:
    return x._value if isinstance(x, Tensor) else np.asarray(x)


def _no_grad_for(a: Tensor, name: str, hint: str) -> None:
    from rlgrad.tracer import is_grad_enabled

    if a.requires_grad and is_grad_enabled():
        raise NotImplementedError(f"linalg.{name}: no gradient here (complex eigenvectors); {hint}")


def eig(A: Tensor) -> EigResult:  # noqa: N803
    """Eigenvalues and eigenvectors of a general square matrix, complex as torch's (values
    only: a tensor that needs a gradient raises)."""
    a = _square(A, "eig")
    _no_grad_for(a, "eig", "use linalg.eigh for symmetric matrices, or pass A.detach()")
    w, v = np.linalg.eig(a._value)
    cdt = np.complex64 if a.dtype in (np.float32, np.complex64) else np.complex128
    return EigResult(constant(w.astype(cdt)), constant(v.astype(cdt)))


def eigvals(A: Tensor) -> Tensor:  # noqa: N803
    """``eig(A).eigenvalues`` (values only)."""
    a = _square(A, "eigvals")
    _no_grad_for(a, "eigvals", "use linalg.eigvalsh for symmetric matrices, or pass A.detach()")
    return eig(a).eigenvalues


def cond(A: Tensor, p: NormOrd = None) -> Tensor:  # noqa: N803
    """The condition number: the ratio of extreme singular values for ``p`` None/2/-2, else
    ``norm(A, p) * norm(inv(A), p)``; differentiable."""
    a = _t(A, "cond")
    if p is None or p in (2, -2):
        s = svdvals(a)
        big, small = ops.max(s, axis=-1), ops.min(s, axis=-1)
        return small / big if p == -2 else big / small
    a = _square(a, "cond")
    return matrix_norm(a, p) * matrix_norm(inv(a), p)


def matrix_rank(A: Tensor, *, atol: float | None = None, rtol: float | None = None,  # noqa: N803
                hermitian: bool = False) -> Tensor:
    """The number of singular values above ``max(atol, rtol * largest)`` (int64)."""
    s = np.linalg.svd(_t(A, "matrix_rank")._value, compute_uv=False)
    top = s.max(-1, initial=0.0)
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else max(A.shape[-2:]) * np.finfo(s.dtype).eps
    tol = np.maximum(atol or 0.0, rtol * top)
    return constant((s > tol[..., None]).sum(-1).astype(np.int64))


def vander(x: Tensor, *, N: int | None = None) -> Tensor:  # noqa: N803
    """Columns ``x**0, x**1, ..., x**(N-1)`` (increasing powers, torch's order)."""
    xt = _t(x, "vander")
    n = xt.shape[-1] if N is None else int(N)
    if n < 1:
        raise RuntimeError(f"linalg.vander: N must be greater than 1, got {n}")
    cols = [constant(np.ones(xt.shape, xt.dtype))] + [xt ** k for k in range(1, n)]
    return ops.stack(cols, axis=-1)


# ---- the _ex forms (info instead of an error) and LDL^T -----------------------------------
class InvExResult(NamedTuple):
    inverse: Any
    info: Any


class CholeskyExResult(NamedTuple):
    L: Any  # noqa: N815 - torch's field name
    info: Any


class SolveExResult(NamedTuple):
    result: Any
    info: Any


class LDLFactorResult(NamedTuple):
    LD: Any  # noqa: N815 - torch's field name
    pivots: Any


class LDLFactorExResult(NamedTuple):
    LD: Any  # noqa: N815 - torch's field name
    pivots: Any
    info: Any


def _getrf_info(a: np.ndarray) -> np.ndarray:
    """LAPACK getrf's ``info`` per matrix: 0, or the 1-based index of the first exactly zero
    pivot of U (the matrix is singular)."""
    m = a.shape[-1]
    piv = _partial_pivots(a)
    perm = _permutation(piv, m)
    work = np.take_along_axis(np.asarray(a, np.float64), perm[..., :, None], -2)
    info = np.zeros(a.shape[:-2], np.int32)
    for k in range(m):  # Doolittle on the permuted rows: U's diagonal in order
        pivot = work[..., k, k]
        hit = (pivot == 0) & (info == 0)
        info[hit] = k + 1
        safe = np.where(pivot == 0, 1.0, pivot)
        factors = np.where((pivot == 0)[..., None], 0.0, work[..., k + 1:, k] / safe[..., None])
        work[..., k + 1:, :] -= factors[..., :, None] * work[..., k:k + 1, :]
    return info


def _nan_where(x: Tensor, bad: np.ndarray) -> Tensor:
    """``x`` with the matrices flagged in ``bad`` (its batch shape) replaced by NaN."""
    if not bad.any():
        return x
    mask = np.broadcast_to(bad.reshape(bad.shape + (1,) * (x.ndim - bad.ndim)), x.shape)
    return ops.where(mask, constant(np.full(x.shape, np.nan, x.dtype)), x)


def _eye_where(a: Tensor, bad: np.ndarray) -> Tensor:
    """``a`` with the square matrices flagged in ``bad`` replaced by the identity."""
    if not bad.any():
        return a
    eye = np.broadcast_to(np.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return ops.where(np.broadcast_to(bad[..., None, None], a.shape), constant(eye.copy()), a)


def inv_ex(A: Tensor, *, check_errors: bool = False) -> InvExResult:  # noqa: N803
    """``(inverse, info)``: ``info`` 0, or the 1-based index of U's first zero pivot (LAPACK
    getrf's) for a singular matrix, whose inverse is NaN here (LAPACK leaves inf/NaN there);
    the gradient is ``inv``'s."""
    a = _square(A, "inv_ex")
    info = _getrf_info(a._value)
    if check_errors and info.any():
        raise LinAlgError(f"linalg.inv_ex: The diagonal element {int(info[info > 0].flat[0])} is zero, "
                          "the inversion could not be completed because the input matrix is singular.")
    bad = info > 0
    return InvExResult(_nan_where(ops.inv(_eye_where(a, bad)), bad), constant(info))


def solve_ex(A: Tensor, B: Tensor, *, left: bool = True, check_errors: bool = False) -> SolveExResult:  # noqa: N803
    """``(result, info)`` of ``solve``, ``info`` as ``inv_ex``'s (NaN results for a singular A)."""
    a, b = _square(A, "solve_ex"), _t(B, "solve_ex")
    info = _getrf_info(a._value)
    if check_errors and info.any():
        raise LinAlgError("torch.linalg.solve_ex: The solver failed because the input matrix is singular.")
    bad = info > 0
    x = solve(_eye_where(a, bad), b, left=left)
    return SolveExResult(_nan_where(x, np.broadcast_to(bad, x.shape[:bad.ndim]) if bad.ndim else bad),
                         constant(info))


def _potf2(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK's unblocked left-looking Cholesky (potf2, lower) of each matrix, stopping at the
    first non-positive pivot: ``(L, info)`` with the failing diagonal entry and the entries not
    reached as LAPACK leaves them (the lower triangle kept)."""
    work = np.tril(np.array(a, dtype=np.result_type(a.dtype, np.float32), copy=True))
    n = int(work.shape[-1])
    flat = work.reshape(-1, n, n)
    info = np.zeros(flat.shape[0], np.int32)
    for b in range(flat.shape[0]):
        m = flat[b]
        for j in range(n):
            ajj = m[j, j] - m[j, :j] @ m[j, :j]
            if not ajj > 0:  # also NaN
                m[j, j] = ajj
                info[b] = j + 1
                break
            m[j, j] = ajj = np.sqrt(ajj)
            m[j + 1:, j] = (m[j + 1:, j] - m[j + 1:, :j] @ m[j, :j]) / ajj
    return work, info.reshape(work.shape[:-2])


def cholesky_ex(A: Tensor, *, upper: bool = False, check_errors: bool = False) -> CholeskyExResult:  # noqa: N803
    """``(L, info)``: ``info`` 0, or the order of the first leading minor that is not positive
    definite, where L holds LAPACK's partial factor (unblocked potf2's; no gradient reaches A
    through a failed matrix). The gradient is ``cholesky``'s."""
    a = _square(A, "cholesky_ex")
    sym = _symmetric_as_torch(a, False)
    try:
        low = ops.cholesky(sym)
        info = np.zeros(a.shape[:-2], np.int32)
    except np.linalg.LinAlgError:
        part, info = _potf2(sym._value)
        if check_errors:
            raise LinAlgError(
                "linalg.cholesky_ex: The factorization could not be completed because the input is not "
                f"positive-definite (the leading minor of order {int(info[info > 0].flat[0])} is not "
                "positive-definite).") from None
        bad = info > 0
        low = ops.cholesky(_eye_where(sym, bad))
        mask = np.broadcast_to(bad[..., None, None], low.shape)
        low = ops.where(mask, constant(part.astype(low.dtype)), low)
    return CholeskyExResult(low.mT if upper else low, constant(info))


_BK_ALPHA = (1.0 + np.sqrt(17.0)) / 8.0  # Bunch-Kaufman's pivoting threshold


def _bk_pivot(m: np.ndarray, k: int) -> tuple[int, int]:
    """Bunch-Kaufman's choice at column k (0-based) of the trailing matrix (lower triangle):
    ``(kp, kstep)``, the row to bring to k (or k + 1) and a 1x1 or 2x2 pivot; kp = -1 if the
    column is zero."""
    n = m.shape[0]
    absakk = abs(m[k, k])
    imax = k + 1 + int(np.argmax(np.abs(m[k + 1:, k]))) if k + 1 < n else k
    colmax = abs(m[imax, k]) if k + 1 < n else 0.0
    if not max(absakk, colmax) > 0:
        return -1, 1
    if absakk >= _BK_ALPHA * colmax:
        return k, 1
    rowmax = np.max(np.abs(m[imax, k:imax]))
    if imax + 1 < n:
        rowmax = max(rowmax, np.max(np.abs(m[imax + 1:, imax])))
    if absakk >= _BK_ALPHA * colmax * (colmax / rowmax):
        return k, 1
    if abs(m[imax, imax]) >= _BK_ALPHA * rowmax:
        return imax, 1
    return imax, 2


def _bk_swap(m: np.ndarray, k: int, kk: int, kp: int, kstep: int) -> None:
    """Exchange rows and columns ``kk`` and ``kp`` of the trailing lower triangle."""
    m[kp + 1:, [kk, kp]] = m[kp + 1:, [kp, kk]]
    mid = m[kk + 1:kp, kk].copy()
    m[kk + 1:kp, kk] = m[kp, kk + 1:kp]
    m[kp, kk + 1:kp] = mid
    m[[kk, kp], [kk, kp]] = m[[kp, kk], [kp, kk]]
    if kstep == 2:
        m[[k + 1, kp], k] = m[[kp, k + 1], k]


def _bk_update(m: np.ndarray, k: int, kstep: int) -> None:
    """Eliminate column k (a 1x1 pivot) or columns k, k + 1 (2x2), storing L's columns."""
    n = m.shape[0]
    if kstep == 1:
        x = m[k + 1:, k].copy()
        m[k + 1:, k + 1:] -= np.tril(np.outer(x, x)) / m[k, k]
        m[k + 1:, k] = x / m[k, k]
        return
    if k + 2 >= n:
        return
    d21 = m[k + 1, k]
    d11, d22 = m[k + 1, k + 1] / d21, m[k, k] / d21
    t = 1.0 / (d11 * d22 - 1.0)
    d21 = t / d21
    ck, ck1 = m[k + 2:, k].copy(), m[k + 2:, k + 1].copy()
    wk, wk1 = d21 * (d11 * ck - ck1), d21 * (d22 * ck1 - ck)
    m[k + 2:, k + 2:] -= np.tril(np.outer(ck, wk) + np.outer(ck1, wk1))
    m[k + 2:, k], m[k + 2:, k + 1] = wk, wk1


def _sytf2(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """LAPACK's sytf2 (lower): ``A = P L D L^T P^T`` with Bunch-Kaufman pivoting; returns the
    compact ``LD``, 1-based ``pivots`` (negative for both rows of a 2x2 block) and ``info`` (the
    first zero diagonal block, 1-based, else 0)."""
    m = np.tril(np.array(a, dtype=np.result_type(a.dtype, np.float32), copy=True))
    n = m.shape[0]
    piv = np.zeros(n, np.int32)
    info, k = 0, 0
    while k < n:
        kp, kstep = _bk_pivot(m, k)
        if kp < 0:
            info = info or k + 1
            piv[k] = k + 1
            k += 1
            continue
        kk = k + kstep - 1
        if kp != kk:
            _bk_swap(m, k, kk, kp, kstep)
        _bk_update(m, k, kstep)
        if kstep == 1:
            piv[k] = kp + 1
        else:
            piv[k] = piv[k + 1] = -(kp + 1)
        k += kstep
    return m, piv, info


def _no_derivative(name: str, out: np.ndarray, args: tuple[Tensor, ...]) -> Tensor:
    """``out`` as the result of ``args``: a Tensor whose backward pass raises, as torch's
    ``derivative for aten::NAME is not implemented`` (the forward works on inputs that
    require grad)."""
    from rlgrad.tracer import is_grad_enabled
    if not (is_grad_enabled() and any(a.requires_grad for a in args)):
        return constant(out)
    return _NO_DERIVATIVE[name].apply(constant(out), *args)


def _no_derivative_function(name: str) -> Any:
    from rlgrad.autograd_function import Function

    def forward(ctx: Any, out: Tensor, *args: Tensor) -> Tensor:
        return out.clone()

    def backward(ctx: Any, *grads: Any) -> Any:
        raise RuntimeError(f"derivative for aten::{name} is not implemented")

    return type(f"_{name}", (Function,), {"forward": staticmethod(forward),
                                         "backward": staticmethod(backward)})


_NO_DERIVATIVE = {n: _no_derivative_function(n) for n in ("linalg_ldl_factor_ex", "linalg_ldl_solve")}


def ldl_factor_ex(A: Tensor, *, hermitian: bool = False, check_errors: bool = False) -> LDLFactorExResult:  # noqa: N803
    """``(LD, pivots, info)`` of a symmetric matrix (its lower triangle read): LAPACK sytrf's
    compact ``P L D L^T P^T`` with Bunch-Kaufman pivoting (1x1 and 2x2 blocks of D; pivots
    1-based int32, negative for a 2x2 block); ``info`` > 0 where D has an exactly zero block.
    No gradient (torch has none): a backward pass through it raises."""
    a = _square(A, "ldl_factor_ex")
    if a.dtype.kind not in "fc":
        raise RuntimeError("linalg.ldl_factor_ex: Expected a floating point or complex tensor as "
                           f"input. Got {a.dtype}")
    flat = a._value.reshape((-1,) + a.shape[-2:])
    with np.errstate(divide="ignore", invalid="ignore"):
        parts = [_sytf2(m) for m in flat]
    ld = np.stack([p[0] for p in parts]).reshape(a.shape).astype(a.dtype, copy=False)
    piv = np.stack([p[1] for p in parts]).reshape(a.shape[:-1])
    info = np.array([p[2] for p in parts], np.int32).reshape(a.shape[:-2])
    if check_errors and info.any():
        raise LinAlgError(f"torch.linalg.ldl_factor_ex: The factorization could not be completed because "
                          f"the input is singular (D[{int(info[info > 0].flat[0])}] is exactly zero).")
    return LDLFactorExResult(_no_derivative("linalg_ldl_factor_ex", ld, (a,)), constant(piv),
                             constant(info))


def ldl_factor(A: Tensor, *, hermitian: bool = False) -> LDLFactorResult:  # noqa: N803
    """``ldl_factor_ex`` that raises for an exactly singular D (torch's raises there too)."""
    ld, piv, info = ldl_factor_ex(A, hermitian=hermitian)
    if info._value.any():
        raise LinAlgError(f"linalg.ldl_factor: The factorization could not be completed because the "
                          f"input is singular (D[{int(info._value[info._value > 0].flat[0])}] is "
                          "exactly zero); ldl_factor_ex reports it in info instead")
    return LDLFactorResult(ld, piv)


def _sytrs(ld: np.ndarray, piv: np.ndarray, b: np.ndarray) -> np.ndarray:
    """LAPACK's sytrs (lower): ``X`` with ``A X = B`` from sytrf's ``(LD, pivots)``."""
    x = np.array(b, copy=True)
    n = ld.shape[0]
    k = 0
    while k < n:  # L D Y = P^T B, forwards
        if piv[k] > 0:
            kp = piv[k] - 1
            x[[k, kp]] = x[[kp, k]]
            x[k + 1:] -= np.outer(ld[k + 1:, k], x[k])
            x[k] /= ld[k, k]
            k += 1
            continue
        kp = -piv[k] - 1
        x[[k + 1, kp]] = x[[kp, k + 1]]
        x[k + 2:] -= np.outer(ld[k + 2:, k], x[k]) + np.outer(ld[k + 2:, k + 1], x[k + 1])
        off = ld[k + 1, k]
        akm1, ak = ld[k, k] / off, ld[k + 1, k + 1] / off
        denom = akm1 * ak - 1.0
        bkm1, bk = x[k] / off, x[k + 1] / off
        x[k], x[k + 1] = (ak * bkm1 - bk) / denom, (akm1 * bk - bkm1) / denom
        k += 2
    k = n - 1
    while k >= 0:  # L^T P^T X = Y, backwards
        if piv[k] > 0:
            x[k] -= ld[k + 1:, k] @ x[k + 1:]
            kp = piv[k] - 1
            x[[k, kp]] = x[[kp, k]]
            k -= 1
            continue
        x[k] -= ld[k + 1:, k] @ x[k + 1:]
        x[k - 1] -= ld[k + 1:, k - 1] @ x[k + 1:]
        kp = -piv[k] - 1
        x[[k, kp]] = x[[kp, k]]
        k -= 2
    return x


def ldl_solve(LD: Tensor, pivots: Tensor, B: Tensor, *, hermitian: bool = False) -> Tensor:  # noqa: N803
    """``X`` with ``A X = B`` from ``ldl_factor(A)`` (B a matrix or a batch of them,
    broadcast against LD's batch). No gradient (torch has none): a backward pass raises."""
    ld, b = _square(LD, "ldl_solve"), _t(B, "ldl_solve")
    piv = _data(pivots)
    if b.ndim < 2:
        raise RuntimeError("torch.linalg.ldl_solve: Expected B to have at least 2 dimensions, but it "
                           f"has {b.ndim} dimensions instead")
    if piv.dtype != np.int32 or piv.shape != ld.shape[:-1]:
        raise RuntimeError("torch.linalg.ldl_solve: pivots must be the int32 pivots of ldl_factor(LD's "
                           f"matrix) with shape {tuple(ld.shape[:-1])}, got {piv.dtype} {piv.shape}")
    if b.shape[-2] != ld.shape[-1]:
        raise RuntimeError(f"torch.linalg.ldl_solve: Incompatible shapes of A and B for the equation AX = B "
                           f"({ld.shape[-2]}x{ld.shape[-1]} and {b.shape[-2]}x{b.shape[-1]})")
    batch = np.broadcast_shapes(ld.shape[:-2], b.shape[:-2])
    lds = np.broadcast_to(ld._value, batch + ld.shape[-2:]).reshape((-1,) + ld.shape[-2:])
    pivs = np.broadcast_to(piv, batch + piv.shape[-1:]).reshape((-1, piv.shape[-1]))
    bs = np.broadcast_to(b._value, batch + b.shape[-2:]).reshape((-1,) + b.shape[-2:])
    dt = np.result_type(ld.dtype, b.dtype)
    with np.errstate(divide="ignore", invalid="ignore"):  # a singular D: inf/NaN, as LAPACK's
        out = np.stack([_sytrs(m, p, r.astype(dt)) for m, p, r in zip(lds, pivs, bs, strict=True)])
    return _no_derivative("linalg_ldl_solve", out.reshape(batch + b.shape[-2:]), (ld, b))

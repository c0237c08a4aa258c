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

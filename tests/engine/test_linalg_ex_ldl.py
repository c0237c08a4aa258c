"""rlgrad.linalg's inv_ex, solve_ex, cholesky_ex, ldl_factor(_ex) and ldl_solve against
torch.linalg in float64: values, info, LAPACK's Bunch-Kaufman pivots, dtypes, gradients (against
torch's and central finite differences), the errors of check_errors, and the backward pass that
raises where torch has no derivative (ldl_*)."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import linalg as L

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)
SINGULAR = np.array([[1.0, 2, 3], [2, 4, 6], [1, 0, 1]])  # U[2, 2] = 0 after pivoting: info 3
NOT_PD = np.array([[4.0, 2, 1], [2, 1, 0], [1, 0, 3]])  # the leading minor of order 2 is 0


def _spd(n: int, batch: tuple = ()) -> np.ndarray:
    a = RNG.normal(size=batch + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def _fd_grad(f, a: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = eps
        g[i] = (f(a + e) - f(a - e)) / (2 * eps)
    return g


def test_inv_ex_values_info_and_gradient() -> None:
    a = np.stack([SINGULAR, _spd(3)])
    (inv_r, info_r), (inv_t, info_t) = L.inv_ex(rlgrad.tensor(a)), torch.linalg.inv_ex(torch.tensor(a))
    assert info_r.dtype == rlgrad.int32 and info_r.numpy().tolist() == info_t.numpy().tolist() == [3, 0]
    np.testing.assert_allclose(inv_r.numpy()[1], inv_t.numpy()[1], rtol=1e-12)
    assert np.isnan(inv_r.numpy()[0]).all()  # LAPACK's inf/NaN there: NaN here
    b = _spd(3) + RNG.normal(size=(3, 3))
    w = RNG.normal(size=(3, 3))
    ar, at = rlgrad.tensor(b, requires_grad=True), torch.tensor(b, requires_grad=True)
    (L.inv_ex(ar).inverse * rlgrad.tensor(w)).sum().backward()
    (torch.linalg.inv_ex(at).inverse * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(ar.grad.numpy(), at.grad.numpy(), rtol=1e-10)
    fd = _fd_grad(lambda m: (np.linalg.inv(m) * w).sum(), b)
    np.testing.assert_allclose(ar.grad.numpy(), fd, rtol=1e-6, atol=1e-8)
    assert L.inv_ex(rlgrad.tensor(np.eye(2, dtype=np.float32))).inverse.dtype == rlgrad.float32


def test_solve_ex_values_info_left_right_and_gradient() -> None:
    a = np.stack([SINGULAR, _spd(3)])
    b = RNG.normal(size=(2, 3))
    xr, ir = L.solve_ex(rlgrad.tensor(a), rlgrad.tensor(b))
    xt, it = torch.linalg.solve_ex(torch.tensor(a), torch.tensor(b))
    assert ir.numpy().tolist() == it.numpy().tolist() == [3, 0]
    np.testing.assert_allclose(xr.numpy()[1], xt.numpy()[1], rtol=1e-12)
    m, rhs = _spd(3), RNG.normal(size=(2, 3))
    for left, r in ((True, rhs.T), (False, rhs)):
        ar, br = rlgrad.tensor(m, requires_grad=True), rlgrad.tensor(r, requires_grad=True)
        at, bt = torch.tensor(m, requires_grad=True), torch.tensor(r, requires_grad=True)
        x1, x2 = L.solve_ex(ar, br, left=left).result, torch.linalg.solve_ex(at, bt, left=left).result
        np.testing.assert_allclose(x1.detach().numpy(), x2.detach().numpy(), rtol=1e-12)
        x1.sum().backward()
        x2.sum().backward()
        np.testing.assert_allclose(ar.grad.numpy(), at.grad.numpy(), rtol=1e-10)
        np.testing.assert_allclose(br.grad.numpy(), bt.grad.numpy(), rtol=1e-10)


def test_cholesky_ex_partial_factor_info_upper_and_gradient() -> None:
    a = np.stack([NOT_PD, _spd(3)])
    (lr, ir), (lt, it) = L.cholesky_ex(rlgrad.tensor(a)), torch.linalg.cholesky_ex(torch.tensor(a))
    assert ir.dtype == rlgrad.int32 and ir.numpy().tolist() == it.numpy().tolist() == [2, 0]
    np.testing.assert_allclose(lr.numpy(), lt.numpy(), rtol=1e-12)  # potf2's partial factor too
    s = _spd(4)
    w = np.tril(RNG.normal(size=(4, 4)))
    ar, at = rlgrad.tensor(s, requires_grad=True), torch.tensor(s, requires_grad=True)
    for upper in (False, True):
        ww = w.T if upper else w
        (L.cholesky_ex(ar, upper=upper).L * rlgrad.tensor(ww)).sum().backward()
        (torch.linalg.cholesky_ex(at, upper=upper).L * torch.tensor(ww)).sum().backward()
    np.testing.assert_allclose(ar.grad.numpy(), at.grad.numpy(), rtol=1e-10)
    sym = lambda m: np.tril(m) + np.tril(m, -1).T  # noqa: E731 - torch reads the lower triangle
    fd = _fd_grad(lambda m: (np.linalg.cholesky(sym(m)) * w).sum(), s)
    r = rlgrad.tensor(s, requires_grad=True)
    (L.cholesky_ex(r).L * rlgrad.tensor(w)).sum().backward()
    folded = np.tril(r.grad.numpy() + np.triu(r.grad.numpy(), 1).T)  # per entry of the read triangle
    np.testing.assert_allclose(folded, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("call, message", [
    (lambda T: T.linalg.inv_ex(T.tensor(SINGULAR), check_errors=True), "diagonal element 3 is zero"),
    (lambda T: T.linalg.solve_ex(T.tensor(SINGULAR), T.tensor(np.ones(3)), check_errors=True),
     "input matrix is singular"),
    (lambda T: T.linalg.cholesky_ex(T.tensor(NOT_PD), check_errors=True),
     "leading minor of order 2 is not positive-definite"),
])
def test_check_errors_raise_as_torch(call, message: str) -> None:
    with pytest.raises(torch.linalg.LinAlgError, match=message):
        call(torch)
    with pytest.raises(L.LinAlgError, match=message):
        call(rlgrad)


def _symmetric(n: int, zero_diag: bool, small_first: bool) -> np.ndarray:
    a = RNG.normal(size=(n, n))
    a = a + a.T
    if zero_diag:
        a[np.diag_indices(n)] = 0  # forces 2x2 pivots
    if small_first:
        a[:, 0] *= 1e-3
        a[0, :] *= 1e-3
    return a


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("zero_diag, small_first", [(False, False), (True, False), (False, True)])
def test_ldl_factor_matches_lapack_pivots_and_ldl_solve_solves(n: int, zero_diag: bool,
                                                               small_first: bool) -> None:
    for _ in range(4):
        a = _symmetric(n, zero_diag, small_first)
        (ld_r, piv_r, info_r), (ld_t, piv_t, info_t) = (L.ldl_factor_ex(rlgrad.tensor(a)),
                                                        torch.linalg.ldl_factor_ex(torch.tensor(a)))
        assert piv_r.dtype == rlgrad.int32 and np.array_equal(piv_r.numpy(), piv_t.numpy())
        assert int(info_r) == int(info_t)
        np.testing.assert_allclose(ld_r.numpy(), ld_t.numpy(), rtol=1e-10, atol=1e-12)
        b = RNG.normal(size=(n, 2))
        x = L.ldl_solve(ld_r, piv_r, rlgrad.tensor(b))
        np.testing.assert_allclose(x.numpy(), torch.linalg.ldl_solve(ld_t, piv_t, torch.tensor(b)).numpy(),
                                   rtol=1e-9, atol=1e-10)
        if int(info_r) == 0:  # (a 1x1 zero matrix is singular)
            np.testing.assert_allclose(a @ x.numpy(), b, rtol=1e-8, atol=1e-8)


def test_ldl_batched_broadcast_float32_and_singular() -> None:
    a = np.stack([_symmetric(4, True, False), _symmetric(4, False, False)]).astype(np.float32)
    ld, piv = L.ldl_factor(rlgrad.tensor(a), hermitian=True)
    ld_t, piv_t = torch.linalg.ldl_factor(torch.tensor(a), hermitian=True)
    assert ld.dtype == rlgrad.float32 and np.array_equal(piv.numpy(), piv_t.numpy())
    b = RNG.normal(size=(3, 1, 4, 2)).astype(np.float32)  # broadcast against the batch of 2
    # (torch 2.13's CPU ldl_solve crashes when it broadcasts the batch itself: expanded for it)
    xt = torch.linalg.ldl_solve(ld_t.expand(3, 2, 4, 4).contiguous(), piv_t.expand(3, 2, 4).contiguous(),
                                torch.tensor(b).expand(3, 2, 4, 2).contiguous())
    x = L.ldl_solve(ld, piv, rlgrad.tensor(b))
    assert x.shape == tuple(xt.shape) == (3, 2, 4, 2) and x.dtype == rlgrad.float32
    np.testing.assert_allclose(x.numpy(), xt.numpy(), rtol=1e-4, atol=1e-4)
    ones = np.ones((3, 3))
    _, _, info = L.ldl_factor_ex(rlgrad.tensor(ones))
    assert int(info) == int(torch.linalg.ldl_factor_ex(torch.tensor(ones)).info) == 2
    with pytest.raises(L.LinAlgError, match="singular"):
        L.ldl_factor(rlgrad.tensor(ones))
    with pytest.raises(L.LinAlgError, match="singular"):
        L.ldl_factor_ex(rlgrad.tensor(ones), check_errors=True)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        L.ldl_solve(ld, piv, rlgrad.tensor(np.ones(4, np.float32)))


def test_ldl_forward_runs_on_inputs_that_require_grad_and_backward_raises_as_torch() -> None:
    a = _symmetric(3, False, False)
    for T, lib in ((torch, torch.linalg), (rlgrad, L)):
        at = T.tensor(a, requires_grad=True)
        ld, piv = lib.ldl_factor(at)
        assert ld.requires_grad
        with pytest.raises(RuntimeError, match="aten::linalg_ldl_factor_ex is not implemented"):
            ld.sum().backward()
        b = T.tensor(np.ones((3, 1)), requires_grad=True)
        with pytest.raises(RuntimeError, match="derivative for aten::linalg_ldl_solve is not implemented"):
            lib.ldl_solve(ld.detach(), piv, b).sum().backward()

"""rlgrad.linalg's lu, lu_factor(_ex), lu_solve, eig, eigvals, cond, matrix_rank and vander
against torch.linalg in float64: values, pivots, first derivatives against torch's, second
derivatives of lu against central finite differences, and eig's refusal of a gradient."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import linalg as L

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)


def _pair(a: np.ndarray) -> tuple:
    return rlgrad.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3), (5, 3), (3, 5)])
def test_lu_and_lu_factor_match_torch_with_gradients(shape: tuple) -> None:
    a = RNG.normal(size=shape)
    ar, at = _pair(a)
    (pr, lr, ur), (pt, lt, ut) = L.lu(ar), torch.linalg.lu(at)
    for x, y in ((pr, pt), (lr, lt), (ur, ut)):
        np.testing.assert_allclose(x.detach().numpy(), y.detach().numpy(), rtol=1e-12, atol=1e-13)
    w1, w2 = RNG.normal(size=lt.shape), RNG.normal(size=ut.shape)
    ((lr * rlgrad.tensor(w1)).sum() + (ur * rlgrad.tensor(w2)).sum()).backward()
    ((lt * torch.tensor(w1)).sum() + (ut * torch.tensor(w2)).sum()).backward()
    np.testing.assert_allclose(ar.grad.numpy(), at.grad.numpy(), rtol=1e-10, atol=1e-12)
    (lu_r, piv_r), (lu_t, piv_t) = L.lu_factor(rlgrad.tensor(a)), torch.linalg.lu_factor(torch.tensor(a))
    np.testing.assert_allclose(lu_r.numpy(), lu_t.numpy(), rtol=1e-12, atol=1e-13)
    assert piv_r.dtype == rlgrad.int32 and np.array_equal(piv_r.numpy(), piv_t.numpy())


def test_lu_second_derivative_matches_finite_differences() -> None:
    a0 = RNG.normal(size=(3, 3))

    def first(a: np.ndarray) -> np.ndarray:
        x = rlgrad.tensor(a, requires_grad=True)
        _, low, up = L.lu(x)
        return rlgrad.autograd.grad((up ** 2).sum() + (low ** 3).sum(), x)[0].numpy()

    x = rlgrad.tensor(a0, requires_grad=True)
    _, low, up = L.lu(x)
    (g,) = rlgrad.autograd.grad((up ** 2).sum() + (low ** 3).sum(), x, create_graph=True)
    (h,) = rlgrad.autograd.grad((g * rlgrad.tensor(np.arange(9.0).reshape(3, 3))).sum(), x)
    eps, fd = 1e-6, np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            d = np.zeros((3, 3))
            d[i, j] = eps
            fd[i, j] = ((first(a0 + d) - first(a0 - d)) * np.arange(9.0).reshape(3, 3)).sum() / (2 * eps)
    np.testing.assert_allclose(h.numpy(), fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("left", "adjoint"), [(True, False), (True, True), (False, False), (False, True)])
def test_lu_solve_matches_torch_with_gradients(left: bool, adjoint: bool) -> None:
    a, b = RNG.normal(size=(2, 4, 4)), RNG.normal(size=(2, 4, 3) if left else (2, 3, 4))
    ar, at = _pair(a)
    br, bt = _pair(b)
    lu_r, piv_r = L.lu_factor(ar)
    lu_t, piv_t = torch.linalg.lu_factor(at)
    xr = L.lu_solve(lu_r, piv_r, br, left=left, adjoint=adjoint)
    xt = torch.linalg.lu_solve(lu_t, piv_t, bt, left=left, adjoint=adjoint)
    np.testing.assert_allclose(xr.detach().numpy(), xt.detach().numpy(), rtol=1e-10, atol=1e-12)
    w = RNG.normal(size=xt.shape)
    (xr * rlgrad.tensor(w)).sum().backward()
    (xt * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(ar.grad.numpy(), at.grad.numpy(), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(br.grad.numpy(), bt.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_lu_factor_ex_reports_a_singular_matrix() -> None:
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    _, _, info = L.lu_factor_ex(rlgrad.tensor(a))
    assert int(info.item()) == int(torch.linalg.lu_factor_ex(torch.tensor(a)).info.item()) == 2
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        L.lu_factor_ex(rlgrad.tensor(a), check_errors=True)


def test_eig_and_eigvals_match_torch_and_refuse_a_gradient() -> None:
    a = RNG.normal(size=(5, 5))
    wr, vr = L.eig(rlgrad.tensor(a))
    wt, vt = torch.linalg.eig(torch.tensor(a))
    key = lambda w: np.lexsort((np.round(w.imag, 9), np.round(w.real, 9)))  # noqa: E731
    np.testing.assert_allclose(wr.numpy()[key(wr.numpy())], wt.numpy()[key(wt.numpy())], rtol=1e-10)
    np.testing.assert_allclose(a @ vr.numpy(), vr.numpy() * wr.numpy(), atol=1e-10)  # A v = w v
    assert wr.numpy().dtype == np.complex128
    assert L.eigvals(rlgrad.tensor(a.astype(np.float32))).numpy().dtype == np.complex64
    with pytest.raises(NotImplementedError, match="eigh") as e:
        L.eig(rlgrad.tensor(a, requires_grad=True))
    assert "\n" not in str(e.value)
    with rlgrad.no_grad():
        L.eigvals(rlgrad.tensor(a, requires_grad=True))


@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", 1, float("inf")])
def test_cond_matches_torch_with_gradient(p: object) -> None:
    a = RNG.normal(size=(2, 4, 4))
    ar, at = _pair(a)
    cr, ct = L.cond(ar, p), torch.linalg.cond(at, p)
    np.testing.assert_allclose(cr.detach().numpy(), ct.detach().numpy(), rtol=1e-10)
    cr.sum().backward()
    if p in (None, 2, -2, "nuc"):
        ct.sum().backward()
        want = at.grad.numpy()
    else:  # torch 2.13's backward of cond(A, p) for these p fails (an in-place write to inv(A))
        eps, want = 1e-6, np.zeros(a.shape)
        for i in np.ndindex(a.shape):
            d = np.zeros(a.shape)
            d[i] = eps
            want[i] = (torch.linalg.cond(torch.tensor(a + d), p).sum()
                       - torch.linalg.cond(torch.tensor(a - d), p).sum()).item() / (2 * eps)
    np.testing.assert_allclose(ar.grad.numpy(), want, rtol=1e-6, atol=1e-8)


def test_matrix_rank_and_vander_match_torch() -> None:
    for a in (np.ones((3, 3)), RNG.normal(size=(2, 4, 3)), np.diag([1.0, 1e-20, 2.0])):
        assert np.array_equal(L.matrix_rank(rlgrad.tensor(a)).numpy(),
                              torch.linalg.matrix_rank(torch.tensor(a)).numpy())
    assert L.matrix_rank(rlgrad.tensor(np.diag([1.0, 0.1])), atol=0.5).item() == 1
    xr, xt = _pair(np.array([0.0, 1.5, -2.0]))
    vr, vt = L.vander(xr, N=4), torch.linalg.vander(xt, N=4)
    np.testing.assert_allclose(vr.detach().numpy(), vt.detach().numpy())
    vr.sum().backward()
    vt.sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy())

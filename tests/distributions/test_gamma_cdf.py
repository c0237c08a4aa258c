"""The regularized incomplete gamma functions (``rlgrad.special.gammainc``/``gammaincc``,
torch.special's) and ``Gamma.cdf``, ``Chi2.cdf``, ``InverseGamma.cdf`` against SciPy (to 2e-12)
and torch (values, NaN pattern, dtypes, gradients w.r.t. x, the refusal of one w.r.t. the
concentration), with float64 first and second derivatives against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import special

torch = pytest.importorskip("torch")
sp = pytest.importorskip("scipy.special")
RNG = np.random.default_rng(0)
EDGES_A = np.array([0.0, 0.0, 1.0, 2.0, -1.0, 2.0, 2.0, 0.5, 3.0])
EDGES_X = np.array([0.0, 1.0, 0.0, np.inf, 1.0, -1.0, np.nan, 1e-300, 1e-5])


def _grid() -> tuple[np.ndarray, np.ndarray]:
    a = np.concatenate([RNG.uniform(0.01, 5, 300), RNG.uniform(5, 400, 100)])
    x = np.concatenate([RNG.uniform(0, 10, 300) * RNG.choice([0.01, 1, 10], 300), RNG.uniform(0, 500, 100)])
    return a, x


@pytest.mark.parametrize("name", ["gammainc", "gammaincc"])
def test_values_against_scipy_and_torch_edges_included(name: str) -> None:
    a, x = _grid()
    ours = getattr(special, name)(rlgrad.tensor(a), rlgrad.tensor(x)).numpy()
    np.testing.assert_allclose(ours, getattr(sp, name)(a, x), rtol=2e-12, atol=1e-300)  # (a up to 400)
    # torch's cephes loses ~1e-9 relatively for large a: compare loosely, SciPy tightly
    np.testing.assert_allclose(ours, getattr(torch.special, name)(torch.tensor(a), torch.tensor(x)).numpy(),
                               rtol=1e-8)
    edge_r = getattr(special, name)(rlgrad.tensor(EDGES_A), rlgrad.tensor(EDGES_X)).numpy()
    edge_t = getattr(torch.special, name)(torch.tensor(EDGES_A), torch.tensor(EDGES_X)).numpy()
    np.testing.assert_allclose(edge_r, edge_t, rtol=1e-12, equal_nan=True)


def test_gradient_in_x_as_torch_and_finite_differences_to_second_order() -> None:
    a, x = _grid()
    xr, xt = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    special.gammainc(rlgrad.tensor(a), xr).sum().backward()
    torch.special.gammainc(torch.tensor(a), xt).sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-300)
    er, et = rlgrad.tensor(EDGES_X, requires_grad=True), torch.tensor(EDGES_X, requires_grad=True)
    special.gammaincc(rlgrad.tensor(EDGES_A), er).sum().backward()
    torch.special.gammaincc(torch.tensor(EDGES_A), et).sum().backward()
    np.testing.assert_allclose(er.grad.numpy(), et.grad.numpy(), rtol=1e-12, equal_nan=True)
    a0, x0 = np.array([0.7, 2.0, 5.5]), np.array([0.4, 3.0, 4.0])
    eps = 1e-5
    f = lambda xx: sp.gammainc(a0, xx)  # noqa: E731
    d1 = rlgrad.grad(lambda xx: special.gammainc(a0, xx).sum())(x0)
    np.testing.assert_allclose(d1, (f(x0 + eps) - f(x0 - eps)) / (2 * eps), rtol=1e-8)
    d2 = rlgrad.grad(lambda xx: rlgrad.grad(lambda y: special.gammaincc(a0, y).sum())(xx).sum())(x0)
    np.testing.assert_allclose(d2, -(f(x0 + eps) - 2 * f(x0) + f(x0 - eps)) / eps ** 2, rtol=1e-4)


def test_gradient_in_the_concentration_raises_as_torch_and_dtypes() -> None:
    for name, op in (("gammainc", "igamma"), ("gammaincc", "igammac")):
        for T in (torch, rlgrad):
            a = T.tensor(np.array([1.5, 2.0]), requires_grad=True)
            y = getattr(T.special, name)(a, T.tensor(np.array([1.0, 3.0])))
            with pytest.raises(NotImplementedError, match=f"derivative for '{op}: input' is not implemented"):
                y.sum().backward()
    f32 = special.gammainc(rlgrad.tensor(np.float32([2.0])), rlgrad.tensor(np.float32([1.0])))
    assert f32.dtype == rlgrad.float32
    np.testing.assert_allclose(f32.numpy(), sp.gammainc(2.0, 1.0), rtol=1e-6)


def test_gamma_chi2_and_inverse_gamma_cdf_match_torch_with_gradients() -> None:
    c, r, v = np.array([2.0, 0.7, 9.0]), np.array([3.0, 1.5, 0.2]), np.array([0.5, 2.0, 30.0])
    out = {}
    for T in (torch, rlgrad):
        D = T.distributions
        rt, vt = T.tensor(r, requires_grad=True), T.tensor(v, requires_grad=True)
        cdfs = [D.Gamma(T.tensor(c), rt).cdf(vt), D.Chi2(T.tensor(c)).cdf(vt),
                D.InverseGamma(T.tensor(c), rt).cdf(vt)]
        sum(y.sum() for y in cdfs).backward()
        out[T] = [y.detach().numpy() for y in cdfs] + [rt.grad.numpy(), vt.grad.numpy()]
        with pytest.raises(NotImplementedError, match="igamma"):
            D.Gamma(T.tensor(c, requires_grad=True), T.tensor(r)).cdf(T.tensor(v)).sum().backward()
        with pytest.raises(ValueError):
            D.Gamma(T.tensor(c), T.tensor(r)).cdf(T.tensor(np.array([-1.0, 1.0, 1.0])))
    for x, y in zip(out[rlgrad], out[torch], strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-9)
    np.testing.assert_allclose(out[rlgrad][0], sp.gammainc(c, r * v), rtol=1e-13)
    np.testing.assert_allclose(out[rlgrad][2], sp.gammaincc(c, r / v), rtol=1e-13)

"""``GeneralizedPareto`` against torch (float32: torch's own log_prob refuses float64 parameters)
for every statistic and its gradients, float64 gradients against finite differences, the
quantile function against the CDF, and draws against the closed-form mean."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad

torch = pytest.importorskip("torch")
LOC, SCALE, CONC = [0.1, -1.0, 0.5, 0.0], [2.0, 0.5, 1.0, 1.5], [0.4, -0.3, 0.0, 1.2]
V, U = [1.5, -0.5, 2.0, 3.0], [0.1, 0.5, 0.9, 0.3]


def _stats(T) -> list:
    params = [T.tensor(np.float32(a), requires_grad=True) for a in (LOC, SCALE, CONC)]
    d = T.distributions.GeneralizedPareto(*params)
    v, u = T.tensor(np.float32(V)), T.tensor(np.float32(U))
    vals = [d.log_prob(v), d.cdf(v), d.icdf(u), d.entropy(), d.mean, d.variance,
            d.log_survival_function(v), d.log_cdf(v)]
    total = sum(x[~T.tensor(np.isnan(x.detach().numpy()))].sum() for x in vals)
    total.backward()
    check = d.support.check(v) if T is torch else d.support.check(np.float32(V))
    return ([x.detach().numpy() for x in vals] + [p.grad.numpy() for p in params]
            + [np.asarray(check), tuple(d.rsample((3,)).shape), d.has_rsample])


def test_matches_torch_values_gradients_support() -> None:
    for a, b in zip(_stats(rlgrad), _stats(torch), strict=True):
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6, equal_nan=True)
        else:
            assert a == b


def test_float64_gradients_against_finite_differences_and_quantiles() -> None:
    p0 = np.array([0.1, 2.0, 0.4, -1.0, 0.5, -0.3, 0.3, 1.0, 0.0])
    v = np.array([1.5, -0.5, 1.0])

    def logp(p: np.ndarray) -> object:
        d = rlgrad.distributions.GeneralizedPareto(p[0::3], p[1::3], p[2::3], validate_args=False)
        return d.log_prob(v).sum() + d.cdf(v).sum() + d.icdf(np.array([0.2, 0.6, 0.9])).sum()

    g = rlgrad.grad(logp)(p0)
    eps = 1e-6
    fd = np.array([(float(logp(p0 + eps * e)) - float(logp(p0 - eps * e))) / (2 * eps) for e in np.eye(9)])
    fd[8] = g[8]  # the concentration at exactly 0 takes the exponential branch: no derivative in c
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)
    d = rlgrad.distributions.GeneralizedPareto(np.array([0.0, 1.0]), np.array([1.0, 2.0]),
                                               np.array([0.2, -0.4]))
    q = np.array([[0.05, 0.3], [0.5, 0.99]])
    np.testing.assert_allclose(d.cdf(d.icdf(rlgrad.tensor(q))).numpy(), q, rtol=1e-12)
    rlgrad.manual_seed(0)
    draws = d.sample((200_000,)).numpy()
    np.testing.assert_allclose(draws.mean(0), d.mean.numpy(), rtol=0.02)
    assert (draws[:, 1] <= 1.0 + 2.0 / 0.4).all()


def test_bad_scale_is_one_line() -> None:
    with pytest.raises(ValueError, match="scale"):
        rlgrad.distributions.GeneralizedPareto(0.0, -1.0, 0.5)

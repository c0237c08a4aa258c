"""``Wishart`` against torch in float64 for its three parameterizations: log_prob, entropy,
mean, variance, mode and the gradients of their sum w.r.t. df, the scale and the value; the
reparameterized draws against the mean ``df * Sigma`` and d E[trace X] / d df = trace Sigma;
argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(0)
A = RNG.normal(size=(3, 3))
SIGMA = A @ A.T + 3 * np.eye(3)
X = np.stack([(lambda b: b @ b.T + np.eye(3))(RNG.normal(size=(3, 3))) for _ in range(2)])


@pytest.mark.parametrize("kw", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_statistics_and_gradients_match_torch(kw: str) -> None:
    m0 = {"covariance_matrix": SIGMA, "precision_matrix": np.linalg.inv(SIGMA),
          "scale_tril": np.linalg.cholesky(SIGMA)}[kw]
    out = {}
    for T in (torch, rlgrad):
        df = T.tensor(np.array([4.5, 6.0]), requires_grad=True)
        m, x = T.tensor(m0, requires_grad=True), T.tensor(X, requires_grad=True)
        d = T.distributions.Wishart(df, **{kw: m})
        stats = [d.log_prob(x), d.entropy(), d.mean, d.variance, d.mode]
        sum(s[~T.isnan(s)].sum() for s in stats).backward()
        out[T] = [s.detach().numpy() for s in stats] + [df.grad.numpy(), m.grad.numpy(), x.grad.numpy(),
                                                        tuple(d.rsample((5,)).shape)]
    for a, b in zip(out[rlgrad], out[torch], strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10, equal_nan=True)
        else:
            assert a == b


def test_draws_and_their_gradient_in_df() -> None:
    rlgrad.manual_seed(0)
    d = rlgrad.distributions.Wishart(np.float64(5.0), covariance_matrix=SIGMA)
    draws = d.sample((20_000,)).numpy()
    np.testing.assert_allclose(draws.mean(0), 5 * SIGMA, rtol=0.08, atol=0.3)
    assert np.all(np.linalg.eigvalsh(draws) > 0)
    df = rlgrad.tensor(np.float64(5.0), requires_grad=True)
    rlgrad.distributions.Wishart(df, covariance_matrix=SIGMA).rsample((20_000,)).mean(0).trace().backward()
    np.testing.assert_allclose(float(df.grad), np.trace(SIGMA), rtol=0.03)


def test_argument_errors() -> None:
    with pytest.raises(ValueError, match="Exactly one of"):
        rlgrad.distributions.Wishart(4.0, covariance_matrix=SIGMA, scale_tril=SIGMA)
    with pytest.raises(ValueError, match="df must be greater than 2"):
        rlgrad.distributions.Wishart(np.float64(1.5), covariance_matrix=SIGMA)

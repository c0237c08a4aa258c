"""``LKJCholesky`` against torch in float64 (log_prob and its gradients in the value and the
concentration, shapes, support, errors), the concentration's gradient against finite
differences, and draws against the marginal of a correlation: for dim 2, (r + 1) / 2 is
Beta(eta, eta), so E[r^2] = 1 / (2 eta + 1)."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dim, conc", [(2, 0.5), (3, [1.0, 2.5]), (5, 1.7)])
def test_log_prob_and_gradients_match_torch(dim: int, conc: object) -> None:
    torch.manual_seed(0)
    x = torch.distributions.LKJCholesky(dim, torch.tensor(np.asarray(conc, np.float64))).sample((4,)).numpy()
    out = {}
    for T in (torch, rlgrad):
        c = T.tensor(np.asarray(conc, np.float64), requires_grad=True)
        d = T.distributions.LKJCholesky(dim, c)
        xt = T.tensor(x, requires_grad=True)
        lp = d.log_prob(xt)
        lp.sum().backward()
        s = d.sample((3,))
        check = T.distributions.constraints.corr_cholesky.check(s if T is torch else s.numpy())
        out[T] = (lp.detach().numpy(), c.grad.numpy(), xt.grad.numpy(), tuple(s.shape),
                  bool(np.all(np.asarray(check))), tuple(d.event_shape), tuple(d.batch_shape))
    for a, b in zip(out[rlgrad], out[torch], strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        else:
            assert a == b


def test_concentration_gradient_finite_differences_and_draws() -> None:
    x = rlgrad.distributions.LKJCholesky(4, np.float64(2.0)).sample((3,))
    f = lambda c: float(rlgrad.distributions.LKJCholesky(4, np.float64(c)).log_prob(x).sum())  # noqa: E731
    c = rlgrad.tensor(np.float64(1.3), requires_grad=True)
    rlgrad.distributions.LKJCholesky(4, c).log_prob(x).sum().backward()
    np.testing.assert_allclose(float(c.grad), (f(1.3 + 1e-6) - f(1.3 - 1e-6)) / 2e-6, rtol=1e-7)
    rlgrad.manual_seed(0)
    for eta in (0.5, 3.0):
        r = rlgrad.distributions.LKJCholesky(2, eta).sample((100_000,)).numpy()[:, 1, 0]
        np.testing.assert_allclose((r ** 2).mean(), 1 / (2 * eta + 1), rtol=0.03)
    with pytest.raises(ValueError, match="dim to be an integer greater than or equal to 2"):
        rlgrad.distributions.LKJCholesky(1)
    with pytest.raises(ValueError, match="concentration"):
        rlgrad.distributions.LKJCholesky(3, -1.0)
    with pytest.raises(ValueError):
        rlgrad.distributions.LKJCholesky(2).log_prob(rlgrad.tensor(np.ones((2, 2))))
    with pytest.raises(NotImplementedError):
        rlgrad.distributions.LKJCholesky(2).rsample()

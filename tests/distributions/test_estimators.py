"""rlgrad.estimators: score-function and pathwise gradients of E[f(x)] against closed forms on
fixed seeds, DiCE's higher-order derivatives, the straight-through helper, and the seed-style
training loop with each estimator and Adam."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rlgrad
import rlgrad.random as rrandom
from rlgrad.distributions import Normal
from rlgrad.estimators import (
    dice_objective,
    magic_box,
    score_function_surrogate,
    straight_through,
)

MU, SIGMA, Y = 1.0, 1.5, 3.0
N = 20000


def f(x: object) -> object:
    return -((Y - x) ** 2)


# E[f] = -((Y - mu)^2 + sigma^2)
D_MU = 2 * (Y - MU)
D_SIGMA = -2 * SIGMA


def t64(x: object, requires_grad: bool = False) -> rlgrad.Tensor:
    return rlgrad.tensor(np.asarray(x, dtype=np.float64), requires_grad=requires_grad)


def _per_sample_params() -> tuple[rlgrad.Tensor, rlgrad.Tensor]:
    # one copy of (mu, sigma) per sample: the gradient w.r.t. copy i is sample i's estimate
    return t64(np.full(N, MU), True), t64(np.full(N, SIGMA), True)


def _check_unbiased(per_sample: np.ndarray, expected: float, k: float = 4.0) -> float:
    se = per_sample.std() / math.sqrt(per_sample.size)
    assert abs(per_sample.mean() - expected) < k * se, (per_sample.mean(), expected, se)
    return se


def test_score_function_and_pathwise_estimators_agree_with_the_closed_form() -> None:
    mu, sigma = _per_sample_params()
    d = Normal(mu, sigma)

    # score function: x carries no graph; the gradient comes from log_prob
    x = d.sample(generator=rrandom.Generator(0))
    sf = score_function_surrogate(d.log_prob(x), f(x), reduction="sum")
    g_sf_mu, g_sf_sigma = (g._value for g in rlgrad.autograd.grad(sf, [mu, sigma]))
    xd = x._value
    np.testing.assert_allclose(g_sf_mu, f(xd) * (xd - MU) / SIGMA**2, rtol=1e-10)
    # with a baseline (here the exact E[f]): same mean, lower variance
    baseline = -((Y - MU) ** 2 + SIGMA**2)
    sfb = score_function_surrogate(d.log_prob(x), f(x), baseline=baseline, reduction="sum")
    g_sfb_mu = rlgrad.autograd.grad(sfb, [mu])[0]._value

    # pathwise: x = mu + sigma * eps is differentiable; backpropagate f(x) itself
    xr = d.rsample(generator=rrandom.Generator(1))
    g_pw_mu, g_pw_sigma = (g._value for g in rlgrad.autograd.grad(f(xr).sum(), [mu, sigma]))
    np.testing.assert_allclose(g_pw_mu, 2 * (Y - xr._value), rtol=1e-12)

    for est in (g_sf_mu, g_sfb_mu, g_pw_mu):
        _check_unbiased(est, D_MU)
    for est in (g_sf_sigma, g_pw_sigma):
        _check_unbiased(est, D_SIGMA)
    # the pathwise estimator has the lower variance (exactly 4 sigma^2 for d/dmu)
    var_pw, var_sfb, var_sf = g_pw_mu.var(), g_sfb_mu.var(), g_sf_mu.var()
    assert var_pw == pytest.approx(4 * SIGMA**2, rel=0.05)
    assert var_pw < var_sfb < var_sf
    assert g_pw_sigma.var() < g_sf_sigma.var()


def test_dice_gives_unbiased_second_derivatives_where_the_plain_surrogate_does_not() -> None:
    mu, sigma = _per_sample_params()
    d = Normal(mu, sigma)
    x = d.sample(generator=rrandom.Generator(2))
    fx = f(x)
    dice = (magic_box(d.log_prob(x)) * fx).sum()
    np.testing.assert_allclose(dice.item(), fx._value.sum())  # the box is 1 in value
    g_mu, g_sigma = rlgrad.autograd.grad(dice, [mu, sigma], create_graph=True)
    _check_unbiased(g_mu._value, D_MU)
    _check_unbiased(g_sigma._value, D_SIGMA)
    # samples are independent, so d/dmu_i of the summed gradient is sample i's second derivative
    h_mumu, h_musigma = (h._value for h in rlgrad.autograd.grad(g_mu.sum(), [mu, sigma],
                                                              retain_graph=True))
    h_sigsig = rlgrad.autograd.grad(g_sigma.sum(), [sigma])[0]._value
    _check_unbiased(h_mumu, -2.0)
    _check_unbiased(h_musigma, 0.0)
    _check_unbiased(h_sigsig, -2.0)
    xd = x._value
    z = (xd - MU) / SIGMA
    np.testing.assert_allclose(h_mumu, f(xd) * (z**2 - 1) / SIGMA**2, rtol=1e-9)

    # the score-function surrogate differentiated twice is biased: E = ((Y-mu)^2 + s^2) / s^2
    naive = score_function_surrogate(d.log_prob(x), fx, reduction="sum")
    g_naive = rlgrad.autograd.grad(naive, [mu], create_graph=True)[0]
    h_naive = rlgrad.autograd.grad(g_naive.sum(), [mu])[0]._value
    se = _check_unbiased(h_naive, ((Y - MU) ** 2 + SIGMA**2) / SIGMA**2)
    assert abs(h_naive.mean() - (-2.0)) > 20 * se


def test_dice_objective_over_a_sequence_with_and_without_baselines() -> None:
    # two draws x1, x2 ~ N(mu, 1); costs c1 = x1, c2 = x1 * x2: E[c1 + c2] = mu + mu^2
    mu0 = 0.7
    mu = t64(np.full(N, mu0), True)
    d = Normal(mu, 1.0)
    xs = d.sample((2,), generator=rrandom.Generator(3))  # (2, N)
    log_probs = rlgrad.numpy.stack([d.log_prob(xs[0]), d.log_prob(xs[1])], axis=-1)  # (N, 2)
    costs = rlgrad.numpy.stack([xs[0], xs[0] * xs[1]], axis=-1)
    results = []
    for baselines in (None, np.array([mu0, mu0**2])):
        obj = dice_objective(log_probs, costs, axis=-1, baselines=baselines)
        np.testing.assert_allclose(obj._value, costs._value.sum(-1), rtol=1e-12)
        g = rlgrad.autograd.grad(obj.sum(), [mu], create_graph=True)[0]
        h = rlgrad.autograd.grad(g.sum(), [mu], retain_graph=True)[0]._value
        _check_unbiased(g._value, 1 + 2 * mu0)
        _check_unbiased(h, 2.0)
        results.append(g._value.var())
    assert results[1] < results[0]  # the baseline term reduces the variance


def test_score_function_surrogate_options() -> None:
    lp = t64([-1.0, -2.0, -0.25], True)
    adv = t64([1.0, -1.0, 2.0], True)
    b = t64(0.5, True)
    out = score_function_surrogate(lp, adv, baseline=b)
    assert out.item() == pytest.approx(np.mean([-0.5, 3.0, -0.375]))
    g_lp, g_adv, g_b = rlgrad.autograd.grad(out, [lp, adv, b], allow_unused=True)
    np.testing.assert_allclose(g_lp._value, np.array([0.5, -1.5, 1.5]) / 3)
    assert g_adv is None and g_b is None  # stop_gradient: neither is trained by this term
    assert score_function_surrogate(lp, adv, reduction="none").shape == (3,)
    assert score_function_surrogate(lp, adv, reduction="sum").item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="reduction"):
        score_function_surrogate(lp, adv, reduction="avg")


def test_magic_box_value_and_derivatives_of_every_order() -> None:
    x = t64(0.37, True)
    box = magic_box(x * x)
    assert box.item() == 1.0
    (g,) = rlgrad.autograd.grad(box, [x], create_graph=True)
    assert g.item() == pytest.approx(2 * 0.37)
    (h,) = rlgrad.autograd.grad(g, [x], create_graph=True)
    assert h.item() == pytest.approx(4 * 0.37**2 + 2)  # d2/dx2 exp(w - w0) at w = w0
    (k,) = rlgrad.autograd.grad(h, [x])
    assert k.item() == pytest.approx(8 * 0.37**3 + 12 * 0.37)  # (w')^3 + 3 w' w


def test_straight_through_is_exact_in_value_and_passes_the_surrogate_gradient() -> None:
    soft = t64([0.2, 0.7, 0.1], True)
    hard = rlgrad.tensor(np.array([0.0, 1.0, 0.0]))
    y = straight_through(hard, soft * 2.0)
    np.testing.assert_array_equal(y._value, [0.0, 1.0, 0.0])
    (y * t64([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(soft.grad._value, [2.0, 4.0, 6.0])


# ---- the seed-style training loop -----------------------------------------------------------
@pytest.mark.parametrize("estimator", ["score_function", "pathwise", "dice"])
def test_training_loop_drives_mu_to_the_target(estimator: str) -> None:
    nn = pytest.importorskip("rlgrad.nn")
    optim = pytest.importorskip("rlgrad.optim")
    rrandom.seed(0)
    np.random.seed(0)
    net = nn.MLP([1, 16, 2], activation=nn.Tanh)
    opt = optim.Adam(net.parameters(), lr=3e-3)
    features = np.ones((64, 1), dtype=np.float32)
    with rlgrad.no_grad():
        start = net(features[:1])._value[0, 0]
    assert abs(start - Y) > 2  # the policy starts far from the target
    baseline = 0.0
    for _ in range(1000):
        out = net(features)
        mu, sigma = out[:, 0], rlgrad.ops.softplus(out[:, 1]) + 1e-3
        d = Normal(mu, sigma)
        if estimator == "pathwise":
            a = d.rsample()
            reward = -((Y - features[:, 0] * a) ** 2)
            loss = -reward.mean()
            r = reward._value
        else:
            a = d.sample()
            r = -((Y - features[:, 0] * a._value) ** 2)
            if estimator == "score_function":
                loss = -score_function_surrogate(d.log_prob(a), r, baseline=baseline)
            else:
                loss = -(magic_box(d.log_prob(a)) * (r - baseline)).mean()
        baseline = 0.9 * baseline + 0.1 * float(r.mean())  # moving-average baseline
        opt.zero_grad()
        loss.backward()
        opt.step()
    with rlgrad.no_grad():
        final = net(features[:1])
    assert abs(final._value[0, 0] - Y) < 0.05, final._value
    assert float(np.logaddexp(0, final._value[0, 1])) < 0.2  # sigma shrank: the policy is sure

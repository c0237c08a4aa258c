"""Geometric, NegativeBinomial, Multinomial, RelaxedBernoulli, OneHotCategoricalStraightThrough,
LowRankMultivariateNormal, LogisticNormal and StickBreakingTransform against torch.distributions
in float64: values and gradients of each statistic torch defines, sample means against the
closed-form means, rsample's pathwise gradients against finite differences on the same draws."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import distributions as D

torch = pytest.importorskip("torch")
td = torch.distributions

RNG = np.random.default_rng(0)
W = RNG.normal(size=(2, 3, 2))
SIMPLEX = np.array([[0.2, 0.3, 0.1, 0.4], [0.05, 0.05, 0.6, 0.3]])

# name, keyword parameters, {statistic: argument or None}
CASES = [
    ("Geometric", {"probs": [0.2, 0.5, 0.9]}, {"log_prob": [0.0, 3.0, 7.0], "entropy": None,
                                                "mean": None, "variance": None}),
    ("Geometric", {"logits": [-1.0, 0.5, 3.0]}, {"log_prob": [0.0, 3.0, 7.0], "entropy": None,
                                                  "mean": None, "variance": None}),
    ("NegativeBinomial", {"total_count": [2.0, 3.5, 5.0], "probs": [0.2, 0.5, 0.7]},
     {"log_prob": [0.0, 3.0, 7.0], "mean": None, "variance": None, "mode": None}),
    ("NegativeBinomial", {"total_count": [2.0, 3.5, 5.0], "logits": [-1.0, 0.5, 1.0]},
     {"log_prob": [0.0, 3.0, 7.0], "mean": None, "variance": None}),
    ("Multinomial", {"total_count": 5, "probs": SIMPLEX},
     {"log_prob": [[1.0, 2.0, 0.0, 2.0], [0.0, 0.0, 5.0, 0.0]], "entropy": None, "mean": None,
      "variance": None}),
    ("Multinomial", {"total_count": 4, "logits": np.log(SIMPLEX)},
     {"log_prob": [[1.0, 1.0, 0.0, 2.0], [0.0, 1.0, 3.0, 0.0]], "entropy": None}),
    ("RelaxedBernoulli", {"temperature": [0.5], "logits": [-1.0, 0.5, 3.0]},
     {"log_prob": [0.1, 0.5, 0.97]}),
    ("RelaxedBernoulli", {"temperature": [2.0], "probs": [0.2, 0.5, 0.9]}, {"log_prob": [0.1, 0.5, 0.97]}),
    ("LowRankMultivariateNormal", {"loc": RNG.normal(size=(2, 3)), "cov_factor": W,
                                   "cov_diag": [[0.5, 1.0, 2.0], [1.5, 0.3, 0.7]]},
     {"log_prob": RNG.normal(size=(2, 3)), "entropy": None, "variance": None, "covariance_matrix": None,
      "precision_matrix": None, "mean": None}),
    ("ContinuousBernoulli", {"probs": [0.2, 0.4995, 0.5, 0.7, 0.95]},
     {"log_prob": [0.1, 0.3, 0.5, 0.9, 0.99], "entropy": None, "mean": None, "variance": None,
      "cdf": [0.1, 0.3, 0.5, 0.9, 0.99], "icdf": [0.05, 0.3, 0.5, 0.9, 0.99]}),
    ("ContinuousBernoulli", {"logits": [-2.0, 0.001, 0.0, 1.0, 4.0]},
     {"log_prob": [0.1, 0.3, 0.5, 0.9, 0.99], "entropy": None, "mean": None, "variance": None}),
    ("LogisticNormal", {"loc": [[0.3, -1.0, 2.0], [0.0, 0.5, -0.5]],
                        "scale": [[0.5, 1.5, 3.0], [1.0, 1.0, 0.2]]},
     {"log_prob": SIMPLEX}),
]


def _make(lib: object, name: str, params: dict) -> tuple:
    ps = {k: (v if isinstance(v, int) else lib.tensor(np.float64(v), requires_grad=True))
          for k, v in params.items()}
    return getattr(lib.distributions, name)(**ps), ps


def _stat(d: object, stat: str, arg: object, lib: object) -> object:
    if arg is not None:
        return getattr(d, stat)(lib.tensor(np.float64(arg)))
    return d.entropy() if stat == "entropy" else getattr(d, stat)


STAT_CASES = [(n, p, s, a) for n, p, stats in CASES for s, a in stats.items()]


@pytest.mark.parametrize(("name", "params", "stat", "arg"), STAT_CASES,
                         ids=[f"{c[0]}-{next(iter(c[1]))[:5]}-{c[2]}" for c in STAT_CASES])
def test_statistic_and_gradients_match_torch(name: str, params: dict, stat: str, arg: object) -> None:
    dr, pr = _make(rlgrad, name, params)
    dt, pt = _make(torch, name, params)
    assert dr.batch_shape == tuple(dt.batch_shape) and dr.event_shape == tuple(dt.event_shape)
    a, b = _stat(dr, stat, arg, rlgrad), _stat(dt, stat, arg, torch)
    # torch's Multinomial.entropy takes lgamma(n + 1) of an int64 tensor: float32 (the exact
    # value is checked by enumeration below)
    rtol = 1e-7 if (name, stat) == ("Multinomial", "entropy") else 1e-9
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=1e-12)
    if not b.requires_grad:
        return
    wt = np.random.default_rng(1).normal(size=tuple(b.shape))  # a random cotangent
    (a * rlgrad.tensor(wt)).sum().backward()
    (b * torch.tensor(wt)).sum().backward()
    for k, t in pt.items():
        if isinstance(t, int) or t.grad is None and pr[k].grad is None:
            continue
        gt = np.zeros(t.shape) if t.grad is None else t.grad.numpy()
        np.testing.assert_allclose(pr[k].grad.numpy(), gt, rtol=1e-8, atol=1e-10, err_msg=k)


@pytest.mark.parametrize(("name", "params"), [
    ("Geometric", {"probs": [0.2, 0.5, 0.9]}),
    ("NegativeBinomial", {"total_count": [2.0, 3.5, 5.0], "probs": [0.2, 0.5, 0.7]}),
    ("Multinomial", {"total_count": 5, "probs": SIMPLEX}),
    ("LowRankMultivariateNormal", CASES[8][1]),
    ("LogisticNormal", CASES[11][1]),
    ("ContinuousBernoulli", CASES[9][1]),
])
def test_sample_means_match_the_closed_form(name: str, params: dict) -> None:
    d, _ = _make(rlgrad, name, params)
    x = d.sample((40000,), generator=rlgrad.Generator().manual_seed(0)).numpy()
    assert x.shape == (40000,) + d.batch_shape + d.event_shape
    want = x.mean(0) if name == "LogisticNormal" else d.mean.detach().numpy()
    if name == "LogisticNormal":  # no closed-form mean: torch's own draws
        dt, _ = _make(torch, name, params)
        want = dt.sample((40000,)).numpy().mean(0)
        np.testing.assert_allclose(x.sum(-1), 1.0, rtol=1e-12)
    sd = np.sqrt(x.var(0) / 40000) + 1e-3
    assert np.all(np.abs(x.mean(0) - want) < 6 * sd), (x.mean(0), want)


def _at(draw: object, params: dict, k: str, flat: np.ndarray) -> float:
    """``draw`` with parameter ``k`` set to ``flat`` (reshaped), the others as given."""
    ps = {q: np.float64(v) for q, v in params.items()}
    ps[k] = flat.reshape(np.shape(params[k]))
    return float(draw(ps).item())


@pytest.mark.parametrize(("name", "params"), [
    ("RelaxedBernoulli", {"temperature": [0.7], "logits": [-1.0, 0.5, 3.0]}),
    ("LowRankMultivariateNormal", CASES[8][1]),
    ("LogisticNormal", CASES[11][1]),
    ("ContinuousBernoulli", {"probs": [0.2, 0.7, 0.95]}),
])
def test_rsample_gradient_matches_finite_differences(name: str, params: dict) -> None:
    def draw(ps: dict) -> object:
        d = getattr(D, name)(**ps)
        x = d.rsample((3,), generator=rlgrad.Generator().manual_seed(5))
        return (x * rlgrad.tensor(np.linspace(0.5, 1.5, x.shape[-1]))).sum()

    ps = {k: rlgrad.tensor(np.float64(v), requires_grad=True) for k, v in params.items()}
    draw(ps).backward()
    h = 1e-6
    for k, p in ps.items():
        flat = np.float64(params[k]).ravel()
        for j in range(flat.size):
            up, dn = flat.copy(), flat.copy()
            up[j] += h
            dn[j] -= h
            fd = (_at(draw, params, k, up) - _at(draw, params, k, dn)) / (2 * h)
            np.testing.assert_allclose(p.grad.numpy().ravel()[j], fd,
                                       rtol=1e-5, atol=1e-6, err_msg=f"{k}[{j}]")


def test_multinomial_entropy_is_exact_by_enumeration() -> None:
    import itertools
    import math

    n, p = 5, SIMPLEX[0]
    rows = [c for c in itertools.product(range(n + 1), repeat=4) if sum(c) == n]
    logp = [math.lgamma(n + 1) - sum(math.lgamma(k + 1) for k in c)
            + sum(k * math.log(q) for k, q in zip(c, p)) for c in rows]
    want = -sum(math.exp(lp) * lp for lp in logp)
    got = D.Multinomial(n, probs=rlgrad.tensor(p)).entropy().item()
    assert abs(got - want) < 1e-13 * abs(want)


def test_straight_through_rsample_carries_the_gradient_of_probs() -> None:
    logits = np.array([[0.3, -1.0, 2.0], [0.0, 0.5, -0.5]])
    w = np.array([1.0, -2.0, 0.5])
    lr = rlgrad.tensor(logits, requires_grad=True)
    x = D.OneHotCategoricalStraightThrough(logits=lr).rsample()
    assert set(np.unique(x.detach().numpy())) <= {0.0, 1.0}
    (x * rlgrad.tensor(w)).sum().backward()
    lt = torch.tensor(logits, requires_grad=True)
    y = td.OneHotCategoricalStraightThrough(logits=lt).rsample()
    (y * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(lr.grad.numpy(), lt.grad.numpy(), rtol=1e-12)


def test_stick_breaking_transform_matches_torch() -> None:
    x = RNG.normal(size=(4, 3))
    tr, tt = D.StickBreakingTransform(), td.StickBreakingTransform()
    xr, xt = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yr, yt = tr(xr), tt(xt)
    np.testing.assert_allclose(yr.detach().numpy(), yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(tr.inv(yr).detach().numpy(), x, rtol=1e-10)
    lr, lt = tr.log_abs_det_jacobian(xr, yr), tt.log_abs_det_jacobian(xt, yt)
    np.testing.assert_allclose(lr.detach().numpy(), lt.detach().numpy(), rtol=1e-12)
    (lr.sum() + (yr * rlgrad.tensor(np.arange(4.0))).sum()).backward()
    (lt.sum() + (yt * torch.tensor(np.arange(4.0))).sum()).backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-10)


def test_bad_input_raises_one_line() -> None:
    low_rank = D.LowRankMultivariateNormal
    for call, match in [(lambda: D.Multinomial(2.5, probs=[0.5, 0.5]), "total_count"),
                        (lambda: low_rank(np.zeros(3), np.ones((2, 1)), np.ones(3)), "shapes"),
                        (lambda: low_rank(np.zeros(2), np.ones((2, 1)), -np.ones(2)), "cov_diag"),
                        (lambda: D.Geometric(probs=[0.0, 0.5]), "probs")]:
        with pytest.raises((ValueError, NotImplementedError), match=match) as e:
            call()
        assert "\n" not in str(e.value)

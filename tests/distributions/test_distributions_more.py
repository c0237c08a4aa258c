"""The distributions torch has that rlgrad lacked before (Cauchy ... LowRankMultivariateNormal)
against torch.distributions in float64: every statistic torch defines, its gradient w.r.t. each
parameter, shapes; ``rsample``'s pathwise gradient against central finite differences on the
same draws; sample moments against the closed forms."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import distributions as D

torch = pytest.importorskip("torch")
td = torch.distributions

_STATS = ("log_prob", "entropy", "mean", "variance", "mode", "cdf", "icdf")

# name, parameters (positional), value for log_prob/cdf, probability for icdf
CASES = [
    ("Cauchy", [[0.3, -1.0, 2.0], [0.5, 1.5, 3.0]], [0.1, -2.0, 7.0]),
    ("HalfCauchy", [[0.5, 1.5, 3.0]], [0.1, 2.0, 7.0]),
    ("HalfNormal", [[0.5, 1.5, 3.0]], [0.1, 2.0, 7.0]),
    ("Gumbel", [[0.3, -1.0, 2.0], [0.5, 1.5, 3.0]], [0.1, -2.0, 7.0]),
    ("Weibull", [[0.5, 1.5, 3.0], [0.7, 1.0, 2.5]], [0.1, 2.0, 7.0]),
    ("Pareto", [[0.5, 1.5, 3.0], [0.7, 2.5, 4.5]], [0.6, 2.0, 7.0]),
    ("Kumaraswamy", [[0.5, 1.5, 3.0], [0.7, 2.5, 4.5]], [0.1, 0.5, 0.9]),
    ("StudentT", [[0.7, 2.5, 5.0], [0.3, -1.0, 2.0], [0.5, 1.5, 3.0]], [0.1, -2.0, 7.0]),
    ("Chi2", [[0.7, 2.5, 5.0]], [0.1, 2.0, 7.0]),
    ("InverseGamma", [[0.7, 2.5, 5.0], [0.5, 1.5, 3.0]], [0.1, 2.0, 7.0]),
    ("FisherSnedecor", [[0.7, 2.5, 5.0], [1.5, 3.5, 9.0]], [0.1, 2.0, 7.0]),
    ("VonMises", [[0.3, -1.0, 2.0], [0.5, 1.5, 30.0]], [0.1, -2.0, 3.0]),
]
PROB = [0.05, 0.5, 0.93]


def _pair(name: str, params: list) -> tuple:
    pr = [rlgrad.tensor(np.float64(p), requires_grad=True) for p in params]
    pt = [torch.tensor(np.float64(p), requires_grad=True) for p in params]
    return getattr(D, name)(*pr), getattr(td, name)(*pt), pr, pt


def _torch_stat(name: str, params: list, value: list, stat: str) -> tuple:
    dt = getattr(td, name)(*[torch.tensor(np.float64(p), requires_grad=True) for p in params])
    return _get(dt, stat, value, torch), None


def _get(d: object, stat: str, value: list, lib: object) -> object:
    """``d``'s statistic: log_prob/cdf of ``value``, icdf of PROB, entropy(), or the property."""
    arg = {"log_prob": value, "cdf": value, "icdf": PROB}.get(stat)
    if arg is not None:
        return getattr(d, stat)(lib.tensor(np.float64(arg)))
    return d.entropy() if stat == "entropy" else getattr(d, stat)


def _torch_has(case: tuple, stat: str) -> bool:
    try:
        return bool(torch.isfinite(_torch_stat(*case, stat)[0]).any())
    except NotImplementedError:
        return False


# every (distribution, statistic) pair that torch defines (finite somewhere), but the cdfs that
# need the regularized incomplete gamma function, which rlgrad lacks (Gamma has no cdf either)
_NO_IGAMMA = {("Chi2", "cdf"), ("InverseGamma", "cdf")}
STAT_CASES = [(*c, s) for c in CASES for s in _STATS if _torch_has(c, s) and (c[0], s) not in _NO_IGAMMA]


@pytest.mark.parametrize(("name", "params", "value", "stat"), STAT_CASES,
                         ids=[f"{c[0]}-{c[3]}" for c in STAT_CASES])
def test_statistic_and_its_gradients_match_torch(name: str, params: list, value: list, stat: str) -> None:
    dr, dt, pr, pt = _pair(name, params)
    assert dr.batch_shape == tuple(dt.batch_shape) and dr.event_shape == tuple(dt.event_shape)
    a, b = _get(dr, stat, value, rlgrad), _get(dt, stat, value, torch)
    # torch's VonMises reads log I0 from a polynomial fit good to ~1e-8; rlgrad's is float64's
    rtol = 1e-6 if name == "VonMises" else 1e-9
    np.testing.assert_allclose(a.numpy() if not a.requires_grad else a.detach().numpy(),
                               b.detach().numpy(), rtol=rtol, atol=rtol * 0.1)
    fin = torch.isfinite(b)
    if not b.requires_grad or not fin.any():
        return
    (b[fin]).sum().backward()
    a_sum = (a * rlgrad.tensor(fin.numpy().astype(np.float64))).sum() if not fin.all() else a.sum()
    a_sum.backward()
    for r, t in zip(pr, pt, strict=True):
        gr = np.zeros(r.shape) if r.grad is None else r.grad.numpy()
        gt = np.zeros(r.shape) if t.grad is None else t.grad.numpy()
        # where the statistic is finite (torch sends 0 * NaN = NaN back from masked entries)
        np.testing.assert_allclose(gr[fin.numpy()], gt[fin.numpy()], rtol=rtol * 10, atol=rtol * 0.1)


# the Gamma-based draws are implicitly reparameterized: NumPy's Gamma sampler is not a smooth
# function of the shape for fixed noise, so those are checked below by their expectations
_GAMMA_BASED = {"StudentT", "Chi2", "InverseGamma", "FisherSnedecor"}
RSAMPLED = [c for c in CASES if getattr(D, c[0]).has_rsample and c[0] not in _GAMMA_BASED]


@pytest.mark.parametrize(("name", "params", "value"), RSAMPLED, ids=[c[0] for c in RSAMPLED])
def test_rsample_gradient_matches_finite_differences(name: str, params: list, value: list) -> None:
    def draw(ps: list) -> object:
        g = rlgrad.Generator().manual_seed(7)
        return getattr(D, name)(*ps).rsample((5,), generator=g).sum()

    ps = [rlgrad.tensor(np.float64(p), requires_grad=True) for p in params]
    draw(ps).backward()
    h = 1e-6
    for i, p in enumerate(ps):
        if not p.requires_grad:
            continue
        for j in range(len(params[i])):
            up, dn = [np.float64(q) for q in params], [np.float64(q) for q in params]
            up[i][j] += h
            dn[i][j] -= h
            fd = (float(draw(up).item()) - float(draw(dn).item())) / (2 * h)
            np.testing.assert_allclose(p.grad.numpy()[j], fd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("name", "params", "value"), CASES, ids=[c[0] for c in CASES])
def test_sample_moments_and_support(name: str, params: list, value: list) -> None:
    d = getattr(D, name)(*[np.float64(p) for p in params])
    x = d.sample((40000,), generator=rlgrad.Generator().manual_seed(0)).numpy()
    assert x.shape == (40000, 3) and x.dtype == np.float64
    assert np.all(np.isfinite(d.log_prob(rlgrad.tensor(x)).numpy()))  # in the support
    q = np.quantile(x, [0.25, 0.5, 0.75], axis=0)  # vs torch's cdf (heavy tails: no moments)
    dt = getattr(td, name)(*[torch.tensor(np.float64(p)) for p in params])
    try:
        want = dt.cdf(torch.tensor(q)).numpy()
    except NotImplementedError:  # no cdf in torch: the median against torch's own draws
        torch.manual_seed(0)  # torch's global generator: else the draws depend on test order
        ref = dt.sample((40000,)).numpy()
        np.testing.assert_allclose(q[1], np.median(ref, 0), rtol=0.05, atol=0.03)
        return
    np.testing.assert_allclose(want, np.array([[0.25] * 3, [0.5] * 3, [0.75] * 3]), atol=0.015)


def test_bad_parameters_raise_one_line() -> None:
    with pytest.raises(ValueError, match="scale") as e:
        D.Cauchy(0.0, -1.0)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="log_prob"):
        D.Pareto(1.0, 2.0).log_prob(rlgrad.tensor(0.5))


def test_gamma_rsample_gradient_is_the_implicit_one() -> None:
    """dx/da = -(dP(a, x)/da) / p(a, x) per draw, P the regularized incomplete gamma function
    (mpmath's, differentiated numerically at 30 digits); dx/drate = -x/rate; a second
    derivative raises."""
    mpmath = pytest.importorskip("mpmath")
    a = rlgrad.tensor(np.array([0.3, 1.0, 4.5, 60.0]), requires_grad=True)
    rate = rlgrad.tensor(np.array([1.0, 2.0, 0.5, 1.5]), requires_grad=True)
    x = D.Gamma(a, rate).rsample(generator=rlgrad.Generator().manual_seed(3))
    x.sum().backward()
    mpmath.mp.dps = 30

    def implicit(ai: float, g: float) -> float:
        cdf = lambda aa, xx: mpmath.gammainc(aa, 0, xx, regularized=True)  # noqa: E731
        return float(-mpmath.diff(lambda aa: cdf(aa, g), ai) / mpmath.diff(lambda xx: cdf(ai, xx), g))

    for i, (ai, ri) in enumerate(zip([0.3, 1.0, 4.5, 60.0], [1.0, 2.0, 0.5, 1.5])):
        g = float(x.detach().numpy()[i]) * ri  # the Gamma(a, 1) draw
        np.testing.assert_allclose(a.grad.numpy()[i], implicit(ai, g) / ri, rtol=1e-9)
    np.testing.assert_allclose(rate.grad.numpy(), -x.detach().numpy() / rate.detach().numpy(), rtol=1e-12)
    a2 = rlgrad.tensor([2.0], requires_grad=True)
    (g1,) = rlgrad.autograd.grad(D.Gamma(a2, 1.0).rsample().sum(), a2, create_graph=True)
    with pytest.raises(NotImplementedError, match="second derivative") as e:
        g1.sum().backward()
    assert "\n" not in str(e.value)


def test_standard_gamma_grad_is_torchs_to_its_accuracy() -> None:
    """torch's _standard_gamma_grad is an approximation good to ~1e-4 relative; rlgrad's series
    is exact (above)."""
    from rlgrad.special import standard_gamma_grad

    rng = np.random.default_rng(1)
    for a in (0.05, 0.7, 3.0, 40.0, 800.0):
        x = np.maximum(rng.gamma(a, size=300), 1e-300)
        got = standard_gamma_grad(x, np.full_like(x, a))
        want = torch._standard_gamma_grad(torch.tensor(np.full_like(x, a)), torch.tensor(x)).numpy()
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-3)


GAMMA_BASED = [
    ("Gamma", [[0.4, 2.5, 9.0], [1.0, 2.0, 0.5]]),
    ("Chi2", [[3.0, 5.5, 12.0]]),
    ("StudentT", [[5.0, 7.5, 12.0], [0.3, -1.0, 2.0], [0.5, 1.5, 3.0]]),
    ("InverseGamma", [[5.0, 7.5, 12.0], [0.5, 1.5, 3.0]]),
    ("FisherSnedecor", [[5.0, 7.5, 12.0], [9.0, 10.5, 14.0]]),
    ("Beta", [[0.7, 2.5, 5.0], [1.5, 3.5, 0.9]]),
]


@pytest.mark.parametrize(("name", "params"), GAMMA_BASED, ids=[c[0] for c in GAMMA_BASED])
def test_gamma_based_rsample_gradients_are_unbiased(name: str, params: list) -> None:
    """The mean over 200000 draws of d(x + x^2/10)/dtheta is d E[x + x^2/10]/dtheta, E from
    torch's mean and variance (within 5 standard errors)."""
    n = 200000
    pr = [rlgrad.tensor(np.float64(p), requires_grad=True) for p in params]
    x = getattr(D, name)(*pr).rsample((n,), generator=rlgrad.Generator().manual_seed(11))
    per = x + x * x / 10
    per.mean(0).sum().backward()
    pt = [torch.tensor(np.float64(p), requires_grad=True) for p in params]
    dt = getattr(td, name)(*pt)
    (dt.mean + (dt.variance + dt.mean ** 2) / 10).sum().backward()
    # the standard error of the gradient estimate, from per-draw gradients of one parameter
    spread = per.detach().numpy().std(0) / np.sqrt(n)
    for r, t in zip(pr, pt, strict=True):
        tol = 5 * np.abs(t.grad.numpy()) * (spread / np.abs(per.detach().numpy().mean(0))) + 5e-3
        np.testing.assert_allclose(r.grad.numpy(), t.grad.numpy(), rtol=0, atol=np.max(tol) + 0.02)

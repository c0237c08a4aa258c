"""The distributions of issue 29's survey against torch.distributions (torch 2.13): ``Laplace``,
``Exponential``, ``LogNormal``, ``Poisson``, ``Binomial``, ``MixtureSameFamily`` and
``distributions.utils``: log_prob, entropy, moments, cdf/icdf, sample shapes, rsample, the KL
pairs torch registers for them, gradients (vs torch, and vs finite differences to second order
in float64) and the errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import distributions as D
from rlgrad.gradcheck import check_grads

torch = pytest.importorskip("torch")
td = torch.distributions

RNG = np.random.default_rng(29)
LOC = RNG.normal(size=(3, 4))
SCALE = np.exp(RNG.normal(size=(3, 4)) * 0.5)
VAL = RNG.normal(size=(3, 4)) * 2
POS = np.abs(VAL) + 0.05
COUNTS = np.array([[0.0, 1, 2, 5], [3, 0, 7, 1], [1, 1, 4, 2]])
P01 = 1 / (1 + np.exp(-LOC))
U = np.array([[0.01, 0.3, 0.5, 0.99], [0.2, 0.7, 0.45, 0.55], [0.5, 0.05, 0.95, 0.6]])


def _np(x: Any) -> np.ndarray:
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x._value)


def _close(a: Any, b: Any, tol: float = 1e-10) -> None:
    a, b = _np(a), _np(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# name: (constructor of (lib, params...), params, values for log_prob, what to compare)
CASES: dict[str, tuple[Callable, tuple, np.ndarray, tuple[str, ...]]] = {
    "Laplace": (lambda M, a, b: M.Laplace(a, b), (LOC, SCALE), VAL,
                ("entropy", "mean", "mode", "variance", "stddev", "cdf", "icdf")),
    "Exponential": (lambda M, r: M.Exponential(r), (SCALE,), POS,
                    ("entropy", "mean", "mode", "variance", "stddev", "cdf", "icdf")),
    "LogNormal": (lambda M, a, b: M.LogNormal(a, b), (LOC, SCALE), POS,
                  ("entropy", "mean", "mode", "variance", "cdf", "icdf")),
    "Poisson": (lambda M, r: M.Poisson(r), (SCALE * 3,), COUNTS, ("mean", "mode", "variance")),
    "Binomial probs": (lambda M, p: M.Binomial(7, probs=p), (P01,), COUNTS,
                       ("entropy", "mean", "mode", "variance")),
    "Binomial logits": (lambda M, lg: M.Binomial(rlgrad.tensor(np.full((3, 4), 9.0)) if M is D else
                                                 torch.full((3, 4), 9.0, dtype=torch.float64), logits=lg),
                        (LOC * 3,), COUNTS, ("entropy", "mean", "mode", "variance")),
    "MixtureSameFamily Normal": (
        lambda M, lg, a, b: M.MixtureSameFamily(M.Categorical(logits=lg), M.Normal(a, b)),
        (LOC, LOC[::-1].copy(), SCALE), VAL[:, 0], ("mean", "variance", "cdf")),
    "MixtureSameFamily Independent": (
        lambda M, lg, a, b: M.MixtureSameFamily(M.Categorical(logits=lg[:, 0]),
                                                M.Independent(M.Normal(a, b), 1)),
        (LOC, LOC[::-1].copy(), SCALE), VAL[0], ("mean", "variance")),
}


def _make(name: str, lib: Any, grad: bool) -> tuple[Any, list]:
    make, params, _, _ = CASES[name]
    if lib is D:
        ps = [rlgrad.tensor(p, requires_grad=grad) for p in params]
    else:
        ps = [torch.tensor(p, requires_grad=grad) for p in params]
    return make(lib, *ps), ps


@pytest.mark.parametrize("name", sorted(CASES))
def test_log_prob_moments_and_gradients_match_torch(name: str) -> None:
    _, _, value, what = CASES[name]
    dr, pr = _make(name, D, True)
    dt, pt = _make(name, td, True)
    assert tuple(dr.batch_shape) == tuple(dt.batch_shape)
    assert tuple(dr.event_shape) == tuple(dt.event_shape)
    assert dr.has_rsample == dt.has_rsample
    lr, lt = dr.log_prob(rlgrad.tensor(value)), dt.log_prob(torch.tensor(value))
    _close(lr, lt)
    lr.sum().backward()
    lt.sum().backward()
    for a, b in zip(pr, pt, strict=True):
        _close(a.grad, b.grad, 1e-9)
    for attr in what:
        if attr in ("cdf", "icdf"):
            arg = U if attr == "icdf" else value
            got, want = getattr(dr, attr)(rlgrad.tensor(arg)), getattr(dt, attr)(torch.tensor(arg))
        elif attr == "entropy":
            got, want = dr.entropy(), dt.entropy()
        else:
            got, want = getattr(dr, attr), getattr(dt, attr)
        _close(got, want, 1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_sample_shapes_dtypes_and_support(name: str) -> None:
    dr, _ = _make(name, D, False)
    dt, _ = _make(name, td, False)
    rlgrad.manual_seed(0)
    for shape in ((), (5,), (2, 3)):
        s, w = dr.sample(shape), dt.sample(shape)
        assert tuple(s.shape) == tuple(w.shape) and s.dtype == np.float64
        assert not s.requires_grad
        assert np.all(np.isfinite(dr.log_prob(s)._value))


@pytest.mark.parametrize("name, mean", [("Laplace", LOC), ("Exponential", 1 / SCALE),
                                        ("LogNormal", np.exp(LOC + SCALE**2 / 2)),
                                        ("Poisson", SCALE * 3), ("Binomial probs", 7 * P01)])
def test_draws_have_the_distributions_mean(name: str, mean: np.ndarray) -> None:
    dr, _ = _make(name, D, False)
    rlgrad.manual_seed(1)
    draws = dr.sample((40000,))._value
    sd = np.sqrt(dr.variance._value / 40000)
    assert np.all(np.abs(draws.mean(0) - mean) < 6 * sd)


def test_rsample_is_the_pathwise_derivative() -> None:
    """d x / d loc = 1 and d x / d scale = (x - loc) / scale for Laplace (and LogNormal's through
    exp); d x / d rate = -x / rate for Exponential: closed forms of the reparameterisation."""
    loc, scale = rlgrad.tensor(LOC, requires_grad=True), rlgrad.tensor(SCALE, requires_grad=True)
    x = D.Laplace(loc, scale).rsample((50,))
    x.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), np.full(LOC.shape, 50.0))
    np.testing.assert_allclose(scale.grad.numpy(), ((x._value - LOC) / SCALE).sum(0), rtol=1e-12)
    rate = rlgrad.tensor(SCALE, requires_grad=True)
    e = D.Exponential(rate).rsample((50,))
    e.sum().backward()
    np.testing.assert_allclose(rate.grad.numpy(), (-e._value / SCALE).sum(0), rtol=1e-12)
    loc, scale = rlgrad.tensor(LOC, requires_grad=True), rlgrad.tensor(SCALE, requires_grad=True)
    y = D.LogNormal(loc, scale).rsample((50,))
    y.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), y._value.sum(0), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="no reparameterized sampler"):
        D.Poisson(rlgrad.tensor(SCALE)).rsample()


KL_PAIRS: dict[str, tuple[Callable, Callable]] = {
    "Laplace Laplace": (lambda M: M.Laplace(_p(M, LOC), _p(M, SCALE)),
                        lambda M: M.Laplace(_p(M, LOC[::-1].copy()), _p(M, SCALE[:, ::-1].copy()))),
    "Exponential Exponential": (lambda M: M.Exponential(_p(M, SCALE)), lambda M: M.Exponential(_p(M, POS))),
    "Poisson Poisson": (lambda M: M.Poisson(_p(M, SCALE)), lambda M: M.Poisson(_p(M, POS))),
    "Binomial Binomial": (lambda M: M.Binomial(5, probs=_p(M, P01)),
                          lambda M: M.Binomial(5, logits=_p(M, VAL))),
    "Exponential Gamma": (lambda M: M.Exponential(_p(M, SCALE)), lambda M: M.Gamma(_p(M, POS), _p(M, SCALE))),
    "Gamma Exponential": (lambda M: M.Gamma(_p(M, POS), _p(M, SCALE)), lambda M: M.Exponential(_p(M, SCALE))),
    "Exponential Normal": (lambda M: M.Exponential(_p(M, SCALE)), lambda M: M.Normal(_p(M, LOC), _p(M, POS))),
    "Laplace Normal": (lambda M: M.Laplace(_p(M, LOC), _p(M, SCALE)),
                       lambda M: M.Normal(_p(M, VAL), _p(M, POS))),
    "LogNormal LogNormal": (lambda M: M.LogNormal(_p(M, LOC), _p(M, SCALE)),
                            lambda M: M.LogNormal(_p(M, VAL), _p(M, POS))),
}
_LEAVES: dict[int, list] = {}


def _p(M: Any, x: np.ndarray) -> Any:
    t = rlgrad.tensor(x, requires_grad=True) if M is D else torch.tensor(x.copy(), requires_grad=True)
    _LEAVES.setdefault(id(M), []).append(t)
    return t


@pytest.mark.parametrize("name", sorted(KL_PAIRS))
def test_kl_pairs_torch_registers_match_with_gradients(name: str) -> None:
    make_p, make_q = KL_PAIRS[name]
    _LEAVES.clear()
    kr = D.kl_divergence(make_p(D), make_q(D))
    kt = td.kl_divergence(make_p(td), make_q(td))
    _close(kr, kt, 1e-9)
    kr.sum().backward()
    kt.sum().backward()
    for a, b in zip(_LEAVES[id(D)], _LEAVES[id(td)], strict=True):
        _close(a.grad, b.grad, 1e-8)


def test_binomial_kl_with_more_trials_in_q_raises_and_fewer_is_infinite() -> None:
    for M in (D, td):
        p = torch.tensor(P01) if M is td else rlgrad.tensor(P01)
        with pytest.raises(NotImplementedError, match="q.total_count > p.total_count"):
            M.kl_divergence(M.Binomial(3, probs=p), M.Binomial(5, probs=p))
    assert np.all(np.isinf(D.kl_divergence(D.Binomial(5, probs=rlgrad.tensor(P01)),
                                           D.Binomial(3, probs=rlgrad.tensor(P01)))._value))


def test_binomial_enumerate_support_and_inhomogeneous_counts_match_torch() -> None:
    _close(D.Binomial(3, probs=rlgrad.tensor(P01)).enumerate_support(),
           td.Binomial(3, probs=torch.tensor(P01)).enumerate_support())
    _close(D.Binomial(3, probs=rlgrad.tensor(P01)).enumerate_support(False),
           td.Binomial(3, probs=torch.tensor(P01)).enumerate_support(False))
    n = np.array([3.0, 5.0])
    for M, T in ((D, rlgrad.tensor), (td, torch.tensor)):
        with pytest.raises(NotImplementedError, match="Inhomogeneous total count"):
            M.Binomial(T(n), probs=T(np.array([0.3, 0.6]))).entropy()


@pytest.mark.parametrize("f", [
    lambda a, b: D.Laplace(a, rlgrad.numpy.exp(b)).log_prob(rlgrad.tensor(VAL)),
    lambda a, b: D.Laplace(a, rlgrad.numpy.exp(b)).entropy() + D.Laplace(a, rlgrad.numpy.exp(b)).cdf(
        rlgrad.tensor(VAL)),
    lambda a, b: D.Exponential(rlgrad.numpy.exp(a)).log_prob(rlgrad.tensor(POS)) * b,
    lambda a, b: D.LogNormal(a, rlgrad.numpy.exp(b)).log_prob(rlgrad.tensor(POS)),
    lambda a, b: D.Poisson(rlgrad.numpy.exp(a)).log_prob(rlgrad.tensor(COUNTS)) + b,
    lambda a, b: D.Binomial(7, logits=a).log_prob(rlgrad.tensor(COUNTS)) + D.Binomial(7, logits=b).entropy(),
    lambda a, b: D.MixtureSameFamily(D.Categorical(logits=a), D.Normal(b, rlgrad.tensor(SCALE))).log_prob(
        rlgrad.tensor(VAL[:, 0])),
    lambda a, b: D.kl_divergence(D.Laplace(a, rlgrad.numpy.exp(b)), D.Laplace(b, rlgrad.numpy.exp(a))),
])
def test_second_derivatives_match_finite_differences(f: Callable) -> None:
    def g(a: Any, b: Any) -> Any:
        traced = isinstance(a, rlgrad.Tensor) or isinstance(b, rlgrad.Tensor)
        out = f(*[x if isinstance(x, rlgrad.Tensor) else rlgrad.tensor(x) for x in (a, b)])
        return out if traced else out.numpy()

    check_grads(g, modes=("rev",), order=2)(LOC * 0.5, SCALE * 0.3)  # (a != b: off abs's kink)


def test_bad_parameters_raise_one_line() -> None:
    with pytest.raises(ValueError, match="scale"):
        D.Laplace(rlgrad.tensor(LOC), rlgrad.tensor(-SCALE))
    with pytest.raises(ValueError, match="rate"):
        D.Exponential(rlgrad.tensor(-SCALE))
    with pytest.raises(ValueError, match="rate"):
        D.Poisson(rlgrad.tensor(-SCALE))
    with pytest.raises(ValueError, match="exactly one|probs|logits"):
        D.Binomial(3)
    with pytest.raises(ValueError, match="value"):
        D.Poisson(rlgrad.tensor(SCALE)).log_prob(rlgrad.tensor(COUNTS + 0.5))
    for M, T in ((D, rlgrad.tensor), (td, torch.tensor)):
        with pytest.raises(ValueError, match="Mixture distribution needs to be an +instance of"):
            M.MixtureSameFamily(M.Normal(T(LOC), T(SCALE)), M.Normal(T(LOC), T(SCALE)))
        with pytest.raises(ValueError, match="does not equal"):
            M.MixtureSameFamily(M.Categorical(logits=T(LOC[:, :3])), M.Normal(T(LOC), T(SCALE)))
        with pytest.raises(NotImplementedError):
            M.MixtureSameFamily(M.Categorical(logits=T(LOC)), M.Normal(T(LOC), T(SCALE))).entropy()
        with pytest.raises(NotImplementedError):
            M.Poisson(T(SCALE)).entropy()


def test_distribution_utils_match_torch() -> None:
    from torch.distributions import utils as tu

    from rlgrad.distributions import utils as ru
    x = rlgrad.tensor(LOC)
    _close(ru.logits_to_probs(x), tu.logits_to_probs(torch.tensor(LOC)))
    _close(ru.logits_to_probs(x, is_binary=True), tu.logits_to_probs(torch.tensor(LOC), is_binary=True))
    _close(ru.probs_to_logits(rlgrad.tensor(P01)), tu.probs_to_logits(torch.tensor(P01)))
    _close(ru.probs_to_logits(rlgrad.tensor(P01), True), tu.probs_to_logits(torch.tensor(P01), True))
    _close(ru.clamp_probs(rlgrad.tensor(np.array([0.0, 1.0]))), tu.clamp_probs(torch.tensor([0.0, 1.0],
                                                                                             dtype=torch.float64)))
    a, b = ru.broadcast_all(rlgrad.tensor(LOC[0]), 1.0)
    assert tuple(a.shape) == tuple(b.shape) == (4,)


def test_float32_parameters_give_float32_results() -> None:
    f32 = LOC.astype(np.float32)
    for d in (D.Laplace(f32, 1.0), D.Exponential(np.abs(f32)), D.LogNormal(f32, 1.0), D.Poisson(np.abs(f32)),
              D.Binomial(3, logits=f32)):
        assert d.log_prob(d.sample()).dtype == np.float32
        assert d.mean.dtype == np.float32

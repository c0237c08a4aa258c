"""rlgrad.distributions: closed forms, torch.distributions (when installed), gradients against
finite differences, sampling frequencies on fixed seeds, shapes, dtypes and validation errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rlgrad
import rlgrad.random as rrandom
from rlgrad.distributions import (
    Bernoulli,
    Beta,
    Categorical,
    DiagNormal,
    Distribution,
    Independent,
    Normal,
    RelaxedOneHotCategorical,
    TanhNormal,
    kl_divergence,
)
from rlgrad.special import gammaln

LOG_2PI = math.log(2 * math.pi)


def t64(x: object, requires_grad: bool = False) -> rlgrad.Tensor:
    return rlgrad.tensor(np.asarray(x, dtype=np.float64), requires_grad=requires_grad)


@pytest.fixture
def torch():  # noqa: ANN201 - the module
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


def _within(samples: np.ndarray, expected: float, sd: float, k: float = 5.0) -> None:
    """Sample mean within k standard errors of ``expected``."""
    se = sd / math.sqrt(samples.size)
    assert abs(float(samples.mean()) - expected) < k * se, (float(samples.mean()), expected, se)


# ---- Categorical ---------------------------------------------------------------------------
LOGITS = np.array([[0.3, -1.2, 2.0, 0.0], [1.0, 1.0, -0.5, 3.0]])


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def test_categorical_closed_forms_from_logits_and_probs() -> None:
    lp_ref = _log_softmax(LOGITS)
    p_ref = np.exp(lp_ref)
    for d in (Categorical(logits=t64(LOGITS)), Categorical(probs=t64(p_ref))):
        assert d.batch_shape == (2,) and d.event_shape == ()
        np.testing.assert_allclose(d.probs._value, p_ref, rtol=1e-12)
        np.testing.assert_allclose(d.logits._value, lp_ref, rtol=1e-12, atol=1e-12)
        value = np.array([2, 3])
        np.testing.assert_allclose(d.log_prob(value)._value, lp_ref[[0, 1], [2, 3]], rtol=1e-12)
        np.testing.assert_allclose(d.entropy()._value, -(p_ref * lp_ref).sum(-1), rtol=1e-12)
        np.testing.assert_array_equal(d.mode._value, [2, 3])
        assert np.all(np.isnan(d.mean._value)) and d.mean.shape == (2,)
        # value broadcasting against the batch: (3, 1) x (2,) -> (3, 2)
        v = np.array([[0], [1], [3]])
        np.testing.assert_allclose(d.log_prob(v)._value, lp_ref[np.arange(2), v], rtol=1e-12)
    np.testing.assert_array_equal(Categorical(logits=LOGITS).enumerate_support()._value,
                                  [[0, 0], [1, 1], [2, 2], [3, 3]])


def test_categorical_against_torch(torch) -> None:  # noqa: ANN001
    tl = torch.tensor(LOGITS)
    ours, theirs = Categorical(logits=t64(LOGITS)), torch.distributions.Categorical(logits=tl)
    v = np.array([1, 2])
    np.testing.assert_allclose(ours.log_prob(v)._value, theirs.log_prob(torch.tensor(v)).numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(ours.entropy()._value, theirs.entropy().numpy(), rtol=1e-12)
    other = LOGITS[::-1] * 0.7
    np.testing.assert_allclose(
        kl_divergence(ours, Categorical(logits=t64(other)))._value,
        torch.distributions.kl_divergence(
            theirs, torch.distributions.Categorical(logits=torch.tensor(other.copy()))).numpy(),
        rtol=1e-12)


def test_categorical_kl_closed_form_and_zero_mass() -> None:
    p = np.array([0.5, 0.5, 0.0])
    q = np.array([0.25, 0.25, 0.5])
    kl = kl_divergence(Categorical(probs=p), Categorical(probs=q)).item()
    assert kl == pytest.approx(math.log(2.0), rel=1e-12)  # 0 * log 0 counts as 0
    assert kl_divergence(Categorical(probs=q), Categorical(probs=p)).item() == math.inf
    assert kl_divergence(Categorical(probs=p), Categorical(probs=p)).item() == 0.0


def test_categorical_gradients_match_finite_differences() -> None:
    v = np.array([2, 0])
    rlgrad.check_grads(lambda lg: Categorical(logits=lg).log_prob(v), order=2)(LOGITS)
    rlgrad.check_grads(lambda lg: Categorical(logits=lg).entropy(), order=2)(LOGITS)
    q = t64(LOGITS[::-1])
    rlgrad.check_grads(lambda lg: kl_divergence(Categorical(logits=lg),
                                                Categorical(logits=q)), order=2)(LOGITS)
    p = np.exp(_log_softmax(LOGITS))
    # probs parameterisation: the gradient of the normalised probabilities
    rlgrad.check_grads(lambda pr: Categorical(probs=pr, validate_args=False).log_prob(v),
                       order=1)(p)
    rlgrad.check_grads(lambda pr: Categorical(probs=pr, validate_args=False).entropy(),
                       order=1)(p)


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log")
def test_categorical_masked_logits_are_never_sampled_and_grads_stay_finite() -> None:
    lg = t64([0.5, -np.inf, 1.0, -np.inf], requires_grad=True)
    d = Categorical(logits=lg)
    rrandom.seed(3)
    draws = np.array([int(d.sample()) for _ in range(2000)])
    assert set(np.unique(draws)) == {0, 2}
    assert np.all(np.isin(d.sample((500,))._value, [0, 2]))
    (d.entropy() + d.log_prob(2)).backward()
    assert np.all(np.isfinite(lg.grad._value))
    assert lg.grad._value[1] == 0.0 and lg.grad._value[3] == 0.0
    zero = Categorical(probs=[0.0, 0.3, 0.7])
    assert np.all(zero.sample((2000,))._value > 0)
    assert zero.log_prob(0).item() == -math.inf
    assert np.isfinite(zero.entropy().item())


@pytest.mark.parametrize("k", [2, 5, 40])
def test_categorical_sampling_frequencies(k: int) -> None:
    rng = np.random.default_rng(k)
    logits = rng.normal(size=k) * 1.5
    probs = np.exp(_log_softmax(logits))
    rrandom.seed(0)
    n = 20000
    d = Categorical(logits=t64(logits))
    one_at_a_time = np.array([int(d.sample()) for _ in range(n if k < 10 else 2000)])
    batched = d.sample((n,))._value
    assert batched.dtype == np.int64 and batched.shape == (n,)
    for draws in (one_at_a_time, batched):
        freq = np.bincount(draws, minlength=k) / draws.size
        se = np.sqrt(probs * (1 - probs) / draws.size)
        assert np.all(np.abs(freq - probs) < 5 * se + 1e-12), (freq, probs)
    # a batch of rows, and probs= input
    rows = np.stack([probs, probs[::-1]])
    draws = Categorical(probs=rows).sample((n,))._value
    assert draws.shape == (n, 2)
    for r in range(2):
        freq = np.bincount(draws[:, r], minlength=k) / n
        assert np.all(np.abs(freq - rows[r]) < 5 * np.sqrt(rows[r] * (1 - rows[r]) / n) + 1e-12)


def test_seeding_and_generators_are_reproducible() -> None:
    d = Categorical(logits=[0.1, 0.2, 0.3])
    n = Normal(np.zeros(3), np.ones(3))
    rrandom.seed(123)
    a = [int(d.sample()) for _ in range(20)], d.sample((7,))._value, n.sample((2,))._value
    rrandom.seed(123)
    b = [int(d.sample()) for _ in range(20)], d.sample((7,))._value, n.sample((2,))._value
    assert a[0] == b[0]
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[2], b[2])
    g1, g2 = rrandom.Generator(7), rrandom.Generator(7)
    np.testing.assert_array_equal(n.sample((4,), generator=g1)._value,
                                  n.sample((4,), generator=g2)._value)
    # an explicit generator does not advance the global stream
    rrandom.seed(5)
    first = n.sample()._value
    rrandom.seed(5)
    n.sample(generator=rrandom.Generator(99))
    np.testing.assert_array_equal(n.sample()._value, first)
    # a numpy Generator is accepted too, and bad generators are refused clearly
    n.sample(generator=np.random.default_rng(0))
    with pytest.raises(TypeError, match="rlgrad.random.Generator"):
        n.sample(generator=42)


def test_generator_object() -> None:
    g = rrandom.Generator(11)
    assert g.initial_seed() == 11 and "seed=11" in repr(g)
    state = g.get_state()
    a = g.random(3)
    g.set_state(state)
    np.testing.assert_array_equal(g.random(3), a)
    g.manual_seed(11)
    np.testing.assert_array_equal(g.numpy.random(3), a)
    assert g.standard_normal(2, dtype=np.float32).dtype == np.float32
    c1, c2 = g.spawn(2)
    assert not np.array_equal(c1.random(4), c2.random(4))
    with pytest.raises(ValueError, match="non-negative integer"):
        g.manual_seed(-1)
    assert rrandom.seed(3) is rrandom.default_generator
    st = rrandom.get_rng_state()
    x = Normal(0.0, 1.0).sample((3,))._value
    rrandom.set_rng_state(st)
    np.testing.assert_array_equal(Normal(0.0, 1.0).sample((3,))._value, x)
    assert rlgrad.random is rrandom  # wired lazily on the package


# ---- Bernoulli -----------------------------------------------------------------------------
def test_bernoulli_closed_forms_and_torch(torch) -> None:  # noqa: ANN001
    logits = np.array([-3.0, -0.2, 0.0, 1.5, 30.0])
    p = 1 / (1 + np.exp(-logits))
    v = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    ref_lp = v * np.log(p) + (1 - v) * np.log1p(-p)
    q = 1 / (1 + np.exp(logits))  # 1 - p without cancellation
    ref_h = p * np.log1p(np.exp(-logits)) + q * np.log1p(np.exp(logits))
    # logits: stable also where p rounds to 1 (torch's form loses digits there)
    np.testing.assert_allclose(Bernoulli(logits=t64(logits)).entropy()._value, ref_h, rtol=1e-12)
    for d in (Bernoulli(logits=t64(logits)), Bernoulli(probs=t64(p))):
        np.testing.assert_allclose(d.log_prob(v)._value[:4], ref_lp[:4], rtol=1e-10)
        np.testing.assert_allclose(d.entropy()._value[:4], ref_h[:4], rtol=1e-9)
        np.testing.assert_allclose(d.mean._value, p, rtol=1e-12)
        np.testing.assert_allclose(d.variance._value[:4], (p * (1 - p))[:4], rtol=1e-12)
    # logits parameterisation stays exact where probs round to 1
    assert Bernoulli(logits=t64(30.0)).log_prob(0.0).item() == pytest.approx(-30.0, rel=1e-12)
    theirs = torch.distributions.Bernoulli(logits=torch.tensor(logits))
    ours = Bernoulli(logits=t64(logits))
    np.testing.assert_allclose(ours.log_prob(v)._value, theirs.log_prob(torch.tensor(v)).numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(ours.entropy()._value[:4], theirs.entropy().numpy()[:4], rtol=1e-10)
    q = np.array([0.3, 0.5, 0.9, 0.2, 0.6])
    np.testing.assert_allclose(
        kl_divergence(ours, Bernoulli(probs=t64(q)))._value,
        torch.distributions.kl_divergence(
            theirs, torch.distributions.Bernoulli(probs=torch.tensor(q))).numpy(), rtol=1e-9)
    np.testing.assert_array_equal(Bernoulli(probs=[0.2, 0.5, 0.8]).mode._value[[0, 2]], [0.0, 1.0])
    assert np.isnan(Bernoulli(probs=[0.2, 0.5, 0.8]).mode._value[1])


def test_bernoulli_sampling_and_gradients() -> None:
    rrandom.seed(1)
    d = Bernoulli(probs=np.array([0.1, 0.7], dtype=np.float32))
    s = d.sample((20000,))._value
    assert s.dtype == np.float32 and set(np.unique(s)) <= {0.0, 1.0}
    _within(s[:, 0], 0.1, math.sqrt(0.09))
    _within(s[:, 1], 0.7, math.sqrt(0.21))
    v = np.array([1.0, 0.0, 1.0])
    lg = np.array([-1.0, 0.3, 2.0])
    rlgrad.check_grads(lambda x: Bernoulli(logits=x).log_prob(v), order=2)(lg)
    rlgrad.check_grads(lambda x: Bernoulli(logits=x).entropy(), order=2)(lg)
    rlgrad.check_grads(lambda x: Bernoulli(logits=x).entropy(), order=2)(np.zeros(1))
    rlgrad.check_grads(lambda x: Bernoulli(probs=x).log_prob(v), order=2)(np.array([0.2, 0.5, 0.9]))


# ---- Normal / Independent ------------------------------------------------------------------
def test_normal_closed_forms() -> None:
    loc, scale = np.array([0.0, 1.5, -2.0]), np.array([1.0, 0.5, 3.0])
    d = Normal(t64(loc), t64(scale))
    x = np.array([0.3, 1.0, 4.0])
    np.testing.assert_allclose(
        d.log_prob(x)._value, -0.5 * ((x - loc) / scale) ** 2 - np.log(scale) - 0.5 * LOG_2PI)
    np.testing.assert_allclose(d.entropy()._value, 0.5 + 0.5 * LOG_2PI + np.log(scale))
    np.testing.assert_allclose(d.mean._value, loc)
    np.testing.assert_allclose(d.mode._value, loc)
    np.testing.assert_allclose(d.stddev._value, scale)
    np.testing.assert_allclose(d.variance._value, scale**2)
    q = Normal(t64(loc[::-1]), t64(scale[::-1]))
    ref = (np.log(scale[::-1] / scale) + (scale**2 + (loc - loc[::-1]) ** 2)
           / (2 * scale[::-1] ** 2) - 0.5)
    np.testing.assert_allclose(kl_divergence(d, q)._value, ref, rtol=1e-12)
    # broadcasting of parameters: batch_shape and parameter shapes as torch's broadcast_all
    b = Normal(np.zeros((2, 1)), np.ones(3))
    assert b.batch_shape == (2, 3) and b.loc.shape == (2, 3) and b.scale.shape == (2, 3)
    assert b.sample((4,)).shape == (4, 2, 3) and b.rsample().shape == (2, 3)


def test_normal_and_diag_normal_against_torch(torch) -> None:  # noqa: ANN001
    rng = np.random.default_rng(0)
    loc, scale = rng.normal(size=(4, 3)), rng.uniform(0.3, 2.0, size=(4, 3))
    loc2, scale2 = rng.normal(size=(4, 3)), rng.uniform(0.3, 2.0, size=(4, 3))
    x = rng.normal(size=(5, 4, 3))
    T = torch.distributions
    mine = DiagNormal(t64(loc), t64(scale))
    theirs = T.Independent(T.Normal(torch.tensor(loc), torch.tensor(scale)), 1)
    assert mine.batch_shape == tuple(theirs.batch_shape) == (4,)
    assert mine.event_shape == tuple(theirs.event_shape) == (3,)
    np.testing.assert_allclose(mine.log_prob(x)._value, theirs.log_prob(torch.tensor(x)).numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(mine.entropy()._value, theirs.entropy().numpy(), rtol=1e-12)
    other = Independent(Normal(t64(loc2), t64(scale2)), 1)
    other_t = T.Independent(T.Normal(torch.tensor(loc2), torch.tensor(scale2)), 1)
    np.testing.assert_allclose(kl_divergence(mine, other)._value,
                               T.kl_divergence(theirs, other_t).numpy(), rtol=1e-12)
    np.testing.assert_allclose(
        kl_divergence(Normal(t64(loc), t64(scale)), Normal(t64(loc2), t64(scale2)))._value,
        T.kl_divergence(T.Normal(torch.tensor(loc), torch.tensor(scale)),
                        T.Normal(torch.tensor(loc2), torch.tensor(scale2))).numpy(), rtol=1e-12)


def test_normal_gradients_and_rsample_pathwise_derivative() -> None:
    loc, scale, x = np.array([0.2, -1.0]), np.array([0.7, 2.0]), np.array([1.0, 0.5])
    rlgrad.check_grads(lambda m, s: Normal(m, s).log_prob(x), order=2)(loc, scale)
    rlgrad.check_grads(lambda v: Normal(loc, scale).log_prob(v), order=2)(x)
    rlgrad.check_grads(lambda m, s: Normal(m, s).entropy(), order=2)(loc, scale)
    rlgrad.check_grads(lambda m, s: kl_divergence(Normal(m, s), Normal(x, scale[::-1])),
                       order=2)(loc, scale)

    def drawn(m: object, s: object) -> object:  # fixed noise: a deterministic function
        return Normal(m, s).rsample((3,), generator=rrandom.Generator(0)) ** 2

    rlgrad.check_grads(drawn, order=2)(loc, scale)
    # d x / d loc = 1 and d x / d scale = eps exactly
    m, s = t64(loc, True), t64(scale, True)
    xs = Normal(m, s).rsample(generator=rrandom.Generator(4))
    eps = rrandom.Generator(4).standard_normal((2,))
    xs.sum().backward()
    np.testing.assert_allclose(m.grad._value, [1.0, 1.0])
    np.testing.assert_allclose(s.grad._value, eps, rtol=1e-12)
    rlgrad.check_grads(lambda m, s: DiagNormal(m, s).log_prob(np.stack([x, x])),
                       order=2)(np.stack([loc, loc]), np.stack([scale, scale]))


def test_normal_sampling_moments_and_float32() -> None:
    rrandom.seed(2)
    d = Normal(np.float32(1.5), np.float32(0.5))
    s = d.sample((40000,))._value
    assert s.dtype == np.float32
    _within(s, 1.5, 0.5)
    assert float(s.std()) == pytest.approx(0.5, rel=0.02)
    p = rlgrad.tensor(np.array([0.0, 1.0], dtype=np.float32), requires_grad=True)
    d32 = Normal(p, 2.0)  # Python float scale follows the tensor's dtype
    assert d32.scale.dtype == np.float32
    r = d32.rsample((3,))
    assert r.dtype == np.float32 and d32.log_prob(r).dtype == np.float32
    assert d32.entropy().dtype == np.float32
    d32.log_prob(r).sum().backward()
    assert p.grad.dtype == np.float32


# ---- the sample / rsample / log_prob contract ----------------------------------------------
def _all_distributions(m: rlgrad.Tensor, s: rlgrad.Tensor) -> list[Distribution]:
    return [
        Normal(m, s), DiagNormal(m, s), TanhNormal(m, s), Beta(s, s + 1.0),
        Categorical(logits=m), Bernoulli(logits=m), RelaxedOneHotCategorical(s[0], logits=m),
    ]


def test_sample_never_has_a_graph_and_rsample_does() -> None:
    m = t64([0.1, -0.4, 0.3], requires_grad=True)
    s = t64([0.5, 1.0, 2.0], requires_grad=True)
    for d in _all_distributions(m, s):
        x = d.sample()
        assert not x.requires_grad and x.grad_fn is None, type(d).__name__
        assert x.shape == d.batch_shape + d.event_shape
        assert d.sample((2, 5)).shape == (2, 5) + d.batch_shape + d.event_shape
        if d.has_rsample:
            r = d.rsample((2,))
            assert r.requires_grad and r.shape == (2,) + d.batch_shape + d.event_shape
        # log_prob of a detached sample: still differentiable w.r.t. the parameters
        lp = d.log_prob(x)
        assert lp.shape == d.batch_shape
        gm, gs = rlgrad.autograd.grad(lp.sum(), [m, s], allow_unused=True)
        assert any(g is not None and np.any(g._value != 0) for g in (gm, gs)), type(d).__name__


def test_rsample_without_reparameterization_names_the_alternatives() -> None:
    from rlgrad.distributions import Poisson

    for d in (Categorical(logits=[0.0, 1.0]), Bernoulli(probs=0.3), Poisson(2.0)):
        assert d.has_rsample is False
        with pytest.raises(NotImplementedError) as e:
            d.rsample()
        msg = str(e.value)
        assert type(d).__name__ in msg and "log_prob" in msg and "score-function" in msg
        assert "RelaxedOneHotCategorical" in msg
    assert Independent(Poisson(np.ones(2)), 1).has_rsample is False
    with pytest.raises(NotImplementedError, match="log_prob"):
        Independent(Poisson(np.ones(2)), 1).rsample()


def test_gradient_through_a_sample_is_a_clear_error() -> None:
    loc = t64(0.5, requires_grad=True)
    x = Normal(loc, 1.0).sample()
    with pytest.raises(RuntimeError, match="does not require grad") as e:
        (x * x).backward()
    assert "sample()" in str(e.value) and "rsample()" in str(e.value)
    # detaching the parameters before building the distribution cuts every gradient
    d = Normal(loc.detach(), 1.0)
    lp = d.log_prob(0.3)
    with pytest.raises(RuntimeError, match="does not require grad") as e:
        lp.backward()
    assert "Usual causes" in str(e.value) and "detach()" in str(e.value)
    with pytest.raises(RuntimeError, match="does not require grad"):
        rlgrad.autograd.grad(Categorical(logits=t64([1.0, 2.0], True).detach()).log_prob(1), [loc])


# ---- TanhNormal ----------------------------------------------------------------------------
def _tanh_normal_ref(y: np.ndarray, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    u = np.arctanh(y)
    return (-0.5 * ((u - loc) / scale) ** 2 - np.log(scale) - 0.5 * LOG_2PI
            - np.log1p(-(y**2)))


def test_tanh_normal_log_prob_change_of_variables() -> None:
    loc, scale = np.array([0.0, 0.5, -1.0]), np.array([1.0, 0.3, 2.0])
    y = np.array([0.2, -0.7, 0.95])
    d = TanhNormal(t64(loc), t64(scale))
    np.testing.assert_allclose(d.log_prob(y)._value, _tanh_normal_ref(y, loc, scale), rtol=1e-10)
    # the stable log-det equals log(1 - tanh(u)^2) where the naive form is accurate
    u = np.linspace(-5, 5, 11)
    np.testing.assert_allclose(TanhNormal.log_abs_det_jacobian(u), np.log1p(-np.tanh(u) ** 2),
                               rtol=1e-9, atol=1e-12)
    # density integrates to 1 over (-1, 1) (trapezoid in u-space)
    uu = np.linspace(-12, 12, 200001)
    dens = np.exp(TanhNormal(0.5, 0.8).log_prob(np.tanh(uu).astype(np.float32))
                  ._value.astype(np.float64)) * (1 - np.tanh(uu) ** 2)
    assert np.trapezoid(dens, uu) == pytest.approx(1.0, abs=2e-3)
    np.testing.assert_allclose(d.mode._value, np.tanh(loc))
    with pytest.raises(NotImplementedError, match="rsample_and_log_prob"):
        d.entropy()
    with pytest.raises(NotImplementedError, match="mode"):
        _ = d.mean


def test_tanh_normal_against_torch(torch) -> None:  # noqa: ANN001
    T = torch.distributions
    loc, scale = np.array([0.1, -0.6]), np.array([0.4, 1.3])
    y = np.array([0.3, -0.9])
    theirs = T.TransformedDistribution(T.Normal(torch.tensor(loc), torch.tensor(scale)),
                                       [T.transforms.TanhTransform()])
    np.testing.assert_allclose(TanhNormal(t64(loc), t64(scale)).log_prob(y)._value,
                               theirs.log_prob(torch.tensor(y)).numpy(), rtol=1e-10)


def test_tanh_normal_saturated_samples_keep_a_finite_exact_log_prob() -> None:
    # |u| >= 20: tanh(u) rounds to 1.0 on every libm (1 - 2e^-40 is within half an ulp of 1; at
    # |u| = 19 the correctly rounded value is 1 - 2^-53, which only some SIMD tanh rounds to 1),
    # atanh would give inf; the cached pre-tanh value is used
    loc = t64([20.0, -21.0], requires_grad=True)
    scale = t64([0.01, 0.01], requires_grad=True)
    d = TanhNormal(loc, scale)
    y = d.rsample(generator=rrandom.Generator(0))
    assert np.all(np.abs(y._value) == 1.0)
    lp = d.log_prob(y)
    u = d.base_dist.rsample(generator=rrandom.Generator(0))._value
    ref = (-0.5 * ((u - loc._value) / scale._value) ** 2 - np.log(scale._value) - 0.5 * LOG_2PI
           - 2 * (math.log(2) - u - np.logaddexp(0, -2 * u)))
    np.testing.assert_allclose(lp._value, ref, rtol=1e-12)
    lp.sum().backward()
    assert np.all(np.isfinite(loc.grad._value)) and np.all(np.isfinite(scale.grad._value))
    # a detached view of the draw: same value, no pathwise term (only the explicit dependence)
    d2 = TanhNormal(t64([0.3], True), t64([0.5], True))
    y2 = d2.rsample()
    lp_path, lp_score = d2.log_prob(y2), d2.log_prob(y2.detach())
    np.testing.assert_array_equal(d2.log_prob(y2._value)._value, lp_score._value)
    np.testing.assert_allclose(lp_path._value, lp_score._value)
    g_path = rlgrad.autograd.grad(lp_path.sum(), [d2.loc])[0]._value
    g_score = rlgrad.autograd.grad(lp_score.sum(), [d2.loc])[0]._value
    u2 = np.arctanh(y2._value)
    np.testing.assert_allclose(g_score, (u2 - 0.3) / 0.25, rtol=1e-6)
    assert not np.allclose(g_path, g_score)
    # rsample_and_log_prob gives the same pair
    yy, lpp = d.rsample_and_log_prob(generator=rrandom.Generator(0))
    np.testing.assert_array_equal(yy._value, y._value)
    np.testing.assert_allclose(lpp._value, lp._value)


def test_independent_tanh_normal_for_action_vectors() -> None:
    loc = t64([[0.1, -0.3], [0.5, 0.2]], True)
    d = Independent(TanhNormal(loc, 0.7), 1)
    assert d.batch_shape == (2,) and d.event_shape == (2,) and d.has_rsample
    y = d.rsample()
    np.testing.assert_allclose(d.log_prob(y)._value,
                               TanhNormal(loc, 0.7).log_prob(y._value)._value.sum(-1), rtol=1e-10)
    np.testing.assert_allclose(d.mode._value, np.tanh(loc._value))


def test_tanh_normal_gradients_match_finite_differences() -> None:
    loc, scale = np.array([0.3, -0.8]), np.array([0.6, 1.1])

    def sac_term(m: object, s: object) -> object:
        y, lp = TanhNormal(m, s).rsample_and_log_prob((2,), generator=rrandom.Generator(1))
        return lp + y * 3.0

    rlgrad.check_grads(sac_term, order=2)(loc, scale)
    rlgrad.check_grads(lambda m, s: TanhNormal(m, s).log_prob(np.array([0.5, -0.2])),
                       order=2)(loc, scale)
    rlgrad.check_grads(lambda v: TanhNormal(loc, scale).log_prob(v), order=1)(
        np.array([0.5, -0.2]))


# ---- Beta ----------------------------------------------------------------------------------
def test_beta_closed_forms() -> None:
    a, b = np.array([2.0, 0.5, 3.0, 1.0]), np.array([3.0, 0.5, 1.0, 1.0])
    d = Beta(t64(a), t64(b))
    x = np.array([0.3, 0.1, 0.8, 0.5])
    lbeta = gammaln(a) + gammaln(b) - gammaln(a + b)
    ref = (a - 1) * np.log(x) + (b - 1) * np.log1p(-x) - lbeta
    np.testing.assert_allclose(d.log_prob(x)._value, ref, rtol=1e-12)
    np.testing.assert_allclose(d.mean._value, a / (a + b))
    np.testing.assert_allclose(d.variance._value, a * b / ((a + b) ** 2 * (a + b + 1)))
    mode = d.mode._value
    assert mode[0] == pytest.approx(1 / 3) and mode[2] == 1.0 and np.isnan(mode[3])
    # Beta(1, 1) is uniform: entropy 0; Beta(2, 1) has density 2x: entropy 1/2 - log 2
    np.testing.assert_allclose(Beta(t64([1.0, 2.0]), t64([1.0, 1.0])).entropy()._value,
                               [0.0, 0.5 - math.log(2)], atol=1e-13)
    # xlogy at the boundary: Beta(1, 2) at 0 has density 2
    assert Beta(1.0, 2.0).log_prob(0.0).item() == pytest.approx(math.log(2), rel=1e-6)


def test_beta_against_torch(torch) -> None:  # noqa: ANN001
    T = torch.distributions
    a, b = np.array([2.0, 0.7, 5.0]), np.array([3.0, 0.4, 1.5])
    x = np.array([0.25, 0.6, 0.9])
    ours, theirs = Beta(t64(a), t64(b)), T.Beta(torch.tensor(a), torch.tensor(b))
    np.testing.assert_allclose(ours.log_prob(x)._value, theirs.log_prob(torch.tensor(x)).numpy(),
                               rtol=1e-10)
    np.testing.assert_allclose(ours.entropy()._value, theirs.entropy().numpy(), rtol=1e-10)
    a2, b2 = np.array([2.0, 0.5, 3.0, 1.0]), np.array([3.0, 2.0, 0.8, 4.0])  # interior and edges
    np.testing.assert_allclose(Beta(t64(a2), t64(b2)).mode._value,
                               T.Beta(torch.tensor(a2), torch.tensor(b2)).mode.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(Beta(t64([0.3, 0.6]), t64([0.6, 0.3])).mode._value, [0.0, 1.0])
    q, qt = Beta(t64(b), t64(a + 1)), T.Beta(torch.tensor(b), torch.tensor(a + 1))
    np.testing.assert_allclose(kl_divergence(ours, q)._value, T.kl_divergence(theirs, qt).numpy(),
                               rtol=1e-10)


def test_beta_sampling_and_gradients() -> None:
    rrandom.seed(4)
    s = Beta(np.float32(2.0), np.float32(5.0)).sample((20000,))._value
    assert s.dtype == np.float32
    _within(s, 2 / 7, math.sqrt(10 / (49 * 8)))
    a, b, x = np.array([1.5, 4.0]), np.array([2.5, 0.8]), np.array([0.3, 0.7])
    rlgrad.check_grads(lambda p, q: Beta(p, q).log_prob(x), order=2)(a, b)
    rlgrad.check_grads(lambda p, q: Beta(p, q).entropy(), order=2)(a, b)
    rlgrad.check_grads(lambda p, q: kl_divergence(Beta(p, q), Beta(b, a)), order=1)(a, b)


# ---- RelaxedOneHotCategorical --------------------------------------------------------------
def test_relaxed_one_hot_rsample_and_log_prob(torch) -> None:  # noqa: ANN001
    T = torch.distributions
    logits = np.array([[0.5, -1.0, 2.0], [0.0, 0.3, 0.1]])
    temp = 0.7
    ours = RelaxedOneHotCategorical(temp, logits=t64(logits, requires_grad=True))
    assert ours.batch_shape == (2,) and ours.event_shape == (3,)
    y = ours.rsample((4,))
    assert y.shape == (4, 2, 3) and y.requires_grad
    np.testing.assert_allclose(y._value.sum(-1), 1.0, rtol=1e-12)
    theirs = T.RelaxedOneHotCategorical(torch.tensor(temp, dtype=torch.float64),
                                        logits=torch.tensor(logits))
    np.testing.assert_allclose(ours.log_prob(y._value)._value,
                               theirs.log_prob(torch.tensor(y._value)).numpy(), rtol=1e-9)


def test_relaxed_one_hot_hard_is_one_hot_with_the_soft_gradient() -> None:
    logits = np.array([0.5, -1.0, 2.0, 0.1])
    w = np.array([1.0, -2.0, 0.5, 3.0])
    grads = []
    soft = None
    for hard in (False, True):
        lg = t64(logits, requires_grad=True)
        y = RelaxedOneHotCategorical(0.5, logits=lg, hard=hard).rsample(
            generator=rrandom.Generator(8))
        if hard:
            assert set(np.unique(y._value)) == {0.0, 1.0} and y._value.sum() == 1.0
            assert int(np.argmax(y._value)) == int(np.argmax(soft))
        else:
            soft = y._value
        (y * w).sum().backward()
        grads.append(lg.grad._value)
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)
    rlgrad.check_grads(lambda lg: RelaxedOneHotCategorical(0.5, logits=lg).rsample(
        (2,), generator=rrandom.Generator(3)), order=2)(logits)


def test_relaxed_one_hot_log_prob_gradients() -> None:
    y = np.array([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1]])
    rlgrad.check_grads(lambda lg, t: RelaxedOneHotCategorical(t, logits=lg).log_prob(y),
                       order=2)(np.array([0.5, -1.0, 0.3]), np.array(0.8))
    rlgrad.check_grads(lambda v: RelaxedOneHotCategorical(0.8, logits=np.zeros(3)).log_prob(v),
                       order=1)(y)


def test_relaxed_one_hot_argmax_follows_the_categorical() -> None:
    probs = np.array([0.2, 0.5, 0.3])
    rrandom.seed(6)
    y = RelaxedOneHotCategorical(1.0, probs=probs).sample((20000,))._value
    freq = np.bincount(np.argmax(y, -1), minlength=3) / 20000
    assert np.all(np.abs(freq - probs) < 5 * np.sqrt(probs * (1 - probs) / 20000))


# ---- validation ----------------------------------------------------------------------------
@pytest.mark.parametrize("make, arg, why", [
    (lambda: Categorical(probs=[0.5, -0.1, 0.6]), "'probs'", "non-negative"),
    (lambda: Categorical(probs=[[0.5, 0.5], [0.0, 0.0]]), "'probs'", "positive, finite sum"),
    (lambda: Categorical(logits=[0.0, np.nan]), "'logits'", "NaN"),
    (lambda: Categorical(logits=[0.0, np.inf]), "'logits'", r"\+inf"),
    (lambda: Categorical(logits=[[0.0, 1.0], [-np.inf, -np.inf]]), "'logits'", "masked"),
    (lambda: Bernoulli(probs=[0.5, 1.2]), "'probs'", r"\[0.0, 1.0\]"),
    (lambda: Normal(0.0, 0.0), "'scale'", "positive"),
    (lambda: Normal(np.zeros(3), np.array([1.0, -1.0, 2.0])), "'scale'", "positive"),
    (lambda: Normal(np.nan, 1.0), "'loc'", "NaN"),
    (lambda: DiagNormal(np.zeros(2), -np.ones(2)), "'scale'", "positive"),
    (lambda: TanhNormal(0.0, -1.0), "'scale'", "positive"),
    (lambda: Beta(0.0, 1.0), "'concentration1'", "positive"),
    (lambda: Beta(1.0, -2.0), "'concentration0'", "positive"),
    (lambda: RelaxedOneHotCategorical(0.0, logits=[0.0, 1.0]), "'temperature'", "positive"),
])
def test_invalid_arguments_raise_value_error_naming_them(make: object, arg: str,
                                                         why: str) -> None:
    with pytest.raises(ValueError, match=f"argument {arg}.*{why}"):
        make()


@pytest.mark.parametrize("dist, value, why", [
    (lambda: Categorical(logits=[0.0, 1.0, 2.0]), 3, r"integer in \[0, 2\]"),
    (lambda: Categorical(logits=[0.0, 1.0, 2.0]), 1.5, r"integer in \[0, 2\]"),
    (lambda: Categorical(logits=[0.0, 1.0, 2.0]), -1, r"integer in \[0, 2\]"),
    (lambda: Bernoulli(probs=0.3), 0.5, "0 or 1"),
    (lambda: Beta(2.0, 2.0), 1.5, r"\[0.0, 1.0\]"),
    (lambda: TanhNormal(0.0, 1.0), -1.5, r"\[-1.0, 1.0\]"),
    (lambda: Normal(0.0, 1.0), np.nan, "NaN"),
    (lambda: RelaxedOneHotCategorical(1.0, probs=[0.5, 0.5]), [0.7, 0.7], "sum to 1"),
    (lambda: DiagNormal(np.zeros(3), np.ones(3)), np.zeros(2), "event shape"),
    (lambda: DiagNormal(np.zeros((2, 3)), np.ones(3)), np.zeros((2, 1)), r"event shape \(3,\)"),
])
def test_values_outside_the_support_raise(dist: object, value: object, why: str) -> None:
    with pytest.raises(ValueError, match=f"log_prob: value.*{why}"):
        dist().log_prob(value)


def test_validation_can_be_switched_off() -> None:
    # per instance
    assert Normal(0.0, -1.0, validate_args=False).scale.item() == -1.0
    d = Categorical(probs=[0.2, 0.2], validate_args=False)  # normalised internally
    np.testing.assert_allclose(d.probs._value, [0.5, 0.5])
    assert d.log_prob(1).item() == pytest.approx(math.log(0.5))
    # globally
    Distribution.set_default_validate_args(False)
    try:
        Beta(-1.0, 1.0)
        Categorical(logits=[np.nan, 0.0])
        assert np.isnan(Normal(0.0, 1.0).log_prob(np.nan).item())
    finally:
        Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        Beta(-1.0, 1.0)
    with pytest.raises(ValueError, match="True or False"):
        Distribution.set_default_validate_args("yes")


def test_constructor_errors() -> None:
    with pytest.raises(ValueError, match="exactly one of probs= or logits="):
        Categorical()
    with pytest.raises(ValueError, match="exactly one of probs= or logits=, got both"):
        Bernoulli(probs=0.5, logits=0.0)
    with pytest.raises(ValueError, match="at least one dimension"):
        Categorical(logits=1.0)
    with pytest.raises(ValueError, match="do not broadcast"):
        Normal(np.zeros(2), np.ones(3))
    with pytest.raises(ValueError, match="reinterpreted_batch_ndims"):
        Independent(Normal(np.zeros(2), np.ones(2)), 2)
    with pytest.raises(NotImplementedError, match="registered pairs"):
        kl_divergence(Normal(0.0, 1.0), Beta(1.0, 1.0))


# ---- properties ----------------------------------------------------------------------------
def test_properties_on_random_parameters() -> None:
    hyp = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    floats = st.floats(-8.0, 8.0, allow_nan=False)

    @hyp.settings(max_examples=40, deadline=None, derandomize=True)
    @hyp.given(st.lists(floats, min_size=2, max_size=6), st.lists(floats, min_size=2, max_size=6))
    def check(a: list[float], b: list[float]) -> None:
        k = min(len(a), len(b))
        p, q = Categorical(logits=t64(a[:k])), Categorical(logits=t64(b[:k]))
        support = p.enumerate_support(expand=False)
        # log_prob is a normalised log-pmf; entropy and KL are its expectations
        lp = p.log_prob(support)._value
        assert np.exp(lp).sum() == pytest.approx(1.0, rel=1e-12)
        assert p.entropy().item() == pytest.approx(-(np.exp(lp) * lp).sum(), rel=1e-9, abs=1e-12)
        kl = kl_divergence(p, q).item()
        assert kl >= -1e-12
        assert kl == pytest.approx((np.exp(lp) * (lp - q.log_prob(support)._value)).sum(),
                                   rel=1e-9, abs=1e-12)
        assert kl_divergence(p, p).item() == pytest.approx(0.0, abs=1e-12)
        m, s = np.array(a[:k]), np.exp(np.array(b[:k]) / 4)
        n, n2 = Normal(t64(m), t64(s)), Normal(t64(m[::-1]), t64(s[::-1]))
        assert np.all(kl_divergence(n, n2)._value >= -1e-12)

    check()


def test_random_seed_also_seeds_layer_initialization() -> None:
    # like torch.manual_seed: one call makes both sampling and a network's initial weights repeat
    from rlgrad import nn

    rlgrad.random.seed(7)
    w1 = nn.Linear(4, 3).weight._value.copy()
    s1 = rlgrad.random.default_generator.numpy.random()
    rlgrad.random.seed(7)
    w2 = nn.Linear(4, 3).weight._value.copy()
    s2 = rlgrad.random.default_generator.numpy.random()
    np.testing.assert_array_equal(w1, w2)
    assert s1 == s2


def test_distributions_trace_under_jit_and_check_eagerly():
    """Traced by rlgrad.jit, Categorical reads each call's actions (not the first call's) and the
    entropy's mask is recomputed; the value checks are skipped while tracing only."""
    import rlgrad
    from rlgrad.distributions import Categorical, Independent, Normal

    def f(logits, a, loc, x):
        c = Categorical(logits=logits)
        n = Independent(Normal(loc, rlgrad.numpy.exp(loc * 0.5)), 1)
        return c.log_prob(a) + c.entropy() + n.log_prob(x)

    step = rlgrad.jit(f)
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 3)).astype(np.float32)
    loc, x = (rng.normal(size=(5, 2)).astype(np.float32) for _ in range(2))
    for a in (np.array([0, 1, 2, 0, 1]), np.array([2, 2, 2, 2, 2])):
        logits[1, 0] = -np.inf if a[0] == 2 else 0.3  # a masked action: entropy's mask changes
        np.testing.assert_allclose(step(logits, a, loc, x),
                                   f(rlgrad.tensor(logits), a, loc, x)._value, rtol=1e-6)
    with pytest.raises(ValueError, match="value must be an integer"):
        Categorical(logits=logits).log_prob(np.array([0, 1, 3, 0, 1]))
    with pytest.raises(ValueError, match="scale"):
        Normal(loc, -np.ones_like(loc))

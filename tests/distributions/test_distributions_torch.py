"""rlgrad.distributions against torch.distributions (torch 2.13): values, gradients, shapes and
validation errors for the same parameters and values."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import distributions as D
from rlgrad.special import erf, erfinv

torch = pytest.importorskip("torch")
td = torch.distributions


def _t(x: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.tensor(np.asarray(x, dtype=np.float64), requires_grad=grad)


def _r(x: np.ndarray) -> rlgrad.Tensor:
    return rlgrad.tensor(np.asarray(x, dtype=np.float64), requires_grad=True)


def _close(a: object, b: object, rtol: float = 1e-10, atol: float = 1e-12) -> None:
    a, b = _np(a), _np(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def _np(x: object) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().numpy()
    if isinstance(x, rlgrad.Tensor):
        return x._value
    return np.asarray(x)


def _grads(out_r: rlgrad.Tensor, params_r: list, out_t: torch.Tensor, params_t: list) -> None:
    """Gradients of sum(out) w.r.t. the parameters, rlgrad vs torch."""
    out_r.sum().backward()
    out_t.sum().backward()
    for pr, pt in zip(params_r, params_t, strict=True):
        _close(pr.grad._value, pt.grad)


# ---- erf / erfinv ------------------------------------------------------------------------------
def test_erf_and_erfinv_match_torch_with_gradients() -> None:
    x = np.linspace(-4, 4, 41)
    _close(erf(x), torch.erf(_t(x)), rtol=1e-14, atol=1e-16)
    y = np.concatenate([np.linspace(-0.999999, 0.999999, 201), [1 - 1e-12, -1 + 1e-15, 1e-300]])
    _close(erfinv(y), torch.erfinv(_t(y)), rtol=1e-13, atol=0)
    _close(erfinv(np.array([1.0, -1.0, 1.5])), torch.erfinv(_t([1.0, -1.0, 1.5])))
    xr, xt = _r(x), _t(x, True)
    _grads(erf(xr), [xr], torch.erf(xt), [xt])
    yr, yt = _r(y[:201]), _t(y[:201], True)
    _grads(erfinv(yr), [yr], torch.erfinv(yt), [yt])


def test_erfinv_second_derivative_matches_finite_differences() -> None:
    y0, h = 0.3, 1e-5
    g = rlgrad.grad(rlgrad.grad(lambda y: erfinv(y)))
    fd = (erfinv(y0 + h) - 2 * erfinv(y0) + erfinv(y0 - h)) / h**2
    assert float(g(y0)) == pytest.approx(float(fd), rel=1e-5)


# ---- Normal.cdf / icdf -------------------------------------------------------------------------
def test_normal_cdf_icdf_match_torch() -> None:
    loc, scale = np.array([0.3, -1.0, 2.0]), np.array([0.5, 2.0, 1.5])
    v = np.array([[0.1, -3.0, 2.5], [1.0, 0.0, -1.0]])
    lr, sr, lt, st = _r(loc), _r(scale), _t(loc, True), _t(scale, True)
    _grads(D.Normal(lr, sr).cdf(v), [lr, sr], td.Normal(lt, st).cdf(_t(v)), [lt, st])
    p = np.array([[0.01, 0.5, 0.99], [0.3, 0.7, 1e-6]])
    lr, sr, lt, st = _r(loc), _r(scale), _t(loc, True), _t(scale, True)
    _grads(D.Normal(lr, sr).icdf(p), [lr, sr], td.Normal(lt, st).icdf(_t(p)), [lt, st])
    q = D.Normal(loc, scale)
    _close(q.cdf(q.icdf(p)), p, rtol=1e-12)


def test_normal_icdf_gradient_wrt_value() -> None:
    pr, pt = _r([0.2, 0.9]), _t([0.2, 0.9], True)
    _grads(D.Normal(1.0, 2.0).icdf(pr), [pr], td.Normal(1.0, 2.0).icdf(pt), [pt])


def test_normal_icdf_outside_unit_interval_raises_one_line() -> None:
    with pytest.raises(ValueError, match=r"Normal.icdf: value must lie in \[0.0, 1.0\]") as e:
        D.Normal(0.0, 1.0).icdf(np.array([0.5, 1.5]))
    assert "\n" not in str(e.value)


# ---- Categorical(probs=) ----------------------------------------------------------------------
def test_categorical_probs_are_normalised_as_torch() -> None:
    p = np.array([[1.0, 2.0, 1.0], [0.2, 0.1, 0.6]])
    pr, pt = _r(p), _t(p, True)
    dr, dt = D.Categorical(probs=pr), td.Categorical(probs=pt)
    _close(dr.probs, dt.probs)
    v = np.array([2, 0])
    _close(dr.log_prob(v), dt.log_prob(torch.tensor(v)))
    _grads(dr.log_prob(v) + dr.entropy(), [pr], dt.log_prob(torch.tensor(v)) + dt.entropy(), [pt])
    with pytest.raises(ValueError, match="'probs' must have a positive, finite sum") as e:
        D.Categorical(probs=[[0.5, 0.5], [0.0, 0.0]])
    assert "\n" not in str(e.value)


# ---- transforms and TransformedDistribution ---------------------------------------------------
def _pair(name: str, *args: object, **kw: object) -> tuple:
    return getattr(D, name)(*args, **kw), getattr(td, name)(*args, **kw)


@pytest.mark.parametrize("name, x", [
    ("TanhTransform", np.array([-3.0, -0.2, 0.0, 0.7, 25.0])),
    ("ExpTransform", np.array([-3.0, -0.2, 0.0, 0.7, 5.0])),
    ("SigmoidTransform", np.array([-30.0, -0.2, 0.0, 0.7, 5.0])),
])
def test_elementwise_transforms_match_torch(name: str, x: np.ndarray) -> None:
    tr, tt = _pair(name)
    xr, xt = _r(x), _t(x, True)
    yr, yt = tr(xr), tt(xt)
    _close(yr, yt)
    _grads(tr.log_abs_det_jacobian(xr, yr) + yr, [xr], tt.log_abs_det_jacobian(xt, yt) + yt, [xt])
    inner = slice(1, 4)  # away from where the forward map rounds to its bound
    _close(tr.inv(yr._value[inner]), tt.inv(_t(yt.detach().numpy()[inner])), rtol=1e-9)
    assert tr.sign == tt.sign and tr.bijective
    assert tr.domain.event_dim == tt.domain.event_dim == tr.codomain.event_dim


def test_affine_transform_with_event_dim_matches_torch() -> None:
    loc, scale = np.array([0.5, -1.0, 2.0]), np.array([2.0, -0.5, 3.0])
    x = np.arange(6.0).reshape(2, 3) / 5
    lr, sr, lt, st = _r(loc), _r(scale), _t(loc, True), _t(scale, True)
    tr = D.AffineTransform(lr, sr, event_dim=1)
    tt = td.AffineTransform(lt, st, event_dim=1)
    yr, yt = tr(x), tt(_t(x))
    _close(yr, yt)
    _close(tr.inv(yr._value), x)
    ladj_r, ladj_t = tr.log_abs_det_jacobian(x, yr), tt.log_abs_det_jacobian(_t(x), yt)
    assert ladj_r.shape == tuple(ladj_t.shape) == (2,)
    _grads(ladj_r + yr.sum(-1), [lr, sr], ladj_t + yt.sum(-1), [lt, st])
    s = D.AffineTransform(1.0, -2.0)
    _close(s.log_abs_det_jacobian(x, s(x)), td.AffineTransform(1.0, -2.0).log_abs_det_jacobian(
        _t(x), _t(x)))
    assert s.sign == -1


def test_compose_transform_matches_torch() -> None:
    x = np.array([[-1.0, 0.3], [2.0, 0.1]])
    parts_r = [D.AffineTransform(0.5, 2.0), D.TanhTransform(), D.AffineTransform(1.0, 3.0)]
    parts_t = [td.AffineTransform(0.5, 2.0), td.TanhTransform(), td.AffineTransform(1.0, 3.0)]
    cr, ct = D.ComposeTransform(parts_r), td.ComposeTransform(parts_t)
    xr, xt = _r(x), _t(x, True)
    yr, yt = cr(xr), ct(xt)
    _close(yr, yt)
    _close(cr.inv(yr._value), x, rtol=1e-9)
    _grads(cr.log_abs_det_jacobian(xr, yr), [xr], ct.log_abs_det_jacobian(xt, yt), [xt])


def _squashed(mu: np.ndarray, std: np.ndarray, eps: np.ndarray) -> tuple:
    """SAC's squashed Gaussian both ways, rlgrad's from rsample() and torch's from the same
    noise (torch's rsample is base.rsample() then the transform, with the same cache)."""
    mr, sr, mt, st = _r(mu), _r(std), _t(mu, True), _t(std, True)
    rlgrad.random.seed(3)
    dr = D.TransformedDistribution(D.Normal(mr, sr), [D.TanhTransform(cache_size=1)])
    yr = dr.rsample()
    tt = td.TanhTransform(cache_size=1)
    dt = td.TransformedDistribution(td.Normal(mt, st), [tt])
    yt = tt(mt + st * _t(eps))
    return (dr, yr, [mr, sr]), (dt, yt, [mt, st])


def test_sac_squashed_gaussian_log_prob_of_rsample_matches_torch() -> None:
    mu, std = np.array([[0.1, -0.5], [22.0, -19.0]]), np.array([[0.5, 1.2], [0.3, 0.2]])
    rlgrad.random.seed(3)
    eps = D.Normal(np.zeros(2), np.ones(2)).sample((2,))._value  # the noise rsample will use
    (dr, yr, pr), (dt, yt, pt) = _squashed(mu, std, eps)
    assert dr.batch_shape == tuple(dt.batch_shape) and dr.event_shape == tuple(dt.event_shape)
    _close(yr, yt)
    lr, lt = dr.log_prob(yr), dt.log_prob(yt)
    assert np.isfinite(lr._value).all()  # tanh rounded to +-1 in the second row: the cache helps
    _close(lr, lt, rtol=1e-9)
    _grads(lr + yr, pr, lt + yt, pt)


def test_transformed_distribution_shapes_and_values_match_torch() -> None:
    loc, scale = np.array([[0.2, -0.3, 1.0]]), np.array([[1.0, 0.5, 2.0]])
    v = np.array([[0.3, 0.9, -0.2], [-0.7, 0.1, 0.5]])
    for event_dim in (0, 1):
        dr = D.TransformedDistribution(D.Normal(loc, scale), [
            D.AffineTransform(0.0, 2.0, event_dim=event_dim), D.SigmoidTransform()])
        dt = td.TransformedDistribution(td.Normal(_t(loc), _t(scale)), [
            td.AffineTransform(0.0, 2.0, event_dim=event_dim), td.SigmoidTransform()])
        assert dr.batch_shape == tuple(dt.batch_shape)
        assert dr.event_shape == tuple(dt.event_shape)
        x = (v + 1) / 2.5
        _close(dr.log_prob(x), dt.log_prob(_t(x)))
        assert dr.sample((4,)).shape == tuple(dt.sample((4,)).shape)
    # a LogNormal the torch way
    dr = D.TransformedDistribution(D.Normal(np.array(0.3), np.array(0.8)), D.ExpTransform())
    dt = td.TransformedDistribution(td.Normal(_t(0.3), _t(0.8)), td.ExpTransform())
    _close(dr.log_prob(np.array([0.5, 2.0])), dt.log_prob(_t([0.5, 2.0])))


def test_transformed_distribution_sample_has_no_graph_and_validates() -> None:
    mu = _r([0.0, 1.0])
    d = D.TransformedDistribution(D.Normal(mu, 1.0), [D.TanhTransform(cache_size=1)])
    y = d.sample()
    assert not y.requires_grad and np.all(np.abs(y._value) <= 1)
    assert np.isfinite(d.log_prob(y)._value).all()
    with pytest.raises(ValueError, match=r"log_prob: value must lie in \[-1.0, 1.0\]") as e:
        d.log_prob(np.array([0.5, 1.5]))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="cache_size must be 0 or 1"):
        D.TanhTransform(cache_size=2)
    with pytest.raises(NotImplementedError):
        _ = d.mean


# ---- Uniform, Gamma, Dirichlet, OneHotCategorical, MultivariateNormal -------------------------
def _compare(name: str, params: list, value: np.ndarray, kw: tuple = (), rtol: float = 1e-9,
             stats: tuple = ("log_prob", "entropy", "mean", "variance")) -> tuple:
    """Every statistic and its gradient w.r.t. the parameters, rlgrad vs torch (a fresh pair
    of distributions from float64 parameters for each); returns the last pair."""
    k = len(params) - len(kw)
    for stat in stats:
        prs, pts = [_r(p) for p in params], [_t(p, True) for p in params]
        dr = getattr(D, name)(*prs[:k], **dict(zip(kw, prs[k:], strict=True)))
        dt = getattr(td, name)(*pts[:k], **dict(zip(kw, pts[k:], strict=True)))
        assert dr.batch_shape == tuple(dt.batch_shape)
        assert dr.event_shape == tuple(dt.event_shape)
        if stat == "log_prob":
            a, b = dr.log_prob(value), dt.log_prob(_t(value))
        elif stat == "entropy":
            a, b = dr.entropy(), dt.entropy()
        else:
            a, b = getattr(dr, stat), getattr(dt, stat)
        _close(a, b, rtol=rtol)
        a.sum().backward()
        b.sum().backward()
        for pr, pt in zip(prs, pts, strict=True):  # no gradient (None) counts as zeros
            gr = np.zeros(pr.shape) if pr.grad is None else pr.grad._value
            gt = np.zeros(pr.shape) if pt.grad is None else pt.grad
            _close(gr, gt, rtol=rtol)
    return dr, dt


def test_uniform_matches_torch() -> None:
    low, high = np.array([[-1.0, 0.5], [0.0, 2.0]]), np.array([[1.0, 3.0], [0.5, 2.5]])
    v = np.array([0.2, 2.2])
    dr, dt = _compare("Uniform", [low, high], v, stats=("entropy", "mean", "variance"))
    v2 = np.array([[0.2, 2.2], [0.1, 2.1]])
    _close(dr.log_prob(v2), dt.log_prob(_t(v2)))
    _close(dr.cdf(v2), dt.cdf(_t(v2)))
    _close(dr.icdf(np.array([0.25, 0.5])), dt.icdf(_t([0.25, 0.5])))
    x = dr.rsample((1000,))
    assert x.shape == (1000, 2, 2) and np.all((x._value >= low) & (x._value < high))
    dr.low.grad = None
    x.sum().backward()  # d/dlow of low + u (high - low) summed = sum(1 - u)
    assert dr.low.grad._value == pytest.approx(1000 - ((x._value - low) / (high - low)).sum(0))
    q = D.Uniform(np.array(-2.0), np.array(3.0))
    qt = td.Uniform(_t(-2.0), _t(3.0))
    _close(D.kl_divergence(dr, q), td.kl_divergence(dt, qt))
    _close(D.kl_divergence(q, dr), td.kl_divergence(qt, dt))  # inf where dr misses q's support
    with pytest.raises(ValueError, match="'low' must be below 'high'") as e:
        D.Uniform(np.array([0.0, 1.0]), np.array([1.0, 1.0]))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"log_prob: value must lie in \[low, high\)"):
        D.Uniform(np.array(0.0), np.array(1.0)).log_prob(1.5)


def test_gamma_matches_torch() -> None:
    a, r = np.array([0.5, 1.0, 3.5]), np.array([2.0, 0.7, 1.3])
    v = np.array([[0.3, 1.2, 4.0], [2.0, 0.0, 0.1]])
    # rtol 1e-8: rlgrad's and torch's digamma differ by a few 1e-10
    dr, dt = _compare("Gamma", [a, r], v, rtol=1e-8)
    _close(dr.mode, dt.mode)
    q, qt = D.Gamma(np.array([1.5]), np.array([0.5])), td.Gamma(_t([1.5]), _t([0.5]))
    _close(D.kl_divergence(dr, q), td.kl_divergence(dt, qt))
    x = dr.sample((20000,))._value
    assert x.shape == (20000, 3) and (x > 0).all()
    np.testing.assert_allclose(x.mean(0), a / r, rtol=0.05)
    assert dr.has_rsample == dt.has_rsample  # (its gradients: test_distributions_more.py)
    with pytest.raises(ValueError, match="argument 'rate' must be positive") as e:
        D.Gamma(1.0, np.array([1.0, -1.0]))
    assert "\n" not in str(e.value)


def test_dirichlet_matches_torch() -> None:
    c = np.array([[0.5, 2.0, 3.0], [1.5, 1.5, 4.0]])
    v = np.array([0.2, 0.3, 0.5])
    dr, dt = _compare("Dirichlet", [c], v, rtol=1e-8)
    _close(dr.mode, dt.mode)
    q, qt = D.Dirichlet(np.array([1.0, 2.0, 1.0])), td.Dirichlet(_t([1.0, 2.0, 1.0]))
    _close(D.kl_divergence(dr, q), td.kl_divergence(dt, qt))
    x = dr.sample((4,))._value
    assert x.shape == (4, 2, 3)
    np.testing.assert_allclose(x.sum(-1), 1.0)
    with pytest.raises(ValueError, match="log_prob: value must be non-negative and sum to 1"):
        dr.log_prob(np.array([0.2, 0.3, 0.6]))
    with pytest.raises(ValueError, match="argument 'concentration' must be positive"):
        D.Dirichlet(np.array([1.0, 0.0]))


def test_one_hot_categorical_matches_torch() -> None:
    logits = np.array([[0.1, -1.0, 2.0], [0.5, 0.5, -0.3]])
    v = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    dr, dt = _compare("OneHotCategorical", [logits], v, kw=("logits",))
    _close(dr.mode, dt.mode)
    _close(dr.enumerate_support(), dt.enumerate_support())
    q = np.array([0.3, 0.3, 0.4])
    _close(D.kl_divergence(dr, D.OneHotCategorical(probs=q)),
           td.kl_divergence(dt, td.OneHotCategorical(probs=_t(q))))
    x = dr.sample((5,))._value
    assert x.shape == (5, 2, 3) and np.all(x.sum(-1) == 1)
    with pytest.raises(ValueError, match="log_prob: value must be one-hot") as e:
        dr.log_prob(np.array([1.0, 1.0, 0.0]))
    assert "\n" not in str(e.value)


_COV = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.5]])


@pytest.mark.parametrize("kw", ["covariance_matrix", "precision_matrix", "scale_tril"])
def test_multivariate_normal_matches_torch(kw: str) -> None:
    loc = np.array([[0.1, -0.2, 0.3], [1.0, 0.0, -1.0]])
    m = {"covariance_matrix": _COV, "precision_matrix": np.linalg.inv(_COV),
         "scale_tril": np.linalg.cholesky(_COV)}[kw]
    v = np.array([[0.5, 0.1, -0.3], [0.0, 0.2, 0.4]])
    dr, dt = _compare("MultivariateNormal", [loc, m], v, kw=(kw,))
    for attr in ("scale_tril", "covariance_matrix", "precision_matrix"):
        _close(getattr(dr, attr), getattr(dt, attr), rtol=1e-9)
    assert dr.rsample((4,)).shape == tuple(dt.rsample((4,)).shape) == (4, 2, 3)


def test_multivariate_normal_rsample_gradient_and_kl_match_torch() -> None:
    loc, lt = np.array([0.1, -0.2, 0.3]), np.linalg.cholesky(_COV)
    lr, sr, lt_t, st = _r(loc), _r(lt), _t(loc, True), _t(lt, True)
    rlgrad.random.seed(5)
    eps = D.Normal(np.zeros(3), np.ones(3)).sample((2,))._value  # the noise rsample will use
    rlgrad.random.seed(5)
    xr = D.MultivariateNormal(lr, scale_tril=sr).rsample((2,))
    xt = lt_t + (st @ _t(eps)[..., None])[..., 0]
    _close(xr, xt)
    _grads(xr * xr, [lr, sr], xt * xt, [lt_t, st])
    q_loc, q_cov = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 0.0]]), np.eye(3) * 0.7 + 0.1
    pr, pt = _r(loc), _t(loc, True)
    qr, qt = _r(q_cov), _t(q_cov, True)
    kr = D.kl_divergence(D.MultivariateNormal(pr, _COV), D.MultivariateNormal(q_loc, qr))
    kt = td.kl_divergence(td.MultivariateNormal(pt, _t(_COV)), td.MultivariateNormal(_t(q_loc), qt))
    _close(kr, kt, rtol=1e-9)
    _grads(kr, [pr, qr], kt, [pt, qt])


def test_multivariate_normal_bad_input_raises_one_line() -> None:
    bad = [
        (lambda: D.MultivariateNormal(np.zeros(2)), "exactly one of"),
        (lambda: D.MultivariateNormal(np.zeros(2), -np.eye(2)), "positive-definite"),
        (lambda: D.MultivariateNormal(np.zeros(2), np.array([[1.0, 0.5], [0.0, 1.0]])),
         "symmetric"),
        (lambda: D.MultivariateNormal(np.zeros(2), scale_tril=np.array([[1.0, 0.5], [0.0, 1.0]])),
         "lower-triangular"),
        (lambda: D.MultivariateNormal(np.zeros(3), np.eye(2)), "shapes"),
    ]
    for make, why in bad:
        with pytest.raises(ValueError, match=why) as e:
            make()
        assert "\n" not in str(e.value)


# ---- second derivatives against finite differences (float64) -----------------------------------
def _second(f: object, x0: float, h: float = 1e-4) -> tuple:
    x = np.float64(x0)  # float64 parameters throughout (a Python float would be float32)
    g2 = float(rlgrad.grad(rlgrad.grad(f))(x))
    fd = (float(f(x + h)) - 2 * float(f(x)) + float(f(x - h))) / h**2
    return g2, fd


_V3 = np.array([0.2, 0.3, 0.5])


@pytest.mark.parametrize("f", [
    lambda m: D.Normal(m, 1.5).cdf(0.4),
    lambda m: D.Normal(0.3, 1.5).icdf(m * 0.1 + 0.2),
    lambda m: D.TransformedDistribution(D.Normal(m, 0.7), [
        D.AffineTransform(0.1, 2.0), D.TanhTransform()]).log_prob(0.6),
    lambda m: D.TransformedDistribution(  # float64 base: torch's promotion keeps float32 loc
        D.Normal(np.float64(0.0), np.float64(1.0)), D.SigmoidTransform()).log_prob(m * 0.1 + 0.3),
    lambda m: D.Gamma(m + 1.0, 0.8).log_prob(1.7) + D.Gamma(m + 1.0, 0.8).entropy(),
    lambda m: D.Dirichlet(m * np.array([1.0, 0.0, 0.0]) + np.array([1.0, 2.0, 3.0])).log_prob(
        _V3) + D.Dirichlet(m * np.array([1.0, 0.0, 0.0]) + np.array([1.0, 2.0, 3.0])).entropy(),
    lambda m: D.Uniform(m - 2.0, m * m + 1.0).entropy(),
    lambda m: D.MultivariateNormal(np.zeros(2), m * np.array([[1.0, 0.3], [0.3, 0.0]])
                                   + np.array([[1.0, 0.0], [0.0, 2.0]])).log_prob(np.ones(2)),
], ids=["cdf", "icdf", "affine-tanh", "sigmoid", "gamma", "dirichlet", "uniform", "mvn"])
def test_second_derivatives_match_finite_differences(f: object) -> None:
    g2, fd = _second(f, 0.35)
    assert g2 == pytest.approx(fd, rel=1e-5, abs=1e-6)


# ---- under rlgrad.jit: masks read at every call --------------------------------------------------
def test_uniform_and_one_hot_log_prob_under_jit_follow_the_value() -> None:
    lo = rlgrad.tensor(np.array([0.0, 1.0]))
    jf = rlgrad.jit(lambda lo, v: D.Uniform(lo, lo + 2.0).log_prob(v))
    _close(jf(lo, rlgrad.tensor(np.array([0.5, 1.5]))), np.log([0.5, 0.5]))
    with np.errstate(divide="ignore"):
        _close(jf(lo, rlgrad.tensor(np.array([0.5, 3.5]))), [np.log(0.5), -np.inf])
    logits = rlgrad.tensor(np.array([[0.1, 0.5, -1.0]]))
    jg = rlgrad.jit(lambda lg, v: D.OneHotCategorical(logits=lg).log_prob(v))
    for k in range(3):
        v = np.eye(3)[k][None]
        _close(jg(logits, rlgrad.tensor(v)), td.OneHotCategorical(logits=_t(logits._value))
               .log_prob(_t(v)))


def test_transformed_cdf_icdf_and_kl_match_torch() -> None:
    loc, scale = np.array([0.2, -0.4]), np.array([0.8, 1.3])
    lr, sr, lt, st = _r(loc), _r(scale), _t(loc, True), _t(scale, True)
    dr = D.TransformedDistribution(D.Normal(lr, sr), [D.AffineTransform(0.5, -2.0),
                                                      D.TanhTransform()])
    dt = td.TransformedDistribution(td.Normal(lt, st), [td.AffineTransform(0.5, -2.0),
                                                        td.TanhTransform()])
    v, p = np.array([0.3, -0.6]), np.array([0.1, 0.8])
    _grads(dr.cdf(v) + dr.icdf(p), [lr, sr], dt.cdf(_t(v)) + dt.icdf(_t(p)), [lt, st])
    q_r = D.TransformedDistribution(D.Normal(np.array(0.0), np.array(1.0)), [
        D.AffineTransform(0.5, -2.0), D.TanhTransform()])
    q_t = td.TransformedDistribution(td.Normal(_t(0.0), _t(1.0)), [
        td.AffineTransform(0.5, -2.0), td.TanhTransform()])
    _close(D.kl_divergence(dr, q_r), td.kl_divergence(dt, q_t))
    other = D.TransformedDistribution(D.Normal(np.array(0.0), np.array(1.0)), D.ExpTransform())
    with pytest.raises(NotImplementedError, match="same transforms"):
        D.kl_divergence(dr, other)
    assert D.TanhTransform() == D.TanhTransform(cache_size=1) != D.ExpTransform()
    assert D.AffineTransform(1.0, 2.0) == D.AffineTransform(1.0, 2.0) != D.AffineTransform(1.0, 3.0)
    assert D.TanhTransform().inv == D.TanhTransform().inv != D.TanhTransform()


def test_float32_parameters_give_float32_results() -> None:
    a = np.array([1.5, 2.0], np.float32)
    for d in [D.Uniform(a - 1, a), D.Gamma(a, a), D.Dirichlet(a), D.OneHotCategorical(logits=a),
              D.MultivariateNormal(a, np.eye(2, dtype=np.float32)),
              D.TransformedDistribution(D.Normal(a, a), [D.AffineTransform(0.5, 2.0),
                                                         D.TanhTransform(cache_size=1)])]:
        x = d.sample()
        assert x.dtype == np.float32 and d.log_prob(x).dtype == np.float32, type(d).__name__
    assert D.Normal(a, a).icdf(np.array([0.3, 0.4], np.float32)).dtype == np.float32

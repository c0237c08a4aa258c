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

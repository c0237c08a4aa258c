"""rlgrad.special: lgamma / digamma / polygamma in NumPy, against math.lgamma, mpmath (when
installed) and finite differences, with gradients of every order."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rlgrad
from rlgrad import special

XS = np.concatenate([
    np.linspace(-9.7, 0.45, 57), np.linspace(0.5, 30.0, 80), np.logspace(-6, 8, 30),
])
XS = XS[XS != np.floor(XS)]  # no poles


def test_gammaln_matches_math_lgamma() -> None:
    got = special.gammaln(XS)
    ref = np.array([math.lgamma(x) for x in XS])
    np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-13)


def test_gammaln_known_values_and_poles() -> None:
    np.testing.assert_allclose(special.gammaln(np.array([1.0, 2.0, 0.5, 10.0])),
                               [0.0, 0.0, 0.5 * math.log(math.pi), math.log(362880.0)],
                               atol=2e-15, rtol=1e-14)
    assert np.all(np.isposinf(special.gammaln(np.array([0.0, -1.0, -7.0]))))


def test_digamma_known_values() -> None:
    euler = 0.5772156649015329
    x = np.array([1.0, 0.5, 2.0, 10.0, -0.5])
    ref = [-euler, -euler - 2 * math.log(2), 1 - euler,
           sum(1 / k for k in range(1, 10)) - euler, -euler - 2 * math.log(2) + 2]
    np.testing.assert_allclose(special.digamma(x), ref, rtol=1e-14, atol=1e-15)
    assert np.all(np.isnan(special.digamma(np.array([0.0, -3.0]))))


def test_trigamma_known_values() -> None:
    x = np.array([1.0, 0.5, 2.0])
    ref = [math.pi**2 / 6, math.pi**2 / 2, math.pi**2 / 6 - 1]
    np.testing.assert_allclose(special.trigamma(x), ref, rtol=1e-14)
    # polygamma(2, 1) = -2 zeta(3)
    np.testing.assert_allclose(special.polygamma(2, np.array(1.0)), -2 * 1.2020569031595942,
                               rtol=1e-14)


def test_polygamma_against_mpmath() -> None:
    mpmath = pytest.importorskip("mpmath")
    xs = XS[np.abs(XS) < 1e5][::3]
    for n in range(4):
        got = special.polygamma(n, xs)
        ref = np.array([float(mpmath.polygamma(n, mpmath.mpf(float(x)))) for x in xs])
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-12, err_msg=f"n={n}")


def test_against_scipy_when_installed() -> None:
    sp = pytest.importorskip("scipy.special")
    np.testing.assert_allclose(special.gammaln(XS), sp.gammaln(XS), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(special.digamma(XS), sp.digamma(XS), rtol=1e-12, atol=1e-12)
    pos = XS[XS > 0]
    np.testing.assert_allclose(special.polygamma(1, pos), sp.polygamma(1, pos), rtol=1e-12)


def test_derivatives_are_the_next_function_by_finite_differences() -> None:
    x = np.array([0.3, 1.7, 4.2, 25.0, -2.5])
    h = 1e-6
    for f, df in [(special.gammaln, special.digamma), (special.digamma, special.trigamma),
                  (special.trigamma, lambda z: special.polygamma(2, z))]:
        fd = (f(x + h) - f(x - h)) / (2 * h)
        np.testing.assert_allclose(df(x), fd, rtol=1e-6, atol=1e-6)


def test_gradients_of_every_order_through_the_engine() -> None:
    x = np.array([0.7, 2.3, 6.0])
    rlgrad.check_grads(lambda z: special.gammaln(z), order=3)(x)
    rlgrad.check_grads(lambda z: special.digamma(z) * z, order=2)(x)
    rlgrad.check_grads(lambda a, b: special.betaln(a, b), order=2)(x, x[::-1] + 0.1)
    g2 = rlgrad.grad(rlgrad.grad(lambda z: special.gammaln(z)))(3.0)
    assert g2 == pytest.approx(math.pi**2 / 6 - 1 - 1 / 4, rel=1e-13)


def test_dtype_is_preserved() -> None:
    x32 = np.array([0.5, 3.0], dtype=np.float32)
    for f in (special.gammaln, special.digamma, special.trigamma):
        assert f(x32).dtype == np.float32
    t = rlgrad.tensor(x32, requires_grad=True)
    special.gammaln(t).sum().backward()
    assert t.grad.dtype == np.float32
    np.testing.assert_allclose(t.grad._value, special.digamma(x32.astype(np.float64)), rtol=1e-6)


def test_xlogy_is_zero_at_zero_with_finite_gradient() -> None:
    x = rlgrad.tensor(np.array([0.0, 2.0]), requires_grad=True)
    y = rlgrad.tensor(np.array([0.0, 3.0]), requires_grad=True)
    out = special.xlogy(x, y)
    np.testing.assert_allclose(out._value, [0.0, 2 * math.log(3.0)])
    out.sum().backward()
    np.testing.assert_allclose(x.grad._value, [0.0, math.log(3.0)])
    np.testing.assert_allclose(y.grad._value, [0.0, 2 / 3])
    np.testing.assert_allclose(special.xlog1py(np.array([0.0, 1.0]), np.array([-1.0, 1.0])),
                               [0.0, math.log(2.0)])


def test_polygamma_rejects_bad_order() -> None:
    with pytest.raises(ValueError, match="non-negative integer"):
        special.polygamma(-1, 1.0)

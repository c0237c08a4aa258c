"""``rlgrad.custom_vjp`` / ``rlgrad.custom_jvp`` (issue 30 section 3), JAX's API: against closed
forms and finite differences (first and second order), under grad, jit and forward mode, and the
one-line errors. jax itself is not a dependency: its documented examples are the spec."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import autograd

X = np.array([-1.3, 0.2, 0.7, 2.1])
Y = np.array([2.0, -1.0, 0.5, 1.5])


# ---- custom_vjp ------------------------------------------------------------------------------
@rlgrad.custom_vjp
def sin_times(x: Any, y: Any) -> Any:
    return rnp.sin(x) * y


def _sin_times_fwd(x: Any, y: Any) -> Any:
    return sin_times(x, y), (rnp.cos(x), rnp.sin(x), y)  # calls itself, as JAX's docs do


def _sin_times_bwd(res: Any, g: Any) -> Any:
    cos_x, sin_x, y = res
    return cos_x * g * y, sin_x * g


sin_times.defvjp(_sin_times_fwd, _sin_times_bwd)


def test_custom_vjp_first_and_second_order_closed_form() -> None:
    gx, gy = rlgrad.grad(lambda x, y: rnp.sum(sin_times(x, y)), (0, 1))(X, Y)
    np.testing.assert_allclose(gx, np.cos(X) * Y, rtol=1e-15)
    np.testing.assert_allclose(gy, np.sin(X), rtol=1e-15)
    # second order goes through bwd's ops and the residuals, as JAX defines it
    hxx = rlgrad.grad(lambda x: rnp.sum(rlgrad.grad(lambda x: rnp.sum(sin_times(x, Y)))(x)))(X)
    np.testing.assert_allclose(hxx, -np.sin(X) * Y, rtol=1e-14)
    hxy = rlgrad.grad(lambda y: rnp.sum(rlgrad.grad(lambda x: rnp.sum(sin_times(x, y)))(X)))(Y)
    np.testing.assert_allclose(hxy, np.cos(X), rtol=1e-14)


def test_custom_vjp_finite_differences_second_order() -> None:
    rlgrad.check_grads(lambda x, y: rnp.sum(sin_times(x, y) ** 2), modes=["rev"], order=2)(X, Y)


def test_custom_vjp_torch_style_backward_and_plain_call() -> None:
    x = rlgrad.tensor(X.copy(), requires_grad=True)
    sin_times(x, rlgrad.tensor(Y)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(X) * Y, rtol=1e-15)
    out = sin_times(X, Y)  # nothing to differentiate: the plain function on arrays
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, np.sin(X) * Y, rtol=1e-15)


@functools.partial(rlgrad.custom_vjp, nondiff_argnums=(0, 1))  # JAX's idiom
def clip_gradient(lo: float, hi: float, x: Any) -> Any:
    return x  # identity forward, clipped backward: JAX's custom_vjp example


clip_gradient.defvjp(lambda lo, hi, x: (x, None),
                     lambda lo, hi, res, g: (rnp.clip(g, lo, hi),))


def test_custom_vjp_nondiff_argnums_clip_gradient() -> None:
    f = rlgrad.custom_vjp(lambda lo, hi, x: x, nondiff_argnums=(0, 1))
    f.defvjp(lambda lo, hi, x: (x, None), lambda lo, hi, res, g: (rnp.clip(g, lo, hi),))
    g = rlgrad.grad(lambda x: rnp.sum(f(-0.5, 0.5, x) * Y))(X)
    np.testing.assert_allclose(g, np.clip(Y, -0.5, 0.5), rtol=0)
    g = rlgrad.grad(lambda x: rnp.sum(clip_gradient(-0.5, 0.5, x) * Y))(X)
    np.testing.assert_allclose(g, np.clip(Y, -0.5, 0.5), rtol=0)


@rlgrad.custom_vjp
def sincos(x: Any) -> Any:
    return rnp.sin(x), rnp.cos(x)


sincos.defvjp(lambda x: (sincos(x), x),
              lambda x, g: (g[0] * rnp.cos(x) - g[1] * rnp.sin(x),))


def test_custom_vjp_tuple_output() -> None:
    def f(x: Any) -> Any:
        s, c = sincos(x)
        return rnp.sum(s * Y + c * c)

    np.testing.assert_allclose(rlgrad.grad(f)(X), np.cos(X) * Y - 2 * np.cos(X) * np.sin(X),
                               rtol=1e-14)
    s, c = sincos(X)
    np.testing.assert_allclose(s, np.sin(X))


def test_custom_vjp_under_jit() -> None:
    step = rlgrad.jit(rlgrad.value_and_grad(lambda x: rnp.sum(sin_times(x, Y))))
    for k in range(3):
        x = X + 0.4 * k
        val, g = step(x)
        assert val == pytest.approx(float(np.sum(np.sin(x) * Y)), rel=1e-14)
        np.testing.assert_allclose(g, np.cos(x) * Y, rtol=1e-14)


def test_custom_vjp_refuses_forward_mode_in_one_line() -> None:
    with pytest.raises(TypeError, match="custom_vjp function sin_times: it defines only a "
                                        "reverse-mode rule") as e:
        rlgrad.jvp(lambda x: sin_times(x, Y), (X,), (np.ones_like(X),))
    assert "\n" not in str(e.value)


def test_custom_vjp_errors_in_one_line() -> None:
    f = rlgrad.custom_vjp(lambda x: x * 2)
    with pytest.raises(AttributeError, match="No VJP defined"):
        rlgrad.grad(lambda x: rnp.sum(f(x)))(X)
    f.defvjp(lambda x: (f(x), None), lambda res, g: g * 2)  # not a tuple
    with pytest.raises(TypeError, match="one cotangent per differentiable argument") as e:
        rlgrad.grad(lambda x: rnp.sum(f(x)))(X)
    assert "\n" not in str(e.value)


# ---- custom_jvp ------------------------------------------------------------------------------
@rlgrad.custom_jvp
def log1pexp(x: Any) -> Any:
    return rnp.log(1.0 + rnp.exp(x))


@log1pexp.defjvp
def _log1pexp_jvp(primals: tuple, tangents: tuple) -> tuple:
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * (1.0 - 1.0 / (1.0 + rnp.exp(x)))  # JAX's docs' stable rule


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def test_custom_jvp_reverse_mode_is_the_transpose() -> None:
    g = rlgrad.grad(lambda x: rnp.sum(log1pexp(x) * Y))(X)
    np.testing.assert_allclose(g, _sigmoid(X) * Y, rtol=1e-14)
    # the point of the rule: finite where the plain derivative is nan (exp overflow)
    with np.errstate(over="ignore"):  # the value's own exp overflows to inf there; the rule is exact
        big = rlgrad.grad(lambda x: rnp.sum(log1pexp(x)))(np.array([1000.0]))
    np.testing.assert_allclose(big, [1.0])


def test_custom_jvp_forward_mode_and_second_order() -> None:
    out, t = rlgrad.jvp(log1pexp, (X,), (Y,))
    np.testing.assert_allclose(out, np.log1p(np.exp(X)), rtol=1e-15)
    np.testing.assert_allclose(t, _sigmoid(X) * Y, rtol=1e-14)
    s = _sigmoid(X)
    h = rlgrad.grad(lambda x: rnp.sum(rlgrad.grad(lambda x: rnp.sum(log1pexp(x)))(x)))(X)
    np.testing.assert_allclose(h, s * (1 - s), rtol=1e-13)
    np.testing.assert_allclose(np.diag(rlgrad.hessian(lambda x: rnp.sum(log1pexp(x)))(X)),
                               s * (1 - s), rtol=1e-13)
    np.testing.assert_allclose(rlgrad.jacfwd(log1pexp)(X), rlgrad.jacrev(log1pexp)(X), rtol=1e-14)
    rlgrad.check_grads(lambda x: rnp.sum(log1pexp(x) ** 2), modes=["rev", "fwd"], order=2)(X)


def test_custom_jvp_nondiff_argnums_and_two_arguments() -> None:
    f = rlgrad.custom_jvp(lambda n, x, y: x**n * y, nondiff_argnums=(0,))

    @f.defjvp
    def f_jvp(n: int, primals: tuple, tangents: tuple) -> tuple:
        (x, y), (tx, ty) = primals, tangents
        return f(n, x, y), n * x ** (n - 1) * y * tx + x**n * ty

    gx, gy = rlgrad.grad(lambda x, y: rnp.sum(f(3, x, y)), (0, 1))(X, Y)
    np.testing.assert_allclose(gx, 3 * X**2 * Y, rtol=1e-14)
    np.testing.assert_allclose(gy, X**3, rtol=1e-14)
    rlgrad.check_grads(lambda x, y: rnp.sum(f(3, x, y)), modes=["rev", "fwd"], order=2)(X, Y)


def test_custom_jvp_under_jit_and_torch_style() -> None:
    step = rlgrad.jit(rlgrad.grad(lambda x: rnp.sum(log1pexp(x))))
    for k in range(3):
        np.testing.assert_allclose(step(X - k), _sigmoid(X - k), rtol=1e-14)
    x = rlgrad.tensor(X.copy(), requires_grad=True)
    (g,) = autograd.grad(log1pexp(x).sum(), x)
    np.testing.assert_allclose(g.numpy(), _sigmoid(X), rtol=1e-14)


def test_custom_jvp_without_rule_is_one_line() -> None:
    f = rlgrad.custom_jvp(lambda x: x * 2)
    with pytest.raises(AttributeError, match="No JVP defined for custom_jvp function") as e:
        rlgrad.grad(lambda x: rnp.sum(f(x)))(X)
    assert "\n" not in str(e.value)

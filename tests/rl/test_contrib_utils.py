"""``rlgrad.rl.contrib.common.utils`` (sb3-contrib's names): the quantile Huber loss and its
gradient against sb3-contrib's on torch, conjugate gradient on NumPy and torch inputs, the
flattened gradient in closed form, and TRPO's rollout-size checks."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import autograd, nn
from rlgrad.rl.contrib import TRPO
from rlgrad.rl.contrib.common.utils import (
    conjugate_gradient_solver,
    flat_grad,
    quantile_huber_loss,
)
from rlgrad.rl.qrdqn import quantile_huber_loss as qrdqn_loss
from rlgrad.rl.qrdqn import quantile_midpoints

SHAPES = [((5, 7), (5, 3)), ((4, 2, 6), (4, 1, 9)), ((4, 2, 6), (4, 2, 5))]


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("summed", [True, False])
def test_quantile_huber_loss_and_gradient_match_sb3_contrib(shapes, summed: bool) -> None:
    th = pytest.importorskip("torch")
    sb3_utils = pytest.importorskip("sb3_contrib.common.utils")
    rng = np.random.default_rng(0)
    cur = rng.normal(size=shapes[0]) * 2
    tgt = rng.normal(size=shapes[1]) * 2
    x = rlgrad.Tensor(cur, requires_grad=True)
    loss = quantile_huber_loss(x, tgt, sum_over_quantiles=summed)
    (grad,) = autograd.grad(loss, [x])
    xt = th.tensor(cur, requires_grad=True)
    want = sb3_utils.quantile_huber_loss(xt, th.tensor(tgt), sum_over_quantiles=summed)
    want.backward()
    np.testing.assert_allclose(float(loss._value), want.item(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad._value), xt.grad.numpy(), rtol=1e-6, atol=1e-9)


def test_quantile_huber_loss_is_qrdqns_and_checks_shapes() -> None:
    rng = np.random.default_rng(1)
    cur, tgt = rng.normal(size=(6, 8)), rng.normal(size=(6, 8))
    got = float(quantile_huber_loss(cur, tgt)._value)
    want = float(qrdqn_loss(rlgrad.Tensor(cur), rlgrad.Tensor(tgt), quantile_midpoints(8))._value)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(float(quantile_huber_loss(np.zeros((1, 10)), np.ones((1, 10)))._value),
                               2.5)
    for a, b in [((1, 4, 4), (1, 4)), ((4, 4), (3, 4)), ((4, 4, 4, 4), (4, 4, 4, 4))]:
        with pytest.raises(ValueError, match="quantile_huber_loss: ") as e:
            quantile_huber_loss(np.zeros(a), np.zeros(b))
        assert "\n" not in str(e.value)


def test_conjugate_gradient_solver_on_numpy_and_torch() -> None:
    a = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    x = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(conjugate_gradient_solver(lambda v: a @ v, a @ x), x, rtol=1e-10)
    th = pytest.importorskip("torch")
    at, xt = th.tensor(a), th.tensor(x)
    got = conjugate_gradient_solver(lambda v: at @ v, at @ xt, max_iter=5)
    assert isinstance(got, th.Tensor)
    np.testing.assert_allclose(got.numpy(), x, rtol=1e-10)


def test_flat_grad_is_the_closed_form() -> None:
    lin = nn.Linear(3, 2)
    w, b = lin.weight._value.copy(), lin.bias._value.copy()
    inp = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    out = (lin(inp) ** 2).sum()
    g = flat_grad(out, [lin.weight, lin.bias, nn.Parameter(np.zeros(4, np.float32))])
    y = inp @ w.T + b  # d/dW sum(y^2) = 2 y^T x, d/db = 2 sum(y)
    want = np.concatenate([(2 * y.T @ inp).ravel(), 2 * y.sum(0)])
    np.testing.assert_allclose(np.asarray(g._value), want, rtol=1e-5)


def test_trpo_rollout_size_checks() -> None:
    with pytest.raises(AssertionError, match="n_steps \\* n_envs must be greater than 1") as e:
        TRPO("MlpPolicy", "Pendulum-v1", n_steps=1)
    assert isinstance(e.value, ValueError) and "\n" not in str(e.value)
    TRPO("MlpPolicy", "Pendulum-v1", n_steps=1, normalize_advantage=False, batch_size=1)
    with pytest.warns(UserWarning, match="batch_size=8 does not divide the rollout"):
        TRPO("MlpPolicy", "Pendulum-v1", n_steps=6, batch_size=8)

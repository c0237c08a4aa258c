"""QR-DQN: its quantile Huber loss against NumPy (value and gradient), its target, and that it
is trainable from the API and the CLI as a DQN subclass."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from np_reference import relu_mlp_np

import rlgrad
from rlgrad import autograd
from rlgrad.rl import ALGORITHMS, QRDQN
from rlgrad.rl.buffers import ReplayBatch
from rlgrad.rl.qrdqn import quantile_huber_loss, quantile_midpoints
from rlgrad.rl.steps import grad_step

ROOT = Path(__file__).resolve().parents[2]


def _qh_numpy(current, target, taus, kappa):
    """The loss and its gradient w.r.t. ``current``, float64, from the formula."""
    u = target[:, None, :] - current[:, :, None]  # (batch, N, N')
    w = np.abs(taus[None, :, None] - (u < 0))
    h = np.where(np.abs(u) <= kappa, 0.5 * u * u, kappa * (np.abs(u) - 0.5 * kappa))
    b, n2 = len(current), target.shape[1]
    loss = (w * h).sum(axis=1).mean()
    grad = -(w * np.clip(u, -kappa, kappa)).sum(axis=2) / (b * n2)
    return loss, grad


@pytest.mark.parametrize("kappa", [1.0, 0.3])
def test_quantile_huber_loss_value_and_gradient_against_numpy(kappa):
    rng = np.random.default_rng(0)
    current = rng.normal(size=(6, 5)) * 2
    target = rng.normal(size=(6, 5)) * 2
    taus = quantile_midpoints(5).astype(np.float64)
    np.testing.assert_allclose(taus, [0.1, 0.3, 0.5, 0.7, 0.9])
    x = rlgrad.tensor(current, requires_grad=True)
    loss = quantile_huber_loss(x, target, taus, kappa)
    (g,) = autograd.grad(loss, [x])
    exp_loss, exp_grad = _qh_numpy(current, target, taus, kappa)
    np.testing.assert_allclose(float(loss._value), exp_loss, rtol=1e-12)
    np.testing.assert_allclose(g._value, exp_grad, rtol=1e-10, atol=1e-14)
    # second check of the gradient: central finite differences of the NumPy loss
    eps, fd = 1e-6, np.zeros_like(current)
    for idx in np.ndindex(current.shape):
        d = np.zeros_like(current)
        d[idx] = eps
        fd[idx] = (_qh_numpy(current + d, target, taus, kappa)[0]
                   - _qh_numpy(current - d, target, taus, kappa)[0]) / (2 * eps)
    np.testing.assert_allclose(g._value, fd, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("double_q", [False, True])
def test_qrdqn_target_and_training_loss(double_q):
    n_q, b = 4, 4  # batch size == n_quantiles: a wrong broadcast would pass silently
    m = QRDQN("CartPole-v1", gamma=0.9, double_q=double_q, seed=0, batch_size=b,
              policy_kwargs={"net_arch": [16], "n_quantiles": n_q})
    rng = np.random.default_rng(1)
    for p in m.q_net_target.parameters():
        p._value += rng.normal(0, 0.5, p.shape).astype(np.float32)
    batch = ReplayBatch(rng.normal(size=(b, 4)).astype(np.float32), rng.integers(0, 2, b),
                        rng.normal(size=(b, 4)).astype(np.float32),
                        rng.normal(size=b).astype(np.float32), np.array([1, 0, 0, 1], bool),
                        np.zeros(b, bool))
    theta_t = relu_mlp_np(m.q_net_target, batch.next_observations).reshape(b, 2, n_q)
    picker = relu_mlp_np(m.q_net, batch.next_observations).reshape(b, 2, n_q) if double_q \
        else theta_t
    a_star = picker.mean(2).argmax(1)
    y = batch.rewards[:, None] + 0.9 * (1 - batch.terminated[:, None]) * theta_t[np.arange(b),
                                                                                 a_star]
    np.testing.assert_allclose(m.td_target(batch), y, rtol=1e-5, atol=1e-5)
    theta = relu_mlp_np(m.q_net, batch.observations).reshape(b, 2, n_q)
    current = theta[np.arange(b), batch.actions]
    exp_loss, d_current = _qh_numpy(current, y, quantile_midpoints(n_q).astype(np.float64), 1.0)
    exp_bias = np.zeros((2, n_q))  # the output bias of (action, quantile)
    for i, a in enumerate(batch.actions):
        exp_bias[a] += d_current[i]
    data = {"obs": batch.observations, "actions": batch.actions, "target": y.astype(np.float32)}
    for compiled in (False, True):  # QRDQN.loss, the training loss, eager and compiled
        loss, _, grads = grad_step(m.loss, m._params, compiled)(data)
        assert float(loss) == pytest.approx(exp_loss, rel=1e-5)
        np.testing.assert_allclose(grads[-1], exp_bias.reshape(-1), rtol=1e-4, atol=1e-6)


def test_qrdqn_is_a_dqn_with_sb3_contrib_defaults_and_the_zoo_preset():
    from rlgrad.rl import load_preset
    from rlgrad.rl.hyperparams import hyperparameters

    assert ALGORITHMS["qrdqn"] is QRDQN
    m = QRDQN("CartPole-v1", seed=0)
    assert m.n_quantiles == 200 and m.q_net[-1].bias.shape == (400,)
    hp = m.get_hyperparams()
    assert hp["learning_rate"] == 5e-5 and hp["exploration_fraction"] == 0.005
    assert hp["max_grad_norm"] is None and hp["buffer_size"] == 1_000_000
    assert m.optimizer.param_groups[0]["eps"] == pytest.approx(0.01 / 32)
    assert hyperparameters(QRDQN)["learning_rate"].default == 5e-5
    assert set(hyperparameters(QRDQN)) == set(hyperparameters(rlgrad.rl.DQN))
    preset = load_preset("qrdqn", "CartPole-v1")
    assert preset["policy_kwargs"] == {"net_arch": [256, 256], "n_quantiles": 10}
    assert preset["n_timesteps"] == 50000 and preset["gradient_steps"] == 128


def test_qrdqn_trains_saves_and_loads_from_the_api(tmp_path):
    kw = dict(learning_starts=200, train_freq=64, gradient_steps=20, batch_size=16,
              policy_kwargs={"net_arch": [32], "n_quantiles": 8})
    m = QRDQN("CartPole-v1", seed=0, **kw).learn(1200)
    assert m._n_updates > 0 and np.isfinite(m.logger.history[-1]["train/loss"])
    m.save(str(tmp_path / "q.safetensors"))
    m2 = QRDQN.load(str(tmp_path / "q.safetensors"))
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_array_equal(m.predict(obs, deterministic=True)[0],
                                  m2.predict(obs, deterministic=True)[0])


def test_qrdqn_from_the_cli(tmp_path):
    run = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-m", "rlgrad.cli", "train", "CartPole-v1", "--algo", "qrdqn",
         "--steps", "600", "--set", "learning_starts=200", "--set", "gradient_steps=4",
         "--set", "policy_kwargs.n_quantiles=6", "--run-dir", str(run), "--no-progress"],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    ckpt = rlgrad.load(run / "checkpoint.safetensors")
    assert ckpt["algo"] == "QRDQN"
    assert ckpt["hyperparams"]["policy_kwargs"] == {"net_arch": [256, 256], "n_quantiles": 6}

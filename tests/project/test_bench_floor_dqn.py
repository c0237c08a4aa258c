"""The hand-written NumPy floor of the DQN benchmark (``bench/_numpy_dqn.py``) computes what it
claims: its backward and its Huber head against central finite differences (float64), its
targets against the formula computed row by row, its Adam's flush of tiny moments."""

from __future__ import annotations

import numpy as np
from bench_floors import load_floor

floor = load_floor("_numpy_dqn")

D, A, H, N = 4, 2, 5, 7


def _net(seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    net = floor.QNet(D, A, H, batch=N, seed=seed, dtype=np.float64)
    net.params += 0.3 * rng.standard_normal(net.params.shape)  # non-zero biases
    x1 = np.ones((N, D + 1))
    x1[:, :D] = rng.standard_normal((N, D))
    return net, x1, rng


def _fd(f, p0: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    out = np.empty_like(p0)
    for i in range(len(p0)):
        e = np.zeros_like(p0)
        e[i] = eps
        out[i] = (f(p0 + e) - f(p0 - e)) / (2 * eps)
    return out


def test_qnet_backward_is_the_gradient_of_its_forward() -> None:
    net, x1, rng = _net(1)
    dq = rng.standard_normal((N, A))
    q = net.forward(x1)
    # some hidden units are off on some rows (the ReLU kink is exercised), not all
    a1 = net.scratch(N)[0][:, :H]
    assert (a1 == 0).any() and (a1 > 0).any()
    got = net.backward(x1, dq).copy()
    p0 = net.params.copy()
    want = _fd(lambda p: float(np.sum(dq * net.forward(x1, p))), p0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(net.forward(x1), q)  # forward(params=...) left self alone


def test_huber_head_is_the_gradient_of_the_loss() -> None:
    rng = np.random.default_rng(2)
    q = rng.standard_normal((N, A)) * 2
    actions = rng.integers(0, A, N)
    y = rng.standard_normal(N)
    rows = np.arange(N)
    d = q[rows, actions] - y
    assert (abs(d) > 1).any() and (abs(d) < 1).any()  # both branches of the Huber loss

    def loss(flat: np.ndarray) -> float:
        return floor.huber_grad(flat.reshape(N, A), actions, y, np.empty((N, A)), rows)

    dq = np.empty((N, A))
    value = floor.huber_grad(q, actions, y, dq, rows)
    h = np.where(abs(d) <= 1, 0.5 * d * d, abs(d) - 0.5)
    assert np.isclose(value, h.mean(), rtol=1e-14)
    np.testing.assert_allclose(dq.ravel(), _fd(loss, q.ravel()), rtol=1e-7, atol=1e-9)


def test_targets_are_the_bootstrapped_max_row_by_row() -> None:
    net = floor.QNet(D, A, H, batch=N, seed=3)
    rng = np.random.default_rng(3)
    rb = floor.Replay(20, D)
    for _ in range(13):
        o, o2 = rng.standard_normal(D), rng.standard_normal(D)
        rb.add(o, o2, int(rng.integers(A)), float(rng.standard_normal()), bool(rng.random() < .3))
    target = net.params + np.float32(0.1)
    idx = rng.integers(0, rb.n, 30)  # with repeats, more distinct rows than one chunk
    got = floor.targets(net, target, rb, idx, 0.9, chunk=4)
    want = [rb.rewards[i] + 0.9 * rb.not_term[i] * net.forward(rb.next_obs[i:i + 1], target).max()
            for i in idx]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_adam_flushes_tiny_moments_every_50_steps() -> None:
    p = np.zeros(4, np.float32)
    opt = floor.FlushAdam(p, 1e-8)
    floor_value = np.finfo(np.float32).tiny * 1e13
    # 1e-20 squared is subnormal (v below the floor, m above); 1e-30: m below it too
    g = np.array([1e-20, 1.0, 1e-30, -1.0], np.float32)
    for _ in range(49):
        opt.step(g, 1e-3)
    assert 0 < opt.v[0] < floor_value and 0 < opt.m[2] < floor_value
    m0, v1 = opt.m[0], opt.v[1]
    opt.step(g, 1e-3)
    assert opt.v[0] == 0 and opt.m[2] == 0  # flushed
    assert np.isclose(opt.m[0], m0 * 0.9 + 1e-21, rtol=1e-5)  # kept
    assert np.isclose(opt.v[1], v1 * 0.999 + 0.001, rtol=1e-6)


def test_train_runs_the_schedule() -> None:
    cfg = {"total": 300, "lr": 1e-3, "batch_size": 8, "buffer_size": 1000,
           "learning_starts": 100, "gamma": 0.99, "target_update_interval": 10,
           "train_freq": 64, "gradient_steps": 4, "exploration_fraction": 0.5,
           "exploration_initial_eps": 1.0, "exploration_final_eps": 0.05,
           "max_grad_norm": 10.0, "hidden": 16}
    res = floor.train(cfg, seed=0)
    # rollouts of 64 until 300 steps (5 of them, 320 steps); trains after the 2nd (128 > 100)
    assert res["steps"] == 320 and res["updates"] == 4 * 4
    assert np.isfinite(res["net"].params).all()

"""The hand-written NumPy floor of the on-policy benchmarks (``bench/_numpy_ppo.py``) computes the
gradients of the losses it claims: its backward against rlgrad's ``grad`` of the same loss
written with ``rlgrad.numpy`` and against central finite differences, float64, and its optimizer
steps against rlgrad's Adam and RMSprop (TensorFlow form)."""

from __future__ import annotations

import numpy as np
import pytest
from bench_floors import load_floor

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import optim

floor = load_floor("_numpy_ppo")

D, A, H, N = 4, 3, 8, 9


def _setup(seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    net = floor.ActorCritic(D, A, H, batch=N, n_envs=2, seed=seed, dtype=np.float64)
    net.params += 0.3 * rng.standard_normal(net.params.shape)  # non-zero biases, larger logits
    x1 = np.ones((N, D + 1))
    x1[:, :D] = rng.standard_normal((N, D))
    lg, v = net.forward(x1)
    logp_all = lg - np.log(np.exp(lg).sum(1, keepdims=True))
    actions = rng.integers(0, A, N)
    b = {"x1": x1, "actions": actions,
         # old log-probabilities and values far enough that some rows are clipped
         "old_logp": logp_all[np.arange(N), actions] + 0.4 * rng.standard_normal(N),
         "old_v": v[:, 0] + 0.5 * rng.standard_normal(N),
         "adv": rng.standard_normal(N), "ret": v[:, 0] + rng.standard_normal(N)}
    return net, b


def _reference_loss(kind: str, b: dict, clip: float, ent: float, vf: float):
    """The loss as a function of the flat parameters, in rlgrad.numpy (differentiable)."""
    sizes = [(D + 1) * 2 * H, (H + 1) * H, (H + 1) * H, (H + 1) * A, H + 1]
    offs = np.cumsum([0, *sizes])
    n = len(b["adv"])
    ones = np.ones((n, 1))
    onehot = np.eye(A)[b["actions"]]

    def loss(p):
        w1, w2a, w2c, w3a, w3c = (p[o0:o1] for o0, o1 in zip(offs[:-1], offs[1:]))
        h1 = rnp.tanh(rnp.dot(b["x1"], rnp.reshape(w1, (D + 1, 2 * H))))
        ha = rnp.tanh(rnp.dot(rnp.concatenate([h1[:, :H], ones], axis=1), rnp.reshape(w2a, (H + 1, H))))
        hc = rnp.tanh(rnp.dot(rnp.concatenate([h1[:, H:], ones], axis=1), rnp.reshape(w2c, (H + 1, H))))
        lg = rnp.dot(rnp.concatenate([ha, ones], axis=1), rnp.reshape(w3a, (H + 1, A)))
        v = rnp.dot(rnp.concatenate([hc, ones], axis=1), rnp.reshape(w3c, (H + 1, 1)))[:, 0]
        logp_all = lg - rnp.log(rnp.sum(rnp.exp(lg), axis=1, keepdims=True))
        logp = rnp.sum(logp_all * onehot, axis=1)
        entropy = -rnp.mean(rnp.sum(rnp.exp(logp_all) * logp_all, axis=1))
        adv = b["adv"]
        if kind == "pg":
            return -rnp.mean(logp * adv) + vf * rnp.mean((b["ret"] - v) ** 2) - ent * entropy
        adv = (adv - adv.mean()) / (adv.std(ddof=0 if kind == "purejaxrl" else 1) + 1e-8)
        ratio = rnp.exp(logp - b["old_logp"])
        surrogate = -rnp.mean(rnp.minimum(ratio * adv, rnp.clip(ratio, 1 - clip, 1 + clip) * adv))
        if kind == "purejaxrl":
            v_clip = b["old_v"] + rnp.clip(v - b["old_v"], -clip, clip)
            value = 0.5 * rnp.mean(rnp.maximum((v - b["ret"]) ** 2, (v_clip - b["ret"]) ** 2))
        else:
            value = rnp.mean((v - b["ret"]) ** 2)
        return surrogate + vf * value - ent * entropy

    return loss


@pytest.mark.parametrize("kind", ["purejaxrl", "sb3", "pg"])
def test_floor_backward_is_the_gradient_of_its_loss(kind: str) -> None:
    net, b = _setup(1)
    clip, ent, vf = 0.2, 0.01, 0.5
    heads = floor.Heads(N, A, dtype=np.float64)
    lg, v = net.forward(b["x1"])
    if kind == "pg":
        dl, dv = heads.pg(lg, v, b, ent, vf)
    else:
        dl, dv = heads.ppo(lg, v, b, clip, ent, vf, kind)
        # the data reach both sides of each kink: clipped and unclipped ratios and values
        logp = (lg - np.log(np.exp(lg).sum(1, keepdims=True)))[np.arange(N), b["actions"]]
        r = np.exp(logp - b["old_logp"])
        assert ((r < 1 - clip) | (r > 1 + clip)).any() and (abs(r - 1) < clip).any()
    got = net.backward(b["x1"], dl, dv).copy()
    loss = _reference_loss(kind, b, clip, ent, vf)
    p0 = net.params.copy()
    want = np.asarray(rlgrad.grad(loss)(p0))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    # central finite differences of the loss on every parameter
    eps = 1e-6
    fd = np.empty_like(p0)
    for i in range(len(p0)):
        e = np.zeros_like(p0)
        e[i] = eps
        fd[i] = (float(loss(p0 + e)) - float(loss(p0 - e))) / (2 * eps)
    np.testing.assert_allclose(got, fd, rtol=1e-5, atol=1e-8)


def test_floor_optimizers_step_as_rlgrads() -> None:
    rng = np.random.default_rng(3)
    p0 = rng.standard_normal(50)
    grads = [rng.standard_normal(50) for _ in range(4)]
    cases = [(floor.Adam, lambda t: optim.Adam([t], lr=0.01, eps=1e-5), 0.7),
             (floor.RMSprop, lambda t: optim.RMSprop([t], lr=0.01, alpha=0.99, eps=1e-5,
                                                     tf_style=True), 0.3)]
    for cls, make, scale in cases:
        p = p0.copy()
        ours = cls(p, eps=1e-5)
        t = rlgrad.tensor(p0.copy(), requires_grad=True)
        theirs = make(t)
        for g in grads:
            ours.step(g, 0.01, scale)
            t.grad = rlgrad.tensor(g * scale)
            theirs.step()
        np.testing.assert_allclose(p, t.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_floor_clip_factors() -> None:
    g = np.array([3.0, 4.0])  # norm 5
    assert floor.clip_factor(g, 0.5, "purejaxrl") == pytest.approx(0.1)  # optax: c / |g|
    assert floor.clip_factor(g, 0.5, "sb3") == pytest.approx(0.5 / (5 + 1e-6))  # torch
    assert floor.clip_factor(g, 10.0, "sb3") == 1.0 and floor.clip_factor(g, None, "sb3") == 1.0

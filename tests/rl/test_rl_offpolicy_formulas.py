"""Formula-level checks of one SAC / DDPG / TD3 update against an independent float64 NumPy
computation: our own forward pass of the networks from their weights (not rlgrad's acting code),
with the minibatch and the noise recorded while ``train(1, batch_size)`` runs on a hand-filled
replay buffer. Checked: the TD target, the critic loss and its last-layer gradient (closed form),
the actor loss and its last-layer-bias gradient (float64 finite differences), SAC's
entropy-coefficient loss and gradient, TD3's delay / clipped double-Q / smoothing noise, and the
Polyak update of the target networks.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from rlgrad import nn
from rlgrad.rl import DDPG, SAC, TD3

OBS, ACT, B, N_ROWS = 4, 2, 16, 40
GAMMA, TAU = 0.8, 0.3
LOG_2PI = float(np.log(2.0 * np.pi))


class Box2(gym.Env):
    """Never stepped: only its spaces matter (a 2-d action, so sums over action dims count)."""

    observation_space = spaces.Box(-1.0, 1.0, (OBS,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (ACT,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(OBS, np.float32), {}

    def step(self, action):
        return np.zeros(OBS, np.float32), 0.0, False, False, {}


# ---- an independent float64 forward pass ------------------------------------------------------
def layers(seq):
    """A Sequential of Linear/ReLU/Tanh as float64 copies: [("lin", W, b) | ("relu",) | ("tanh",)]."""
    out = []
    for mod in seq:
        if isinstance(mod, nn.Linear):
            out.append(("lin", mod.weight._value.astype(np.float64), mod.bias._value.astype(np.float64)))
        elif isinstance(mod, nn.ReLU):
            out.append(("relu",))
        elif isinstance(mod, nn.Tanh):
            out.append(("tanh",))
        else:
            raise AssertionError(f"unexpected layer {mod!r}")
    return out


def forward(ls, x, return_hidden=False):
    x = np.asarray(x, np.float64)
    h = x
    for layer in ls:
        if layer[0] == "lin":
            h = x  # the input of the last Linear seen
            x = x @ layer[1].T + layer[2]
        elif layer[0] == "relu":
            x = np.maximum(x, 0.0)
        else:
            x = np.tanh(x)
    return (x, h) if return_hidden else x


def sac_actor(snap, obs, eps, mu_bias=None):
    """a = tanh(mu + std eps) and log pi(a|s) = sum_i [N(u_i; mu_i, std_i) - log(1 - tanh(u_i)^2)]."""
    h = forward(snap["latent"], obs)
    _, w_mu, b_mu = snap["mu"]
    mu = h @ w_mu.T + (b_mu if mu_bias is None else mu_bias)
    _, w_ls, b_ls = snap["log_std"]
    log_std = np.clip(h @ w_ls.T + b_ls, -20.0, 2.0)
    eps = np.asarray(eps, np.float64)
    u = mu + np.exp(log_std) * eps
    a = np.tanh(u)
    logp = (-0.5 * eps**2 - log_std - 0.5 * LOG_2PI - np.log(1.0 - np.tanh(u) ** 2)).sum(-1)
    return a, logp


def q_values(critic_snap, obs, act):
    x = np.concatenate([np.asarray(obs, np.float64), np.asarray(act, np.float64)], axis=1)
    return [forward(q, x)[:, 0] for q in critic_snap]


def critic_snapshot(critic):
    return [layers(q) for q in critic.q_networks]


def params64(module):
    return [p._value.astype(np.float64) for p in module.parameters()]


def fill_buffer(m, seed=1):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (N_ROWS, OBS)).astype(np.float32)
    nxt = rng.uniform(-1, 1, (N_ROWS, OBS)).astype(np.float32)
    act = rng.uniform(-0.9, 0.9, (N_ROWS, ACT)).astype(np.float32)
    rew = rng.normal(size=N_ROWS).astype(np.float32)
    term = rng.random(N_ROWS) < 0.3
    term[:2] = [True, False]
    m.replay_buffer.add(obs, nxt, act, rew, term, np.zeros(N_ROWS, bool))


def perturb_targets(m, modules):
    """Targets start as copies of the online nets: move them so online != target is visible."""
    rng = np.random.default_rng(2)
    for mod in modules:
        for p in mod.parameters():
            p._value[...] += rng.normal(0.0, 0.05, p._value.shape).astype(np.float32)


def record_batches(m):
    batches, orig = [], m.sample

    def sample(batch_size):
        b = orig(batch_size)
        batches.append(b)
        return b

    m.sample = sample
    return batches


def fd_grad(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def last_linear(seq):
    return [mod for mod in seq if isinstance(mod, nn.Linear)][-1]


def assert_polyak(after_online, before_target, after_target, tau):
    for s, t0, t1 in zip(after_online, before_target, after_target, strict=True):
        np.testing.assert_allclose(t1, tau * s + (1 - tau) * t0, rtol=1e-5, atol=1e-6)
    # the target really moved and is not a copy of the online network
    assert any(not np.allclose(t0, t1) for t0, t1 in zip(before_target, after_target))
    assert any(not np.allclose(s, t1) for s, t1 in zip(after_online, after_target))


# ---- SAC --------------------------------------------------------------------------------------
def make_sac():
    m = SAC(Box2(), learning_starts=0, batch_size=B, tau=TAU, gamma=GAMMA, seed=0,
            ent_coef="auto_0.3", policy_kwargs={"net_arch": [16, 16]})
    fill_buffer(m)
    perturb_targets(m, [m.critic_target])
    return m


def record_eps(m):
    """The standard-normal draws of SAC's actions (the noise of a = tanh(mu + std eps))."""
    m.rng = RecordingRng(m.rng)
    return m.rng.standard_normals


def sac_snapshot(actor):
    return {"latent": layers(actor.latent_pi), "mu": layers([actor.mu])[0],
            "log_std": layers([actor.log_std])[0]}


def sac_target(b, actor_snap, target_snap, alpha, eps, gamma=GAMMA):
    a2, logp2 = sac_actor(actor_snap, b.next_observations, eps)
    q_next = np.min(q_values(target_snap, b.next_observations, a2), axis=0) - alpha * logp2
    return b.rewards + gamma * (1.0 - b.terminated) * q_next


def test_sac_td_target():
    m = make_sac()
    eps = record_eps(m)
    b = m.sample(B)
    y = m.td_target(b, 0.3)
    assert len(eps) == 1 and eps[0].shape == (B, ACT)
    ref = sac_target(b, sac_snapshot(m.actor), critic_snapshot(m.critic_target), 0.3, eps[0])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_sac_one_update():
    m = make_sac()
    actor0, critic0 = sac_snapshot(m.actor), critic_snapshot(m.critic)
    target0, target0_params = critic_snapshot(m.critic_target), params64(m.critic_target)
    log_alpha = float(m.log_ent_coef._value[0])
    alpha, te = np.exp(log_alpha), m.target_entropy
    assert te == -ACT
    batches, eps = record_batches(m), record_eps(m)
    m.train(1, B)
    logs = m.logger.name_to_value
    (b,) = batches
    assert len(eps) == 2  # the actor's a ~ pi(.|s), then the target's a' ~ pi(.|s')

    # entropy coefficient: loss -mean(log_alpha (log pi + target_entropy)), d/dlog_alpha closed form
    a_pi, logp = sac_actor(actor0, b.observations, eps[0])
    assert logs["train/ent_coef_loss"] == pytest.approx(-np.mean(log_alpha * (logp + te)), rel=1e-5)
    np.testing.assert_allclose(m.log_ent_coef.grad._value, [-np.mean(logp + te)], rtol=1e-5)
    assert logs["train/ent_coef"] == pytest.approx(alpha, rel=1e-6)  # used before its own step

    # critics: 0.5 * sum_j mean((Q_j - y)^2); d/d(last bias) = mean(Q_j - y), d/dW = mean((Q_j - y) h)
    y = sac_target(b, actor0, target0, alpha, eps[1])
    qs = q_values(critic0, b.observations, b.actions)
    loss = 0.5 * sum(np.mean((q - y) ** 2) for q in qs)
    assert logs["train/critic_loss"] == pytest.approx(loss, rel=1e-5)
    x = np.concatenate([b.observations, b.actions], axis=1)
    for q_net, q_snap, q in zip(m.critic.q_networks, critic0, qs, strict=True):
        _, h = forward(q_snap, x, return_hidden=True)
        lin = last_linear(q_net)
        np.testing.assert_allclose(lin.bias.grad._value, [np.mean(q - y)], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(lin.weight.grad._value, [np.mean((q - y)[:, None] * h, 0)],
                                   rtol=1e-4, atol=1e-6)

    # actor: mean(alpha log pi(a|s) - min_j Q_j(s, a)) through the critic as updated just before
    critic1 = critic_snapshot(m.critic)

    def actor_loss(mu_bias):
        a, lp = sac_actor(actor0, b.observations, eps[0], mu_bias)
        return np.mean(alpha * lp - np.min(q_values(critic1, b.observations, a), axis=0))

    b_mu = actor0["mu"][2]
    assert logs["train/actor_loss"] == pytest.approx(actor_loss(b_mu), rel=1e-5, abs=1e-6)
    np.testing.assert_allclose(m.actor.mu.bias.grad._value, fd_grad(actor_loss, b_mu),
                               rtol=1e-3, atol=1e-5)
    assert np.abs(m.actor.mu.bias.grad._value).max() > 1e-3  # a gradient that can be wrong

    assert_polyak(params64(m.critic), target0_params, params64(m.critic_target), TAU)


# ---- DDPG / TD3 -------------------------------------------------------------------------------
class RecordingRng:
    """Delegates to the algorithm's NumPy generator and keeps the draws of ``normal`` and
    ``standard_normal``."""

    def __init__(self, rng):
        self._rng, self.normals, self.standard_normals = rng, [], []

    def normal(self, *args, **kwargs):
        x = self._rng.normal(*args, **kwargs)
        self.normals.append(np.array(x, dtype=np.float64))
        return x

    def standard_normal(self, *args, **kwargs):
        x = self._rng.standard_normal(*args, **kwargs)
        self.standard_normals.append(np.array(x, dtype=np.float64))
        return x

    def __getattr__(self, name):
        return getattr(self._rng, name)


def make_td3(algo):
    kw = dict(learning_starts=0, batch_size=B, tau=TAU, gamma=GAMMA, seed=0,
              policy_kwargs={"net_arch": [16, 16]})
    if algo == "td3":  # noise std 0.6 clipped at 0.3: both clips of the smoothing act
        m = TD3(Box2(), target_policy_noise=0.6, target_noise_clip=0.3, **kw)
    else:
        m = DDPG(Box2(), **kw)
    fill_buffer(m)
    perturb_targets(m, [m.critic_target, m.actor_target])
    # mu'(s') near +-1 in some rows, so the clip of the smoothed action to [-1, 1] acts
    last_linear(m.actor_target.mu).bias._value[...] = [2.0, -2.0]
    m.rng = RecordingRng(m.rng)
    return m


def td3_target(b, actor_t, critic_t, noise, clip, gamma=GAMMA):
    a2 = forward(actor_t, b.next_observations)
    if noise is not None:
        a2 = np.clip(a2 + np.clip(noise, -clip, clip), -1.0, 1.0)
    q_next = np.min(q_values(critic_t, b.next_observations, a2), axis=0)
    return b.rewards + gamma * (1.0 - b.terminated) * q_next


def check_critic_step(m, b, critic0, y):
    """Critic loss sum_j mean((Q_j - y)^2) (SB3's TD3: no 1/2) and its last-bias gradient."""
    qs = q_values(critic0, b.observations, b.actions)
    loss = sum(np.mean((q - y) ** 2) for q in qs)
    assert m.logger.name_to_value["train/critic_loss"] == pytest.approx(loss, rel=1e-5)
    for q_net, q in zip(m.critic.q_networks, qs, strict=True):
        np.testing.assert_allclose(last_linear(q_net).bias.grad._value, [2 * np.mean(q - y)],
                                   rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("algo", ["ddpg", "td3"])
def test_ddpg_td3_one_update(algo):
    m = make_td3(algo)
    td3 = algo == "td3"
    assert len(m.critic.q_networks) == (2 if td3 else 1)
    batches = record_batches(m)
    if td3:  # policy_delay=2: the first step updates the critics only, and no target
        actor_before, targets_before = params64(m.actor), params64(m.critic_target)
        targets_before += params64(m.actor_target)
        critic0, critic_t, actor_t = (critic_snapshot(m.critic), critic_snapshot(m.critic_target),
                                      layers(m.actor_target.mu))
        m.train(1, B)
        assert "train/actor_loss" not in m.logger.name_to_value
        y = td3_target(batches[-1], actor_t, critic_t, m.rng.normals[-1], 0.3)
        check_critic_step(m, batches[-1], critic0, y)
        for p0, p1 in zip(actor_before + targets_before,
                          params64(m.actor) + params64(m.critic_target) + params64(m.actor_target)):
            np.testing.assert_array_equal(p0, p1)
    actor0, critic0 = layers(m.actor.mu), critic_snapshot(m.critic)
    actor_t, critic_t = layers(m.actor_target.mu), critic_snapshot(m.critic_target)
    targets0 = params64(m.critic_target) + params64(m.actor_target)
    n_noise = len(m.rng.normals)
    m.train(1, B)
    b = batches[-1]
    assert len(m.rng.normals) == n_noise + td3  # DDPG: no target policy smoothing
    noise = m.rng.normals[-1] if td3 else None
    if td3:
        assert noise.shape == (B, ACT) and np.abs(noise).max() > 0.3  # the clip is exercised
        smoothed = forward(actor_t, b.next_observations) + np.clip(noise, -0.3, 0.3)
        assert np.abs(smoothed).max() > 1.0  # and so is the clip to the action bounds
    y = td3_target(b, actor_t, critic_t, noise, 0.3)
    check_critic_step(m, b, critic0, y)

    # actor: -mean(Q_1(s, mu(s))) through the critic as updated just before
    q1 = critic_snapshot(m.critic)[0]
    b_last = actor0[-2][2]

    def actor_loss(bias):
        ls = list(actor0)
        ls[-2] = ("lin", ls[-2][1], bias)
        return -np.mean(q_values([q1], b.observations, forward(ls, b.observations))[0])

    assert m.logger.name_to_value["train/actor_loss"] == pytest.approx(actor_loss(b_last), rel=1e-5)
    grad = last_linear(m.actor.mu).bias.grad._value
    np.testing.assert_allclose(grad, fd_grad(actor_loss, b_last), rtol=1e-3, atol=1e-6)
    assert np.abs(grad).max() > 1e-4

    online = params64(m.critic) + params64(m.actor)
    assert_polyak(online, targets0, params64(m.critic_target) + params64(m.actor_target), TAU)

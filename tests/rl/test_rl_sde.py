"""gSDE (generalized State-Dependent Exploration): the distribution's density and gradients, and
SAC's exploration noise (held between resets, ``sde_sample_freq``, save/load, a short run)."""

import math

import numpy as np
import pytest

import rlgrad
from rlgrad.distributions import StateDependentNoiseDistribution
from rlgrad.rl import SAC, evaluate

B, F, A = 5, 4, 3


def _numbers(seed=0, full_std=True):
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(B, A))
    latent = rng.normal(size=(B, F))
    log_std = rng.normal(size=(F, A if full_std else 1)) * 0.5 - 0.5
    weights = rng.normal(size=(F, A))
    return mean, latent, log_std, weights


def _closed_form(mean, latent, log_std, actions, squash, eps=1e-6):
    """log p by hand: N(mean, latent^2 @ std^2 + eps) per dimension, SB3's squash correction."""
    std = np.broadcast_to(np.exp(log_std), (F, A))
    var = latent ** 2 @ std ** 2 + eps
    u = np.arctanh(actions) if squash else actions
    lp = (-0.5 * (u - mean) ** 2 / var - 0.5 * np.log(var) - 0.5 * math.log(2 * math.pi)).sum(-1)
    if squash:
        lp -= np.log(1.0 - np.tanh(u) ** 2 + eps).sum(-1)
    return lp


@pytest.mark.parametrize("squash", [False, True])
@pytest.mark.parametrize("full_std", [True, False])
def test_log_prob_matches_closed_form(squash, full_std):
    mean, latent, log_std, weights = _numbers(1, full_std)
    d = StateDependentNoiseDistribution(mean, log_std, latent, squash_output=squash)
    rng = np.random.default_rng(2)
    actions = np.tanh(rng.normal(size=(B, A))) if squash else rng.normal(size=(B, A))
    np.testing.assert_allclose(d.log_prob(actions)._value,
                               _closed_form(mean, latent, log_std, actions, squash), rtol=1e-10)
    # a draw: mean + latent @ (std * E), and its log-probability from the pre-tanh value
    a, lp = d.rsample_and_log_prob(weights=weights)
    u = mean + latent @ (np.broadcast_to(np.exp(log_std), (F, A)) * weights)
    np.testing.assert_allclose(a._value, np.tanh(u) if squash else u, rtol=1e-12)
    np.testing.assert_allclose(lp._value, _closed_form(mean, latent, log_std, a._value, squash),
                               rtol=1e-8)
    assert d.log_prob(a)._value.shape == (B,)
    np.testing.assert_allclose(d.mode._value, np.tanh(mean) if squash else mean)


def test_unsquashed_entropy_and_variance():
    mean, latent, log_std, _ = _numbers(3)
    d = StateDependentNoiseDistribution(mean, log_std, latent)
    var = latent ** 2 @ np.exp(log_std) ** 2 + 1e-6
    np.testing.assert_allclose(d.variance._value, var, rtol=1e-12)
    np.testing.assert_allclose(d.entropy()._value, (0.5 * np.log(2 * math.pi * math.e * var)).sum(-1),
                               rtol=1e-12)


def test_per_row_exploration_matrices():
    mean, latent, log_std, _ = _numbers(4)
    w = np.random.default_rng(5).normal(size=(B, F, A))
    d = StateDependentNoiseDistribution(mean, log_std, latent)
    a = d.rsample(weights=w)._value
    for i in range(B):
        np.testing.assert_allclose(a[i], mean[i] + latent[i] @ (np.exp(log_std) * w[i]),
                                   rtol=1e-12)


def test_expln_std():
    mean, latent, _, _ = _numbers(6)
    log_std = np.array([[-1.0, 0.0, 2.0]] * F)
    d = StateDependentNoiseDistribution(mean, log_std, latent, use_expln=True)
    np.testing.assert_allclose(d.std._value[0], [math.exp(-1.0), 1.0, math.log1p(2.0 + 1e-6) + 1])


@pytest.mark.parametrize("squash", [False, True])
def test_log_prob_gradients_match_finite_differences(squash):
    mean, latent, log_std, _ = _numbers(7)
    rng = np.random.default_rng(8)
    actions = np.tanh(rng.normal(size=(B, A))) if squash else rng.normal(size=(B, A))
    m, s, z = (rlgrad.tensor(x, requires_grad=True) for x in (mean, log_std, latent))

    def f(m, s, z):
        return StateDependentNoiseDistribution(m, s, z, squash_output=squash,
                                               learn_features=True).log_prob(actions)

    assert rlgrad.gradcheck(f, (m, s, z), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("learn_features", [False, True])
def test_rsample_loss_gradients_match_finite_differences(learn_features):
    """A SAC-like loss of the reparameterized draw: d/d(mean, log_std, features) through the
    exploration matrix ``std * E``, the variance and the tanh correction."""
    mean, latent, log_std, weights = _numbers(9)
    q = np.random.default_rng(10).normal(size=(B, A))
    m, s, z = (rlgrad.tensor(x, requires_grad=True) for x in (mean, log_std, latent))

    def loss(m, s, z):
        d = StateDependentNoiseDistribution(m, s, z, squash_output=True,
                                            learn_features=learn_features)
        a, lp = d.rsample_and_log_prob(weights=weights)
        return (0.1 * lp - (a * q).sum(-1)).mean()

    # detached features (learn_features=False) get no gradient: checked w.r.t. mean, log_std only
    z.requires_grad = learn_features
    assert rlgrad.gradcheck(loss, (m, s, z), eps=1e-6, atol=1e-7, rtol=1e-5)
    if not learn_features:
        z.requires_grad = True
        loss(m, s, z).backward()
        assert z.grad is None or not np.any(z.grad._value)


def test_matches_stable_baselines3():
    th = pytest.importorskip("torch")
    sb3 = pytest.importorskip("stable_baselines3.common.distributions")
    mean, latent, log_std, weights = _numbers(11)
    ref = sb3.StateDependentNoiseDistribution(A, squash_output=True, learn_features=True)
    ref.latent_sde_dim = F
    tm, ts, tz = (th.tensor(x, requires_grad=True) for x in (mean, log_std, latent))
    ref.proba_distribution(tm, ts, tz)
    ref.exploration_mat = ref.get_std(ts) * th.tensor(weights)
    ref.exploration_matrices = ref.exploration_mat[None]
    a_ref = ref.sample()
    lp_ref = ref.log_prob(a_ref)
    (lp_ref.sum() + a_ref.sum()).backward()
    m, s, z = (rlgrad.tensor(x, requires_grad=True) for x in (mean, log_std, latent))
    d = StateDependentNoiseDistribution(m, s, z, squash_output=True, learn_features=True)
    a, lp = d.rsample_and_log_prob(weights=weights)
    (lp.sum() + a.sum()).backward()
    np.testing.assert_allclose(a._value, a_ref.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(lp._value, lp_ref.detach().numpy(), rtol=1e-7)
    for mine, theirs in ((m, tm), (s, ts), (z, tz)):
        np.testing.assert_allclose(mine.grad._value, theirs.grad.numpy(), rtol=1e-6, atol=1e-9)


# ---- SAC with gSDE --------------------------------------------------------------------------
def _sac(**kw):
    opts = dict(use_sde=True, learning_starts=0, batch_size=32, train_freq=8, gradient_steps=1,
                policy_kwargs={"net_arch": [16, 16], "log_std_init": -1.0}, seed=0)
    opts.update(kw)
    return SAC("MountainCarContinuous-v0", **opts)


def test_actor_shapes_and_deterministic_action():
    m = _sac(policy_kwargs={"net_arch": [16, 8], "log_std_init": -3.67, "full_std": False})
    assert m.actor.log_std.shape == (8, 1)
    np.testing.assert_allclose(m.actor.log_std._value, -3.67)
    obs = np.stack([m.observation_space.sample() for _ in range(4)])
    a, _ = m.predict(obs, deterministic=True)
    h = rlgrad.rl.policies.mlp_numpy(m.actor.latent_pi, obs.astype(np.float32))
    mu = np.clip(rlgrad.rl.policies.mlp_numpy([m.actor.mu], h), -2.0, 2.0)
    np.testing.assert_allclose(a, np.tanh(mu), atol=1e-6)  # through unscale_action


def test_noise_held_between_resets_and_new_after():
    m = _sac()
    obs = np.stack([m.observation_space.sample() for _ in range(1)]).astype(np.float32)
    a1 = m._explore(obs)
    np.testing.assert_array_equal(a1, m._explore(obs))  # same state, same matrix: same action
    m.actor.reset_noise(m.rng, 1)
    assert not np.array_equal(a1, m._explore(obs))
    # the stochastic action is tanh(mu + h @ (std * E)) with the held E
    h = rlgrad.rl.policies.mlp_numpy(m.actor.latent_pi, obs)
    mu = np.clip(rlgrad.rl.policies.mlp_numpy([m.actor.mu], h), -2, 2)
    w = np.exp(m.actor.log_std._value) * m.actor.sde_weights[0]
    np.testing.assert_allclose(m._explore(obs), np.tanh(mu + h @ w), rtol=1e-5)


def _weights_per_step(m, steps):
    """The exploration matrix in force at each environment step of ``learn(steps)``."""
    seen = []
    explore = m._explore

    def spy(obs):
        seen.append(m.actor.sde_weights.copy())
        return explore(obs)

    m._explore = spy
    m.learn(steps)
    return seen


@pytest.mark.parametrize("freq,changes", [
    (-1, [8, 16]),          # a new matrix per rollout (train_freq 8) only
    (3, [3, 6, 8, 11, 14, 16, 19, 22]),  # and every 3 steps within each rollout
])
def test_sde_sample_freq(freq, changes):
    m = _sac(sde_sample_freq=freq)
    seen = _weights_per_step(m, 24)
    assert len(seen) == 24
    new = [i for i in range(1, 24) if not np.array_equal(seen[i], seen[i - 1])]
    assert new == changes


def test_gradient_steps_draw_their_own_matrix_and_train_log_std():
    m = _sac(gradient_steps=4)
    before = m.actor.log_std._value.copy()
    m.learn(64)
    assert not np.array_equal(before, m.actor.log_std._value)
    assert m.logger.name_to_value["train/std"] == pytest.approx(
        float(np.exp(m.actor.log_std._value).mean()))


def test_use_sde_at_warmup():
    m = _sac(learning_starts=16, use_sde_at_warmup=True)
    seen = _weights_per_step(m, 8)
    assert len(seen) == 8  # gSDE actions also while warming up
    m2 = _sac(learning_starts=16)
    assert _weights_per_step(m2, 8) == []  # uniformly random warm-up actions


def test_save_load_same_actions(tmp_path):
    m = _sac(n_envs=2).learn(48)
    path = str(tmp_path / "sde.safetensors")
    m.save(path)
    m2 = SAC.load(path)
    assert m2.use_sde and m2.actor.log_std.shape == m.actor.log_std.shape
    obs = np.stack([m.observation_space.sample() for _ in range(2)]).astype(np.float32)
    np.testing.assert_array_equal(m.predict(obs, deterministic=True)[0],
                                  m2.predict(obs, deterministic=True)[0])
    np.testing.assert_array_equal(m.predict(obs, deterministic=False)[0],
                                  m2.predict(obs, deterministic=False)[0])
    np.testing.assert_array_equal(m._explore(obs), m2._explore(obs))


def test_resumed_run_is_bit_identical(tmp_path):
    full = _sac().learn(96)
    part = _sac().learn(48)
    path = str(tmp_path / "ck.safetensors")
    part.save(path, include_replay_buffer=True)
    resumed = SAC.load(path).learn(48, reset_num_timesteps=False)
    for p, q in zip(full.actor.parameters(), resumed.actor.parameters()):
        np.testing.assert_array_equal(p._value, q._value)


def test_sac_gsde_learns_pendulum():
    model = SAC("Pendulum-v1", use_sde=True, learning_rate=1e-3, learning_starts=200,
                batch_size=128, policy_kwargs={"net_arch": [64, 64], "log_std_init": -2.0},
                seed=0).learn(4000)
    mean, _ = evaluate(model, n_episodes=10)
    assert mean >= -450  # a random policy: about -1200

"""gSDE for A2C and PPO (``use_sde``, ``sde_sample_freq``, ``log_std_init``, ``full_std``,
``use_expln``, ``squash_output``): the ActorCriticPolicy's values, log-probabilities, entropies
and gradients against Stable-Baselines3's own policy with the same weights and the same
exploration matrices, its acting in NumPy against SB3's ``policy(obs)``, SB3's argument checks,
the noise schedule of a rollout, and SAC's SB3 methods (``policy.reset_noise``,
``actor.get_std``)."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import rlgrad
from rlgrad.rl import A2C, PPO, SAC
from rlgrad.rl.policies import ActorCriticPolicy

th = pytest.importorskip("torch")
sb3_policies = pytest.importorskip("stable_baselines3.common.policies")

OBS = spaces.Box(-1.0, 1.0, (5,), np.float32)
ACT = spaces.Box(-2.0, 2.0, (3,), np.float32)
OPTIONS = [dict(full_std=True, use_expln=False, squash_output=False),
           dict(full_std=False, use_expln=False, squash_output=False),
           dict(full_std=True, use_expln=True, squash_output=True),
           dict(full_std=False, use_expln=True, squash_output=True)]


def _pair(opts, log_std_init=-0.5):
    """rlgrad's and SB3's gSDE ActorCriticPolicy with the same weights (rlgrad's copied)."""
    kw = dict(net_arch=[16, 8], log_std_init=log_std_init, use_sde=True, **opts)
    mine = ActorCriticPolicy(OBS, ACT, init_seed=0, **kw)
    ref = sb3_policies.ActorCriticPolicy(OBS, ACT, lambda _: 1e-3, **kw)
    ref.load_state_dict({k: th.tensor(np.asarray(v)) for k, v in mine.state_dict().items()},
                        strict=True)
    return mine, ref  # (float32: SB3's policy casts observations to it)


def _batch(seed=0, n=7, squash=False):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n, 5)).astype(np.float32)
    actions = rng.uniform(-0.95, 0.95, (n, 3)) if squash else rng.normal(size=(n, 3))
    return obs, actions.astype(np.float32)


@pytest.mark.parametrize("opts", OPTIONS)
def test_evaluate_actions_values_and_gradients_match_sb3(opts):
    mine, ref = _pair(opts)
    obs, actions = _batch(1, squash=opts["squash_output"])
    v_ref, lp_ref, ent_ref = ref.evaluate_actions(th.tensor(obs), th.tensor(actions))
    v, lp, ent = mine.evaluate_actions(rlgrad.tensor(obs), actions)
    np.testing.assert_allclose(v._value, v_ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lp._value, lp_ref.detach().numpy(), rtol=1e-5)
    if opts["squash_output"]:  # no closed form: None, as SB3's (the loop uses -log_prob)
        assert ent is None and ent_ref is None
        loss, loss_ref = lp.sum(), lp_ref.sum()
    else:
        np.testing.assert_allclose(ent._value, ent_ref.detach().numpy(), rtol=1e-5)
        loss, loss_ref = lp.sum() + 0.3 * ent.sum(), lp_ref.sum() + 0.3 * ent_ref.sum()
    loss.backward()
    loss_ref.backward()
    ref_params = dict(ref.named_parameters())
    for name, p in mine.named_parameters():
        g_ref = ref_params[name].grad
        if g_ref is None:  # the value towers: not in the loss
            assert p.grad is None, name
            continue
        np.testing.assert_allclose(p.grad._value, g_ref.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=name)
    assert np.abs(mine.log_std.grad._value).sum() > 0


@pytest.mark.parametrize("opts", OPTIONS)
def test_acting_matches_sb3_with_the_same_exploration_matrices(opts):
    mine, ref = _pair(opts, log_std_init=-1.0)
    obs, _ = _batch(2, n=4)
    mine.reset_noise(4, np.random.default_rng(3))
    # SB3's matrices are std * E: give it rlgrad's E
    std = th.tensor(mine.sde_std())
    ref.action_dist.exploration_matrices = std * th.tensor(mine.sde_weights)
    with th.no_grad():
        a_ref, v_ref, lp_ref = ref(th.tensor(obs))
    actions, values, log_prob = mine.act(obs, np.random.default_rng(0))
    np.testing.assert_allclose(actions, a_ref.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values, v_ref.numpy()[:, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_prob, lp_ref.numpy(), rtol=1e-5, atol=1e-5)
    # the NumPy log-probability is the Tensor distribution's of the same actions
    np.testing.assert_allclose(log_prob, mine.distribution(rlgrad.tensor(obs)).log_prob(
        actions)._value, rtol=1e-5, atol=1e-5)
    # deterministic: the mean (tanh of it when squashed), as SB3's
    with th.no_grad():
        det_ref = ref(th.tensor(obs), deterministic=True)[0].numpy()
    np.testing.assert_allclose(mine.mode(obs), det_ref, rtol=1e-5, atol=1e-6)


def test_std_shapes_and_expln():
    for full_std, shape in ((True, (8, 3)), (False, (8, 1))):
        p = ActorCriticPolicy(OBS, ACT, net_arch=[8], use_sde=True, full_std=full_std,
                              log_std_init=0.7, init_seed=0)
        assert p.log_std.shape == shape
        np.testing.assert_allclose(p.get_std()._value, np.full((8, 3), np.exp(0.7)), rtol=1e-6)
    p = ActorCriticPolicy(OBS, ACT, net_arch=[8], use_sde=True, use_expln=True,
                          log_std_init=0.7, init_seed=0)
    # expln: log1p(x + eps) + 1 above zero (SB3's)
    np.testing.assert_allclose(p.get_std()._value, np.full((8, 3), np.log1p(0.7 + 1e-6) + 1.0),
                               rtol=1e-6)


def test_argument_checks_as_sb3():
    with pytest.raises(ValueError, match="continuous actions"):
        PPO("MlpPolicy", "CartPole-v1", use_sde=True)
    with pytest.raises(AssertionError, match=r"use_sde=True"):
        PPO("MlpPolicy", "Pendulum-v1", policy_kwargs=dict(squash_output=True))
    p = ActorCriticPolicy(OBS, ACT, net_arch=[8])
    with pytest.raises(AssertionError, match="only available when using gSDE"):
        p.reset_noise()


@pytest.mark.parametrize("freq, resets", [(-1, 2), (4, 4), (3, 6)])
def test_noise_resets_per_rollout_and_every_sde_sample_freq(freq, resets, monkeypatch):
    model = A2C("MlpPolicy", "Pendulum-v1", use_sde=True, sde_sample_freq=freq, n_steps=8,
                seed=0, policy_kwargs=dict(net_arch=[8]))
    seen = []
    real = model.policy.reset_noise

    def spy(n_envs=1, rng=None):
        real(n_envs, rng)
        seen.append(model.policy.sde_weights.copy())

    monkeypatch.setattr(model.policy, "reset_noise", spy)
    model.learn(16)  # two rollouts of 8 steps
    assert len(seen) == resets
    assert all(w.shape == (1, 8, 1) for w in seen)
    assert not any(np.array_equal(a, b) for a, b in zip(seen, seen[1:]))


@pytest.mark.parametrize("cls", [A2C, PPO])
def test_squashed_actions_stored_in_unit_box_sent_unscaled(cls):
    sent = []

    class Spy(gym.Wrapper):
        def step(self, action):
            sent.append(np.array(action))
            return super().step(action)

    kw = {"batch_size": 32} if cls is PPO else {}
    model = cls("MlpPolicy", Spy(gym.make("Pendulum-v1")), use_sde=True, n_steps=32, seed=3, **kw,
                policy_kwargs=dict(squash_output=True, log_std_init=1.0, net_arch=[8]))
    model.learn(32)
    stored = model.rollout_buffer.actions.reshape(-1)
    assert np.abs(stored).max() <= 1.0
    np.testing.assert_allclose(np.concatenate(sent), 2.0 * stored, rtol=1e-6)
    a, _ = model.predict(np.zeros(3, np.float32), deterministic=True)
    assert a.shape == (1,) and -2.0 <= a[0] <= 2.0


def test_sac_policy_reset_noise_and_actor_get_std():
    model = SAC("MlpPolicy", "Pendulum-v1", use_sde=True, seed=0,
                policy_kwargs=dict(net_arch=[8], log_std_init=-2.0))
    model.policy.reset_noise(3)
    assert model.actor.sde_weights.shape == (3, 8, 1)
    np.testing.assert_allclose(model.policy.actor.get_std()._value, np.full((8, 1), np.exp(-2.0)),
                               rtol=1e-6)


class Reach(gym.Env):
    """x in [-1, 1] moved by 0.2 a each step, reward -|x|, 20 steps: a random policy scores
    about -10, one that steers to 0 about -1."""

    observation_space = spaces.Box(-1, 1, (1,), np.float32)
    action_space = spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t = self.np_random.uniform(-1, 1), 0
        return np.array([self.x], np.float32), {}

    def step(self, a):
        self.x = float(np.clip(self.x + 0.2 * float(np.clip(a[0], -1, 1)), -1, 1))
        self.t += 1
        return np.array([self.x], np.float32), -abs(self.x), False, self.t >= 20, {}


def test_a2c_gsde_learns():
    from rlgrad.rl import evaluate_policy

    model = A2C("MlpPolicy", Reach(), use_sde=True, n_steps=8, learning_rate=3e-3, seed=0,
                policy_kwargs=dict(log_std_init=-1, net_arch=[32]))
    env = Reach()
    env.reset(seed=5)
    before, _ = evaluate_policy(model, env, n_eval_episodes=20, deterministic=False)
    model.learn(4000)
    after, _ = evaluate_policy(model, env, n_eval_episodes=20, deterministic=False)
    assert before < -8 and after > -2.5, (before, after)


@pytest.mark.parametrize("env_id, freq, std_shape",
                         [("LunarLanderContinuous-v3", -1, (64, 2)),
                          ("MountainCarContinuous-v0", 16, (64, 1))])
def test_a2c_gsde_presets_build_and_run(env_id, freq, std_shape):
    from rlgrad.rl import make_from_preset

    if env_id.startswith("Lunar"):
        pytest.importorskip("Box2D")
    model, budget = make_from_preset("a2c", env_id, seed=0)
    assert model.use_sde and model.sde_sample_freq == freq and model.n_envs == 4
    assert model.policy.log_std.shape == std_shape and not model.policy.ortho_init
    np.testing.assert_allclose(model.policy.log_std._value, -2.0 if env_id.startswith("Lunar")
                               else 0.0)
    model.learn(4 * 100)
    assert budget in (5_000_000, 100_000)

"""SB3's custom-policy contract in the on-policy loop: a policy class overriding ``forward`` acts
through it (its values reach the rollout and GAE, checked against the closed form), the rollout
buffer's ``size()``; and the off-policy ``model.policy.obs_to_tensor`` / ``actor(obs)``."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from rlgrad.rl import A2C, PPO, SAC
from rlgrad.rl.policies import ActorCriticPolicy


class OneEpisode(gym.Env):
    """Reward 1 at the last of ``max_steps`` steps, 0 before; Box observations and actions."""

    observation_space = spaces.Box(-1, 1, (2,), np.float32)
    action_space = spaces.Box(-1, 1, (2,), np.float32)

    def __init__(self, max_steps):
        self.max_steps, self.t = max_steps, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.max_steps
        return self.observation_space.sample(), float(done), done, False, {}


class ConstantValue(ActorCriticPolicy):
    value = 0.5

    def forward(self, obs, deterministic=False):
        actions, values, log_prob = super().forward(obs, deterministic)
        return actions, values * 0.0 + self.value, log_prob


@pytest.mark.parametrize("cls", [A2C, PPO])
@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.99, 0.9)])
def test_custom_forward_values_reach_gae(cls, gamma, lam):
    n = 16
    kw = {"n_epochs": 1, "batch_size": n} if cls is PPO else {}
    model = cls(ConstantValue, OneEpisode(n), n_steps=n, gamma=gamma, gae_lambda=lam, seed=0,
                policy_kwargs=dict(net_arch=[]), **kw)
    model.learn(n)
    buf, v = model.rollout_buffer, ConstantValue.value
    assert buf.size() == n
    np.testing.assert_allclose(buf.values[:, 0], v)
    rewards = np.zeros(n)
    rewards[-1] = 1.0
    adv = np.zeros(n)
    adv[-1] = rewards[-1] - v  # terminal: no bootstrap
    for t in reversed(range(n - 1)):
        adv[t] = rewards[t] + gamma * v - v + gamma * lam * adv[t + 1]
    np.testing.assert_allclose(buf.advantages[:, 0], adv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(buf.returns[:, 0], adv + v, rtol=1e-5, atol=1e-6)


def test_plain_policy_keeps_the_numpy_actor():
    model = A2C("MlpPolicy", OneEpisode(8), n_steps=8, seed=0)
    assert model._rollout_actor() == model.policy.act


def test_off_policy_obs_to_tensor_and_actor_call():
    model = SAC("MlpPolicy", "Pendulum-v1", seed=0, policy_kwargs=dict(net_arch=[8]))
    obs, vectorized = model.policy.obs_to_tensor(np.zeros(3, np.float32))
    assert tuple(obs.shape) == (1, 3) and not vectorized
    a = model.actor(obs)
    assert tuple(a.shape) == (1, 1) and float(abs(a).max()) <= 1.0
    det = model.actor(obs, deterministic=True)._value
    np.testing.assert_allclose(det, model.actor.numpy(obs._value, None), rtol=1e-6)
    q = model.critic(obs, a)[0]
    assert tuple(q.shape) == (1,)

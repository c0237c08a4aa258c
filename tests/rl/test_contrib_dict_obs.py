"""Dict observations in sb3-contrib's on-policy algorithms: RecurrentPPO and MaskablePPO read a
Dict's entries flattened side by side (as PPO does), in acting and in the loss alike."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import rlgrad
from rlgrad.rl.contrib import MaskablePPO, RecurrentPPO
from rlgrad.rl.contrib.common.envs import InvalidActionEnvDiscrete


class TwoKeys(gym.ObservationWrapper):
    """The observation split into two Dict entries."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        n = box.shape[0] // 2
        self.n = n
        self.observation_space = spaces.Dict({
            "z": spaces.Box(box.low[:n], box.high[:n], dtype=box.dtype),
            "a": spaces.Box(box.low[n:], box.high[n:], dtype=box.dtype)})

    def observation(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        return {"z": obs[:self.n], "a": obs[self.n:]}


class WithExtra(gym.ObservationWrapper):
    """A Discrete observation as entry "z" of a Dict, with a Box entry "a" beside it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.observation_space = spaces.Dict({"z": env.observation_space,
                                              "a": spaces.Box(-1.0, 1.0, (2,), np.float32)})

    def observation(self, obs: int) -> dict[str, object]:
        return {"z": obs, "a": np.array([0.5, -0.5], np.float32)}


def _obs(n: int, dim: int) -> dict[str, np.ndarray]:
    x = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    return {"z": x[:, :dim // 2], "a": x[:, dim // 2:]}, x


def test_maskable_ppo_reads_dict_observations_flattened() -> None:
    env = WithExtra(InvalidActionEnvDiscrete(dim=20, n_invalid_actions=10))
    model = MaskablePPO("MultiInputPolicy", env, n_steps=64, batch_size=32, seed=8).learn(64)
    z = np.array([3, 7, 19, 0])
    a = np.random.default_rng(0).uniform(-1, 1, (4, 2)).astype(np.float32)
    got, _ = model.predict({"z": z, "a": a}, deterministic=True)
    # the space's key order (Gymnasium sorts the keys): a, then z one-hot
    assert list(env.observation_space.spaces) == ["a", "z"]
    x = np.concatenate([a, np.eye(20, dtype=np.float32)[z]], axis=1)
    with rlgrad.no_grad():
        logits = np.asarray(model.policy.distribution(rlgrad.Tensor(x)).logits._value)
    np.testing.assert_array_equal(got, logits.argmax(1))


def test_recurrent_ppo_trains_and_acts_on_dict_observations() -> None:
    env = TwoKeys(gym.make("CartPole-v1"))
    model = RecurrentPPO("MultiInputLstmPolicy", env, n_steps=32, batch_size=32, seed=0,
                         policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]}).learn(64)
    obs, _ = _obs(3, 4)
    actions, (h, c) = model.predict(obs, deterministic=True)
    assert actions.shape == (3,) and h.shape == (1, 3, 8) and c.shape == (1, 3, 8)
    assert model.policy.lstm_actor.input_size == 4

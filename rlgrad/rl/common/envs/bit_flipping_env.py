"""``stable_baselines3.common.envs.bit_flipping_env``: the goal-conditioned test env of HER."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
from gymnasium import Env, spaces
from gymnasium.envs.registration import EnvSpec


class BitFlippingEnv(Env):
    """Flip bits until all ``n_bits`` are ones. Observations are dicts of ``observation``,
    ``achieved_goal`` (both the state) and ``desired_goal`` (all ones), as ``MultiBinary``
    vectors, ``Discrete`` integers (``discrete_obs_space``: bit i is worth 2**i) or uint8
    images of 36x36 pixels (``image_obs_space``: the bits as 0/255 then zeros). An action is a
    bit index, or with ``continuous`` a vector whose positive entries flip their bits. Reward 0
    on reaching the goal (which terminates), else -1; truncated after ``max_steps`` (``n_bits``)."""

    spec = EnvSpec("BitFlippingEnv-v0", "no-entry-point")
    metadata = {"render_modes": ["human", "rgb_array"]}  # (render() draws both)
    state: np.ndarray

    def __init__(self, n_bits: int = 10, continuous: bool = False, max_steps: int | None = None,
                 discrete_obs_space: bool = False, image_obs_space: bool = False,
                 channel_first: bool = True, render_mode: str = "human") -> None:
        super().__init__()
        if discrete_obs_space and image_obs_space:
            raise ValueError("BitFlippingEnv: discrete_obs_space and image_obs_space exclude each "
                             "other; set at most one")
        self.render_mode = render_mode
        self.image_shape = (1, 36, 36) if channel_first else (36, 36, 1)
        if discrete_obs_space:
            sub: spaces.Space = spaces.Discrete(2**n_bits)
        elif image_obs_space:
            sub = spaces.Box(low=0, high=255, shape=self.image_shape, dtype=np.uint8)
        else:
            sub = spaces.MultiBinary(n_bits)
        self.observation_space = spaces.Dict(
            {"observation": sub, "achieved_goal": sub, "desired_goal": sub})
        self._obs_space = spaces.MultiBinary(n_bits)  # draws the initial state
        self.action_space: spaces.Space = (
            spaces.Box(-1, 1, shape=(n_bits,), dtype=np.float32) if continuous
            else spaces.Discrete(n_bits))
        self.continuous = continuous
        self.discrete_obs_space = discrete_obs_space
        self.image_obs_space = image_obs_space
        self.desired_goal = np.ones((n_bits,), dtype=sub.dtype)
        self.max_steps = n_bits if max_steps is None else max_steps
        self.current_step = 0

    def seed(self, seed: int) -> None:
        self._obs_space.seed(seed)

    def convert_if_needed(self, state: np.ndarray) -> int | np.ndarray:
        """A bit vector as this env's observation: itself, an integer or an image."""
        if self.discrete_obs_space:
            return sum(int(b) << i for i, b in enumerate(state))
        if self.image_obs_space:
            image = np.zeros(int(np.prod(self.image_shape)), dtype=np.uint8)
            image[:len(state)] = state.astype(np.uint8) * 255
            return image.reshape(self.image_shape)
        return state

    def convert_to_bit_vector(self, state: int | np.ndarray, batch_size: int) -> np.ndarray:
        """Observations (one, or a batch of ``batch_size``) back to rows of bits."""
        n = len(self.state)
        if isinstance(state, int | np.integer):  # one discrete observation
            ints = np.array(state).reshape(batch_size, -1)
            return ((ints & (1 << np.arange(n))) > 0).astype(int)
        # a batch of discrete observations stays as integers: equal integers are equal bits
        if self.image_obs_space:
            return np.asarray(state).reshape(batch_size, -1)[:, :n] / 255
        return np.asarray(state).reshape(batch_size, -1)

    def _get_obs(self) -> dict[str, int | np.ndarray]:
        return OrderedDict([("observation", self.convert_if_needed(self.state.copy())),
                            ("achieved_goal", self.convert_if_needed(self.state.copy())),
                            ("desired_goal", self.convert_if_needed(self.desired_goal.copy()))])

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[dict[str, int | np.ndarray], dict]:
        if seed is not None:
            self._obs_space.seed(seed)
        self.current_step = 0
        self.state = self._obs_space.sample()
        return self._get_obs(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        flip = np.asarray(action) > 0 if self.continuous else action
        self.state[flip] = 1 - self.state[flip]
        obs = self._get_obs()
        reward = float(self.compute_reward(obs["achieved_goal"], obs["desired_goal"], None).item())
        terminated = reward == 0
        self.current_step += 1
        return obs, reward, terminated, self.current_step >= self.max_steps, {
            "is_success": terminated}

    def compute_reward(self, achieved_goal: int | np.ndarray, desired_goal: int | np.ndarray,
                       _info: dict[str, Any] | None) -> np.ndarray:
        """-1 where the achieved goal differs from the desired one, 0 where they match (float32,
        one per row; goals may be batched, as HER relabels them)."""
        if isinstance(achieved_goal, int | np.integer):
            batch_size = 1
        else:
            single_ndim = 3 if self.image_obs_space else 1
            shape = np.shape(achieved_goal)
            batch_size = shape[0] if len(shape) > single_ndim else 1
        desired = self.convert_to_bit_vector(desired_goal, batch_size)
        achieved = self.convert_to_bit_vector(achieved_goal, batch_size)
        distance = np.linalg.norm(achieved - desired, axis=-1)
        return -(distance > 0).astype(np.float32)

    def render(self) -> np.ndarray | None:
        if self.render_mode == "rgb_array":
            return self.state.copy()
        print(self.state)
        return None

    def close(self) -> None:
        pass

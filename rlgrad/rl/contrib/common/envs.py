"""``sb3_contrib.common.envs``: the identity envs with action masks (``InvalidActionEnv*``,
defined in ``rlgrad.rl.common.envs``) and ``CartPoleNoVelEnv``, CartPole with its two velocities
hidden (rl-baselines3-zoo's ``CartPoleNoVel-v1``, registered under that id on import): a
memoryless policy cannot balance it, a recurrent one can."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.classic_control import CartPoleEnv

from rlgrad.rl.common.envs import (
    InvalidActionEnvDiscrete,
    InvalidActionEnvMultiBinary,
    InvalidActionEnvMultiDiscrete,
)

__all__ = ["CartPoleNoVelEnv", "InvalidActionEnvDiscrete", "InvalidActionEnvMultiBinary",
           "InvalidActionEnvMultiDiscrete"]


class CartPoleNoVelEnv(CartPoleEnv):
    """CartPole observing only the cart position and the pole angle (no velocities)."""

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        high = np.array([self.x_threshold * 2, self.theta_threshold_radians * 2], dtype=np.float32)
        self.observation_space = spaces.Box(-high, high, dtype=np.float32)

    @staticmethod
    def _positions(full: np.ndarray) -> np.ndarray:
        return np.asarray(full, dtype=np.float32)[[0, 2]]

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        return self._positions(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, rew, term, trunc, info = super().step(action)
        return self._positions(obs), rew, term, trunc, info


if "CartPoleNoVel-v1" not in gym.registry:
    gym.register("CartPoleNoVel-v1", entry_point=CartPoleNoVelEnv, max_episode_steps=500,
                 reward_threshold=475.0)

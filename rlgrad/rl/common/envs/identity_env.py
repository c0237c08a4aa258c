"""``stable_baselines3.common.envs.identity_env``: test envs whose reward is 1 when the action
repeats the observation. The next observation is drawn from ``action_space`` (seed it with
``env.action_space.seed(n)``), as SB3 draws it, so seeded runs match SB3's step by step."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class IdentityEnv(gym.Env):
    """Observation and action space alike (``Discrete(dim)`` by default, or ``space``); reward 1
    when the action equals the observation; truncated after ``ep_length`` steps."""

    def __init__(self, dim: int | None = None, space: spaces.Space | None = None,
                 ep_length: int = 100) -> None:
        if space is None:
            space = spaces.Discrete(1 if dim is None else dim)
        elif dim is not None:
            raise ValueError("IdentityEnv: give at most one of 'dim' and 'space', not both")
        self.action_space = self.observation_space = space
        self.ep_length = ep_length
        self.current_step = 0
        self.num_resets = -1  # the reset below makes it 0
        self.reset()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        if seed is not None:
            super().reset(seed=seed)
        self.current_step = 0
        self.num_resets += 1
        self._choose_next_state()
        return self.state, {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        reward = self._get_reward(action)
        self._choose_next_state()
        self.current_step += 1
        return self.state, reward, False, self.current_step >= self.ep_length, {}

    def _choose_next_state(self) -> None:
        self.state = self.action_space.sample()

    def _get_reward(self, action: Any) -> float:
        return 1.0 if np.all(self.state == action) else 0.0

    def render(self, mode: str = "human") -> None:
        pass


class IdentityEnvBox(IdentityEnv):
    """A ``Box(low, high, (1,))`` identity: reward 1 when the action is within ``eps`` of the
    observation."""

    def __init__(self, low: float = -1.0, high: float = 1.0, eps: float = 0.05,
                 ep_length: int = 100) -> None:
        super().__init__(ep_length=ep_length,
                         space=spaces.Box(low=low, high=high, shape=(1,), dtype=np.float32))
        self.eps = eps

    def _get_reward(self, action: Any) -> float:
        a = np.asarray(action)
        return 1.0 if np.all((self.state - self.eps <= a) & (a <= self.state + self.eps)) else 0.0


class IdentityEnvMultiDiscrete(IdentityEnv):
    """A ``MultiDiscrete([dim, dim])`` identity."""

    def __init__(self, dim: int = 1, ep_length: int = 100) -> None:
        super().__init__(ep_length=ep_length, space=spaces.MultiDiscrete([dim, dim]))


class IdentityEnvMultiBinary(IdentityEnv):
    """A ``MultiBinary(dim)`` identity."""

    def __init__(self, dim: int = 1, ep_length: int = 100) -> None:
        super().__init__(ep_length=ep_length, space=spaces.MultiBinary(dim))


class FakeImageEnv(gym.Env):
    """Random uint8 images like Atari's (H, W, C), or (C, H, W) with ``channel_first``; reward 0,
    truncated after 10 steps. Images are drawn from ``observation_space`` (seed it)."""

    def __init__(self, action_dim: int = 6, screen_height: int = 84, screen_width: int = 84,
                 n_channels: int = 1, discrete: bool = True, channel_first: bool = False) -> None:
        self.observation_shape = ((n_channels, screen_height, screen_width) if channel_first
                                  else (screen_height, screen_width, n_channels))
        self.observation_space = spaces.Box(low=0, high=255, shape=self.observation_shape,
                                            dtype=np.uint8)
        self.action_space: spaces.Space = (
            spaces.Discrete(action_dim) if discrete
            else spaces.Box(low=-1, high=1, shape=(5,), dtype=np.float32))
        self.ep_length = 10
        self.current_step = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None
              ) -> tuple[np.ndarray, dict]:
        if seed is not None:
            super().reset(seed=seed)
        self.current_step = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.current_step += 1
        return (self.observation_space.sample(), 0.0, False,
                self.current_step >= self.ep_length, {})

    def render(self, mode: str = "human") -> None:
        pass

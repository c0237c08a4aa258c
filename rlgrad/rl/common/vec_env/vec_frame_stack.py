"""``VecFrameStack``: each copy's last ``n_stack`` observations stacked (``StackedObservations``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad.rl.common.vec_env.stacked_observations import StackedObservations
from rlgrad.rl.vec_env import VecEnv, VecEnvError, VecEnvWrapper


class VecFrameStack(VecEnvWrapper):
    def __init__(self, venv: VecEnv, n_stack: int,
                 channels_order: str | Mapping[str, str] | None = None) -> None:
        space = venv.observation_space
        if not isinstance(space, spaces.Box | spaces.Dict):
            raise VecEnvError(f"VecFrameStack only works with gym.spaces.Box and gym.spaces.Dict "
                              f"observation spaces, got {space}")
        self.stacked_obs = StackedObservations(venv.num_envs, n_stack, space, channels_order)
        super().__init__(venv, observation_space=self.stacked_obs.stacked_observation_space)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rewards, dones, infos = self.venv.step_wait()
        obs, infos = self.stacked_obs.update(obs, dones, infos)
        return obs, rewards, dones, infos

    def reset(self) -> Any:
        return self.stacked_obs.reset(self.venv.reset())


__all__ = ["VecFrameStack"]

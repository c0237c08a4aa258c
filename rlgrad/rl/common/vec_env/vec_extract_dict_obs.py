"""``VecExtractDictObs``: one entry of a Dict observation space as the observations."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad.rl.vec_env import VecEnv, VecEnvError, VecEnvWrapper


class VecExtractDictObs(VecEnvWrapper):
    def __init__(self, venv: VecEnv, key: str) -> None:
        self.key = key
        if not isinstance(venv.observation_space, spaces.Dict):
            raise VecEnvError(f"VecExtractDictObs can only be used with Dict obs space, not "
                              f"{venv.observation_space}")
        super().__init__(venv, observation_space=venv.observation_space.spaces[key])

    def reset(self) -> np.ndarray:
        return self.venv.reset()[self.key]

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, reward, done, infos = self.venv.step_wait()
        for info in infos:
            if "terminal_observation" in info:
                info["terminal_observation"] = info["terminal_observation"][self.key]
        return obs[self.key], reward, done, infos


__all__ = ["VecExtractDictObs"]

"""``VecTransposeImage``: channels-last images (H, W, C) as channels first (C, H, W), what
convolutions take; in a Dict space, every image entry."""

from __future__ import annotations

from copy import copy, deepcopy
from typing import Any, TypeVar, cast

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlgrad.rl.common.preprocessing import is_image_space, is_image_space_channels_first
from rlgrad.rl.common.preprocessing import transpose_image as _transpose_image
from rlgrad.rl.vec_env import VecEnv, VecEnvError, VecEnvWrapper


class VecTransposeImage(VecEnvWrapper):
    def __init__(self, venv: VecEnv, skip: bool = False) -> None:
        space = venv.observation_space
        if not (is_image_space(space) or isinstance(space, spaces.Dict)):
            raise VecEnvError(f"The observation space must be an image or dictionary observation "
                              f"space, got {space}")
        self.skip = skip
        if skip:
            super().__init__(venv)
            return
        if isinstance(space, spaces.Dict):
            self.image_space_keys = [k for k, s in space.spaces.items() if is_image_space(s)]
            space = spaces.Dict({k: self.transpose_space(cast(spaces.Box, s), k) if k in self.image_space_keys
                                 else deepcopy(s) for k, s in space.spaces.items()})
        else:
            space = self.transpose_space(cast(spaces.Box, space))  # an image space: a Box
        super().__init__(venv, observation_space=space)

    @staticmethod
    def transpose_space(observation_space: spaces.Box, key: str = "") -> spaces.Box:
        if not is_image_space(observation_space):
            raise VecEnvError(f"The observation space {key} must be an image")
        if is_image_space_channels_first(observation_space):
            raise VecEnvError(f"The observation space {key} must follow the channel last "
                              "convention")
        height, width, channels = observation_space.shape
        return spaces.Box(low=0, high=255, shape=(channels, height, width),
                          dtype=observation_space.dtype)

    @staticmethod
    def transpose_image(image: np.ndarray) -> np.ndarray:
        return _transpose_image(image)

    def transpose_observations(self, observations: Any) -> Any:
        if self.skip:
            return observations
        if isinstance(observations, dict):
            # SB3's deepcopy of the dict, then its image entries transposed (each entry copied
            # on its own: an array's deepcopy is its copy)
            out = copy(observations)
            for k, v in out.items():
                v = _deep_copy(v)
                out[k] = self.transpose_image(v) if k in self.image_space_keys else v
            return out
        return self.transpose_image(observations)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rewards, dones, infos = self.venv.step_wait()
        for i in np.flatnonzero(dones) if np.count_nonzero(dones) else ():  # (most: none done)
            if "terminal_observation" in infos[i]:
                infos[i]["terminal_observation"] = self.transpose_observations(
                    infos[i]["terminal_observation"])
        return self.transpose_observations(obs), rewards, dones, infos

    def reset(self) -> Any:
        return self.transpose_observations(self.venv.reset())


_E = TypeVar("_E")


def _deep_copy(v: Any) -> Any:
    """``deepcopy(v)``: for an array of numbers its copy, without deepcopy's dispatch (a few
    microseconds of every step of a Dict-observation rollout)."""
    return v.copy() if type(v) is np.ndarray and v.dtype != object else deepcopy(v)


def _channels_last(space: spaces.Space) -> bool:
    return (isinstance(space, spaces.Box) and is_image_space(space)
            and not is_image_space_channels_first(space))


def wrap_channels_last(env: _E) -> _E | VecTransposeImage:
    """SB3's ``_wrap_env`` rule: an environment instance or VecEnv whose images (or a Dict's
    image entries) are channels last comes back in a ``VecTransposeImage`` (a gym.Env first in a
    ``DummyVecEnv``); anything else comes back as it is."""
    from rlgrad.rl.vec_env import DummyVecEnv, is_vecenv_wrapped

    space = getattr(env, "observation_space", None)
    if isinstance(env, str) or space is None:
        return env
    subs = space.spaces.values() if isinstance(space, spaces.Dict) else [space]
    if not any(_channels_last(s) for s in subs):
        return env
    if isinstance(env, VecEnv):
        return env if is_vecenv_wrapped(env, VecTransposeImage) else VecTransposeImage(env)
    if not isinstance(env, gym.Env):  # (a Gymnasium vector env: left to its own wrappers)
        return env
    return VecTransposeImage(DummyVecEnv([lambda: env]))


__all__ = ["VecTransposeImage", "wrap_channels_last"]

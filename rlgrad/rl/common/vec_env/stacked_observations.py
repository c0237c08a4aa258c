"""``StackedObservations``: the last ``n_stack`` observations of each copy side by side, on the
channel axis of an image (first or last, found from the space unless ``channels_order`` says)
or the last axis of a vector; a Dict space stacks each entry."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad.rl.common.preprocessing import is_image_space, is_image_space_channels_first
from rlgrad.rl.vec_env import VecEnvError


class StackedObservations:
    """The stacks of ``num_envs`` copies; ``stacked_observation_space`` is one stack's space."""

    def __init__(self, num_envs: int, n_stack: int, observation_space: spaces.Box | spaces.Dict,
                 channels_order: str | Mapping[str, str | None] | None = None) -> None:
        self.n_stack = n_stack
        self.observation_space = observation_space
        if isinstance(observation_space, spaces.Dict):
            if not isinstance(channels_order, Mapping):
                channels_order = dict.fromkeys(observation_space.spaces, channels_order)
            self.sub_stacked_observations = {
                key: StackedObservations(num_envs, n_stack, sub, channels_order[key])  # type: ignore[arg-type]
                for key, sub in observation_space.spaces.items()}
            self.stacked_observation_space: spaces.Space = spaces.Dict(
                {k: s.stacked_observation_space for k, s in self.sub_stacked_observations.items()})
        elif isinstance(observation_space, spaces.Box):
            if isinstance(channels_order, Mapping):
                raise TypeError("When the observation space is Box, channels_order can't be a dict.")
            (self.channels_first, self.stack_dimension, self.stacked_shape,
             self.repeat_axis) = self.compute_stacking(n_stack, observation_space, channels_order)
            low = np.repeat(observation_space.low, n_stack, axis=self.repeat_axis)
            high = np.repeat(observation_space.high, n_stack, axis=self.repeat_axis)
            self.stacked_observation_space = spaces.Box(low=low, high=high,
                                                        dtype=observation_space.dtype)
            self.stacked_obs = np.zeros((num_envs, *self.stacked_shape),
                                        dtype=observation_space.dtype)
        else:
            raise TypeError("StackedObservations only supports Box and Dict as observation "
                            f"spaces. {observation_space} was provided.")

    @staticmethod
    def compute_stacking(n_stack: int, observation_space: spaces.Box,
                         channels_order: str | None = None) -> tuple[bool, int, tuple[int, ...], int]:
        """(channels first, the stacking axis of a batch, one stack's shape, the axis of one
        observation that grows)."""
        if channels_order is None:
            first = (is_image_space(observation_space)
                     and is_image_space_channels_first(observation_space))
        elif channels_order in ("last", "first"):
            first = channels_order == "first"
        else:
            raise VecEnvError(f"`channels_order` must be one of following: 'last', 'first', got "
                              f"{channels_order!r}")
        repeat_axis = 0 if first else -1
        shape = list(observation_space.shape)
        shape[repeat_axis] *= n_stack
        return first, 1 if first else -1, tuple(shape), repeat_axis

    def reset(self, observation: Any) -> Any:
        """Empty stacks ending with ``observation``."""
        if isinstance(observation, dict):
            return {k: self.sub_stacked_observations[k].reset(o) for k, o in observation.items()}
        self.stacked_obs[...] = 0
        k = observation.shape[self.stack_dimension]
        if self.channels_first:
            self.stacked_obs[:, -k:, ...] = observation
        else:
            self.stacked_obs[..., -k:] = observation
        return self.stacked_obs

    def update(self, observations: Any, dones: np.ndarray, infos: list[dict[str, Any]]
               ) -> tuple[Any, list[dict[str, Any]]]:
        """Push ``observations``; a finished copy's stack restarts, and its
        ``terminal_observation`` becomes the stack it ended with."""
        if isinstance(observations, dict):
            return self._update_dict(observations, dones, infos)
        k = observations.shape[self.stack_dimension]
        self.stacked_obs = np.roll(self.stacked_obs, -k, axis=self.stack_dimension)
        for i in np.flatnonzero(dones):
            if "terminal_observation" in infos[i]:
                prev = (self.stacked_obs[i, :-k, ...] if self.channels_first
                        else self.stacked_obs[i, ..., :-k])
                infos[i]["terminal_observation"] = np.concatenate(
                    (prev, infos[i]["terminal_observation"]), axis=self.repeat_axis)
            else:
                warnings.warn("VecFrameStack wrapping a VecEnv without terminal_observation info",
                              stacklevel=3)
            self.stacked_obs[i] = 0
        if self.channels_first:
            self.stacked_obs[:, -k:, ...] = observations
        else:
            self.stacked_obs[..., -k:] = observations
        return self.stacked_obs, infos

    def _update_dict(self, observations: dict[str, np.ndarray], dones: np.ndarray,
                     infos: list[dict[str, Any]]) -> tuple[dict[str, np.ndarray], list[dict]]:
        out = {}
        for key, obs in observations.items():
            sub_infos = [{"terminal_observation": info["terminal_observation"][key]}
                         if "terminal_observation" in info else {} for info in infos]
            out[key], sub_infos = self.sub_stacked_observations[key].update(obs, dones, sub_infos)
            for info, sub in zip(infos, sub_infos, strict=True):
                if "terminal_observation" in info:
                    info["terminal_observation"][key] = sub["terminal_observation"]
        return out, infos


__all__ = ["StackedObservations"]

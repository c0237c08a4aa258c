"""Gymnasium's ``SyncVectorEnv`` for one environment, with a shorter ``step``.

Off-policy presets (DQN on CartPole) step one environment per call: there the generic loop of
``SyncVectorEnv.step`` (the action iterator's dispatch, ``np.stack`` of a one-item list, the
``deepcopy`` of the batch, the NEXT_STEP checks per environment) costs more than CartPole's own
step (~7 us of ~13). ``OneEnvSyncVectorEnv`` is a ``SyncVectorEnv`` (everything else, reset,
checkpoints of its sub-environment, ``envs``, ``call``, is inherited) whose ``step`` does the
same operations on the one environment in a straight line, keeping its own state (whether the
next step is the reset, and its observation batch: not ``SyncVectorEnv``'s private fields),
returning the same values: the same
observation batch (a copy when ``copy``), rewards, termination and truncation arrays (copies) and
info dict, with NEXT_STEP autoreset (a done step's observation is the final one, the next step
resets and reports reward 0, not done) or SAME_STEP (a done step resets at once, the final
observation and info in ``final_obs`` / ``final_info``). A Dict of such spaces (HER's goals) is
batched entry by entry, as Gymnasium's ``concatenate`` does. ``DISABLED`` and observation spaces
whose batching is not a plain ``np.stack`` (Tuple, nested Dicts, ...) take
``SyncVectorEnv.step`` itself.
``tests/rl/test_one_env.py`` checks it step for step against ``SyncVectorEnv``.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import create_empty_array

_STACKED = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


class OneEnvSyncVectorEnv(SyncVectorEnv):
    """``SyncVectorEnv`` of exactly one environment (see the module docstring)."""

    def __init__(self, env_fns: Any, **kwargs: Any) -> None:
        super().__init__(env_fns, **kwargs)
        if self.num_envs != 1:
            raise ValueError(f"OneEnvSyncVectorEnv steps one environment, got {self.num_envs}: "
                             "use gymnasium.vector.SyncVectorEnv for several")
        # the straight line covers SyncVectorEnv's step where that is these operations:
        # NEXT_STEP, observations batched by np.stack, actions iterated by iter() (Box /
        # MultiDiscrete / MultiBinary batch spaces)
        self._same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        space = self.single_observation_space
        # a Dict of such spaces (HER's goals): batched entry by entry, each by np.stack
        self._keys = tuple(space.spaces) if (type(space) is spaces.Dict and space.spaces and all(
            type(s) in _STACKED for s in space.spaces.values())) else None
        self._short = (self.autoreset_mode in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
                       and (type(space) in _STACKED or self._keys is not None)
                       and type(self.action_space) in _STACKED[:1] + _STACKED[2:])
        # its own state (not SyncVectorEnv's fields): whether the next step is the reset, and
        # the observation batch it writes
        self._reset_next = False
        self._batch = create_empty_array(self.single_observation_space, n=1, fn=np.zeros)
        # an observation that is already an array of the batch's row (Box): written in place,
        # what np.stack(..., out=) does, without its dispatch (~1.6 us of a CartPole step)
        self._row = (self._batch.shape[1:], self._batch.dtype) if (
            self._short and self._keys is None) else None

    @classmethod
    def of(cls, venv: SyncVectorEnv) -> OneEnvSyncVectorEnv:
        """The same one environment (not a copy of it) under this class; ``venv``'s options and
        spec carried over (``gym.make_vec`` built it)."""
        env = venv.envs[0]
        out = cls([lambda: env], copy=venv.copy, observation_mode=venv.observation_mode,
                  autoreset_mode=venv.autoreset_mode)
        out.env_fns = venv.env_fns  # how to build it again (make_vec's factory)
        out.spec = venv.spec
        return out

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict[str, Any]]:
        out = super().reset(seed=seed, options=options)
        self._reset_next = False  # (one env: a reset_mask must hold True, so it was reset)
        return out

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        if not self._short:
            return super().step(actions)
        if type(actions) is np.ndarray and actions.ndim and len(actions) == 1:
            action = actions[0]  # what iterating it gives
        else:
            it = iter(actions)
            action = next(it)
            if next(it, it) is not it:  # SyncVectorEnv's strict zip: one action per environment
                return super().step(actions)
        env = self.envs[0]
        infos: dict[str, Any] = {}
        if self._reset_next:  # (NEXT_STEP: the step after a done is the reset)
            obs, info = env.reset()
            reward, terminated, truncated = 0.0, False, False
        else:
            obs, reward, terminated, truncated, info = env.step(action)
            if self._same_step and (terminated or truncated):  # reset now, the end in infos
                infos = self._add_info(infos, {"final_obs": obs, "final_info": info}, 0)
                obs, info = env.reset()
        rewards = np.array([reward], dtype=np.float64)
        terms = np.array([terminated], dtype=np.bool_)
        truncs = np.array([truncated], dtype=np.bool_)
        self._reset_next = not self._same_step and bool(terms[0] or truncs[0])
        if info:
            infos = self._add_info(infos, info, 0)
        if self._keys is not None:
            return self._dict_batch(obs), rewards, terms, truncs, infos
        batch = self._batch
        if type(obs) is np.ndarray and (obs.shape, obs.dtype) == self._row:
            batch[0] = obs
        else:
            batch = self._batch = np.stack([obs], axis=0, out=batch)
        return batch.copy() if self.copy else batch, rewards, terms, truncs, infos

    def _dict_batch(self, obs: Any) -> dict[str, np.ndarray]:
        """A Dict observation written into the batch's arrays, entry by entry in the space's
        key order (Gymnasium's ``concatenate``: an array of the entry's row in place, anything
        else through ``np.stack``'s cast), then their copies when ``copy`` (its ``deepcopy``)."""
        out = {}
        for k in cast(tuple, self._keys):
            row, dst = obs[k], self._batch[k]
            if type(row) is np.ndarray and row.shape == dst.shape[1:] and row.dtype == dst.dtype:
                dst[0] = row
            else:
                dst = np.stack([row], axis=0, out=dst)
            out[k] = dst.copy() if self.copy else dst
        return out

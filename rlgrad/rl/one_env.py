"""Gymnasium's ``SyncVectorEnv`` for one environment, with a shorter ``step``.

Off-policy presets (DQN on CartPole) step one environment per call: there the generic loop of
``SyncVectorEnv.step`` (the action iterator's dispatch, ``np.stack`` of a one-item list, the
``deepcopy`` of the batch, the NEXT_STEP checks per environment) costs more than CartPole's own
step (~7 us of ~13). ``OneEnvSyncVectorEnv`` is a ``SyncVectorEnv`` (everything else, reset,
checkpoints of its sub-environment, ``envs``, ``call``, is inherited) whose ``step`` does the
same operations on the one environment in a straight line, returning the same values: the same
observation batch (a copy when ``copy``), rewards, termination and truncation arrays (copies) and
info dict, with NEXT_STEP autoreset (a done step's observation is the final one, the next step
resets and reports reward 0, not done). Other autoreset modes and observation spaces whose
batching is not a plain ``np.stack`` (Tuple, Dict, ...) take ``SyncVectorEnv.step`` itself.
``tests/test_one_env.py`` checks it step for step against ``SyncVectorEnv``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv

_STACKED = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


class OneEnvSyncVectorEnv(SyncVectorEnv):
    """``SyncVectorEnv`` of exactly one environment (see the module docstring)."""

    def __init__(self, env_fns: Any, **kwargs: Any) -> None:
        super().__init__(env_fns, **kwargs)
        if self.num_envs != 1:
            raise ValueError(f"OneEnvSyncVectorEnv steps one environment, got {self.num_envs}: "
                             "use gymnasium.vector.SyncVectorEnv for several")
        # the straight line holds where SyncVectorEnv's own step is these operations: NEXT_STEP,
        # observations batched by np.stack, actions iterated by iter() (Box / MultiDiscrete /
        # MultiBinary batch spaces), and the fields that step keeps its state in
        self._short = (self.autoreset_mode == AutoresetMode.NEXT_STEP
                       and type(self.single_observation_space) in _STACKED
                       and type(self.action_space) in _STACKED[:1] + _STACKED[2:]
                       and all(hasattr(self, k) for k in ("_autoreset_envs", "_env_obs",
                                                          "_observations", "_rewards")))

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

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        if not self._short:
            return super().step(actions)
        it = iter(actions)
        action = next(it)
        if next(it, it) is not it:  # SyncVectorEnv's strict zip: one action per environment
            return super().step(actions)
        env = self.envs[0]
        if self._autoreset_envs[0]:
            obs, info = env.reset()
            self._rewards[0] = 0.0
            self._terminations[0] = False
            self._truncations[0] = False
        else:
            obs, self._rewards[0], self._terminations[0], self._truncations[0], info = \
                env.step(action)
        self._env_obs[0] = obs
        infos = self._add_info({}, info, 0) if info else {}
        self._observations = np.stack([obs], axis=0, out=self._observations)
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        batch = self._observations
        return (batch.copy() if self.copy else batch, self._rewards.copy(),
                self._terminations.copy(), self._truncations.copy(), infos)

"""Hindsight Experience Replay (Andrychowicz et al., 2017) as SB3's ``HerReplayBuffer``.

Transitions of goal-conditioned environments (Dict observations with ``observation``,
``achieved_goal`` and ``desired_goal``) are stored whole, with each row's episode start and, once
the episode ended, its length. A sampled minibatch has ``n_sampled_goal / (n_sampled_goal + 1)``
virtual rows: the desired goal replaced by a goal achieved in the same episode (chosen by
``goal_selection_strategy``) and the reward recomputed by the environment's
``compute_reward(achieved_goal, desired_goal, info)``. Only rows of finished episodes are
sampled. The sampling is SB3's (NumPy's global generator, the same draws in the same order).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad.rl.common.buffers import DictReplayBuffer
from rlgrad.rl.her.goal_selection_strategy import KEY_TO_GOAL_STRATEGY, GoalSelectionStrategy

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


def reward_function(env: Any) -> Any:
    """``compute_reward(achieved, desired, infos)`` of the first environment of ``env`` (a
    VecEnv with ``env_method``, a Gymnasium vector env or a single env); None without ``env``."""
    if env is None:
        return None
    if hasattr(env, "vec_env"):  # a VecEnv (VecNormalize, SubprocVecEnv) behind Gymnasium's API
        return reward_function(env.vec_env)
    if hasattr(env, "env_method"):
        return lambda a, d, i: env.env_method("compute_reward", a, d, i, indices=[0])[0]
    e = env
    while e is not None and not hasattr(e, "envs"):
        e = getattr(e, "env", None)
    if e is not None:
        return e.envs[0].get_wrapper_attr("compute_reward")
    if hasattr(env, "call"):  # e.g. AsyncVectorEnv: every copy computes, the first one answers
        return lambda a, d, i: env.call("compute_reward", a, d, i)[0]
    return env.get_wrapper_attr("compute_reward")


class HerReplayBuffer(DictReplayBuffer):
    def __init__(self, buffer_size: int, observation_space: spaces.Dict,
                 action_space: spaces.Space, env: Any = None, device: Any = "auto",
                 n_envs: int = 1, optimize_memory_usage: bool = False,
                 handle_timeout_termination: bool = True, n_sampled_goal: int = 4,
                 goal_selection_strategy: GoalSelectionStrategy | str = "future",
                 copy_info_dict: bool = False) -> None:
        missing = [k for k in GOAL_KEYS if k not in getattr(observation_space, "spaces", {})]
        if missing:
            raise ValueError(f"HerReplayBuffer needs a Dict observation space with keys "
                             f"{', '.join(GOAL_KEYS)} (a goal-conditioned env); {observation_space} "
                             f"has no {', '.join(missing)}")
        super().__init__(buffer_size, observation_space, action_space, device=device,
                         n_envs=n_envs, optimize_memory_usage=optimize_memory_usage,
                         handle_timeout_termination=handle_timeout_termination)
        self.env = env
        self._reward_fn = reward_function(env)
        self.copy_info_dict = copy_info_dict
        strategy = goal_selection_strategy
        if isinstance(strategy, str):
            if strategy.lower() not in KEY_TO_GOAL_STRATEGY:
                raise ValueError(f"goal_selection_strategy={strategy!r} is not one of "
                                 f"{', '.join(KEY_TO_GOAL_STRATEGY)}")
            strategy = KEY_TO_GOAL_STRATEGY[strategy.lower()]
        if not isinstance(strategy, GoalSelectionStrategy):
            raise ValueError(f"Invalid goal selection strategy {strategy!r}, please use one of "
                             f"{list(GoalSelectionStrategy)}")
        self.goal_selection_strategy = strategy
        self.n_sampled_goal = int(n_sampled_goal)
        self.her_ratio = 1 - 1.0 / (self.n_sampled_goal + 1)
        self.infos = np.array([[{} for _ in range(self.n_envs)] for _ in range(self.buffer_size)])
        self.ep_start = np.zeros((self.buffer_size, self.n_envs), dtype=np.int64)
        self.ep_length = np.zeros((self.buffer_size, self.n_envs), dtype=np.int64)
        self._current_ep_start = np.zeros(self.n_envs, dtype=np.int64)

    # ---- pickling: the env stays out (it may not pickle), set_env puts it back ----------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("env", None)
        state.pop("_reward_fn", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.env, self._reward_fn = None, None

    def set_env(self, env: Any) -> None:
        if self.env is not None:
            raise ValueError("Trying to set env of already initialized environment.")
        self.env, self._reward_fn = env, reward_function(env)

    # (infos, copied when copy_info_dict, are not saved: dicts of anything)
    _STATE = (*DictReplayBuffer._STATE, "ep_start", "ep_length", "_current_ep_start")

    # ---- storage ------------------------------------------------------------------------------
    def add(self, obs: dict[str, np.ndarray], next_obs: dict[str, np.ndarray],
            action: np.ndarray, reward: np.ndarray, done: np.ndarray,
            infos: list[dict[str, Any]]) -> None:
        p = self.pos
        # the row about to be overwritten belongs to an old finished episode: its rows from
        # here on can no longer be sampled (their episode is cut)
        for e in np.flatnonzero(self.ep_length[p] > 0):
            end = self.ep_start[p, e] + self.ep_length[p, e]
            self.ep_length[np.arange(p, end) % self.buffer_size, e] = 0
        self.ep_start[p] = self._current_ep_start
        if self.copy_info_dict:
            self.infos[p] = infos
        super().add(obs, next_obs, action, reward, done, infos)
        for e in np.flatnonzero(np.asarray(done).reshape(-1)):
            self._compute_episode_length(int(e))

    def _compute_episode_length(self, env_idx: int) -> None:
        """Record the length of ``env_idx``'s episode that ends before ``pos``; the next one
        starts at ``pos``."""
        start, end = self._current_ep_start[env_idx], self.pos
        if end < start:
            end += self.buffer_size
        self.ep_length[np.arange(start, end) % self.buffer_size, env_idx] = end - start
        self._current_ep_start[env_idx] = self.pos

    def truncate_last_trajectory(self) -> None:
        """Mark the episodes still running as ended at the newest row (a time limit when
        ``handle_timeout_termination``, so that their last value is still bootstrapped)."""
        running = np.flatnonzero(self._current_ep_start != self.pos)
        if len(running) == 0:
            return
        warnings.warn("The last trajectory in the replay buffer will be truncated.\nIf you are "
                      "in the same episode as when the replay buffer was saved,\nyou should use "
                      "`truncate_last_trajectory=False` to avoid that issue.", stacklevel=2)
        for e in running:
            self.dones[self.pos - 1, e] = True
            self._compute_episode_length(int(e))
            if self.handle_timeout_termination:
                self.timeouts[self.pos - 1, e] = True

    # ---- sampling ------------------------------------------------------------------------------
    def sample(self, batch_size: int, env: Any = None) -> Any:
        """A minibatch of real and relabelled transitions (virtual rows first), as SB3's
        ``DictReplayBufferSamples`` of rlgrad Tensors."""
        return self._samples(*self.sample_arrays(batch_size, env))

    def sample_arrays(self, batch_size: int, env: Any = None) -> tuple:
        """``sample``'s minibatch as NumPy arrays: (obs, actions, next_obs, dones, rewards,
        None)."""
        valid = self.ep_length > 0
        if not valid.any():
            raise RuntimeError("Unable to sample before the end of the first episode. We "
                               "recommend choosing a value for learning_starts that is greater "
                               "than the maximum number of timesteps in the environment.")
        drawn = np.random.choice(np.flatnonzero(valid), size=batch_size, replace=True)
        rows, envs = np.unravel_index(drawn, valid.shape)
        # the first n_virtual draws are relabelled; the minibatch puts the real rows first
        n_virtual = int(self.her_ratio * batch_size)
        rows, envs = np.roll(rows, -n_virtual), np.roll(envs, -n_virtual)
        virtual = slice(batch_size - n_virtual, batch_size)
        obs = {k: a[rows, envs] for k, a in self.observations.items()}
        next_obs = {k: a[rows, envs] for k, a in self.next_observations.items()}
        rewards = self.rewards[rows, envs].copy()
        if n_virtual:
            goals = self._sample_goals(rows[virtual], envs[virtual])
            obs["desired_goal"][virtual] = goals
            next_obs["desired_goal"][virtual] = goals
            rewards[virtual] = self._relabelled_rewards(
                next_obs["achieved_goal"][virtual], goals, rows[virtual], envs[virtual])
        dones = (self.dones[rows, envs] * (1 - self.timeouts[rows, envs])).reshape(-1, 1)
        return (self._normalize_obs(obs, env), self.actions[rows, envs],
                self._normalize_obs(next_obs, env), dones,
                self._normalize_reward(rewards.reshape(-1, 1), env), None)

    def _relabelled_rewards(self, achieved: np.ndarray, goals: np.ndarray, rows: np.ndarray,
                            envs: np.ndarray) -> np.ndarray:
        if self._reward_fn is None:
            raise ValueError("You must initialize HerReplayBuffer with a VecEnv so it can compute "
                             "rewards for virtual transitions (env=, or set_env(env))")
        infos = (copy.deepcopy(self.infos[rows, envs]) if self.copy_info_dict
                 else [{} for _ in range(len(rows))])
        return np.asarray(self._reward_fn(achieved, goals, infos), dtype=np.float32)

    def _sample_goals(self, rows: np.ndarray, envs: np.ndarray) -> np.ndarray:
        """Achieved goals of the rows' episodes, by ``goal_selection_strategy``."""
        start, length = self.ep_start[rows, envs], self.ep_length[rows, envs]
        s = self.goal_selection_strategy
        if s == GoalSelectionStrategy.FINAL:
            step = length - 1
        elif s == GoalSelectionStrategy.FUTURE:  # inclusive: the row's own step may be drawn
            step = np.random.randint((rows - start) % self.buffer_size, length)
        else:
            step = np.random.randint(0, length)
        return self.next_observations["achieved_goal"][(step + start) % self.buffer_size, envs]

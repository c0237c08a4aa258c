"""Running observation and reward normalisation, as Stable-Baselines3's ``VecNormalize`` does it.

Observations: ``clip((obs - mean) / sqrt(var + eps), -clip_obs, clip_obs)`` with running moments.
Rewards: divided by the running standard deviation of the discounted return (not centred), then
clipped. Statistics are frozen with ``training = False`` (evaluation, ``predict``).
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np


class RunningMeanStd:
    """Mean and variance of a stream of batches (parallel algorithm of Chan et al.), in float64."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = float(epsilon)

    def update(self, batch: np.ndarray) -> None:
        if len(batch) == 0:
            return
        self.update_from_moments(batch.mean(axis=0), batch.var(axis=0), batch.shape[0])

    def update_from_moments(self, b_mean: Any, b_var: Any, b_count: float) -> None:
        """Merge a batch given by its mean, (population) variance and count."""
        delta = b_mean - self.mean
        tot = self.count + b_count
        self.mean = self.mean + delta * (b_count / tot)
        m2 = (self.var * self.count + b_var * b_count
              + np.square(delta) * (self.count * b_count / tot))
        self.var = m2 / tot
        self.count = tot

    def copy(self) -> RunningMeanStd:
        """An independent copy (of the same class)."""
        new = copy.copy(self)
        new.mean, new.var = self.mean.copy(), self.var.copy()
        return new

    def combine(self, other: RunningMeanStd) -> None:
        """Merge ``other``'s statistics into these, as one ``update`` with its moments."""
        self.update_from_moments(other.mean, other.var, other.count)

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean = np.array(state["mean"], dtype=np.float64)
        self.var = np.array(state["var"], dtype=np.float64)
        self.count = float(state["count"])


class Normalizer:
    """Observation and/or reward normalisation for one vector environment."""

    def __init__(self, obs_dim: int, n_envs: int, norm_obs: bool = True, norm_reward: bool = True,
                 clip_obs: float = 10.0, clip_reward: float = 10.0, gamma: float = 0.99,
                 epsilon: float = 1e-8) -> None:
        self.norm_obs, self.norm_reward = norm_obs, norm_reward
        self.clip_obs, self.clip_reward = clip_obs, clip_reward
        self.gamma, self.epsilon = gamma, epsilon
        self.obs_rms = RunningMeanStd((obs_dim,))
        self.ret_rms = RunningMeanStd(())
        self.returns = np.zeros(n_envs, dtype=np.float64)
        self.training = True

    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """Normalised observations of ``obs``'s shape: images (n, C, H, W) go through the flat
        statistics as rows, as vector observations do."""
        if not self.norm_obs:
            return obs
        rows = obs.reshape(len(obs), -1) if obs.ndim > 2 else obs
        out = (rows - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon)
        return np.clip(out, -self.clip_obs, self.clip_obs).astype(np.float32).reshape(obs.shape)

    def update_obs(self, obs: np.ndarray) -> None:
        if self.norm_obs and self.training:
            self.obs_rms.update(obs.reshape(len(obs), -1) if obs.ndim > 2 else obs)

    def process_obs(self, obs: np.ndarray) -> np.ndarray:
        """Update the statistics with ``obs`` (when training), then normalise it."""
        self.update_obs(obs)
        return self.normalize_obs(obs)

    def process_reward(self, rewards: np.ndarray, dones: np.ndarray, valid: np.ndarray
                       ) -> np.ndarray:
        """Scale rewards by the std of the discounted return (``valid``: real transitions)."""
        if not self.norm_reward:
            return rewards
        if self.training:
            self.returns = self.returns * self.gamma + rewards
            self.ret_rms.update(self.returns[valid])
        out = np.clip(rewards / np.sqrt(self.ret_rms.var + self.epsilon),
                      -self.clip_reward, self.clip_reward).astype(np.float32)
        self.returns[dones] = 0.0
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"obs_rms": self.obs_rms.state_dict(), "ret_rms": self.ret_rms.state_dict(),
                "returns": self.returns.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.obs_rms.load_state_dict(state["obs_rms"])
        self.ret_rms.load_state_dict(state["ret_rms"])
        self.returns = np.array(state["returns"], dtype=np.float64)

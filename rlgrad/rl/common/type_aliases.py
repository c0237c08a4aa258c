"""``stable_baselines3.common.type_aliases``: the named tuples SB3's buffers return (of rlgrad
Tensors where SB3 has torch tensors) and the schedule and training-frequency types."""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

from rlgrad.rl.schedules import Schedule

TensorDict = dict[str, Any]


class RolloutBufferSamples(NamedTuple):
    observations: Any
    actions: Any
    old_values: Any
    old_log_prob: Any
    advantages: Any
    returns: Any


class DictRolloutBufferSamples(NamedTuple):
    observations: TensorDict
    actions: Any
    old_values: Any
    old_log_prob: Any
    advantages: Any
    returns: Any


class ReplayBufferSamples(NamedTuple):
    observations: Any
    actions: Any
    next_observations: Any
    dones: Any
    rewards: Any
    # the discount of the bootstrapped value, per row: n-step replay only (gamma ** steps taken)
    discounts: Any = None


class DictReplayBufferSamples(NamedTuple):
    observations: TensorDict
    actions: Any
    next_observations: TensorDict
    dones: Any
    rewards: Any
    discounts: Any = None


class RolloutReturn(NamedTuple):
    episode_timesteps: int
    n_episodes: int
    continue_training: bool


class TrainFrequencyUnit(Enum):
    STEP = "step"
    EPISODE = "episode"


class TrainFreq(NamedTuple):
    frequency: int
    unit: TrainFrequencyUnit


__all__ = ["DictReplayBufferSamples", "DictRolloutBufferSamples", "ReplayBufferSamples",
           "RolloutBufferSamples", "RolloutReturn", "Schedule", "TensorDict", "TrainFreq",
           "TrainFrequencyUnit"]

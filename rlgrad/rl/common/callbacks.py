"""``stable_baselines3.common.callbacks`` -> ``rlgrad.rl.callbacks``."""

from rlgrad.rl.callbacks import (
    BaseCallback,
    CallbackList,
    CheckpointCallback,
    ConvertCallback,
    EvalCallback,
    EventCallback,
    EveryNTimesteps,
    LogEveryNTimesteps,
    ProgressBarCallback,
    StopTrainingOnMaxEpisodes,
    StopTrainingOnNoModelImprovement,
    StopTrainingOnRewardThreshold,
)

__all__ = ["BaseCallback", "CallbackList", "CheckpointCallback", "ConvertCallback", "EvalCallback",
           "EventCallback", "EveryNTimesteps", "LogEveryNTimesteps", "ProgressBarCallback",
           "StopTrainingOnMaxEpisodes", "StopTrainingOnNoModelImprovement",
           "StopTrainingOnRewardThreshold"]

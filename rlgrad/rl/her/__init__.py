"""``stable_baselines3.her``: Hindsight Experience Replay as a replay buffer class
(``replay_buffer_class=HerReplayBuffer``) of the off-policy algorithms."""

from rlgrad.rl.her.goal_selection_strategy import GoalSelectionStrategy
from rlgrad.rl.her.her_replay_buffer import HerReplayBuffer

__all__ = ["GoalSelectionStrategy", "HerReplayBuffer"]

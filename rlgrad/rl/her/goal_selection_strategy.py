"""``stable_baselines3.her.goal_selection_strategy``: where HER takes a replayed transition's
new goal from."""

from __future__ import annotations

from enum import Enum


class GoalSelectionStrategy(Enum):
    """FUTURE: a goal achieved later in the same episode (the transition's own included);
    FINAL: the episode's last achieved goal; EPISODE: any achieved goal of the episode."""

    FUTURE = 0
    FINAL = 1
    EPISODE = 2


KEY_TO_GOAL_STRATEGY = {
    "future": GoalSelectionStrategy.FUTURE,
    "final": GoalSelectionStrategy.FINAL,
    "episode": GoalSelectionStrategy.EPISODE,
}

__all__ = ["KEY_TO_GOAL_STRATEGY", "GoalSelectionStrategy"]

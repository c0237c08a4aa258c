"""``stable_baselines3.common.evaluation`` -> ``rlgrad.rl.evaluation``."""

from rlgrad.rl.evaluation import evaluate_policy

__all__ = ["evaluate_policy"]

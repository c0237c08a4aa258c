"""``sb3_contrib.common.maskable.callbacks``: ``MaskableEvalCallback``, ``EvalCallback`` whose
evaluations pass the eval env's action masks (``use_masking=False``: none)."""

from __future__ import annotations

from typing import Any

from rlgrad.rl.callbacks import EvalCallback
from rlgrad.rl.contrib.common.maskable.evaluation import evaluate_policy

__all__ = ["MaskableEvalCallback"]


class MaskableEvalCallback(EvalCallback):
    def __init__(self, *args: Any, use_masking: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.use_masking = use_masking

    def _evaluate(self, *args: Any, **kwargs: Any) -> Any:
        return evaluate_policy(*args, use_masking=self.use_masking, **kwargs)

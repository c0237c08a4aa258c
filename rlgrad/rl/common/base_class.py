"""``stable_baselines3.common.base_class``: the algorithms' base class."""

from __future__ import annotations

from rlgrad.rl.base import BaseAlgorithm

__all__ = ["BaseAlgorithm"]

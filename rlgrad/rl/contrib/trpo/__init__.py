"""``sb3_contrib.trpo``: ``TRPO`` (``rlgrad.rl.trpo``)."""

from rlgrad.rl.trpo import TRPO

__all__ = ["TRPO"]

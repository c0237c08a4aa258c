"""``sb3_contrib.qrdqn``: ``QRDQN`` (``rlgrad.rl.qrdqn``)."""

from rlgrad.rl.qrdqn import QRDQN

__all__ = ["QRDQN"]

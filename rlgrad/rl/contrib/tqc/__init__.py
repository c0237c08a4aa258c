"""``sb3_contrib.tqc``: ``TQC`` (``rlgrad.rl.tqc``)."""

from rlgrad.rl.tqc import TQC

__all__ = ["TQC"]

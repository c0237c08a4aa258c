"""``sb3_contrib.crossq``: ``CrossQ`` (``rlgrad.rl.crossq``)."""

from rlgrad.rl.crossq import CrossQ

__all__ = ["CrossQ"]

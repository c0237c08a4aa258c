"""``rlgrad.utils``: the parts of ``torch.utils`` RL scripts import (``tensorboard``, ``data``)."""

from rlgrad.utils import data

__all__ = ["data"]

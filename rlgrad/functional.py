"""The old import path of ``rlgrad/transforms.py`` (``grad``, ``vjp``, ``jvp``, ``hessian``, ...),
kept so that existing imports work. New code imports ``rlgrad.transforms`` (or ``rlgrad.grad``);
the layers and losses are ``rlgrad.nn.functional``, a different module."""

from rlgrad.transforms import *  # noqa: F403
from rlgrad.transforms import (
    __all__,  # noqa: F401
    _Depth,  # noqa: F401 - imported from here by code written before the move
)

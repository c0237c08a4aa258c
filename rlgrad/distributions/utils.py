"""``torch.distributions.utils``: the conversions between probabilities and logits."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions.distribution import _params
from rlgrad.tensor import Tensor

__all__ = ["logits_to_probs", "probs_to_logits", "clamp_probs", "broadcast_all"]


def clamp_probs(probs: Tensor) -> Tensor:
    """``probs`` clamped to [eps, 1 - eps] of its dtype, so their logits are finite."""
    eps = float(np.finfo(probs.dtype).eps)
    return ops.clip(probs, eps, 1 - eps)


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    """``sigmoid(logits)`` when ``is_binary``, else the softmax over the last dimension."""
    return ops.sigmoid(logits) if is_binary else ops.softmax(logits, axis=-1)


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    """``log p - log(1 - p)`` when ``is_binary``, else ``log p`` (both of the clamped probs)."""
    p = clamp_probs(probs)
    return ops.log(p) - ops.log1p(-p) if is_binary else ops.log(p)


def broadcast_all(*values: Any) -> tuple[Tensor, ...]:
    """The values as Tensors of one floating dtype, broadcast to one shape."""
    return tuple(_params(*values)[0])

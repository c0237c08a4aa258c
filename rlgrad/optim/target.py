"""Target-network updates: Polyak averaging (DDPG, TD3, SAC) and hard copies (DQN)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from rlgrad.tensor import Tensor
from rlgrad.tracer import replayed

try:  # the optional C module: one pass per pair instead of three NumPy ones (same bits)
    from rlgrad.optim._fused import polyak as _fused_polyak
except ImportError:
    _fused_polyak = None

__all__ = ["polyak_update", "soft_update", "hard_update"]


def _arrays(x: Any, what: str) -> list[np.ndarray]:
    if hasattr(x, "parameters") and callable(x.parameters):
        # A Module: parameters and buffers (e.g. running statistics) are both copied.
        items = list(x.parameters()) + list(getattr(x, "buffers", lambda: [])())
    elif isinstance(x, Tensor | np.ndarray):
        items = [x]
    else:
        items = list(x)
    return [t._value if isinstance(t, Tensor) else t for t in items]


def _pairs(params: Any, target_params: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    src, dst = _arrays(params, "params"), _arrays(target_params, "target_params")
    if len(src) != len(dst):
        raise ValueError(f"target update: {len(src)} source tensors but {len(dst)} target tensors; "
                         "the networks must have the same structure")
    for i, (s, d) in enumerate(zip(src, dst)):
        if s.shape != d.shape:
            raise ValueError(f"target update: tensor {i} has shape {s.shape} in the source but "
                             f"{d.shape} in the target")
    return list(zip(src, dst))


@replayed  # under rlgrad.jit: made again by the compiled step, at its place
def polyak_update(params: Iterable[Any] | Any, target_params: Iterable[Any] | Any, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source``, in place, for every pair of tensors.

    Takes Modules or iterables of Tensors (SB3's argument order: source first). ``tau=1`` is a
    hard copy.
    """
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"polyak_update: tau must be in [0, 1], got {tau}")
    pairs = _pairs(params, target_params)
    if tau == 1.0:
        for s, d in pairs:
            np.copyto(d, s)
        return
    if _fused_polyak is not None and _fused_polyak([d for _, d in pairs], [s for s, _ in pairs],
                                                   1.0 - tau, tau):
        return
    for s, d in pairs:
        d *= 1.0 - tau
        d += tau * s


def soft_update(target: Any, source: Any, tau: float) -> None:
    """``polyak_update`` with the target first (the other common argument order)."""
    polyak_update(source, target, tau)


@replayed
def hard_update(target: Any, source: Any) -> None:
    """Copy ``source``'s parameters (and buffers) into ``target``, in place."""
    for s, d in _pairs(source, target):
        np.copyto(d, s)

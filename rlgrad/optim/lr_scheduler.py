"""Learning-rate schedules, in both forms RL code uses.

* PyTorch-style schedulers that own an optimizer and change its ``lr`` on ``step()``:
  ``LambdaLR``, ``LinearLR``, ``ConstantLR`` (``state_dict``/``load_state_dict`` included).
* Stable-Baselines3-style schedules: plain functions of ``progress_remaining`` (1 at the start
  of training, 0 at the end): ``constant_schedule``, ``linear_schedule``; apply one with
  ``update_learning_rate(optimizer, schedule(progress_remaining))``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlgrad.optim.optimizer import Optimizer
from rlgrad.tracer import replayed

__all__ = [
    "LRScheduler", "LambdaLR", "LinearLR", "ConstantLR", "constant_schedule", "linear_schedule",
    "update_learning_rate", "Schedule",
]

Schedule = Callable[[float], float]


def constant_schedule(value: float) -> Schedule:
    """``f(progress_remaining) = value``."""
    value = float(value)

    def schedule(progress_remaining: float) -> float:
        return value

    return schedule


def linear_schedule(start: float, end: float = 0.0, end_fraction: float = 1.0) -> Schedule:
    """From ``start`` (progress_remaining = 1) to ``end``, reached after ``end_fraction`` of
    training and kept afterwards (SB3's ``get_linear_fn``; ``linear_schedule(3e-4)`` anneals to 0)."""
    if not 0 < end_fraction <= 1:
        raise ValueError(f"end_fraction must be in (0, 1], got {end_fraction}")
    start, end = float(start), float(end)

    def schedule(progress_remaining: float) -> float:
        done = 1.0 - float(progress_remaining)
        if done >= end_fraction:
            return end
        return start + done * (end - start) / end_fraction

    return schedule


def update_learning_rate(optimizer: Optimizer, lr: float) -> None:
    """Set ``lr`` in every parameter group."""
    for g in optimizer.param_groups:
        g["lr"] = float(lr)


class LRScheduler:
    """Base of the PyTorch-style schedulers: ``lr = base_lr * factor(epoch)`` for each group."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def factor(self, epoch: int) -> float:
        raise NotImplementedError

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    @replayed  # under rlgrad.jit: made again by the compiled step, at its place
    def step(self) -> None:
        self.last_epoch += 1
        f = self.factor(self.last_epoch)
        for g, base in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = base * f
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs),
                "_last_lr": list(self._last_lr)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_epoch = int(state_dict["last_epoch"])
        self.base_lrs = list(state_dict["base_lrs"])
        self._last_lr = list(state_dict.get("_last_lr", self.base_lrs))


class LambdaLR(LRScheduler):
    """``lr = base_lr * lr_lambda(epoch)``."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float],
                 last_epoch: int = -1) -> None:
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        return float(self.lr_lambda(epoch))


class LinearLR(LRScheduler):
    """Factor moving linearly from ``start_factor`` to ``end_factor`` over ``total_iters`` steps."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        frac = min(epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return self.start_factor + (self.end_factor - self.start_factor) * frac


class ConstantLR(LRScheduler):
    """``factor`` for the first ``total_iters`` steps, then 1 (PyTorch's ``ConstantLR``)."""

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR: factor must be in [0, 1], got {factor}")
        self.constant_factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        return self.constant_factor if epoch < self.total_iters else 1.0

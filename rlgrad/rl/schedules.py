"""Schedules of ``progress_remaining`` (1 at the start of training, 0 at the end), SB3's
convention: learning rates, clip ranges, exploration rates."""

from __future__ import annotations

from collections.abc import Callable

Schedule = Callable[[float], float]


def get_schedule_fn(value: float | str | Schedule) -> Schedule:
    """A schedule of ``progress_remaining`` (1 at the start of training, 0 at the end).

    A number is constant; ``"lin_X"`` goes linearly from X to 0 (rl-baselines3-zoo's notation).
    """
    if callable(value):
        return value
    if isinstance(value, str):
        if value.startswith("lin_"):
            start = float(value[4:])
            return lambda p: p * start
        value = float(value)
    v = float(value)
    return lambda p: v


def linear_schedule(start: float, end: float, end_fraction: float) -> Schedule:
    """From ``start`` to ``end`` over the first ``end_fraction`` of training, then ``end``."""

    def fn(progress_remaining: float) -> float:
        done = 1.0 - progress_remaining
        if done > end_fraction:
            return end
        return start + done * (end - start) / end_fraction

    return fn

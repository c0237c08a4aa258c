"""Schedules of ``progress_remaining`` (1 at the start of training, 0 at the end), SB3's
convention: learning rates, clip ranges, exploration rates."""

from __future__ import annotations

from collections.abc import Callable

Schedule = Callable[[float], float]
#: a learning rate or clip range as the algorithms take it: a constant, a schedule's name
#: ("lin_3e-4"), or a function of the remaining progress (SB3's)
ScheduleLike = float | str | Schedule


def get_schedule_fn(value: float | str | Schedule) -> Schedule:
    """A schedule of ``progress_remaining`` (1 at the start of training, 0 at the end).

    A number is constant; ``"lin_X"`` goes linearly from X to 0 (rl-baselines3-zoo's notation).
    """
    if callable(value):
        return value
    # SB3's schedule classes (data, not closures: a checkpoint holds them, SB3's tests look)
    if isinstance(value, str) and value.startswith("lin_"):
        return LinearSchedule(float(value[4:]), 0.0, 1.0)  # start * progress_remaining
    return ConstantSchedule(float(value))


def linear_schedule(start: float, end: float, end_fraction: float) -> Schedule:
    """From ``start`` to ``end`` over the first ``end_fraction`` of training, then ``end``."""
    return LinearSchedule(start, end, end_fraction)


class ConstantSchedule:
    """SB3's ``ConstantSchedule``: ``val`` throughout. Data, so a checkpoint can hold it."""

    def __init__(self, val: float) -> None:
        self.val = float(val)

    def __call__(self, progress_remaining: float) -> float:
        return self.val

    def __repr__(self) -> str:
        return f"ConstantSchedule(val={self.val})"


class LinearSchedule:
    """SB3's ``LinearSchedule`` (and ``get_linear_fn``), the same formula: ``start`` to ``end``
    over the first ``end_fraction`` of training, then ``end``."""

    def __init__(self, start: float, end: float, end_fraction: float) -> None:
        self.start, self.end, self.end_fraction = float(start), float(end), float(end_fraction)

    def __call__(self, progress_remaining: float) -> float:
        done = 1.0 - progress_remaining
        if done > self.end_fraction:
            return self.end
        return self.start + done * (self.end - self.start) / self.end_fraction

    def __repr__(self) -> str:
        return (f"LinearSchedule(start={self.start}, end={self.end}, "
                f"end_fraction={self.end_fraction})")


class FloatSchedule:
    """SB3's ``FloatSchedule``: a number (constant) or a schedule, whose values come out as
    Python floats (a NumPy float in a checkpoint would not load as data)."""

    def __init__(self, value_schedule: Schedule | float) -> None:
        if isinstance(value_schedule, FloatSchedule):
            value_schedule = value_schedule.value_schedule
        elif isinstance(value_schedule, int | float):
            value_schedule = ConstantSchedule(float(value_schedule))
        elif not callable(value_schedule):
            raise TypeError(f"FloatSchedule: the schedule must be a number or a callable of the "
                            f"progress remaining, not {value_schedule!r}")
        self.value_schedule: Schedule = value_schedule

    def __call__(self, progress_remaining: float) -> float:
        return float(self.value_schedule(progress_remaining))

    def __repr__(self) -> str:
        return f"FloatSchedule({self.value_schedule})"


def schedule_to_data(fn: object) -> dict[str, object] | None:
    """SB3's standard schedules (``ConstantSchedule``, ``LinearSchedule``, ``FloatSchedule`` of
    them) and rlgrad's as plain data for a checkpoint; None for any other callable (code, which
    a checkpoint does not hold)."""
    kind, module = type(fn).__name__, type(fn).__module__.partition(".")[0]
    if module not in ("rlgrad", "stable_baselines3"):
        return None
    if kind == "FloatSchedule":
        return schedule_to_data(getattr(fn, "value_schedule", None))
    if kind == "ConstantSchedule":
        return {"$schedule": "constant", "val": float(fn.val)}
    if kind == "LinearSchedule":
        return {"$schedule": "linear", "start": float(fn.start), "end": float(fn.end),
                "end_fraction": float(fn.end_fraction)}
    return None


def schedule_from_data(value: object) -> object:
    """``value``, or the schedule ``schedule_to_data`` recorded in it."""
    if not isinstance(value, dict) or "$schedule" not in value:
        return value
    kind = value["$schedule"]
    try:
        if kind == "constant":
            return ConstantSchedule(value["val"])
        if kind == "linear":
            return LinearSchedule(value["start"], value["end"], value["end_fraction"])
    except (KeyError, TypeError, ValueError):
        pass
    raise ValueError(f"a saved schedule is damaged or unknown: {value!r}")

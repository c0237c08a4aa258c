"""Constraints on parameters and values: what each must satisfy, checked when validation is on.

Each constraint is a predicate on NumPy data (never on the graph: checking does not record) and a
phrase used in the ValueError that names the offending argument, e.g. ``"must be positive (> 0)"``.
Names follow ``torch.distributions.constraints``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "Constraint", "real", "positive", "unit_interval", "open_unit_interval", "boolean",
    "simplex", "integer_interval", "interval", "real_vector", "independent", "open_interval",
]


class Constraint:
    """``check(data)`` returns a boolean array (False where violated); ``event_dim`` trailing
    dimensions are checked jointly (a simplex is one event of size K)."""

    event_dim = 0
    description = "satisfy its constraint"

    def check(self, x: np.ndarray) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"constraints.{type(self).__name__.lstrip('_')}"


class _Real(Constraint):
    description = "must be a real number (not NaN)"

    def check(self, x: np.ndarray) -> Any:
        return x == x  # False only for NaN


class _RealVector(_Real):
    event_dim = 1

    def check(self, x: np.ndarray) -> Any:
        return np.all(x == x, axis=-1)


class _Positive(Constraint):
    description = "must be positive (> 0)"

    def check(self, x: np.ndarray) -> Any:
        return x > 0


class _Interval(Constraint):
    def __init__(self, lower: float, upper: float, closed: bool = True) -> None:
        self.lower, self.upper, self.closed = lower, upper, closed
        lo, hi = ("[", "]") if closed else ("(", ")")
        self.description = f"must lie in {lo}{lower}, {upper}{hi}"

    def check(self, x: np.ndarray) -> Any:
        if self.closed:
            return (x >= self.lower) & (x <= self.upper)
        return (x > self.lower) & (x < self.upper)


class _Boolean(Constraint):
    description = "must be 0 or 1"

    def check(self, x: np.ndarray) -> Any:
        return (x == 0) | (x == 1)


class _IntegerInterval(Constraint):
    def __init__(self, lower: int, upper: int) -> None:
        self.lower, self.upper = lower, upper
        self.description = f"must be an integer in [{lower}, {upper}]"

    def check(self, x: np.ndarray) -> Any:
        ok = (x >= self.lower) & (x <= self.upper)
        if x.dtype.kind == "f":
            ok &= x == np.floor(x)
        return ok


class _Simplex(Constraint):
    event_dim = 1
    description = "must be non-negative and sum to 1 along the last dimension"

    def check(self, x: np.ndarray) -> Any:
        tol = _sum_tolerance(x.dtype)
        return np.all(x >= 0, axis=-1) & (np.abs(x.sum(-1) - 1) <= tol)


def _sum_tolerance(dtype: np.dtype) -> float:
    # torch uses 1e-6; float32 sums of softmax outputs are off by a few eps, so scale with eps.
    eps = float(np.finfo(dtype).eps) if np.dtype(dtype).kind == "f" else 0.0
    return max(1e-6, 64 * eps)


real = _Real()
real_vector = _RealVector()
positive = _Positive()
unit_interval = _Interval(0.0, 1.0)
open_unit_interval = _Interval(0.0, 1.0, closed=False)
boolean = _Boolean()
simplex = _Simplex()


def interval(lower: float, upper: float) -> Constraint:
    return _Interval(lower, upper)


def integer_interval(lower: int, upper: int) -> Constraint:
    return _IntegerInterval(lower, upper)


def open_interval(lower: float, upper: float) -> Constraint:
    return _Interval(lower, upper, closed=False)


class independent(Constraint):  # noqa: N801 - torch's name
    """``base`` checked elementwise, then jointly over ``reinterpreted_batch_ndims`` more
    trailing dimensions (the domain of a transform acting on whole vectors)."""

    def __init__(self, base_constraint: Constraint, reinterpreted_batch_ndims: int) -> None:
        self.base_constraint = base_constraint
        self.reinterpreted_batch_ndims = int(reinterpreted_batch_ndims)
        self.event_dim = base_constraint.event_dim + self.reinterpreted_batch_ndims
        self.description = base_constraint.description

    def check(self, x: np.ndarray) -> Any:
        ok = np.asarray(self.base_constraint.check(x))
        n = self.reinterpreted_batch_ndims
        return np.all(ok, axis=tuple(range(-n, 0))) if n and ok.ndim >= n else ok

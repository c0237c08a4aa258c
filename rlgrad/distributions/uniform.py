"""``Uniform(low, high)`` on [low, high) (torch's semantics)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import (
    _OFF_HINT,
    Distribution,
    _data,
    _params,
    _rng,
    _shape_tuple,
    _uniform,
    tracing,
)
from rlgrad.tensor import Tensor, _const
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["Uniform"]


class Uniform(Distribution):
    """Uniform on ``[low, high)``, elementwise.  ``rsample()`` is ``low + u (high - low)`` with
    ``u ~ U[0, 1)`` drawn outside the graph."""

    arg_constraints = {"low": constraints.real, "high": constraints.real}
    has_rsample = True

    def __init__(self, low: Any, high: Any, validate_args: bool | None = None) -> None:
        (self.low, self.high), shape = _params(low, high)
        super().__init__(shape, (), validate_args)
        if self._validate_args:
            self._check_arg("low", self.low, constraints.real)
            self._check_arg("high", self.high, constraints.real)
            ok = self.low._value < self.high._value
            if not np.all(ok):
                first = tuple(int(i) for i in np.argwhere(~np.asarray(ok))[0]) if ok.ndim else ()
                raise ValueError(
                    f"Uniform: argument 'low' must be below 'high', but {int(np.size(ok) - np.sum(ok))}"
                    f" of {max(ok.size, 1)} entries are not (first at index {first}: low "
                    f"{self.low._value[first]}, high {self.high._value[first]}). {_OFF_HINT}")

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return _HalfOpen(self.low._value, self.high._value)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        shape = _shape_tuple(sample_shape) + self._batch_shape
        u = _uniform(_rng(generator), shape, self.low._value.dtype)
        return self.low + _const(u) * (self.high - self.low)

    def log_prob(self, value: Any) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        dtype = self.low._value.dtype
        if tracing() and isinstance(value, Tensor):  # rlgrad.jit: the mask read at every call
            inside = ops.astype((self.low <= value) & (value < self.high), dtype)
        else:
            v = _data(value)
            inside = _const(((self.low._value <= v) & (v < self.high._value)).astype(dtype))
        return ops.log(inside) - ops.log(self.high - self.low)

    def cdf(self, value: Any) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return ops.clip((value - self.low) / (self.high - self.low), 0.0, 1.0)

    def icdf(self, value: Any) -> Tensor:
        if self._validate_args:
            self._validate_probability(value, "icdf")
        return value * (self.high - self.low) + self.low

    def entropy(self) -> Tensor:
        return ops.log(self.high - self.low)

    @property
    def mean(self) -> Tensor:
        return (self.high + self.low) / 2

    @property
    def mode(self) -> Tensor:
        return _const(np.full(self._batch_shape, np.nan, self.low._value.dtype))

    @property
    def stddev(self) -> Tensor:
        return (self.high - self.low) / 12**0.5

    @property
    def variance(self) -> Tensor:
        w = self.high - self.low
        return w * w / 12


class _HalfOpen(constraints.Constraint):
    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        self.low, self.high = low, high
        lo, hi = np.asarray(low), np.asarray(high)
        self.description = (f"must lie in [low, high) = [{lo.item()}, {hi.item()})" if lo.size == 1
                            else "must lie in [low, high)")

    def check(self, x: np.ndarray) -> Any:
        return (x >= self.low) & (x < self.high)

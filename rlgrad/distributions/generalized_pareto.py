"""``GeneralizedPareto(loc, scale, concentration)`` (torch's, after TensorFlow Probability's):
``P(X > x) = (1 + c z)^(-1/c)``, z = (x - loc) / scale, the exponential tail at c = 0; support
``[loc, loc - scale / c]`` for c < 0, ``[loc, inf)`` otherwise. ``rsample`` is its quantile
function at uniform noise."""

from __future__ import annotations

import math

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.continuous import _safe, _Scalar, _where
from rlgrad.tensor import Tensor
from rlgrad.typing import ArrayLike

__all__ = ["GeneralizedPareto"]


class GeneralizedPareto(_Scalar):
    """Exponential at concentration 0 (``|c| <= 1e-8``, torch's ``isclose``), Pareto-tailed
    above, bounded below."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive,
                       "concentration": constraints.real}
    has_rsample = True
    _names = ("loc", "scale", "concentration")
    loc: Tensor
    scale: Tensor
    concentration: Tensor

    def __init__(self, loc: ArrayLike, scale: ArrayLike, concentration: ArrayLike,
                 validate_args: bool | None = None) -> None:
        self._setup((loc, scale, concentration), validate_args)

    def _zero(self) -> tuple[np.ndarray, Tensor]:
        """Where the concentration is 0, and the concentration with 1 there (a finite branch)."""
        eq = np.isclose(self.concentration._value, 0.0)
        return eq, ops.where(eq, 1.0, self.concentration)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]  # per-instance, as torch
        c, lo = self.concentration._value, self.loc._value
        with np.errstate(divide="ignore"):
            hi = np.where(c < 0, lo - self.scale._value / np.where(c < 0, c, -1.0), np.inf)
        return constraints.interval(lo, hi)  # type: ignore[arg-type]  # (per-element bounds)

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        z = (value - self.loc) / self.scale
        eq, c = self._zero()
        y = 1 / c + 1
        tail = _where(ops.equal(y, 0), y, y * ops.log1p(c * z))
        return -ops.log(self.scale) - _where(eq, z, tail)

    def log_survival_function(self, value: Tensor) -> Tensor:
        self._check(value)
        z = (value - self.loc) / self.scale
        eq, c = self._zero()
        return _where(eq, -z, -ops.log1p(c * z) / c)

    def log_cdf(self, value: Tensor) -> Tensor:
        return ops.log1p(-ops.exp(self.log_survival_function(value)))

    def cdf(self, value: Tensor) -> Tensor:
        return ops.exp(self.log_cdf(value))

    def icdf(self, value: Tensor) -> Tensor:
        eq, c = self._zero()
        logu = ops.log1p(-value)
        return _where(eq, self.loc - self.scale * logu, self.loc + self.scale / c * ops.expm1(-c * logu))

    def entropy(self) -> Tensor:
        return ops.broadcast_to(ops.log(self.scale) + self.concentration + 1, self._batch_shape)

    @property
    def mean(self) -> Tensor:
        ok = ops.less(self.concentration, 1)
        c = _safe(self.concentration, ok, 0.5)
        return _where(ok, self.loc + self.scale / (1 - c), math.nan)

    @property
    def variance(self) -> Tensor:
        ok = ops.less(self.concentration, 0.5)
        c = _safe(self.concentration, ok, 0.25)
        return _where(ok, self.scale ** 2 / ((1 - c) ** 2 * (1 - 2 * c)), math.nan)

    mode = property(lambda self: self.loc)

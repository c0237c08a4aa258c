"""``ContinuousBernoulli(probs=|logits=)`` (Loaiza-Ganem and Cunningham, 2019), torch's class:
density ``C(p) p^x (1 - p)^(1 - x)`` on [0, 1]. Near p = 1/2 the normaliser and moments are
0/0 forms; within (0.499, 0.501) they are read from Taylor expansions, as torch does, with the
exact forms fed a safe p so that their gradients stay finite."""

from __future__ import annotations

import math

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.categorical import Bernoulli
from rlgrad.distributions.discrete import _bce_with_logits
from rlgrad.distributions.distribution import Distribution, _noise, _shape_tuple
from rlgrad.tensor import Tensor, _const
from rlgrad.typing import ArrayLike, GeneratorLike, ShapeLike

__all__ = ["ContinuousBernoulli"]

_LIMS = (0.499, 0.501)


class ContinuousBernoulli(Distribution):
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, probs: ArrayLike | None = None, logits: ArrayLike | None = None,
                 validate_args: bool | None = None) -> None:
        b = Bernoulli(probs=probs, logits=logits, validate_args=validate_args)
        if probs is not None:  # torch clamps given probabilities into [eps, 1 - eps]
            eps = float(np.finfo(b.probs._value.dtype).eps)
            b = Bernoulli(probs=ops.clip(b.probs, eps, 1 - eps), validate_args=False)
        self._b = b
        super().__init__(b.batch_shape, (), validate_args)

    probs = property(lambda self: self._b.probs)
    logits = property(lambda self: self._b.logits)

    def _outside(self) -> np.ndarray:
        p = self.probs._value
        return (p <= _LIMS[0]) | (p >= _LIMS[1])

    def _cut(self) -> Tensor:
        return ops.where(self._outside(), self.probs, _LIMS[0])

    def _log_norm(self) -> Tensor:
        cut = self._cut()
        below = ops.where(cut._value <= 0.5, cut, 0.0)
        above = ops.where(cut._value >= 0.5, cut, 1.0)
        exact = ops.log(ops.absolute(ops.log1p(-cut) - ops.log(cut))) - ops.where(
            cut._value <= 0.5, ops.log1p(-2.0 * below), ops.log(2.0 * above - 1.0))
        x = (self.probs - 0.5) ** 2
        return ops.where(self._outside(), exact, math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return -_bce_with_logits(self.logits, value) + self._log_norm()

    def entropy(self) -> Tensor:
        lp0, lp1 = ops.log1p(-self.probs), ops.log(self.probs)
        return self.mean * (lp0 - lp1) - self._log_norm() - lp0

    @property
    def mean(self) -> Tensor:
        cut = self._cut()
        exact = cut / (2.0 * cut - 1.0) + 1.0 / (ops.log1p(-cut) - ops.log(cut))
        x = self.probs - 0.5
        return ops.where(self._outside(), exact, 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x * x) * x)

    @property
    def variance(self) -> Tensor:
        cut = self._cut()
        exact = cut * (cut - 1.0) / (1.0 - 2.0 * cut) ** 2 + 1.0 / (ops.log1p(-cut) - ops.log(cut)) ** 2
        x = (self.probs - 0.5) ** 2
        return ops.where(self._outside(), exact, 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x)

    def cdf(self, value: Tensor) -> Tensor:
        cut = self._cut()
        exact = (cut ** value * (1.0 - cut) ** (1.0 - value) + cut - 1.0) / (2.0 * cut - 1.0)
        inside = ops.where(self._outside(), exact, value)
        inside = ops.where(ops.greater_equal(value, 1.0), 1.0, inside)
        return ops.where(ops.less_equal(value, 0.0), 0.0, inside)

    def icdf(self, value: Tensor) -> Tensor:
        cut = self._cut()
        log_q = ops.log1p(-cut)
        exact = (ops.log1p(-cut + value * (2.0 * cut - 1.0)) - log_q) / (ops.log(cut) - log_q)
        return ops.where(self._outside(), exact, value)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        dt = self.probs._value.dtype
        u = _noise("uniform", generator, _shape_tuple(sample_shape) + self._batch_shape, dt)
        return self.icdf(_const(np.asarray(u, dt)))

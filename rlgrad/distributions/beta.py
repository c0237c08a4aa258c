"""The Beta distribution on [0, 1] (bounded continuous actions), with lgamma/digamma from
``rlgrad.special``."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import Distribution, _params, _rng, _shape_tuple
from rlgrad.distributions.gamma import standard_gamma_rsample
from rlgrad.special import betaln, digamma, xlog1py, xlogy
from rlgrad.tensor import Tensor, _const, _Trace
from rlgrad.tracer import mark_cut
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["Beta"]

_HINT = "Pass positive concentrations, e.g. softplus(x) + 1 (> 1 keeps the density unimodal)."


class Beta(Distribution):
    """Beta(concentration1 = alpha, concentration0 = beta): density x^(a-1) (1-x)^(b-1) / B(a, b).

    ``rsample`` is ``G1 / (G1 + G2)`` of two implicitly reparameterized Gamma draws: unbiased
    pathwise gradients (torch differentiates its Dirichlet draw by another implicit formula, so
    per-draw gradients differ while their expectations agree).
    """

    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1: Any, concentration0: Any,
                 validate_args: bool | None = None) -> None:
        (self.concentration1, self.concentration0), shape = _params(concentration1, concentration0)
        super().__init__(shape, (), validate_args)
        if self._validate_args:
            self._check_arg("concentration1", self.concentration1, constraints.positive, _HINT)
            self._check_arg("concentration0", self.concentration0, constraints.positive, _HINT)

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        a, b = self.concentration1._value, self.concentration0._value
        shape = _shape_tuple(sample_shape) + self._batch_shape
        x = _rng(generator).beta(a, b, size=shape)
        return mark_cut(_const(np.asarray(x, dtype=a.dtype)), "sample",
                        (self.concentration1, self.concentration0))

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        shape = _shape_tuple(sample_shape) + self._batch_shape
        g1 = standard_gamma_rsample(self.concentration1, shape, generator)
        g0 = standard_gamma_rsample(self.concentration0, shape, generator)
        fi = np.finfo(self.concentration1._value.dtype)
        return ops.clip(g1 / (g1 + g0), float(fi.tiny), float(1 - fi.eps))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        a, b = self.concentration1, self.concentration0
        # xlogy: (a - 1) log x is 0 at x = 0 when a = 1 (not 0 * -inf)
        return xlogy(a - 1, value) + xlog1py(b - 1, -value) - betaln(a, b)

    def entropy(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        total = a + b
        return (betaln(a, b) - (a - 1) * digamma(a) - (b - 1) * digamma(b)
                + (total - 2) * digamma(total))

    @property
    def mean(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        return a / (a + b)

    @property
    def variance(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        total = a + b
        return a * b / (total * total * (total + 1))

    @property
    def mode(self) -> Tensor:
        """(a-1)/(a+b-2) when a, b > 1; 0 or 1 where the density peaks at a boundary; for
        a, b < 1 (U-shaped, infinite at both ends) the end with the stronger singularity (0 if
        a < b, 1 if a >= b); NaN for the uniform Beta(1, 1)."""
        a, b = self.concentration1, self.concentration0
        # the masks from the tensors while rlgrad.jit traces (recomputed at every call)
        ad, bd = (a, b) if _Trace.compiling else (a._value, b._value)
        interior = (ad > 1) & (bd > 1)
        safe = ops.where(interior, a + b - 2, 1.0)
        inner = (a - 1) / safe
        edge = ops.where(ad >= bd, 1.0, 0.0)  # U-shaped: x^(a-1) vs (1-x)^(b-1) at the ends
        edge = ops.where((ad <= 1) & (bd > 1), 0.0, edge)
        edge = ops.where((ad > 1) & (bd <= 1), 1.0, edge)
        edge = ops.astype(ops.where((ad == 1) & (bd == 1), np.nan, edge), ad.dtype)
        return ops.where(interior, inner, edge)

"""``Gamma(concentration, rate)`` and ``Dirichlet(concentration)`` (torch's semantics).

``Gamma.rsample`` is implicitly reparameterized, as torch's: the draw ``x`` of
``Gamma(a, 1)`` moves with ``a`` as ``dx/da = -(dP/da) / p(x)``, P the regularized lower
incomplete gamma function, read from its power series (``standard_gamma_grad``). Its second
derivative in ``a`` raises (torch has none either). ``Dirichlet.rsample`` normalises such Gamma
draws: unbiased pathwise gradients (torch differentiates its Dirichlet draw by another implicit
formula, so per-draw gradients differ while their expectations agree).
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import (
    Distribution,
    _as_param,
    _float_dtype,
    _params,
    _rng,
    _shape_tuple,
)
from rlgrad.special import digamma, gamma_draw, gammainc, gammaln, xlogy
from rlgrad.tensor import Tensor, _const
from rlgrad.tracer import mark_cut
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["Gamma", "Dirichlet"]

_HINT = "Pass positive values, e.g. softplus(x) + 1e-3."
_NON_NEGATIVE = constraints.interval(0.0, np.inf)
_NON_NEGATIVE.description = "must be non-negative (>= 0)"


def standard_gamma_rsample(concentration: Tensor, shape: tuple[int, ...], generator: GeneratorLike) -> Tensor:
    """A draw of Gamma(concentration, 1) of ``shape`` whose gradient w.r.t. the concentration is
    the implicit one (torch's ``_standard_gamma``); clamped to the dtype's tiny as torch."""
    a = concentration._value
    g = _rng(generator).gamma(np.broadcast_to(a, shape), 1.0)
    g = np.maximum(g, np.finfo(a.dtype).tiny).astype(a.dtype)
    full = concentration if concentration._value.shape == shape else ops.broadcast_to(concentration, shape)
    return gamma_draw(full, _const(g))


class Gamma(Distribution):
    """Density ``rate^a x^(a-1) exp(-rate x) / Gamma(a)`` for x >= 0, a = concentration."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = _NON_NEGATIVE
    has_rsample = True

    def __init__(self, concentration: Any, rate: Any, validate_args: bool | None = None) -> None:
        (self.concentration, self.rate), shape = _params(concentration, rate)
        super().__init__(shape, (), validate_args)
        if self._validate_args:
            self._check_arg("concentration", self.concentration, constraints.positive, _HINT)
            self._check_arg("rate", self.rate, constraints.positive, _HINT)

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        a, r = self.concentration._value, self.rate._value
        x = _rng(generator).gamma(a, 1.0, size=_shape_tuple(sample_shape) + self._batch_shape) / r
        x = np.maximum(x, np.finfo(a.dtype).tiny).astype(a.dtype)  # torch clamps to tiny too
        return mark_cut(_const(x), "sample", (self.concentration, self.rate))

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        shape = _shape_tuple(sample_shape) + self._batch_shape
        x = standard_gamma_rsample(self.concentration, shape, generator) / self.rate
        tiny = float(np.finfo(self.concentration._value.dtype).tiny)
        return ops.clip(x, tiny, None)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        a, r = self.concentration, self.rate
        return xlogy(a, r) + xlogy(a - 1, value) - r * value - gammaln(a)

    def cdf(self, value: Tensor) -> Tensor:
        """P(a, rate x), the regularized lower incomplete gamma function: its gradient reaches
        ``value`` and ``rate``; one w.r.t. the concentration raises, as torch's."""
        if self._validate_args:
            self._validate_sample(value)
        return cast(Tensor, gammainc(self.concentration, self.rate * value))

    def entropy(self) -> Tensor:
        a = self.concentration
        return a - ops.log(self.rate) + gammaln(a) + (1.0 - a) * digamma(a)

    @property
    def mean(self) -> Tensor:
        return self.concentration / self.rate

    @property
    def mode(self) -> Tensor:
        return ops.clip(self.concentration - 1, 0.0, None) / self.rate

    @property
    def variance(self) -> Tensor:
        return self.concentration / (self.rate * self.rate)


class Dirichlet(Distribution):
    """Distribution on the simplex, ``concentration`` (..., K) > 0: event_shape ``(K,)``."""

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration: Any, validate_args: bool | None = None) -> None:
        c = _as_param(concentration, _float_dtype(concentration))
        if c._value.ndim < 1:
            raise ValueError("Dirichlet: concentration must have at least one dimension (the "
                             "last one indexes the categories), got a scalar")
        self.concentration = c
        super().__init__(c._value.shape[:-1], c._value.shape[-1:], validate_args)
        if self._validate_args:
            self._check_arg("concentration", c, constraints.positive, _HINT)

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        a = self.concentration._value
        g = _rng(generator).gamma(a, 1.0, size=self._extended_shape(sample_shape))
        g = np.maximum(g, np.finfo(a.dtype).tiny)
        return mark_cut(_const((g / g.sum(-1, keepdims=True)).astype(a.dtype)), "sample",
                        (self.concentration,))

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        g = standard_gamma_rsample(self.concentration, self._extended_shape(sample_shape), generator)
        fi = np.finfo(self.concentration._value.dtype)
        return ops.clip(g / ops.sum(g, axis=-1, keepdims=True), float(fi.tiny), float(1 - fi.eps))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        a = self.concentration
        return (ops.sum(xlogy(a - 1.0, value), axis=-1) + gammaln(ops.sum(a, axis=-1))
                - ops.sum(gammaln(a), axis=-1))

    def entropy(self) -> Tensor:
        a = self.concentration
        k = a._value.shape[-1]
        a0 = ops.sum(a, axis=-1)
        return (ops.sum(gammaln(a), axis=-1) - gammaln(a0) - (k - a0) * digamma(a0)
                - ops.sum((a - 1.0) * digamma(a), axis=-1))

    @property
    def mean(self) -> Tensor:
        return self.concentration / ops.sum(self.concentration, axis=-1, keepdims=True)

    @property
    def mode(self) -> Tensor:
        """(a - 1)+ / sum((a - 1)+), as torch; a row with every a < 1 (density infinite at each
        vertex) gets the vertex of its largest a (torch takes the argmax of a NaN row: vertex 0)."""
        a = self.concentration
        k = a._value.shape[-1]
        m = ops.clip(a - 1, 0.0, None)
        m = m / ops.sum(m, axis=-1, keepdims=True)
        low = np.all(a._value < 1, axis=-1)
        if low.any():  # torch: one-hot at the argmax for rows with every a < 1
            onehot = np.eye(k, dtype=a._value.dtype)[np.argmax(a._value, -1)]
            m = ops.where(low[..., None], onehot, m)
        return m

    @property
    def variance(self) -> Tensor:
        a = self.concentration
        a0 = ops.sum(a, axis=-1, keepdims=True)
        return a * (a0 - a) / (a0 * a0 * (a0 + 1))

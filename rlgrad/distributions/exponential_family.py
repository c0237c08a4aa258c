"""``Laplace``, ``Exponential``, ``LogNormal``, ``Poisson`` and ``Binomial`` (torch's semantics:
parameters, shapes, supports, ``rsample`` where torch has one, moments and ``entropy``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.categorical import _one_of
from rlgrad.distributions.distribution import (
    Distribution,
    _noise,
    _params,
    _rng,
    _shape_tuple,
)
from rlgrad.distributions.normal import Normal
from rlgrad.distributions.transformed import TransformedDistribution
from rlgrad.distributions.transforms import ExpTransform
from rlgrad.special import gammaln, xlogy
from rlgrad.tensor import Tensor, _const
from rlgrad.tracer import mark_cut
from rlgrad.typing import ArrayLike, GeneratorLike, ShapeLike

__all__ = ["Laplace", "Exponential", "LogNormal", "Poisson", "Binomial"]

_POSITIVE_HINT = "Pass positive values, e.g. softplus(x) + 1e-5."
_NON_NEGATIVE = constraints.interval(0.0, np.inf)
_NON_NEGATIVE.description = "must be non-negative (>= 0)"


class _NonNegativeInteger(constraints.Constraint):
    description = "must be a non-negative integer"

    def check(self, x: np.ndarray) -> Any:
        return (x >= 0) & (x == np.floor(x))


class Laplace(Distribution):
    """Density ``exp(-|x - loc| / scale) / (2 scale)``; ``rsample`` inverts the CDF of a uniform
    draw in (eps - 1, 1), as torch's."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc: ArrayLike, scale: ArrayLike, validate_args: bool | None = None) -> None:
        (self.loc, self.scale), shape = _params(loc, scale)
        super().__init__(shape, (), validate_args)
        if self._validate_args:
            self._check_arg("scale", self.scale, constraints.positive, _POSITIVE_HINT)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        dt = self.loc.dtype
        u = _noise("uniform", generator, _shape_tuple(sample_shape) + self._batch_shape, dt)
        u = _const(np.asarray(u * (2 - np.finfo(dt).eps) - (1 - np.finfo(dt).eps), dt))
        return self.loc - self.scale * ops.sign(u) * ops.log1p(-ops.absolute(u))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return -ops.log(2 * self.scale) - ops.absolute(value - self.loc) / self.scale

    def cdf(self, value: Tensor) -> Tensor:
        d = value - self.loc
        return 0.5 - 0.5 * ops.sign(d) * ops.expm1(-ops.absolute(d) / self.scale)

    def icdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_probability(value, "icdf")
        t = value - 0.5
        return self.loc - self.scale * ops.sign(t) * ops.log1p(-2 * ops.absolute(t))

    def entropy(self) -> Tensor:
        return 1 + ops.log(2 * self.scale)

    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)
    variance = property(lambda self: 2 * self.scale * self.scale)
    stddev = property(lambda self: math.sqrt(2) * self.scale)


class Exponential(Distribution):
    """Density ``rate exp(-rate x)`` for x >= 0; ``rsample`` is ``-log(1 - u) / rate``."""

    arg_constraints = {"rate": constraints.positive}
    support = _NON_NEGATIVE
    has_rsample = True

    def __init__(self, rate: ArrayLike, validate_args: bool | None = None) -> None:
        (self.rate,), shape = _params(rate)
        super().__init__(shape, (), validate_args)
        if self._validate_args:
            self._check_arg("rate", self.rate, constraints.positive, _POSITIVE_HINT)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        shape = _shape_tuple(sample_shape) + self._batch_shape
        e = _rng(generator).standard_exponential(shape).astype(self.rate.dtype)
        return _const(e) / self.rate

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return ops.log(self.rate) - self.rate * value

    def cdf(self, value: Tensor) -> Tensor:
        return 1 - ops.exp(-self.rate * value)

    def icdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_probability(value, "icdf")
        return -ops.log1p(-value) / self.rate

    def entropy(self) -> Tensor:
        return 1.0 - ops.log(self.rate)

    mean = property(lambda self: 1 / self.rate)
    mode = property(lambda self: _const(np.zeros_like(self.rate._value)))
    variance = property(lambda self: 1 / (self.rate * self.rate))
    stddev = property(lambda self: 1 / self.rate)


class LogNormal(TransformedDistribution):
    """``exp(X)`` for ``X ~ Normal(loc, scale)``: torch's TransformedDistribution subclass."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, loc: ArrayLike, scale: ArrayLike, validate_args: bool | None = None) -> None:
        base = Normal(loc, scale, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args=validate_args)

    loc = property(lambda self: self.base_dist.loc)
    scale = property(lambda self: self.base_dist.scale)
    mean = property(lambda self: ops.exp(self.loc + self.scale * self.scale / 2))
    mode = property(lambda self: ops.exp(self.loc - self.scale * self.scale))

    @property
    def variance(self) -> Tensor:
        s2 = self.scale * self.scale
        return ops.expm1(s2) * ops.exp(2 * self.loc + s2)

    def entropy(self) -> Tensor:
        return self.base_dist.entropy() + self.loc


class Poisson(Distribution):
    """Counts with mean ``rate`` (>= 0): ``log_prob(k) = k log rate - rate - log k!``. No
    ``rsample`` (counts are discrete) and no closed-form entropy, as torch's."""

    arg_constraints = {"rate": _NON_NEGATIVE}
    support = _NonNegativeInteger()

    def __init__(self, rate: ArrayLike, validate_args: bool | None = None) -> None:
        (self.rate,), shape = _params(rate)
        super().__init__(shape, (), validate_args)
        if self._validate_args:
            self._check_arg("rate", self.rate, _NON_NEGATIVE, "Pass a non-negative rate.")

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        r = self.rate._value
        x = _rng(generator).poisson(r, size=_shape_tuple(sample_shape) + self._batch_shape)
        return mark_cut(_const(x.astype(r.dtype)), "sample", (self.rate,))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return xlogy(value, self.rate) - self.rate - gammaln(value + 1)

    mean = property(lambda self: self.rate)
    mode = property(lambda self: ops.floor(self.rate))
    variance = property(lambda self: self.rate)


class Binomial(Distribution):
    """Successes in ``total_count`` trials of probability ``probs = sigmoid(logits)``."""

    arg_constraints = {"total_count": _NonNegativeInteger(), "probs": constraints.unit_interval,
                       "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count: ArrayLike = 1, probs: ArrayLike | None = None,
                 logits: ArrayLike | None = None, validate_args: bool | None = None) -> None:
        _one_of("Binomial", probs, logits)
        (self.total_count, p), shape = _params(total_count, logits if probs is None else probs)
        super().__init__(shape, (), validate_args)
        self._is_probs = probs is not None
        self._param = p
        if self._validate_args:
            self._check_arg("total_count", self.total_count, _NonNegativeInteger())
            self._check_arg("probs" if self._is_probs else "logits", p,
                            constraints.unit_interval if self._is_probs else constraints.real)

    @property
    def probs(self) -> Tensor:
        return self._param if self._is_probs else ops.sigmoid(self._param)

    @property
    def logits(self) -> Tensor:
        if not self._is_probs:
            return self._param
        eps = float(np.finfo(self._param.dtype).eps)  # torch's clamp_probs
        p = ops.clip(self._param, eps, 1 - eps)
        return ops.log(p) - ops.log1p(-p)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.integer_interval(0, self.total_count._value)  # type: ignore[arg-type]  # (per-element bounds)

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        p = self.probs._value
        n = self.total_count._value.astype(np.int64)
        x = _rng(generator).binomial(n, p, size=_shape_tuple(sample_shape) + self._batch_shape)
        return mark_cut(_const(x.astype(p.dtype)), "sample", (self._param,))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        n, lg = self.total_count, self.logits
        # n log(1 + e^lg) written as n (max(lg, 0) + log1p(e^-|lg|)), finite for any logit
        norm = n * ((ops.clip(lg, 0, None) + lg - ops.clip(lg, None, 0)) / 2
                    + ops.log1p(ops.exp(-ops.absolute(lg)))) - gammaln(n + 1)
        return value * lg - gammaln(value + 1) - gammaln(n - value + 1) - norm

    def enumerate_support(self, expand: bool = True) -> Tensor:
        n = self.total_count._value
        if n.size and not np.all(n == n.flat[0]):
            raise NotImplementedError("Inhomogeneous total count not supported by `enumerate_support`.")
        k = int(n.flat[0]) if n.size else 0
        vals = np.arange(k + 1, dtype=self._param.dtype).reshape((-1,) + (1,) * len(self._batch_shape))
        return _const(np.broadcast_to(vals, (k + 1,) + self._batch_shape).copy() if expand else vals)

    def entropy(self) -> Tensor:
        n = self.total_count._value
        if n.size and not np.all(n == n.flat[0]):
            raise NotImplementedError("Inhomogeneous total count not supported by `entropy`.")
        lp = self.log_prob(self.enumerate_support(False))
        return -ops.sum(ops.exp(lp) * lp, axis=0)

    mean = property(lambda self: self.total_count * self.probs)
    variance = property(lambda self: self.total_count * self.probs * (1 - self.probs))

    @property
    def mode(self) -> Tensor:
        return ops.minimum(ops.floor((self.total_count + 1) * self.probs), self.total_count)

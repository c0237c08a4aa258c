"""``Geometric``, ``NegativeBinomial``, ``Multinomial``, ``RelaxedBernoulli`` and
``OneHotCategoricalStraightThrough`` (torch's parameters, supports and formulas).

``probs``/``logits`` are read through a ``Bernoulli`` (or ``Categorical``) built from the
parameter given, so the clamping at 0 and 1 is torch's."""

from __future__ import annotations

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.categorical import Bernoulli, Categorical
from rlgrad.distributions.distribution import (
    Distribution,
    _as_param,
    _data,
    _float_dtype,
    _noise,
    _rng,
    _shape_tuple,
)
from rlgrad.distributions.exponential_family import Binomial, _NonNegativeInteger
from rlgrad.distributions.onehot import OneHotCategorical
from rlgrad.distributions.transformed import TransformedDistribution
from rlgrad.distributions.transforms import SigmoidTransform
from rlgrad.special import gammaln
from rlgrad.tensor import Tensor, _const
from rlgrad.tracer import mark_cut
from rlgrad.typing import ArrayLike, GeneratorLike, ShapeLike

__all__ = ["Geometric", "NegativeBinomial", "Multinomial", "RelaxedBernoulli",
           "LogitRelaxedBernoulli", "OneHotCategoricalStraightThrough"]


def _bce_with_logits(logits: Tensor, target: Tensor) -> Tensor:
    """``F.binary_cross_entropy_with_logits(logits, target, reduction='none')``: written with
    softplus, smooth at 0 (a max/abs form's autodiff gives a wrong slope there)."""
    return ops.softplus(logits) - logits * target


def _clamped_unit(generator: GeneratorLike, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    fi = np.finfo(dtype)
    return np.clip(np.asarray(_noise("uniform", generator, shape, dtype), dtype), fi.tiny, 1 - fi.eps)


class Geometric(Distribution):
    """Failures before the first success, success probability ``probs = sigmoid(logits)``."""

    arg_constraints = {"probs": constraints.interval(0.0, 1.0), "logits": constraints.real}
    support = _NonNegativeInteger()

    def __init__(self, probs: ArrayLike | None = None, logits: ArrayLike | None = None,
                 validate_args: bool | None = None) -> None:
        self._b = Bernoulli(probs=probs, logits=logits, validate_args=validate_args)
        if self._b._validate_args and probs is not None and np.any(self._b.probs._value <= 0):
            raise ValueError("Geometric: argument 'probs' must be in (0, 1], got a value <= 0. "
                             "Pass a probability above 0, e.g. sigmoid(x).")
        super().__init__(self._b.batch_shape, (), validate_args)

    probs = property(lambda self: self._b.probs)
    logits = property(lambda self: self._b.logits)

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        p = self.probs._value
        u = _clamped_unit(generator, _shape_tuple(sample_shape) + self._batch_shape, p.dtype)
        with np.errstate(divide="ignore"):
            x = np.floor(np.log(u) / np.log1p(-p))
        return mark_cut(_const(np.nan_to_num(x, posinf=0.0).astype(p.dtype)), "sample", (self.probs,))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        p = self.probs
        certain = np.logical_and(_data(p) == 1, _data(value) == 0)  # 0 * log(0) read as 0
        safe = ops.where(certain, 0.0, p) if certain.any() else p
        return value * ops.log1p(-safe) + ops.log(p)

    def entropy(self) -> Tensor:
        return _bce_with_logits(self.logits, self.probs) / self.probs

    mean = property(lambda self: 1.0 / self.probs - 1.0)
    mode = property(lambda self: _const(np.zeros_like(self.probs._value)))
    variance = property(lambda self: (1.0 / self.probs - 1.0) / self.probs)


class NegativeBinomial(Distribution):
    """Successes before ``total_count`` failures, success probability ``probs = sigmoid(logits)``."""

    arg_constraints = {"total_count": constraints.interval(0.0, np.inf),
                       "probs": constraints.interval(0.0, 1.0), "logits": constraints.real}
    support = _NonNegativeInteger()

    def __init__(self, total_count: ArrayLike, probs: ArrayLike | None = None,
                 logits: ArrayLike | None = None, validate_args: bool | None = None) -> None:
        self._b = Bernoulli(probs=probs, logits=logits, validate_args=validate_args)
        dt = self._b.logits.dtype
        n = _as_param(total_count, dt if isinstance(dt, np.dtype) else _float_dtype(total_count))
        shape = np.broadcast_shapes(n._value.shape, self._b.batch_shape)
        self.total_count = ops.broadcast_to(n, shape) if n._value.shape != shape else n
        if self._b.batch_shape != shape:
            p = self._b._probs_in if self._b._probs_in is not None else self._b._logits_in
            kw = {"probs" if self._b._probs_in is not None else "logits": ops.broadcast_to(p, shape)}
            self._b = Bernoulli(**kw, validate_args=False)
        super().__init__(shape, (), validate_args)
        if self._validate_args:
            self._check_arg("total_count", self.total_count, self.arg_constraints["total_count"])

    probs = property(lambda self: self._b.probs)
    logits = property(lambda self: self._b.logits)

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        p, n = self.probs._value, self.total_count._value
        shape = _shape_tuple(sample_shape) + self._batch_shape
        rng = _rng(generator)  # Poisson(Gamma(n, p / (1 - p))), as torch draws it
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = rng.gamma(np.broadcast_to(np.maximum(n, 1e-300), shape), 1.0) * (p / (1 - p))
        x = rng.poisson(np.where(n > 0, rate, 0.0))
        return mark_cut(_const(x.astype(p.dtype)), "sample", (self.total_count, self.logits))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        n, lg = self.total_count, self.logits
        unnorm = -n * ops.softplus(lg) + value * (lg - ops.softplus(lg))  # n logsig(-l) + k logsig(l)
        norm = -gammaln(n + value) + gammaln(1.0 + value) + gammaln(n)
        empty = (_data(n) + _data(value)) == 0
        if np.any(empty):
            norm = ops.where(empty, 0.0, norm)
        return unnorm - norm

    mean = property(lambda self: self.total_count * ops.exp(self.logits))
    variance = property(lambda self: self.mean / ops.sigmoid(-self.logits))

    @property
    def mode(self) -> Tensor:
        return ops.clip(ops.floor((self.total_count - 1) * ops.exp(self.logits)), 0.0, None)


class Multinomial(Distribution):
    """Counts of ``total_count`` draws from a ``Categorical(probs=|logits=)``: event ``(K,)``."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count: int = 1, probs: ArrayLike | None = None,
                 logits: ArrayLike | None = None, validate_args: bool | None = None) -> None:
        if not isinstance(total_count, int | np.integer) or isinstance(total_count, bool):
            raise NotImplementedError(
                f"Multinomial: total_count must be a Python int (torch's rule), got "
                f"{type(total_count).__name__}; use Binomial for per-element counts")
        self.total_count = int(total_count)
        self._categorical = Categorical(probs=probs, logits=logits, validate_args=validate_args)
        self._binomial = Binomial(self.total_count, probs=self._categorical.probs, validate_args=False)
        ps = self._categorical.param_shape
        super().__init__(ps[:-1], ps[-1:], validate_args)

    probs = property(lambda self: self._categorical.probs)
    logits = property(lambda self: self._categorical.logits)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]  # depends on total_count
        return constraints.independent(constraints.integer_interval(0, self.total_count), 1)

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        p = self.probs._value
        pv = p.astype(np.float64)
        pv = pv / pv.sum(-1, keepdims=True)
        shape = _shape_tuple(sample_shape) + self._batch_shape
        x = _rng(generator).multinomial(self.total_count, np.broadcast_to(pv, shape + pv.shape[-1:]))
        return mark_cut(_const(x.astype(p.dtype)), "sample", (self.probs,))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        lg = self.logits
        skip = np.logical_and(_data(value) == 0, np.isneginf(_data(lg)))  # 0 * -inf read as 0
        if skip.any():
            lg = ops.where(skip, 0.0, lg)
        n = ops.sum(value, axis=-1) if isinstance(value, Tensor) else np.sum(value, axis=-1)
        return gammaln(n + 1) - ops.sum(gammaln(value + 1), axis=-1) + ops.sum(lg * value, axis=-1)

    def entropy(self) -> Tensor:
        n = float(self.total_count)
        support = self._binomial.enumerate_support(expand=False)._value[1:]
        weights = _const(np.asarray(gammaln(support + 1)))
        binom = ops.exp(self._binomial.log_prob(_const(support)))
        term2 = ops.sum(binom * weights, axis=(0, -1))
        return n * self._categorical.entropy() - float(gammaln(np.float64(n + 1))) + term2

    mean = property(lambda self: self.total_count * self.probs)
    variance = property(lambda self: self.total_count * self.probs * (1 - self.probs))


class LogitRelaxedBernoulli(Distribution):
    """The logit of a ``RelaxedBernoulli`` draw: ``(logit(u) + logits) / temperature``."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(self, temperature: ArrayLike, probs: ArrayLike | None = None,
                 logits: ArrayLike | None = None, validate_args: bool | None = None) -> None:
        self._b = Bernoulli(probs=probs, logits=logits, validate_args=validate_args)
        self.temperature = _as_param(temperature, self._b.logits._value.dtype)
        super().__init__(self._b.batch_shape, (), validate_args)

    probs = property(lambda self: self._b.probs)
    logits = property(lambda self: self._b.logits)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        lg = self.logits
        u = _clamped_unit(generator, _shape_tuple(sample_shape) + self._batch_shape, lg._value.dtype)
        return (_const(np.log(u) - np.log1p(-u)) + lg) / self.temperature

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        diff = self.logits - value * self.temperature
        return ops.log(self.temperature) + diff - 2 * ops.softplus(diff)


class RelaxedBernoulli(TransformedDistribution):
    """``sigmoid`` of a ``LogitRelaxedBernoulli``: a reparameterizable draw in (0, 1) that tends
    to a Bernoulli's as ``temperature`` goes to 0."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval

    def __init__(self, temperature: ArrayLike, probs: ArrayLike | None = None,
                 logits: ArrayLike | None = None, validate_args: bool | None = None) -> None:
        base = LogitRelaxedBernoulli(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, SigmoidTransform(), validate_args=validate_args)

    temperature = property(lambda self: self.base_dist.temperature)
    probs = property(lambda self: self.base_dist.probs)
    logits = property(lambda self: self.base_dist.logits)


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """``rsample()`` is the one-hot draw whose gradient is that of ``probs`` (the straight-through
    estimator: ``sample + probs - probs.detach()``)."""

    has_rsample = True

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        x = self.sample(sample_shape, generator=generator)
        p = self.probs
        return x + (p - ops.stop_gradient(p))

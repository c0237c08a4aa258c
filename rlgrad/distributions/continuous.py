"""Univariate continuous distributions with closed forms (torch's parameters, supports,
``log_prob``, ``entropy``, moments, ``cdf``/``icdf`` and ``rsample`` where torch has them):
``Cauchy``, ``HalfCauchy``, ``HalfNormal``, ``Gumbel``, ``Weibull``, ``Pareto``, ``Kumaraswamy``,
``StudentT``, ``Chi2``, ``InverseGamma``, ``FisherSnedecor`` and ``VonMises``.

``StudentT``, ``Chi2``, ``FisherSnedecor`` and ``InverseGamma`` draw through ``Gamma``'s
implicitly reparameterized ``rsample``, as torch's do, so their draws carry gradients to every
parameter (first order: the Gamma draw has no second derivative in its shape).
"""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import Distribution, _noise, _params, _rng, _shape_tuple
from rlgrad.distributions.gamma import Gamma, standard_gamma_rsample
from rlgrad.special import betaln, digamma, erf, erfinv, gammaincc, gammaln, i0e, i1e
from rlgrad.tensor import Tensor, _const
from rlgrad.tracer import mark_cut
from rlgrad.typing import ArrayLike, GeneratorLike, ShapeLike

__all__ = ["Cauchy", "HalfCauchy", "HalfNormal", "Gumbel", "Weibull", "Pareto", "Kumaraswamy",
           "StudentT", "Chi2", "InverseGamma", "FisherSnedecor", "VonMises"]

_EULER = 0.57721566490153286061
_LOG_PI = math.log(math.pi)
_HINT = "Pass positive values, e.g. softplus(x) + 1e-5."
_NON_NEGATIVE = constraints.interval(0.0, np.inf)
_NON_NEGATIVE.description = "must be non-negative (>= 0)"


def _full(like: Tensor, value: float) -> Tensor:
    return _const(np.full(like._value.shape, value, like._value.dtype))


def _where(cond: Any, a: Any, b: Any) -> Tensor:
    return ops.where(cond, a, b)


def _safe(x: Tensor, ok: Any, fill: float) -> Tensor:
    """``x`` where ``ok``, else ``fill``: a formula valid only where ``ok`` then stays finite
    elsewhere, so the discarded branch of a ``where`` sends no NaN gradient back."""
    return ops.where(ok, x, fill)


class _Scalar(Distribution):
    """Scalar-event distributions of broadcast parameters: ``_names`` in ``__init__``'s order,
    each checked against its ``arg_constraints`` entry."""

    _names: tuple[str, ...] = ()

    def _setup(self, values: tuple, validate_args: bool | None) -> None:
        ts, shape = _params(*values)
        for n, t in zip(self._names, ts, strict=True):
            setattr(self, n, t)
        super().__init__(shape, (), validate_args)
        if self._validate_args:
            for n, t in zip(self._names, ts, strict=True):
                c = self.arg_constraints[n]
                self._check_arg(n, t, c, _HINT if c is constraints.positive else "")

    def _unit(self, sample_shape: ShapeLike, generator: GeneratorLike) -> Tensor:
        """Uniform noise in (tiny, 1 - eps), torch's ``clamp_probs`` of ``rand``."""
        dt = self._dtype()
        u = _noise("uniform", generator, _shape_tuple(sample_shape) + self._batch_shape, dt)
        fi = np.finfo(dt)
        return _const(np.clip(np.asarray(u, dt), fi.tiny, 1 - fi.eps))

    def _dtype(self) -> np.dtype:
        return getattr(self, self._names[0])._value.dtype

    def _check(self, value: Any) -> None:
        if self._validate_args:
            self._validate_sample(value)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        if not self.has_rsample:
            return super().rsample(sample_shape, generator)
        return self.icdf(self._unit(sample_shape, generator))


class Cauchy(_Scalar):
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _names = ("loc", "scale")
    loc: Tensor
    scale: Tensor

    def __init__(self, loc: ArrayLike, scale: ArrayLike, validate_args: bool | None = None) -> None:
        self._setup((loc, scale), validate_args)

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        z = (value - self.loc) / self.scale
        return -_LOG_PI - ops.log(self.scale) - ops.log1p(z * z)

    def cdf(self, value: Tensor) -> Tensor:
        return ops.arctan((value - self.loc) / self.scale) / math.pi + 0.5

    def icdf(self, value: Tensor) -> Tensor:
        return ops.tan(math.pi * (value - 0.5)) * self.scale + self.loc

    def entropy(self) -> Tensor:
        return math.log(4 * math.pi) + ops.log(self.scale)

    mean = property(lambda self: _full(self.loc, math.nan))
    mode = property(lambda self: self.loc)
    variance = property(lambda self: _full(self.loc, math.inf))


class HalfCauchy(_Scalar):
    """``|X|`` for ``X ~ Cauchy(0, scale)``."""

    arg_constraints = {"scale": constraints.positive}
    support = _NON_NEGATIVE
    has_rsample = True
    _names = ("scale",)
    scale: Tensor

    def __init__(self, scale: ArrayLike, validate_args: bool | None = None) -> None:
        self._setup((scale,), validate_args)

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        z = value / self.scale
        lp = math.log(2 / math.pi) - ops.log(self.scale) - ops.log1p(z * z)
        return _where(ops.greater_equal(value, 0), lp, -math.inf)

    def cdf(self, value: Tensor) -> Tensor:
        return 2 * ops.arctan(value / self.scale) / math.pi

    def icdf(self, value: Tensor) -> Tensor:
        return ops.tan(math.pi * value / 2) * self.scale

    def entropy(self) -> Tensor:
        return math.log(2 * math.pi) + ops.log(self.scale)

    mean = property(lambda self: _full(self.scale, math.inf))
    mode = property(lambda self: _full(self.scale, 0.0))
    variance = property(lambda self: _full(self.scale, math.inf))


class HalfNormal(_Scalar):
    """``|X|`` for ``X ~ Normal(0, scale)``."""

    arg_constraints = {"scale": constraints.positive}
    support = _NON_NEGATIVE
    has_rsample = True
    _names = ("scale",)
    scale: Tensor

    def __init__(self, scale: ArrayLike, validate_args: bool | None = None) -> None:
        self._setup((scale,), validate_args)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        e = _noise("normal", generator, _shape_tuple(sample_shape) + self._batch_shape, self._dtype())
        return ops.absolute(_const(e) * self.scale)

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        z = value / self.scale
        lp = 0.5 * math.log(2 / math.pi) - ops.log(self.scale) - 0.5 * z * z
        return _where(ops.greater_equal(value, 0), lp, -math.inf)

    def cdf(self, value: Tensor) -> Tensor:
        return erf(value / (self.scale * math.sqrt(2)))

    def icdf(self, value: Tensor) -> Tensor:
        return erfinv(value) * self.scale * math.sqrt(2)

    def entropy(self) -> Tensor:
        return 0.5 * math.log(math.pi * math.e / 2) + ops.log(self.scale)

    mean = property(lambda self: self.scale * math.sqrt(2 / math.pi))
    mode = property(lambda self: _full(self.scale, 0.0))
    variance = property(lambda self: self.scale * self.scale * (1 - 2 / math.pi))


class Gumbel(_Scalar):
    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _names = ("loc", "scale")
    loc: Tensor
    scale: Tensor

    def __init__(self, loc: ArrayLike, scale: ArrayLike, validate_args: bool | None = None) -> None:
        self._setup((loc, scale), validate_args)

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        z = (value - self.loc) / self.scale
        return -(z + ops.exp(-z)) - ops.log(self.scale)

    def cdf(self, value: Tensor) -> Tensor:
        return ops.exp(-ops.exp(-(value - self.loc) / self.scale))

    def icdf(self, value: Tensor) -> Tensor:
        return self.loc - self.scale * ops.log(-ops.log(value))

    def entropy(self) -> Tensor:
        return ops.log(self.scale) + (1 + _EULER)

    mean = property(lambda self: self.loc + self.scale * _EULER)
    mode = property(lambda self: self.loc)
    variance = property(lambda self: math.pi ** 2 / 6 * self.scale * self.scale)


class Weibull(_Scalar):
    """Density ``(k/l) (x/l)^(k-1) exp(-(x/l)^k)``, ``l = scale``, ``k = concentration``."""

    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive
    has_rsample = True
    _names = ("scale", "concentration")
    scale: Tensor
    concentration: Tensor

    def __init__(self, scale: ArrayLike, concentration: ArrayLike,
                 validate_args: bool | None = None) -> None:
        self._setup((scale, concentration), validate_args)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        e = -ops.log1p(-self._unit(sample_shape, generator))  # Exponential(1)
        return self.scale * e ** (1 / self.concentration)

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        k, z = self.concentration, value / self.scale
        return ops.log(k / self.scale) + (k - 1) * ops.log(z) - z ** k

    def cdf(self, value: Tensor) -> Tensor:
        return -ops.expm1(-((value / self.scale) ** self.concentration))

    def icdf(self, value: Tensor) -> Tensor:
        return self.scale * (-ops.log1p(-value)) ** (1 / self.concentration)

    def entropy(self) -> Tensor:
        k = self.concentration
        return _EULER * (1 - 1 / k) + ops.log(self.scale / k) + 1

    mean = property(lambda self: self.scale * ops.exp(gammaln(1 + 1 / self.concentration)))

    @property
    def mode(self) -> Tensor:
        k = self.concentration  # torch: NaN for k < 1 (a negative base)
        ok = ops.greater_equal(k, 1)
        ks = _safe(k, ok, 1.0)
        return _where(ok, self.scale * ((ks - 1) / ks) ** (1 / ks), math.nan)

    @property
    def variance(self) -> Tensor:
        k = self.concentration
        return self.scale ** 2 * (ops.exp(gammaln(1 + 2 / k)) - ops.exp(2 * gammaln(1 + 1 / k)))


class Pareto(_Scalar):
    """Density ``alpha scale^alpha / x^(alpha + 1)`` for ``x >= scale``."""

    arg_constraints = {"scale": constraints.positive, "alpha": constraints.positive}
    has_rsample = True
    _names = ("scale", "alpha")
    scale: Tensor
    alpha: Tensor

    def __init__(self, scale: ArrayLike, alpha: ArrayLike, validate_args: bool | None = None) -> None:
        self._setup((scale, alpha), validate_args)

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]  # per-instance, as torch
        return constraints.interval(self.scale._value, np.inf)  # type: ignore[arg-type]  # (per-element bounds)

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        a = self.alpha
        return ops.log(a) + a * ops.log(self.scale) - (a + 1) * ops.log(value)

    def cdf(self, value: Tensor) -> Tensor:
        return 1 - (self.scale / value) ** self.alpha

    def icdf(self, value: Tensor) -> Tensor:
        return self.scale * ops.exp(-ops.log1p(-value) / self.alpha)

    def entropy(self) -> Tensor:
        return ops.log(self.scale / self.alpha) + (1 + 1 / self.alpha)

    @property
    def mean(self) -> Tensor:
        ok = ops.greater(self.alpha, 1)
        a = _safe(self.alpha, ok, 2.0)
        return _where(ok, a * self.scale / (a - 1), math.inf)

    mode = property(lambda self: self.scale)

    @property
    def variance(self) -> Tensor:
        ok = ops.greater(self.alpha, 2)
        a = _safe(self.alpha, ok, 3.0)
        return _where(ok, self.scale ** 2 * a / ((a - 1) ** 2 * (a - 2)), math.inf)


class Kumaraswamy(_Scalar):
    """Density ``a b x^(a-1) (1 - x^a)^(b-1)`` on (0, 1), ``a, b`` = concentration1, concentration0."""

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True
    _names = ("concentration1", "concentration0")
    concentration1: Tensor
    concentration0: Tensor

    def __init__(self, concentration1: ArrayLike, concentration0: ArrayLike,
                 validate_args: bool | None = None) -> None:
        self._setup((concentration1, concentration0), validate_args)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        u = self._unit(sample_shape, generator)  # torch: (1 - u^(1/b))^(1/a)
        return (1 - u ** (1 / self.concentration0)) ** (1 / self.concentration1)

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        a, b = self.concentration1, self.concentration0
        return ops.log(a) + ops.log(b) + (a - 1) * ops.log(value) + (b - 1) * ops.log1p(-(value ** a))

    def cdf(self, value: Tensor) -> Tensor:
        return 1 - (1 - value ** self.concentration1) ** self.concentration0

    def icdf(self, value: Tensor) -> Tensor:
        return (1 - (1 - value) ** (1 / self.concentration0)) ** (1 / self.concentration1)

    def entropy(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        return (1 - 1 / b) + (1 - 1 / a) * (digamma(b + 1) + _EULER) - ops.log(a) - ops.log(b)

    def _moment(self, n: int) -> Tensor:
        a, b = self.concentration1, self.concentration0
        return b * ops.exp(betaln(1 + n / a, b))

    mean = property(lambda self: self._moment(1))
    variance = property(lambda self: self._moment(2) - self._moment(1) ** 2)

    @property
    def mode(self) -> Tensor:
        a, b = self.concentration1, self.concentration0
        ok = ops.logical_and(ops.greater_equal(a, 1), ops.greater_equal(b, 1))
        a, b = _safe(a, ok, 2.0), _safe(b, ok, 2.0)
        return _where(ok, ((a - 1) / (a * b - 1)) ** (1 / a), math.nan)


class StudentT(_Scalar):
    arg_constraints = {"df": constraints.positive, "loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True
    _names = ("df", "loc", "scale")
    df: Tensor
    loc: Tensor
    scale: Tensor

    def __init__(self, df: ArrayLike, loc: ArrayLike = 0.0, scale: ArrayLike = 1.0,
                 validate_args: bool | None = None) -> None:
        self._setup((df, loc, scale), validate_args)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        shape = _shape_tuple(sample_shape) + self._batch_shape
        z = _const(np.asarray(_noise("normal", generator, shape, self._dtype())))
        chi2 = 2.0 * standard_gamma_rsample(0.5 * self.df, shape, generator)  # Chi2(df)
        return self.loc + self.scale * z * (chi2 / self.df) ** -0.5

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        df = self.df
        y = (value - self.loc) / self.scale
        z = (ops.log(self.scale) + 0.5 * ops.log(df) + 0.5 * _LOG_PI + gammaln(0.5 * df)
             - gammaln(0.5 * (df + 1.0)))
        return -0.5 * (df + 1.0) * ops.log1p(y * y / df) - z

    def entropy(self) -> Tensor:
        df = self.df
        lbeta = gammaln(0.5 * df) + 0.5 * _LOG_PI - gammaln(0.5 * (df + 1))
        return (ops.log(self.scale) + 0.5 * (df + 1) * (digamma(0.5 * (df + 1)) - digamma(0.5 * df))
                + 0.5 * ops.log(df) + lbeta)

    mean = property(lambda self: _where(ops.greater(self.df, 1), self.loc, math.nan))
    mode = property(lambda self: self.loc)

    @property
    def variance(self) -> Tensor:
        ok = ops.greater(self.df, 2)
        df = _safe(self.df, ok, 3.0)
        v = _where(ok, self.scale * self.scale * df / (df - 2), math.inf)
        return _where(ops.greater(self.df, 1), v, math.nan)


class Chi2(Gamma):
    """``Gamma(df / 2, 1 / 2)``."""

    arg_constraints = {"df": constraints.positive}

    def __init__(self, df: ArrayLike, validate_args: bool | None = None) -> None:
        (d,), _ = _params(df)
        super().__init__(0.5 * d, _const(np.full(d._value.shape, 0.5, d._value.dtype)), validate_args)

    df = property(lambda self: self.concentration * 2)


class InverseGamma(_Scalar):
    """``1 / X`` for ``X ~ Gamma(concentration, rate)``: density ``r^a x^(-a-1) e^(-r/x) / G(a)``."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True
    _names = ("concentration", "rate")
    concentration: Tensor
    rate: Tensor

    def __init__(self, concentration: ArrayLike, rate: ArrayLike, validate_args: bool | None = None) -> None:
        self._setup((concentration, rate), validate_args)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        g = Gamma(self.concentration, self.rate, validate_args=False).rsample(sample_shape, generator)
        return 1 / g

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        a, r = self.concentration, self.rate
        return a * ops.log(r) - gammaln(a) - (a + 1) * ops.log(value) - r / value

    def cdf(self, value: Tensor) -> Tensor:
        """Q(a, rate / x), the upper regularized incomplete gamma function (torch's 1 - P, with
        its gradient: none w.r.t. the concentration)."""
        self._check(value)
        return cast(Tensor, gammaincc(self.concentration, self.rate / value))

    def entropy(self) -> Tensor:
        a = self.concentration
        return a + ops.log(self.rate) + gammaln(a) - (1 + a) * digamma(a)

    @property
    def mean(self) -> Tensor:
        ok = ops.greater(self.concentration, 1)
        return _where(ok, self.rate / (_safe(self.concentration, ok, 2.0) - 1), math.inf)

    mode = property(lambda self: self.rate / (self.concentration + 1))

    @property
    def variance(self) -> Tensor:
        ok = ops.greater(self.concentration, 2)
        a = _safe(self.concentration, ok, 3.0)
        return _where(ok, self.rate ** 2 / ((a - 1) ** 2 * (a - 2)), math.inf)


class FisherSnedecor(_Scalar):
    """The F distribution: ``(X1 / df1) / (X2 / df2)``, ``Xi ~ Chi2(dfi)``."""

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True
    _names = ("df1", "df2")
    df1: Tensor
    df2: Tensor

    def __init__(self, df1: ArrayLike, df2: ArrayLike, validate_args: bool | None = None) -> None:
        self._setup((df1, df2), validate_args)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        shape = _shape_tuple(sample_shape) + self._batch_shape
        x1 = standard_gamma_rsample(0.5 * self.df1, shape, generator) / (0.5 * self.df1)
        x2 = standard_gamma_rsample(0.5 * self.df2, shape, generator) / (0.5 * self.df2)
        return ops.clip(x1 / x2, float(np.finfo(self._dtype()).tiny), None)

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        c1, c2, ratio = 0.5 * self.df1, 0.5 * self.df2, self.df1 / self.df2
        return (gammaln(c1 + c2) - gammaln(c1) - gammaln(c2) + c1 * ops.log(ratio)
                + (c1 - 1) * ops.log(value) - (c1 + c2) * ops.log1p(ratio * value))

    @property
    def mean(self) -> Tensor:
        ok = ops.greater(self.df2, 2)
        d2 = _safe(self.df2, ok, 3.0)
        return _where(ok, d2 / (d2 - 2), math.nan)

    @property
    def mode(self) -> Tensor:
        ok = ops.greater(self.df1, 2)
        d1 = _safe(self.df1, ok, 3.0)
        return _where(ok, (d1 - 2) / d1 * self.df2 / (self.df2 + 2), math.nan)

    @property
    def variance(self) -> Tensor:
        ok = ops.greater(self.df2, 4)
        d1, d2 = self.df1, _safe(self.df2, ok, 5.0)
        return _where(ok, 2 * d2 ** 2 * (d1 + d2 - 2) / (d1 * (d2 - 2) ** 2 * (d2 - 4)), math.nan)


class VonMises(_Scalar):
    """The circular normal: density ``exp(k cos(x - loc)) / (2 pi I0(k))``, draws in [-pi, pi)
    (Best and Fisher's rejection sampler); no rsample and no entropy, as torch's."""

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    _names = ("loc", "concentration")
    loc: Tensor
    concentration: Tensor

    def __init__(self, loc: ArrayLike, concentration: ArrayLike, validate_args: bool | None = None) -> None:
        self._setup((loc, concentration), validate_args)

    def log_prob(self, value: Tensor) -> Tensor:
        self._check(value)
        k = self.concentration
        log_i0 = ops.log(i0e(k)) + k  # log I0(k) without overflow
        return k * ops.cos(value - self.loc) - math.log(2 * math.pi) - log_i0

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        rng, shape = _rng(generator), _shape_tuple(sample_shape) + self._batch_shape
        k = np.broadcast_to(self.concentration._value.astype(np.float64), shape)
        tau = 1 + np.sqrt(1 + 4 * k * k)
        rho = (tau - np.sqrt(2 * tau)) / (2 * k)
        r = (1 + rho * rho) / (2 * rho)
        x, todo = np.zeros(shape), np.ones(shape, bool)
        while todo.any():  # each round accepts at least ~66% of the rest (Best and Fisher)
            u1, u2, u3 = rng.random((3,) + shape)
            z = np.cos(math.pi * u1)
            f = (1 + r * z) / (r + z)
            c = k * (r - f)
            ok = todo & ((c * (2 - c) - u2 > 0) | (np.log(c / u2) + 1 - c >= 0))
            x = np.where(ok, np.sign(u3 - 0.5) * np.arccos(np.clip(f, -1, 1)), x)
            todo &= ~ok
        x = np.mod(x + math.pi + self.loc._value, 2 * math.pi) - math.pi
        return mark_cut(_const(x.astype(self._dtype())), "sample", (self.loc, self.concentration))

    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)
    variance = property(lambda self: 1 - i1e(self.concentration) / i0e(self.concentration))

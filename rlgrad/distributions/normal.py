"""Gaussians: ``Normal``, ``Independent`` (and the diagonal multivariate normal built with it),
and ``TanhNormal``, the squashed Gaussian of SAC."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import (
    Distribution,
    _data,
    _params,
    _rng,
    _shape_tuple,
    _standard_normal,
    _sum_rightmost,
)
from rlgrad.special import erf, erfinv
from rlgrad.tensor import Tensor, _const
from rlgrad.tracer import mark_cut
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["Normal", "Independent", "DiagNormal", "MultivariateNormalDiag", "TanhNormal"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG2 = math.log(2.0)
_SQRT2 = math.sqrt(2.0)
_SCALE_HINT = ("Pass a positive standard deviation, e.g. softplus(x) + 1e-5 or exp(log_std) "
               "(clip log_std to a range such as [-20, 2]).")


class Normal(Distribution):
    """Gaussian with mean ``loc`` and standard deviation ``scale`` (> 0), elementwise.

    ``rsample()`` is ``loc + scale * eps`` with ``eps ~ N(0, 1)`` drawn outside the graph.
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        (self.loc, self.scale), shape = _params(loc, scale)
        super().__init__(shape, (), validate_args)
        if self._validate_args:
            self._check_arg("loc", self.loc, constraints.real)
            self._check_arg("scale", self.scale, constraints.positive, _SCALE_HINT)

    def _eps(self, sample_shape: Any, generator: Any) -> np.ndarray:
        shape = _shape_tuple(sample_shape) + self._batch_shape
        return _standard_normal(_rng(generator), shape, self.loc._value.dtype)

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        eps = self._eps(sample_shape, generator)
        # mark_cut: rlgrad.explain names sample() as the op that cut loc/scale's gradient path
        return mark_cut(_const(self.loc._value + self.scale._value * eps), "sample",
                        (self.loc, self.scale))

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        return self.loc + self.scale * _const(self._eps(sample_shape, generator))

    def log_prob(self, value: Any) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        return -0.5 * (z * z) - ops.log(self.scale) - _HALF_LOG_2PI

    def entropy(self) -> Tensor:
        return ops.log(self.scale) + (0.5 + _HALF_LOG_2PI)

    def cdf(self, value: Any) -> Tensor:
        """P(X <= value) = (1 + erf((value - loc) / (scale sqrt 2))) / 2, as torch's."""
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + erf((value - self.loc) / (self.scale * _SQRT2)))

    def icdf(self, value: Any) -> Tensor:
        """The quantile function: loc + scale sqrt(2) erfinv(2 value - 1), value in [0, 1]."""
        if self._validate_args:
            self._validate_probability(value, "icdf")
        return self.loc + self.scale * erfinv(2 * value - 1) * _SQRT2

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        return self.scale * self.scale


class Independent(Distribution):
    """Reinterpret the rightmost ``reinterpreted_batch_ndims`` batch dimensions of ``base`` as
    event dimensions: ``log_prob`` and ``entropy`` sum over them (torch's ``Independent``).

    ``Independent(Normal(loc, scale), 1)`` is the diagonal multivariate normal of continuous-
    action policies: one log-probability per action vector.
    """

    def __init__(self, base_distribution: Distribution, reinterpreted_batch_ndims: int,
                 validate_args: bool | None = None) -> None:
        n = int(reinterpreted_batch_ndims)
        bshape = base_distribution.batch_shape
        if not 0 <= n <= len(bshape):
            raise ValueError(
                f"Independent: reinterpreted_batch_ndims={n} must be between 0 and the base "
                f"distribution's batch rank {len(bshape)} (batch_shape {bshape})"
            )
        split = len(bshape) - n
        super().__init__(bshape[:split], bshape[split:] + base_distribution.event_shape,
                         validate_args)
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = n

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @property
    def has_enumerate_support(self) -> bool:  # type: ignore[override]
        return False

    @property
    def support(self) -> constraints.Constraint | None:  # type: ignore[override]
        return self.base_dist.support

    @property
    def arg_constraints(self) -> dict:  # type: ignore[override]
        return self.base_dist.arg_constraints

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        return self.base_dist.sample(sample_shape, generator=generator)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        return self.base_dist.rsample(sample_shape, generator=generator)

    def log_prob(self, value: Any) -> Tensor:
        if self._validate_args:
            shape = _data(value).shape
            ev = self._event_shape
            if shape[len(shape) - len(ev):] != ev:  # broadcasting would sum copies silently
                raise ValueError(
                    f"Independent.log_prob: value has shape {shape}, whose trailing dimensions "
                    f"should be the event shape {ev}"
                )
        return _sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self) -> Tensor:
        return _sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    @property
    def mean(self) -> Tensor:
        return self.base_dist.mean

    @property
    def mode(self) -> Tensor:
        return self.base_dist.mode

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance

    @property
    def stddev(self) -> Tensor:
        return self.base_dist.stddev

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"


class DiagNormal(Independent):
    """Multivariate normal with diagonal covariance over the last dimension:
    ``Independent(Normal(loc, scale), 1)`` with ``loc`` and ``scale`` as attributes."""

    base_dist: Normal

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        base = Normal(loc, scale, validate_args=validate_args)
        if not base.batch_shape:
            raise ValueError(
                "DiagNormal: loc and scale need at least one dimension (the event dimension); "
                "use Normal for a scalar Gaussian"
            )
        super().__init__(base, 1, validate_args=validate_args)

    @property
    def loc(self) -> Tensor:
        return self.base_dist.loc

    @property
    def scale(self) -> Tensor:
        return self.base_dist.scale

    def __repr__(self) -> str:
        return f"DiagNormal(loc: {self.loc.shape}, scale: {self.scale.shape})"


MultivariateNormalDiag = DiagNormal  # TensorFlow Probability's name


class TanhNormal(Distribution):
    """``y = tanh(u)``, ``u ~ Normal(loc, scale)``: actions squashed into (-1, 1), as in SAC.

    ``log_prob(y) = Normal.log_prob(u) - log(1 - tanh(u)^2)`` with the log-det-Jacobian in the
    overflow-free form ``2 * (log 2 - u - softplus(-2u))``.  ``rsample()``/``sample()`` remember
    the pre-tanh ``u`` of their last draw, so ``log_prob`` of that draw uses ``u`` itself rather
    than ``atanh(y)``, which loses all precision once ``|y|`` rounds to 1; for other values
    ``atanh`` of the value clipped just inside (-1, 1) is used.  :meth:`rsample_and_log_prob`
    returns both at once.  Elementwise (event_shape ``()``): wrap it in ``Independent(., 1)``
    for one log-probability per action vector.
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.interval(-1.0, 1.0)
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        self.base_dist = Normal(loc, scale, validate_args=validate_args)
        super().__init__(self.base_dist.batch_shape, (), validate_args)
        self._cache: tuple[Tensor, Tensor] | None = None  # (y, u) of the last draw

    @property
    def loc(self) -> Tensor:
        return self.base_dist.loc

    @property
    def scale(self) -> Tensor:
        return self.base_dist.scale

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        u = self.base_dist.rsample(sample_shape, generator=generator)
        y = ops.tanh(u)
        self._cache = (y, u)
        return y

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        u = self.base_dist.sample(sample_shape, generator=generator)
        y = mark_cut(_const(np.tanh(u._value)), "sample", (u,))
        self._cache = (y, u)
        return y

    def rsample_and_log_prob(self, sample_shape: ShapeLike = (),
                             generator: GeneratorLike = None) -> tuple[Tensor, Tensor]:
        """A reparameterized draw and its log-probability (the pair SAC's actor loss needs)."""
        u = self.base_dist.rsample(sample_shape, generator=generator)
        return ops.tanh(u), self._log_prob_pre_tanh(u)

    @staticmethod
    def log_abs_det_jacobian(u: Any) -> Any:
        """log |d tanh(u) / du| = log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable."""
        return 2.0 * (_LOG2 - u - ops.softplus(-2.0 * u))

    def _log_prob_pre_tanh(self, u: Any) -> Tensor:
        return self.base_dist.log_prob(u) - self.log_abs_det_jacobian(u)

    def _pre_tanh(self, value: Any) -> Any:
        cache = self._cache
        if cache is not None:
            if value is cache[0]:
                return cache[1]  # the draw itself: u carries its graph (pathwise)
            if (value._value if isinstance(value, Tensor) else value) is cache[0]._value:
                return _const(cache[1]._value)  # a detached view of the draw: exact u, no graph
        v = _data(value)
        if self._validate_args:
            self._validate_sample(value)
        eps = float(np.finfo(v.dtype if v.dtype.kind == "f" else self.loc._value.dtype).eps)
        return ops.arctanh(ops.clip(value, -1.0 + eps, 1.0 - eps))

    def log_prob(self, value: Any) -> Tensor:
        return self._log_prob_pre_tanh(self._pre_tanh(value))

    @property
    def mode(self) -> Tensor:
        """``tanh(loc)``: the deterministic action SAC evaluates with (the squashed Gaussian's
        mode; the squashed density's own mode moves towards +-1 when scale is large)."""
        return ops.tanh(self.loc)

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError(
            "TanhNormal.mean has no closed form; estimate it with sample((n,)).mean(0), or use "
            "mode (tanh(loc)) for a deterministic action"
        )

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError("TanhNormal.variance has no closed form; estimate it by sampling")

    def entropy(self) -> Tensor:
        raise NotImplementedError(
            "TanhNormal.entropy has no closed form; use the one-sample estimate "
            "-log_prob(y) with y, log_prob = rsample_and_log_prob() (what SAC does)"
        )

    def __repr__(self) -> str:
        return f"TanhNormal(loc: {self.loc.shape}, scale: {self.scale.shape})"

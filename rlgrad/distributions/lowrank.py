"""``LowRankMultivariateNormal`` (covariance ``W W^T + diag(D)``) and ``LogisticNormal`` (a
Normal pushed onto the simplex by ``StickBreakingTransform``), torch's classes.

The low-rank Gaussian's densities are those of the ``MultivariateNormal`` of its covariance
(an O(n^3) factorization, not torch's Woodbury identity: the same values and gradients; for
the small action spaces of RL the difference in cost does not show); its ``rsample`` is torch's
``loc + W e_W + sqrt(D) e_D``."""

from __future__ import annotations

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import Distribution, _as_param, _float_dtype, _noise, _shape_tuple
from rlgrad.distributions.mvn import MultivariateNormal
from rlgrad.distributions.normal import Normal
from rlgrad.distributions.transformed import TransformedDistribution
from rlgrad.distributions.transforms import StickBreakingTransform
from rlgrad.tensor import Tensor, _const
from rlgrad.typing import ArrayLike, GeneratorLike, ShapeLike

__all__ = ["LowRankMultivariateNormal", "LogisticNormal"]


class LowRankMultivariateNormal(Distribution):
    """``loc`` (..., n), ``cov_factor`` W (..., n, r), ``cov_diag`` D (..., n) > 0."""

    arg_constraints = {"loc": constraints.real_vector,
                       "cov_factor": constraints.independent(constraints.real, 2),
                       "cov_diag": constraints.independent(constraints.positive, 1)}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc: ArrayLike, cov_factor: ArrayLike, cov_diag: ArrayLike,
                 validate_args: bool | None = None) -> None:
        dt = _float_dtype(loc, cov_factor, cov_diag)
        loc_t, w, d = _as_param(loc, dt), _as_param(cov_factor, dt), _as_param(cov_diag, dt)
        n = loc_t._value.shape[-1] if loc_t._value.ndim else -1
        if n < 0 or w._value.ndim < 2 or d._value.ndim < 1 or w._value.shape[-2] != n \
                or d._value.shape[-1] != n:
            raise ValueError(
                "LowRankMultivariateNormal: loc must be (..., n), cov_factor (..., n, rank) and "
                f"cov_diag (..., n), got shapes {loc_t._value.shape}, {w._value.shape}, {d._value.shape}")
        batch = np.broadcast_shapes(loc_t._value.shape[:-1], w._value.shape[:-2], d._value.shape[:-1])
        self.loc = ops.broadcast_to(loc_t, batch + (n,))
        self.cov_factor, self.cov_diag = w, d
        super().__init__(batch, (n,), validate_args)
        if self._validate_args:
            self._check_arg("cov_diag", d, constraints.positive,
                            "Pass positive values, e.g. softplus(x) + 1e-5.")
        cov = ops.matmul(w, ops.swapaxes(w, -1, -2)) + ops.expand_dims(d, -1) * np.eye(n, dtype=dt)
        self._mvn = MultivariateNormal(self.loc, covariance_matrix=cov, validate_args=False)

    covariance_matrix = property(lambda self: self._mvn.covariance_matrix)
    precision_matrix = property(lambda self: self._mvn.precision_matrix)
    scale_tril = property(lambda self: self._mvn.scale_tril)
    mean = property(lambda self: self.loc)
    mode = property(lambda self: self.loc)

    @property
    def variance(self) -> Tensor:
        full = self._batch_shape + self._event_shape
        v = ops.sum(self.cov_factor * self.cov_factor, axis=-1) + self.cov_diag
        return v if v._value.shape == full else ops.broadcast_to(v, full)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        shape = self._extended_shape(sample_shape)
        dt = self.loc._value.dtype
        e_w = _noise("normal", generator, shape[:-1] + self.cov_factor._value.shape[-1:], dt)
        e_d = _noise("normal", generator, shape, dt)
        wx = ops.squeeze(ops.matmul(self.cov_factor, ops.expand_dims(_const(e_w), -1)), -1)
        return self.loc + wx + ops.sqrt(self.cov_diag) * _const(e_d)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return self._mvn.log_prob(value)

    def entropy(self) -> Tensor:
        return self._mvn.entropy()


class LogisticNormal(TransformedDistribution):
    """``StickBreakingTransform`` of ``Normal(loc, scale)`` (event ``(K,)`` -> ``(K + 1,)``)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc: ArrayLike, scale: ArrayLike, validate_args: bool | None = None) -> None:
        base = Normal(loc, scale, validate_args=validate_args)
        if not base.batch_shape:  # torch expands a scalar base to one element
            base = Normal(ops.reshape(base.loc, (1,)), ops.reshape(base.scale, (1,)),
                          validate_args=validate_args)
        super().__init__(base, StickBreakingTransform(), validate_args=validate_args)

    loc = property(lambda self: self.base_dist.base_dist.loc)
    scale = property(lambda self: self.base_dist.base_dist.scale)

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        return super().sample(_shape_tuple(sample_shape), generator)

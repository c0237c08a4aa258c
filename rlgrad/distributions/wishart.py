"""``Wishart(df, covariance_matrix=, precision_matrix=, scale_tril=)`` (torch's): the law of
``sum_k x_k x_k^T`` for ``df`` draws ``x_k ~ N(0, Sigma)``, on symmetric positive-definite
matrices. ``rsample`` is Bartlett's decomposition ``L A A^T L^T`` (A lower-triangular, its
squared diagonal Chi2(df - i), standard normals below), reparameterized in the scale through
L and in ``df`` through the Gamma draws' implicit gradient, as torch's."""

from __future__ import annotations

import math

import numpy as np

from rlgrad import linalg, ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import Distribution, _as_param, _float_dtype, _rng, _shape_tuple
from rlgrad.distributions.gamma import Gamma
from rlgrad.special import digamma, multigammaln
from rlgrad.tensor import Tensor, _const
from rlgrad.typing import ArrayLike, GeneratorLike, ShapeLike

__all__ = ["Wishart"]

_LOG2 = math.log(2.0)


def _mvdigamma(x: Tensor, p: int) -> Tensor:
    """sum_{i<p} digamma(x - i / 2): the derivative of the multivariate log-gamma function."""
    return sum((digamma(x - 0.5 * i) for i in range(1, p)), digamma(x))


class Wishart(Distribution):
    """``df`` (batch) > p - 1 and exactly one of the three forms of the scale (..., p, p)."""

    arg_constraints = {"df": constraints.positive}
    support = constraints.positive_definite
    has_rsample = True

    def __init__(self, df: ArrayLike, covariance_matrix: ArrayLike | None = None,
                 precision_matrix: ArrayLike | None = None, scale_tril: ArrayLike | None = None,
                 validate_args: bool | None = None) -> None:
        given = {n: v for n, v in (("covariance_matrix", covariance_matrix),
                                   ("precision_matrix", precision_matrix),
                                   ("scale_tril", scale_tril)) if v is not None}
        if len(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be "
                             "specified.")
        (name, raw), = given.items()
        dtype = _float_dtype(df, raw)
        m, nu = _as_param(raw, dtype), _as_param(df, dtype)
        if m._value.ndim < 2 or m._value.shape[-1] != m._value.shape[-2]:
            raise ValueError(f"Wishart: {name} must be (..., p, p), got shape {m._value.shape}")
        p = m._value.shape[-1]
        batch = np.broadcast_shapes(nu._value.shape, m._value.shape[:-2])
        super().__init__(batch, (p, p), validate_args)
        if self._validate_args and not np.all(nu._value > p - 1):
            raise ValueError(f"Wishart: df must be greater than {p - 1} (p - 1), got {nu._value}")
        self.df = ops.broadcast_to(nu, batch)
        # torch's layout: the matrix as given serves its own property (its gradient reaches
        # every entry), the Cholesky factor (torch's symmetric gradient) everything else
        self._given = (name, m)
        if name == "scale_tril":  # used as given, as torch (its upper part's gradient too)
            tril = m
        elif name == "covariance_matrix":
            tril = linalg.cholesky(m)
        else:
            tril = linalg.cholesky(ops.inv(m))
        self._unbroadcasted_scale_tril = tril

    def _from_tril(self) -> Tensor:
        low = self._unbroadcasted_scale_tril
        return ops.matmul(low, ops.swapaxes(low, -1, -2))

    @property
    def scale_tril(self) -> Tensor:
        return ops.broadcast_to(self._unbroadcasted_scale_tril, self._batch_shape + self._event_shape)

    @property
    def covariance_matrix(self) -> Tensor:
        name, m = self._given
        full = self._batch_shape + self._event_shape
        return ops.broadcast_to(m if name == "covariance_matrix" else self._from_tril(), full)

    @property
    def precision_matrix(self) -> Tensor:
        name, m = self._given
        full = self._batch_shape + self._event_shape
        return ops.broadcast_to(m if name == "precision_matrix" else ops.inv(self._from_tril()), full)

    def _df(self) -> Tensor:
        return ops.reshape(self.df, self._batch_shape + (1, 1))

    @property
    def mean(self) -> Tensor:
        return self._df() * self.covariance_matrix

    @property
    def mode(self) -> Tensor:
        factor = self._df() - (self._event_shape[-1] + 1)
        return ops.where(factor._value > 0, factor, math.nan) * self.covariance_matrix

    @property
    def variance(self) -> Tensor:
        v = self.covariance_matrix
        d = v.diagonal(0, -2, -1)
        return self._df() * (v * v + ops.expand_dims(d, -1) * ops.expand_dims(d, -2))

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        p = self._event_shape[-1]
        shape = _shape_tuple(sample_shape) + self._batch_shape
        dt = self.df._value.dtype
        dof = ops.expand_dims(self.df, -1) - np.arange(p, dtype=dt)  # Chi2(df - i) = Gamma((df-i)/2, 1/2)
        chi2 = Gamma(0.5 * dof, _const(np.full(dof.shape, 0.5, dt)), validate_args=False)
        diag = ops.sqrt(ops.clip(chi2.rsample(_shape_tuple(sample_shape), generator), np.finfo(dt).eps, None))
        rows, cols = np.tril_indices(p, -1)
        noise = np.zeros(shape + (p, p), dt)
        noise[..., rows, cols] = _rng(generator).standard_normal(shape + (rows.size,))
        a = _const(noise) + ops.expand_dims(diag, -1) * np.eye(p, dtype=dt)
        chol = ops.matmul(self._unbroadcasted_scale_tril, a)
        return ops.matmul(chol, ops.swapaxes(chol, -1, -2))

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        from rlgrad.tracer import no_grad
        with no_grad():
            return self.rsample(sample_shape, generator)

    def _log_det_scale(self) -> Tensor:
        return ops.sum(ops.log(self._unbroadcasted_scale_tril.diagonal(0, -2, -1)), axis=-1)

    def log_prob(self, value: ArrayLike) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        nu, p = self.df, self._event_shape[-1]
        x = value if isinstance(value, Tensor) else _const(np.asarray(value, nu._value.dtype))
        logdet_x = 2 * ops.sum(ops.log(ops.cholesky(x).diagonal(0, -2, -1)), axis=-1)
        trace = ops.sum(ops.inv(self._from_tril()) * x, axis=(-2, -1))
        return (-nu * (p * _LOG2 / 2 + self._log_det_scale()) - multigammaln(nu / 2, p)
                + (nu - p - 1) / 2 * logdet_x - trace / 2)

    def entropy(self) -> Tensor:
        nu, p = self.df, self._event_shape[-1]
        return ((p + 1) * (p * _LOG2 / 2 + self._log_det_scale()) + multigammaln(nu / 2, p)
                - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p) + nu * p / 2)

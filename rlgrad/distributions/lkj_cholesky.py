"""``LKJCholesky(dim, concentration)`` (torch's): the Cholesky factor L of a correlation matrix
whose density is proportional to ``det(L L^T)^(concentration - 1)``, drawn by the onion method
(Lewandowski, Kurowicka and Joe 2009, section 3.2), as torch draws it: each row of L a Beta-
distributed length on a uniformly random direction."""

from __future__ import annotations

import math

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import Distribution, _params, _rng, _shape_tuple
from rlgrad.special import gammaln, multigammaln
from rlgrad.tensor import Tensor, _const
from rlgrad.tracer import mark_cut
from rlgrad.typing import ArrayLike, GeneratorLike, ShapeLike

__all__ = ["LKJCholesky"]


class LKJCholesky(Distribution):
    """Events are ``dim x dim`` lower-triangular matrices with unit rows (``corr_cholesky``);
    ``sample`` only (no ``rsample``, as torch); ``log_prob`` is differentiable in the value and
    the concentration."""

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.corr_cholesky
    has_rsample = False

    def __init__(self, dim: int, concentration: ArrayLike = 1.0, validate_args: bool | None = None) -> None:
        if dim < 2:
            raise ValueError(f"Expected dim to be an integer greater than or equal to 2. Found dim={dim}.")
        self.dim = int(dim)
        (self.concentration,), shape = _params(concentration)
        super().__init__(shape, (self.dim, self.dim), validate_args)
        if self._validate_args:
            self._check_arg("concentration", self.concentration, constraints.positive,
                            "Pass positive values, e.g. softplus(x) + 1e-3.")

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        rng = _rng(generator)
        c = self.concentration._value
        dt = c.dtype
        shape = _shape_tuple(sample_shape) + self._batch_shape
        offset = np.concatenate([[0.0], np.arange(self.dim - 1)]).astype(dt)
        b1 = offset + 0.5  # row i's squared length ~ Beta(i/2, c + (dim - 2 - i)/2 + ...)
        b0 = (c + 0.5 * (self.dim - 2))[..., None] - 0.5 * offset
        y = rng.beta(np.broadcast_to(b1, shape + (self.dim,)), np.broadcast_to(b0, shape + (self.dim,)))
        u = np.tril(rng.standard_normal(shape + (self.dim, self.dim)), -1)
        with np.errstate(invalid="ignore", divide="ignore"):
            u = u / np.linalg.norm(u, axis=-1, keepdims=True)
        u[..., 0, :] = 0.0
        w = np.sqrt(y)[..., None] * u
        diag = np.sqrt(np.maximum(1 - np.sum(w * w, axis=-1), np.finfo(dt).tiny))
        w = w + diag[..., None] * np.eye(self.dim, dtype=dt)
        return mark_cut(_const(w.astype(dt, copy=False)), "sample", (self.concentration,))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        if not isinstance(value, Tensor):
            raise TypeError(f"LKJCholesky.log_prob: value must be a Tensor, got {type(value).__name__}")
        diag = value.diagonal(0, -2, -1)[..., 1:]
        dt = self.concentration._value.dtype
        steps = (self.dim - np.arange(2, self.dim + 1)).astype(dt)
        order = 2 * ops.expand_dims(self.concentration - 1, -1) + steps
        unnormalized = ops.sum(order * ops.log(diag), axis=-1)
        dm1 = self.dim - 1
        alpha = self.concentration + 0.5 * dm1
        normalizer = 0.5 * dm1 * math.log(math.pi) + multigammaln(alpha - 0.5, dm1) - gammaln(alpha) * dm1
        return unnormalized - normalizer

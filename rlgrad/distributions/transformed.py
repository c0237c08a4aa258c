"""``TransformedDistribution``: a base distribution pushed through bijections (torch's class).

``log_prob(y)`` inverts the transforms from the last to the first and subtracts each
log-det-Jacobian: ``log p(y) = log p_base(x) - sum_i log |d t_i / d x_i|``.
"""

from __future__ import annotations

from typing import Any

from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import Distribution, _sum_rightmost
from rlgrad.distributions.normal import Independent
from rlgrad.distributions.transforms import ComposeTransform, Transform
from rlgrad.tensor import Tensor
from rlgrad.tracer import no_grad
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["TransformedDistribution"]


class TransformedDistribution(Distribution):
    """``y = t_n(...t_1(x))``, ``x ~ base_distribution``; ``transforms`` is one Transform or a
    list.  ``rsample`` is differentiable when the base's is; ``mean``/``variance``/``entropy``
    have no closed form in general and raise (as torch)."""

    def __init__(self, base_distribution: Distribution, transforms: Any,
                 validate_args: bool | None = None) -> None:
        if isinstance(transforms, Transform):
            transforms = [transforms]
        elif not (isinstance(transforms, list | tuple)
                  and all(isinstance(t, Transform) for t in transforms)):
            raise ValueError("TransformedDistribution: transforms must be a Transform or a list "
                             f"of Transforms, got {transforms!r}")
        self.transforms = list(transforms)
        chain = ComposeTransform(self.transforms)
        base_shape = base_distribution.batch_shape + base_distribution.event_shape
        if len(base_shape) < chain.domain.event_dim:
            raise ValueError(
                f"TransformedDistribution: the base distribution needs at least "
                f"{chain.domain.event_dim} dimensions for these transforms, its shape is {base_shape}")
        shape = chain.forward_shape(base_shape)
        if chain.inverse_shape(shape) != base_shape:
            raise ValueError(
                f"TransformedDistribution: the transforms' parameters broadcast the base shape "
                f"{base_shape} to {shape}; give the base distribution that shape")
        extra = chain.domain.event_dim - len(base_distribution.event_shape)
        if extra > 0:
            base_distribution = Independent(base_distribution, extra)
        self.base_dist = base_distribution
        change = chain.codomain.event_dim - chain.domain.event_dim
        event_dim = max(chain.codomain.event_dim, len(base_distribution.event_shape) + change)
        cut = len(shape) - event_dim
        super().__init__(shape[:cut], shape[cut:], validate_args)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @property
    def arg_constraints(self) -> dict:  # type: ignore[override]
        return {}

    @property
    def support(self) -> constraints.Constraint | None:  # type: ignore[override]
        if not self.transforms:
            return self.base_dist.support
        sup = self.transforms[-1].codomain
        n = len(self._event_shape) - sup.event_dim
        return constraints.independent(sup, n) if n > 0 else sup

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        with no_grad():  # the transforms see the draw itself, so a cache keeps its pair
            x = self.base_dist.sample(sample_shape, generator=generator)
            for t in self.transforms:
                x = t(x)
        return x

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        x = self.base_dist.rsample(sample_shape, generator=generator)
        for t in self.transforms:
            x = t(x)
        return x

    def log_prob(self, value: Any) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        event_dim = len(self._event_shape)
        total: Any = 0.0
        y = value
        for t in reversed(self.transforms):
            x = t.inv(y)
            event_dim += t.domain.event_dim - t.codomain.event_dim
            total = total - _sum_rightmost(t.log_abs_det_jacobian(x, y),
                                           event_dim - t.domain.event_dim)
            y = x
        base = self.base_dist.log_prob(y)
        return total + _sum_rightmost(base, event_dim - len(self.base_dist.event_shape))

    def _monotonize_cdf(self, value: Any) -> Any:
        """The base's cdf read through the transforms: flipped where they decrease."""
        sign: Any = 1
        for t in self.transforms:
            sign = sign * t.sign
        if isinstance(sign, int) and sign == 1:
            return value
        return sign * (value - 0.5) + 0.5

    def cdf(self, value: Any) -> Tensor:
        """P(Y <= value) for monotone transforms (as torch's; event_shape ``()`` bases)."""
        for t in reversed(self.transforms):
            value = t.inv(value)
        if self._validate_args:
            self.base_dist._validate_sample(value)
        return self._monotonize_cdf(self.base_dist.cdf(value))

    def icdf(self, value: Any) -> Tensor:
        value = self.base_dist.icdf(self._monotonize_cdf(value))
        for t in self.transforms:
            value = t(value)
        return value

    def __repr__(self) -> str:
        return f"TransformedDistribution({self.base_dist!r}, {self.transforms!r})"

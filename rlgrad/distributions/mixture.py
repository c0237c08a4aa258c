"""``MixtureSameFamily``: a ``Categorical`` choice among the last batch dimension of one
component distribution (torch's class: GMMs, mixture policies)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.categorical import Categorical
from rlgrad.distributions.distribution import Distribution, _shape_tuple
from rlgrad.tensor import Tensor
from rlgrad.tracer import no_grad
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["MixtureSameFamily"]


class MixtureSameFamily(Distribution):
    """``mixture_distribution`` (a Categorical over k, batch ``B``) picks one of the k
    components of ``component_distribution`` (batch ``B + (k,)``); batch shape ``B``, the
    components' event shape. No ``rsample`` (the choice is discrete) and no closed-form
    entropy, as torch's."""

    has_rsample = False

    def __init__(self, mixture_distribution: Categorical, component_distribution: Distribution,
                 validate_args: bool | None = None) -> None:
        if not isinstance(mixture_distribution, Categorical):
            raise ValueError("The Mixture distribution needs to be an instance of "
                             "torch.distributions.Categorical")
        if not isinstance(component_distribution, Distribution):
            raise ValueError("The Component distribution needs to be an instance of "
                             "torch.distributions.Distribution")
        mb, cb = mixture_distribution.batch_shape, component_distribution.batch_shape
        if not cb or len(mb) != len(cb) - 1 or any(
                m != c and 1 not in (m, c) for m, c in zip(mb, cb[:-1], strict=False)):
            raise ValueError(f"`mixture_distribution.batch_shape` ({mb}) is not compatible with "
                             f"`component_distribution.batch_shape` ({cb})")
        k = mixture_distribution.logits.shape[-1]
        if k != cb[-1]:
            raise ValueError(f"`mixture_distribution component` ({k}) does not equal "
                             f"`component_distribution.batch_shape[-1]` ({cb[-1]})")
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(tuple(cb[:-1]), component_distribution.event_shape, validate_args)

    mixture_distribution = property(lambda self: self._mixture_distribution)
    component_distribution = property(lambda self: self._component_distribution)

    @property
    def support(self) -> constraints.Constraint | None:  # type: ignore[override]
        return self._component_distribution.support

    def _pad(self, x: Any) -> Any:
        """``x`` with the components' axis added before its event dimensions."""
        return ops.expand_dims(x, -1 - self._event_ndims)

    def _mix_weights(self) -> Any:
        """The mixture's probabilities shaped to broadcast against the components' values."""
        p = self._mixture_distribution.probs
        for _ in range(self._event_ndims):
            p = ops.expand_dims(p, -1)
        return p

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        lp = self._component_distribution.log_prob(self._pad(value))  # (..., B, k)
        logw = ops.log_softmax(self._mixture_distribution.logits, axis=-1)
        return ops.logsumexp(lp + logw, axis=-1)

    def cdf(self, value: Tensor) -> Tensor:
        c = self._component_distribution.cdf(self._pad(value))
        return ops.sum(c * self._mixture_distribution.probs, axis=-1)

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        """A component index per draw, then that component's draw (torch's: outside the graph)."""
        shape = _shape_tuple(sample_shape)
        with no_grad():
            idx = self._mixture_distribution.sample(shape, generator=generator)._value  # (S, B)
            comp = self._component_distribution.sample(shape, generator=generator)  # (S, B, k, E)
        axis = len(shape) + len(self._batch_shape)
        pick = idx.reshape(idx.shape + (1,) * (1 + self._event_ndims))
        pick = np.broadcast_to(pick, pick.shape[:axis] + (1,) + tuple(comp.shape[axis + 1:]))
        return ops.squeeze(ops.take_along_axis(comp, pick, axis), axis)

    @property
    def mean(self) -> Tensor:
        return ops.sum(self._mix_weights() * self._component_distribution.mean,
                       axis=-1 - self._event_ndims)

    @property
    def variance(self) -> Tensor:
        """Total variance: the mean of the components' variances plus the variance of their means."""
        w, axis = self._mix_weights(), -1 - self._event_ndims
        comp = self._component_distribution
        within = ops.sum(w * comp.variance, axis=axis)
        diff = comp.mean - self._pad(self.mean)
        return within + ops.sum(w * diff * diff, axis=axis)

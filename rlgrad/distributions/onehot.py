"""``OneHotCategorical``: a ``Categorical`` whose draws are one-hot vectors (torch's class)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.categorical import Categorical
from rlgrad.distributions.distribution import Distribution, _data
from rlgrad.tensor import Tensor, _const
from rlgrad.tracer import mark_cut
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["OneHotCategorical"]


class _OneHot(constraints.Constraint):
    event_dim = 1
    description = "must be one-hot along the last dimension (entries 0 or 1, one 1 per row)"

    def check(self, x: np.ndarray) -> Any:
        return np.all((x == 0) | (x == 1), axis=-1) & (x.sum(-1) == 1)


class OneHotCategorical(Distribution):
    """Event shape ``(K,)``; ``log_prob`` reads the index of each one-hot row."""

    arg_constraints = Categorical.arg_constraints
    support = _OneHot()
    has_enumerate_support = True

    def __init__(self, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None) -> None:
        self._categorical = Categorical(probs=probs, logits=logits, validate_args=validate_args)
        k = self._categorical.param_shape[-1]
        super().__init__(self._categorical.batch_shape, (k,), validate_args)

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self._categorical.param_shape

    def _one_hot(self, idx: np.ndarray) -> np.ndarray:
        k = self._event_shape[0]
        return np.eye(k, dtype=self.probs._value.dtype)[idx]

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        idx = self._categorical.sample(sample_shape, generator=generator)._value
        return mark_cut(_const(self._one_hot(idx)), "sample", (self.probs,))

    def log_prob(self, value: Any) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        if isinstance(value, Tensor):  # an engine op: rlgrad.jit reads it at every call
            return self._categorical.log_prob(ops.argmax(value, axis=-1))
        return self._categorical.log_prob(np.argmax(_data(value), axis=-1))

    def entropy(self) -> Tensor:
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True) -> Tensor:
        k = self._event_shape[0]
        values = np.eye(k, dtype=self.probs._value.dtype).reshape((k,) + (1,) * len(
            self._batch_shape) + (k,))
        if expand:
            values = np.broadcast_to(values, (k,) + self._batch_shape + (k,))
        return _const(np.ascontiguousarray(values))

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        return _const(self._one_hot(np.argmax(self.probs._value, axis=-1)))

    @property
    def variance(self) -> Tensor:
        p = self.probs
        return p * (1 - p)

    def __repr__(self) -> str:
        return f"OneHotCategorical(probs: {self.probs.shape})"



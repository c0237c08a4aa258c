"""RelaxedOneHotCategorical: the Concrete / Gumbel-softmax relaxation of a one-hot Categorical,
with a reparameterized sampler and an optional straight-through (hard) mode."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.categorical import Categorical
from rlgrad.distributions.distribution import (
    Distribution,
    _as_param,
    _float_dtype,
    _rng,
    _shape_tuple,
)
from rlgrad.estimators import straight_through
from rlgrad.tensor import Tensor, _const
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["RelaxedOneHotCategorical"]


class RelaxedOneHotCategorical(Distribution):
    """``softmax((logits + g) / temperature)`` with ``g`` i.i.d. Gumbel(0, 1): a point of the
    simplex that tends to a one-hot Categorical sample as ``temperature -> 0``.

    ``rsample()`` is differentiable w.r.t. the logits/probs (and the temperature).  With
    ``hard=True`` draws are exactly one-hot (the argmax) while their gradient is the soft
    sample's (the straight-through Gumbel-softmax estimator: biased, often useful).
    ``log_prob`` is the Concrete density of a point in the open simplex (as torch's).
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector,
                       "temperature": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: bool | None = None, hard: bool = False) -> None:
        self._categorical = Categorical(probs=probs, logits=logits, validate_args=validate_args)
        param = self._categorical._param_data()
        self.temperature = _as_param(temperature, _float_dtype(param))
        super().__init__(self._categorical.batch_shape, (self._categorical._num_events,),
                         validate_args)
        self.hard = bool(hard)
        if self._validate_args:
            self._check_arg("temperature", self.temperature, constraints.positive,
                            "Pass a positive temperature such as 0.5 or 1.0.")

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    def _t_event(self) -> Tensor:
        """The temperature with a trailing axis, to broadcast against the K categories."""
        t = self.temperature
        return ops.expand_dims(t, -1) if t._value.ndim else t

    def _gumbel(self, sample_shape: Any, generator: Any) -> np.ndarray:
        dtype = self._categorical._param_data().dtype
        shape = _shape_tuple(sample_shape) + self._batch_shape + self._event_shape
        rng = _rng(generator)
        if dtype == np.float32 or dtype == np.float64:
            e = rng.standard_exponential(shape, dtype=dtype)
        else:
            e = rng.standard_exponential(shape).astype(dtype)
        with np.errstate(divide="ignore"):
            return -np.log(e)  # -log(Exp(1)) ~ Gumbel(0, 1)

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        scores = (self.logits + _const(self._gumbel(sample_shape, generator))) / self._t_event()
        soft = ops.softmax(scores, axis=-1)
        if not self.hard:
            return soft
        d = soft._value
        hard = (np.arange(d.shape[-1]) == np.argmax(d, axis=-1)[..., None]).astype(d.dtype)
        return straight_through(_const(hard), soft)

    def log_prob(self, value: Any) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        k = self._event_shape[0]
        t = self.temperature
        log_y = ops.log(value)
        # torch's ExpRelaxedCategorical density of log y, plus log|d log y / dy| = -sum log y
        log_scale = math.lgamma(k) + (k - 1) * ops.log(t)
        score = self.logits - log_y * self._t_event()
        score = ops.sum(score - ops.logsumexp(score, axis=-1, keepdims=True), axis=-1)
        return score + log_scale - ops.sum(log_y, axis=-1)

    def __repr__(self) -> str:
        return (f"RelaxedOneHotCategorical(temperature: {self.temperature._value!s}, "
                f"{self._categorical!r}, hard={self.hard})")

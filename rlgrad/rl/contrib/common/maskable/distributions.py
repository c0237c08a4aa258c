"""``sb3_contrib.common.maskable.distributions``: ``MaskableCategorical`` (rlgrad.rl.maskable)
and sb3-contrib's distribution classes over it, on rlgrad's engine: ``proba_distribution`` from
the action net's logits, ``apply_masking``, ``log_prob``, ``entropy``, ``sample``, ``mode``. Logits
and actions may be rlgrad Tensors or arrays (anything ``np.asarray`` takes)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad import nn, ops
from rlgrad.rl.common.distributions import Distribution  # get_actions and the *_from_params
from rlgrad.rl.maskable import HUGE_NEG, MaskableCategorical
from rlgrad.tensor import Tensor


class DistributionNotSetError(AttributeError, AssertionError):
    """A distribution used before ``proba_distribution``: sb3-contrib raises AttributeError
    (Categorical) or AssertionError (MultiCategorical, Bernoulli); this is both."""


class LogitsShapeError(RuntimeError, ValueError):
    """Logits that cannot be laid out as rows of the distribution's width (torch's ``view``
    raises RuntimeError there)."""


def _logits(action_logits: Any, width: int, what: str) -> Tensor:
    x = action_logits if isinstance(action_logits, Tensor) else Tensor(
        np.asarray(action_logits, dtype=np.float32))
    if int(np.prod(x.shape)) % width:
        raise LogitsShapeError(f"{what}.proba_distribution: logits of shape {tuple(x.shape)} "
                               f"cannot be laid out as rows of {width} logits")
    return ops.reshape(x, (-1, width))


def _not_set(what: str) -> DistributionNotSetError:
    return DistributionNotSetError(f"{what}: no distribution yet; call "
                                   "proba_distribution(action_logits) first")


class MaskableCategoricalDistribution(Distribution):
    """sb3-contrib's: a masked Categorical over ``action_dim`` actions."""

    def __init__(self, action_dim: int) -> None:
        self.action_dim = int(action_dim)
        self._dist: MaskableCategorical | None = None

    @property
    def distribution(self) -> MaskableCategorical:
        if self._dist is None:
            raise _not_set(type(self).__name__)
        return self._dist

    def proba_distribution_net(self, latent_dim: int) -> nn.Module:
        """The action net: a Linear layer from the latent features to the logits."""
        return nn.Linear(latent_dim, self.action_dim)

    def proba_distribution(self, action_logits: Any) -> MaskableCategoricalDistribution:
        self._dist = MaskableCategorical(logits=_logits(action_logits, self.action_dim,
                                                        type(self).__name__))
        return self

    def log_prob(self, actions: Any) -> Tensor:
        return self.distribution.log_prob(np.asarray(actions))

    def entropy(self) -> Tensor:
        return self.distribution.entropy()

    def sample(self) -> Tensor:
        return self.distribution.sample()

    def mode(self) -> Tensor:
        return ops.argmax(self.distribution.logits, axis=1)

    def apply_masking(self, masks: Any) -> None:
        self.distribution.apply_masking(masks)


class MaskableMultiCategoricalDistribution(Distribution):
    """sb3-contrib's: independent masked Categoricals over consecutive slices of the logits,
    one per entry of ``action_dims``; the mask is one row of ``sum(action_dims)`` slots."""

    def __init__(self, action_dims: list[int]) -> None:
        self.action_dims = [int(n) for n in action_dims]
        self.distributions: list[MaskableCategorical] = []

    def _parts(self) -> list[MaskableCategorical]:
        if not self.distributions:
            raise _not_set(type(self).__name__)
        return self.distributions

    def proba_distribution_net(self, latent_dim: int) -> nn.Module:
        return nn.Linear(latent_dim, sum(self.action_dims))

    def proba_distribution(self, action_logits: Any) -> MaskableMultiCategoricalDistribution:
        x = _logits(action_logits, sum(self.action_dims), type(self).__name__)
        bounds = np.concatenate([[0], np.cumsum(self.action_dims)]).tolist()
        self.distributions = [MaskableCategorical(logits=x[:, a:b])
                              for a, b in zip(bounds, bounds[1:])]
        return self

    def log_prob(self, actions: Any) -> Tensor:
        parts = self._parts()
        a = np.asarray(actions).reshape(-1, len(self.action_dims))
        return ops.stack([d.log_prob(a[:, i]) for i, d in enumerate(parts)], axis=1).sum(axis=1)

    def entropy(self) -> Tensor:
        return ops.stack([d.entropy() for d in self._parts()], axis=1).sum(axis=1)

    def sample(self) -> Tensor:
        return ops.stack([d.sample() for d in self._parts()], axis=1)

    def mode(self) -> Tensor:
        return ops.stack([ops.argmax(d.logits, axis=1) for d in self._parts()], axis=1)

    def apply_masking(self, masks: Any) -> None:
        parts = self._parts()
        if masks is None:
            for d in parts:
                d.apply_masking(None)
            return
        m = np.asarray(masks, dtype=bool).reshape(-1, sum(self.action_dims))
        bounds = np.concatenate([[0], np.cumsum(self.action_dims)]).tolist()
        for d, a, b in zip(parts, bounds, bounds[1:]):
            d.apply_masking(m[:, a:b])


class MaskableBernoulliDistribution(MaskableMultiCategoricalDistribution):
    """sb3-contrib's: MultiBinary(n) as n masked two-way Categoricals (two mask slots a bit)."""

    def __init__(self, action_dim: int) -> None:
        super().__init__([2] * int(action_dim))


def make_masked_proba_distribution(action_space: spaces.Space) -> Any:
    """The masked distribution of ``action_space`` (Discrete, MultiDiscrete, MultiBinary)."""
    if isinstance(action_space, spaces.Discrete):
        return MaskableCategoricalDistribution(int(action_space.n))
    if isinstance(action_space, spaces.MultiDiscrete):
        return MaskableMultiCategoricalDistribution(list(action_space.nvec))
    if isinstance(action_space, spaces.MultiBinary):
        if not isinstance(action_space.n, int | np.integer):
            raise ValueError(f"Multi-dimensional MultiBinary({action_space.n}) action space is "
                             "not supported: flatten it to MultiBinary(n)")
        return MaskableBernoulliDistribution(int(action_space.n))
    raise NotImplementedError(f"Error: probability distribution, not implemented for action "
                              f"space of type {type(action_space)}: use Discrete, MultiDiscrete "
                              "or MultiBinary")


__all__ = ["HUGE_NEG", "MaskableBernoulliDistribution", "MaskableCategorical",
           "MaskableCategoricalDistribution", "MaskableMultiCategoricalDistribution",
           "make_masked_proba_distribution"]

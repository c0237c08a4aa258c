"""``stable_baselines3.common.distributions``: SB3's action-distribution classes, with its names,
arguments and results, over ``rlgrad.distributions``.

Each class is SB3's two-step object: ``proba_distribution_net`` builds the head (an
``rlgrad.nn.Linear``, and the ``log_std`` parameter of Gaussians), ``proba_distribution(...)``
sets ``self.distribution`` (rlgrad's ``Normal``, ``Categorical``, ``Bernoulli``, or a list of
Categoricals) and returns ``self``. Log-probabilities and entropies are summed over the action's
dimensions as SB3's ``sum_independent_dims``. Inputs may be NumPy arrays, rlgrad Tensors or torch
tensors; results are rlgrad Tensors. MultiDiscrete splits its logits as
``rlgrad.rl.action_dists.MultiCategorical`` does, and gSDE's density is
``rlgrad.distributions.StateDependentNoiseDistribution``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

import rlgrad
from rlgrad import nn, ops
from rlgrad.distributions import Bernoulli, Categorical, Normal
from rlgrad.distributions import kl_divergence as _kl
from rlgrad.distributions.sde import sde_std
from rlgrad.rl.action_dists import MultiCategorical
from rlgrad.rl.common.preprocessing import get_action_dim
from rlgrad.rl.layers import PolicyArgumentError
from rlgrad.tensor import Tensor
from rlgrad.typing import ArrayLike


def _tensor(x: ArrayLike) -> Tensor:
    """An rlgrad Tensor of ``x`` (kept as is when it is one; a torch tensor's values copied)."""
    if isinstance(x, Tensor):
        return x
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    return rlgrad.as_tensor(np.asarray(x))


def sum_independent_dims(tensor: Tensor) -> Tensor:
    """SB3's: the sum over the action dimension of a batch (N, d) -> (N,); a 1-D one summed whole."""
    return tensor.sum(dim=1) if tensor.ndim > 1 else tensor.sum()


class Distribution:
    """SB3's base class: ``proba_distribution`` sets ``self.distribution`` and returns self."""

    def __init__(self) -> None:
        self.distribution: Any = None

    def proba_distribution_net(self, *args: Any, **kwargs: Any
                               ) -> nn.Module | tuple[nn.Module, nn.Parameter]:
        raise NotImplementedError

    def proba_distribution(self, *args: Any, **kwargs: Any) -> Distribution:
        raise NotImplementedError

    def log_prob(self, x: ArrayLike) -> Tensor:
        raise NotImplementedError

    def entropy(self) -> Tensor | None:
        raise NotImplementedError

    def sample(self) -> Tensor:
        raise NotImplementedError

    def mode(self) -> Tensor:
        raise NotImplementedError

    def get_actions(self, deterministic: bool = False) -> Tensor:
        return self.mode() if deterministic else self.sample()

    def actions_from_params(self, *args: Any, deterministic: bool = False, **kwargs: Any) -> Tensor:
        self.proba_distribution(*args, **kwargs)
        return self.get_actions(deterministic=deterministic)

    def log_prob_from_params(self, *args: Any, **kwargs: Any) -> tuple[Tensor, Tensor]:
        actions = self.actions_from_params(*args, **kwargs)
        return actions, self.log_prob(actions)


class DiagGaussianDistribution(Distribution):
    """A Gaussian with a state-independent ``log_std`` per action dimension."""

    def __init__(self, action_dim: int) -> None:
        super().__init__()
        self.action_dim = int(action_dim)

    def proba_distribution_net(self, latent_dim: int, log_std_init: float = 0.0
                               ) -> tuple[nn.Module, nn.Parameter]:
        """(the mean's Linear head, ``log_std`` set to ``log_std_init``)."""
        log_std = np.full(self.action_dim, float(log_std_init), dtype=np.float32)
        return nn.Linear(latent_dim, self.action_dim), nn.Parameter(log_std)

    def proba_distribution(self, mean_actions: ArrayLike, log_std: ArrayLike) -> DiagGaussianDistribution:
        mean = _tensor(mean_actions)
        self.distribution = Normal(mean, rlgrad.ones_like(mean) * _tensor(log_std).exp())
        return self

    def log_prob(self, actions: ArrayLike) -> Tensor:
        return sum_independent_dims(self.distribution.log_prob(_tensor(actions)))

    def entropy(self) -> Tensor | None:
        return sum_independent_dims(self.distribution.entropy())

    def sample(self) -> Tensor:
        return self.distribution.rsample()

    def mode(self) -> Tensor:
        return self.distribution.mean


class TanhBijector:
    """SB3's tanh squashing: ``inverse`` clips to (-1, 1) by the dtype's eps before ``atanh``;
    ``log_prob_correction`` is ``log(1 - tanh(x)^2 + epsilon)``."""

    def __init__(self, epsilon: float = 1e-6) -> None:
        self.epsilon = float(epsilon)

    @staticmethod
    def forward(x: ArrayLike) -> Tensor:
        return ops.tanh(_tensor(x))

    @staticmethod
    def atanh(x: ArrayLike) -> Tensor:
        x = _tensor(x)
        return 0.5 * (ops.log1p(x) - ops.log1p(-x))

    @staticmethod
    def inverse(y: ArrayLike) -> Tensor:
        y = _tensor(y)
        eps = float(np.finfo(y._value.dtype).eps)
        return TanhBijector.atanh(ops.clip(y, -1.0 + eps, 1.0 - eps))

    def log_prob_correction(self, x: ArrayLike) -> Tensor:
        return ops.log(1.0 - ops.square(ops.tanh(_tensor(x))) + self.epsilon)


class SquashedDiagGaussianDistribution(DiagGaussianDistribution):
    """``tanh`` of a diagonal Gaussian (no closed-form entropy: ``entropy()`` is None)."""

    def __init__(self, action_dim: int, epsilon: float = 1e-6) -> None:
        super().__init__(action_dim)
        self.epsilon = float(epsilon)
        self.gaussian_actions: Tensor | None = None

    def log_prob(self, actions: ArrayLike, gaussian_actions: ArrayLike | None = None) -> Tensor:
        actions = _tensor(actions)
        if gaussian_actions is None:
            gaussian_actions = TanhBijector.inverse(actions)
        log_prob = super().log_prob(gaussian_actions)
        return log_prob - ops.log(1.0 - ops.square(actions) + self.epsilon).sum(dim=1)

    def entropy(self) -> Tensor | None:
        return None

    def sample(self) -> Tensor:
        self.gaussian_actions = super().sample()
        return ops.tanh(self.gaussian_actions)

    def mode(self) -> Tensor:
        self.gaussian_actions = super().mode()
        return ops.tanh(self.gaussian_actions)

    def log_prob_from_params(self, mean_actions: ArrayLike, log_std: ArrayLike) -> tuple[Tensor, Tensor]:
        actions = self.actions_from_params(mean_actions, log_std)
        return actions, self.log_prob(actions, self.gaussian_actions)


class CategoricalDistribution(Distribution):
    """Discrete actions: a Categorical over ``action_dim`` logits."""

    def __init__(self, action_dim: int) -> None:
        super().__init__()
        self.action_dim = int(action_dim)

    def proba_distribution_net(self, latent_dim: int) -> nn.Module:
        return nn.Linear(latent_dim, self.action_dim)

    def proba_distribution(self, action_logits: ArrayLike) -> CategoricalDistribution:
        self.distribution = Categorical(logits=_tensor(action_logits))
        return self

    def log_prob(self, actions: ArrayLike) -> Tensor:
        return self.distribution.log_prob(_tensor(actions))

    def entropy(self) -> Tensor | None:
        return self.distribution.entropy()

    def sample(self) -> Tensor:
        return self.distribution.sample()

    def mode(self) -> Tensor:
        return ops.argmax(self.distribution.probs, axis=1)


class MultiCategoricalDistribution(Distribution):
    """MultiDiscrete actions: independent Categoricals on consecutive slices of the logits
    (``distribution`` is their list, as SB3's)."""

    def __init__(self, action_dims: list[int]) -> None:
        super().__init__()
        self.action_dims = [int(n) for n in action_dims]

    def proba_distribution_net(self, latent_dim: int) -> nn.Module:
        return nn.Linear(latent_dim, sum(self.action_dims))

    def proba_distribution(self, action_logits: ArrayLike) -> MultiCategoricalDistribution:
        logits = _tensor(action_logits).reshape(-1, sum(self.action_dims))
        self._multi = MultiCategorical(logits, np.asarray(self.action_dims))
        self.distribution = self._multi.parts
        return self

    def log_prob(self, actions: ArrayLike) -> Tensor:
        return self._multi.log_prob(_tensor(actions))

    def entropy(self) -> Tensor | None:
        return self._multi.entropy()

    def sample(self) -> Tensor:
        return ops.stack([d.sample() for d in self.distribution], axis=1)

    def mode(self) -> Tensor:
        return ops.stack([ops.argmax(d.probs, axis=1) for d in self.distribution], axis=1)


class BernoulliDistribution(Distribution):
    """MultiBinary actions: independent Bernoullis, one per logit."""

    def __init__(self, action_dims: int) -> None:
        super().__init__()
        self.action_dims = int(action_dims)

    def proba_distribution_net(self, latent_dim: int) -> nn.Module:
        return nn.Linear(latent_dim, self.action_dims)

    def proba_distribution(self, action_logits: ArrayLike) -> BernoulliDistribution:
        self.distribution = Bernoulli(logits=_tensor(action_logits))
        return self

    def log_prob(self, actions: ArrayLike) -> Tensor:
        return self.distribution.log_prob(_tensor(actions)).sum(dim=1)

    def entropy(self) -> Tensor | None:
        return self.distribution.entropy().sum(dim=1)

    def sample(self) -> Tensor:
        return self.distribution.sample()

    def mode(self) -> Tensor:
        return ops.round(self.distribution.probs)


class StateDependentNoiseDistribution(Distribution):
    """gSDE (SB3's): the action is ``mean + latent_sde @ W``, the exploration matrix ``W`` drawn
    by ``sample_weights`` (``W ~ N(0, std^2)``, one per row of a batch of ``batch_size``) and held
    until the next draw; the density is ``Normal(mean, sqrt(latent^2 @ std^2 + epsilon))``
    (tanh-squashed with ``squash_output``). The policies' own head is
    ``rlgrad.distributions.StateDependentNoiseDistribution`` (same numbers, tested so)."""

    def __init__(self, action_dim: int, full_std: bool = True, use_expln: bool = False,
                 squash_output: bool = False, learn_features: bool = False,
                 epsilon: float = 1e-6) -> None:
        super().__init__()
        self.action_dim, self.full_std = int(action_dim), bool(full_std)
        self.use_expln, self.learn_features = bool(use_expln), bool(learn_features)
        self.epsilon = float(epsilon)
        self.bijector = TanhBijector(epsilon) if squash_output else None
        self.latent_sde_dim: int | None = None
        self._latent_sde: Any = None
        self.exploration_mat: Any = None
        self.exploration_matrices: Any = None

    def get_std(self, log_std: ArrayLike) -> Tensor:
        """The exploration matrix's std, (latent features, actions) (``expln`` with use_expln)."""
        return sde_std(_tensor(log_std), self.action_dim, self.use_expln, self.epsilon)

    def sample_weights(self, log_std: ArrayLike, batch_size: int = 1) -> None:
        """New exploration matrices from rlgrad's global generator: one for every row
        (``exploration_mat``) and one per row of a batch (``exploration_matrices``)."""
        std = self.get_std(log_std)
        shape = tuple(std.shape)
        self.exploration_mat = std * rlgrad.randn(*shape).to(std.dtype)
        self.exploration_matrices = std * rlgrad.randn(int(batch_size), *shape).to(std.dtype)

    def proba_distribution_net(self, latent_dim: int, log_std_init: float = -2.0,
                               latent_sde_dim: int | None = None
                               ) -> tuple[nn.Module, nn.Parameter]:
        """(the mean's Linear head, ``log_std`` of shape (latent_sde_dim, action_dim), or
        (latent_sde_dim, 1) without ``full_std``); draws the first exploration matrices."""
        self.latent_sde_dim = int(latent_dim if latent_sde_dim is None else latent_sde_dim)
        cols = self.action_dim if self.full_std else 1
        log_std = nn.Parameter(np.full((self.latent_sde_dim, cols), float(log_std_init),
                                       dtype=np.float32))
        self.sample_weights(log_std)
        return nn.Linear(latent_dim, self.action_dim), log_std

    def proba_distribution(self, mean_actions: ArrayLike, log_std: ArrayLike, latent_sde: ArrayLike
                           ) -> StateDependentNoiseDistribution:
        latent = _tensor(latent_sde)
        self._latent_sde = latent if self.learn_features else latent.detach()
        variance = ops.matmul(ops.square(self._latent_sde), ops.square(self.get_std(log_std)))
        self.distribution = Normal(_tensor(mean_actions), ops.sqrt(variance + self.epsilon))
        return self

    def log_prob(self, actions: ArrayLike) -> Tensor:
        actions = _tensor(actions)
        u = actions if self.bijector is None else self.bijector.inverse(actions)
        log_prob = sum_independent_dims(self.distribution.log_prob(u))
        if self.bijector is not None:
            log_prob = log_prob - self.bijector.log_prob_correction(u).sum(dim=1)
        return log_prob

    def entropy(self) -> Tensor | None:
        return None if self.bijector is not None else sum_independent_dims(
            self.distribution.entropy())

    def sample(self) -> Tensor:
        actions = self.distribution.mean + self.get_noise(self._latent_sde)
        return actions if self.bijector is None else self.bijector.forward(actions)

    def mode(self) -> Tensor:
        actions = self.distribution.mean
        return actions if self.bijector is None else self.bijector.forward(actions)

    def get_noise(self, latent_sde: ArrayLike) -> Tensor:
        """``latent @ W``: row i with ``exploration_matrices[i]`` when there is one per row,
        else every row with ``exploration_mat``."""
        latent = _tensor(latent_sde)
        latent = latent if self.learn_features else latent.detach()
        if len(latent) == 1 or len(latent) != len(self.exploration_matrices):
            return ops.matmul(latent, self.exploration_mat)
        return ops.matmul(ops.expand_dims(latent, 1), self.exploration_matrices)[:, 0, :]


def make_proba_distribution(action_space: spaces.Space, use_sde: bool = False,
                            dist_kwargs: dict[str, Any] | None = None) -> Distribution:
    """SB3's: the distribution class of an action space (gSDE for a Box with ``use_sde``)."""
    kw = dict(dist_kwargs or {})
    if isinstance(action_space, spaces.Box):
        cls = StateDependentNoiseDistribution if use_sde else DiagGaussianDistribution
        return cls(get_action_dim(action_space), **kw)
    if isinstance(action_space, spaces.Discrete):
        return CategoricalDistribution(int(action_space.n), **kw)
    if isinstance(action_space, spaces.MultiDiscrete):
        return MultiCategoricalDistribution(list(action_space.nvec), **kw)
    if isinstance(action_space, spaces.MultiBinary):
        if not isinstance(action_space.n, int | np.integer):
            raise PolicyArgumentError(f"Multi-dimensional MultiBinary({action_space.n}) action "
                                      "space is not supported. You can flatten it instead.")
        return BernoulliDistribution(int(action_space.n), **kw)
    raise NotImplementedError("Error: probability distribution, not implemented for action "
                              f"space of type {type(action_space)}. Must be of type Gym Spaces: "
                              "Box, Discrete, MultiDiscrete or MultiBinary.")


def kl_divergence(dist_true: Distribution, dist_pred: Distribution) -> Tensor:
    """SB3's: KL(dist_true || dist_pred) of two distributions of the same class (per action
    dimension for Gaussians, as torch's; summed over the parts of a MultiCategorical)."""
    if dist_true.__class__ != dist_pred.__class__:
        raise PolicyArgumentError("Error: input distributions should be the same type")
    if isinstance(dist_true, MultiCategoricalDistribution) and isinstance(
            dist_pred, MultiCategoricalDistribution):
        if not np.array_equal(dist_pred.action_dims, dist_true.action_dims):
            raise PolicyArgumentError("Error: distributions must have the same input space")
        return ops.stack([_kl(p, q) for p, q in zip(dist_true.distribution,
                                                   dist_pred.distribution)], axis=1).sum(dim=1)
    return _kl(dist_true.distribution, dist_pred.distribution)


__all__ = ["BernoulliDistribution", "CategoricalDistribution", "DiagGaussianDistribution",
           "Distribution", "MultiCategoricalDistribution", "SquashedDiagGaussianDistribution",
           "StateDependentNoiseDistribution", "TanhBijector", "kl_divergence",
           "make_proba_distribution", "sum_independent_dims"]

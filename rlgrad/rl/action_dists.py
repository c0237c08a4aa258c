"""The policy heads of MultiDiscrete and MultiBinary action spaces (SB3's
``MultiCategoricalDistribution`` and ``BernoulliDistribution``), for ``ActorCriticPolicy``.

A MultiDiscrete([n_1, ..., n_k]) action is k independent Categoricals on consecutive slices of
the action net's ``sum(n_i)`` outputs; a MultiBinary(n) action is n independent Bernoullis on its
n logits. Log-probabilities and entropies are summed over the k (or n) parts. Each head has
two forms on the same numbers: a ``Distribution`` of Tensors (the loss, eager or traced by
``rlgrad.jit``) and NumPy sampling for acting (no graph), tested against each other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad.distributions import Bernoulli, Categorical, Independent
from rlgrad.distributions.categorical import logits_draw
from rlgrad.rl.envs import SpaceError

MULTI_ACTION_SPACES = (spaces.MultiDiscrete, spaces.MultiBinary)


def check_multi_action_space(space: spaces.Space) -> None:
    """SB3's rule: a MultiBinary action space must be one-dimensional (and MultiDiscrete too)."""
    if isinstance(space, spaces.MultiBinary) and len(space.shape) != 1:
        raise SpaceError(f"Multi-dimensional MultiBinary({space.n}) action space is not "
                         "supported: flatten it to MultiBinary(n)")
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim != 1:
        raise SpaceError(f"Multi-dimensional MultiDiscrete({space.nvec.tolist()}) action space is "
                         "not supported: flatten it to MultiDiscrete([n_1, ..., n_k])")


def action_net_dim(space: spaces.Space) -> int:
    """Outputs of the action net: one logit per choice (MultiDiscrete) or per bit (MultiBinary)."""
    if isinstance(space, spaces.MultiDiscrete):
        return int(space.nvec.sum())
    return int(space.shape[0])


class MultiCategorical:
    """k independent Categoricals over consecutive slices of ``logits`` (N, sum(nvec));
    actions are int64 rows (N, k)."""

    def __init__(self, logits: Any, nvec: np.ndarray) -> None:
        bounds = np.concatenate([[0], np.cumsum(nvec)]).tolist()
        self.parts = [Categorical(logits=logits[:, a:b]) for a, b in zip(bounds, bounds[1:])]

    def log_prob(self, actions: Any) -> Any:
        return _sum([d.log_prob(actions[:, i]) for i, d in enumerate(self.parts)])

    def entropy(self) -> Any:
        return _sum([d.entropy() for d in self.parts])


def _sum(terms: list[Any]) -> Any:
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out


def distribution(space: spaces.Space, out: Any) -> Any:
    """pi(.|s) of the action net's outputs ``out`` (N, action_net_dim) as Tensors."""
    if isinstance(space, spaces.MultiDiscrete):
        return MultiCategorical(out, space.nvec)
    return Independent(Bernoulli(logits=out), 1)


def sample_numpy(space: spaces.Space, out: np.ndarray, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(actions, log-probabilities) drawn from ``distribution(space, out)`` with NumPy:
    MultiDiscrete by inverse CDF per part (int64 (N, k)), MultiBinary by u < sigmoid(logit)
    (float32 (N, n), as SB3's rollouts hold them)."""
    n = len(out)
    if isinstance(space, spaces.MultiBinary):
        u = rng.random(out.shape)
        actions = (u < 1.0 / (1.0 + np.exp(-out))).astype(np.float32)
        # log p(a) = a l - softplus(l), summed over the bits
        return actions, (actions * out - np.logaddexp(0.0, out)).sum(axis=1)
    bounds = np.concatenate([[0], np.cumsum(space.nvec)])
    actions = np.empty((n, len(space.nvec)), dtype=np.int64)
    log_prob = np.zeros(n, dtype=out.dtype)
    for i in range(len(space.nvec)):
        a, part = logits_draw(out[:, bounds[i]:bounds[i + 1]], rng.random(n))
        actions[:, i] = a
        log_prob += part
    return actions, log_prob


def mode_numpy(space: spaces.Space, out: np.ndarray) -> np.ndarray:
    """The most likely action of each row: argmax per part, or bits with a positive logit."""
    if isinstance(space, spaces.MultiBinary):
        return (out > 0).astype(np.float32)
    bounds = np.concatenate([[0], np.cumsum(space.nvec)])
    return np.stack([out[:, a:b].argmax(axis=1) for a, b in zip(bounds, bounds[1:])], axis=1)


def storage(space: spaces.Space) -> tuple[tuple[int, ...], Any]:
    """(shape, dtype) of one stored action: int64 indices, float32 bits."""
    if isinstance(space, spaces.MultiDiscrete):
        return (len(space.nvec),), np.int64
    return (int(space.shape[0]),), np.float32


def to_env(space: spaces.Space, actions: np.ndarray) -> np.ndarray:
    """Stored actions as the environment takes them (MultiBinary: integers 0/1; MultiDiscrete:
    shifted by the space's ``start``)."""
    if isinstance(space, spaces.MultiBinary):
        return actions.astype(space.dtype)
    return (actions + space.start).astype(space.dtype)

"""Generalized State-Dependent Exploration (gSDE, Raffin et al., 2021), as Stable-Baselines3's
``StateDependentNoiseDistribution`` defines it.

Instead of fresh Gaussian noise at every step, the exploration noise is a linear function of the
policy's features ``z(s)`` (``latent_sde``, shape ``(batch, n_features)``)::

    noise(s) = z(s) @ W,     W[i, j] ~ N(0, std[i, j]^2),   std = exp(log_std)

with the exploration matrix ``W`` drawn once and held for many steps (a rollout, or
``sde_sample_freq`` steps): the same state gives the same noise, so a trajectory explores
smoothly. For a given ``W`` draw, the action is ``mean(s) + noise(s)`` (``tanh`` of it when
``squash_output``). Over the draws of ``W``, that is Gaussian with per-dimension variance
``(z^2 @ std^2)[j]``; the log-probability uses it, with ``epsilon`` added before the square
root, and for squashed actions subtracts ``sum_j log(1 - tanh(u_j)^2 + epsilon)`` (SB3's
squash correction, with its ``epsilon``).

``W = std * E``, ``E`` standard-normal: ``E`` (called ``weights`` here) is drawn outside the graph
and passed in, so a compiled (``rlgrad.jit``) step takes it as an input; ``rsample`` is then
differentiable w.r.t. ``log_std`` and the mean (and the features when ``learn_features``).
``weights`` of shape ``(n_features, n_actions)`` is one matrix for every row; shape
``(batch, n_features, n_actions)`` gives each row its own matrix (one per environment copy).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import (
    Distribution,
    _data,
    _float_dtype,
    _rng,
    _shape_tuple,
    _standard_normal,
)
from rlgrad.tensor import Tensor, _const
from rlgrad.tracer import mark_cut
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["StateDependentNoiseDistribution", "sde_std", "sde_std_numpy"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def sde_std(log_std: Any, n_actions: int, use_expln: bool = False, epsilon: float = 1e-6) -> Any:
    """The ``(n_features, n_actions)`` standard deviations of the exploration matrix's entries.

    ``exp(log_std)``, or with ``use_expln`` the gSDE paper's ``expln``: ``exp(x)`` for ``x <= 0``
    and ``log1p(x + epsilon) + 1`` above (grows slowly). A ``log_std`` of shape
    ``(n_features, 1)`` (``full_std=False``) is one std per feature, shared by every action.
    """
    if use_expln:
        x = log_std
        below = ops.exp(ops.minimum(x, 0.0))
        above = ops.log1p(ops.maximum(x, 0.0) + epsilon) + 1.0
        std = ops.where(_data(x) <= 0, below, above)
    else:
        std = ops.exp(log_std)
    shape = _data(log_std).shape
    if shape[-1] != n_actions:  # (n_features, 1): broadcast over the actions
        std = ops.broadcast_to(std, (shape[0], n_actions))
    return std


def sde_std_numpy(log_std: np.ndarray, n_actions: int, use_expln: bool = False,
                  epsilon: float = 1e-6) -> np.ndarray:
    """:func:`sde_std` on arrays (acting: no graph)."""
    if use_expln:
        std = np.where(log_std <= 0, np.exp(np.minimum(log_std, 0)),
                       np.log1p(np.maximum(log_std, 0) + epsilon) + 1.0)
    else:
        std = np.exp(log_std)
    return np.broadcast_to(std, (log_std.shape[0], n_actions)).astype(log_std.dtype, copy=False)


class StateDependentNoiseDistribution(Distribution):
    """gSDE over actions of shape ``(batch, n_actions)`` (event shape ``(n_actions,)``).

    ``mean_actions``: ``(batch, n_actions)``; ``log_std``: ``(n_features, n_actions)``, or
    ``(n_features, 1)`` for one std per feature (SB3's ``full_std=False``); ``latent_sde``:
    ``(batch, n_features)``, detached unless ``learn_features`` (SB3's SAC actor learns them).
    ``squash_output`` puts a ``tanh`` on the actions (SAC).

    ``log_prob(actions)`` and ``entropy()`` are those of the Gaussian over ``W``'s draws (see the
    module's docstring); ``rsample(weights=E)`` is the action for the exploration matrix
    ``std * E``, and :meth:`rsample_and_log_prob` gives both, the log-probability computed from
    the pre-``tanh`` value (no ``atanh`` round trip).
    """

    arg_constraints = {"mean_actions": constraints.real, "log_std": constraints.real}
    has_rsample = True

    def __init__(self, mean_actions: Any, log_std: Any, latent_sde: Any, *,
                 use_expln: bool = False, learn_features: bool = False,
                 squash_output: bool = False, epsilon: float = 1e-6,
                 validate_args: bool | None = None) -> None:
        dtype = _float_dtype(mean_actions, log_std, latent_sde)
        self.mean_actions = _as_tensor(mean_actions, dtype)
        self.log_std = _as_tensor(log_std, dtype)
        latent = _as_tensor(latent_sde, dtype)
        self.latent_sde = latent if learn_features else latent.detach()
        m, ls, z = self.mean_actions.shape, self.log_std.shape, self.latent_sde.shape
        if len(m) != 2 or len(z) != 2 or len(ls) != 2 or m[0] != z[0] or ls[0] != z[1] \
                or ls[1] not in (1, m[1]):
            raise ValueError(
                "StateDependentNoiseDistribution: expected mean_actions (batch, n_actions), "
                "latent_sde (batch, n_features) and log_std (n_features, n_actions) or "
                f"(n_features, 1); got mean_actions {m}, latent_sde {z}, log_std {ls}"
            )
        super().__init__((m[0],), (m[1],), validate_args)
        if self._validate_args:
            for name in ("mean_actions", "log_std"):
                self._check_arg(name, getattr(self, name), constraints.real)
        self.n_actions = int(m[1])
        self.use_expln = bool(use_expln)
        self.learn_features = bool(learn_features)
        self.squash_output = bool(squash_output)
        self.epsilon = float(epsilon)
        self.std = sde_std(self.log_std, self.n_actions, self.use_expln, self.epsilon)
        variance = ops.matmul(ops.square(self.latent_sde), ops.square(self.std))
        self.scale = ops.sqrt(variance + self.epsilon)  # (batch, n_actions)
        self._cache: tuple[Tensor, Tensor] | None = None  # (action, pre-tanh value) of a draw

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]
        return constraints.interval(-1.0, 1.0) if self.squash_output else constraints.real

    # ---- the exploration matrix and its noise ----------------------------------------------
    def sample_weights(self, sample_shape: ShapeLike = (),
                       generator: GeneratorLike = None) -> np.ndarray:
        """Standard-normal ``E`` of shape ``sample_shape + (n_features, n_actions)`` (no graph)."""
        shape = _shape_tuple(sample_shape) + tuple(self.std.shape)
        return _standard_normal(_rng(generator), shape, self.mean_actions._value.dtype)

    def exploration_matrix(self, weights: Any) -> Tensor:
        """``W = std * E``: differentiable w.r.t. ``log_std`` (the reparameterization)."""
        return self.std * _const(np.asarray(_data(weights), dtype=self.std._value.dtype))

    def get_noise(self, weights: Any) -> Tensor:
        """``latent_sde @ W``: ``weights`` ``(n_features, n_actions)`` for one matrix shared by
        every row, ``(batch, n_features, n_actions)`` for one matrix per row."""
        w = self.exploration_matrix(weights)
        z = self.latent_sde
        if w.ndim == 3 and w.shape[0] == z.shape[0]:
            return ops.matmul(ops.expand_dims(z, 1), w)[:, 0, :]
        if w.ndim != 2:
            raise ValueError(
                f"weights of shape {tuple(w.shape)}: expected {tuple(self.std.shape)} or "
                f"({z.shape[0]}, *{tuple(self.std.shape)}) (one matrix per row)"
            )
        return ops.matmul(z, w)

    # ---- sampling ------------------------------------------------------------------------
    def _pre_squash(self, sample_shape: Any, generator: Any, weights: Any) -> tuple[Tensor, Tensor]:
        if weights is None:
            weights = self.sample_weights(sample_shape, generator)
            w = self.exploration_matrix(weights)
            noise = ops.matmul(self.latent_sde, w)  # (*sample_shape, batch, n_actions)
        else:
            if _shape_tuple(sample_shape):
                raise ValueError("pass either sample_shape or weights, not both")
            noise = self.get_noise(weights)
        return self.mean_actions + noise, noise

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None,
                weights: Any = None) -> Tensor:
        """The action for the exploration matrix ``std * weights`` (drawn if not given; one per
        element of ``sample_shape``), differentiable w.r.t. the parameters."""
        u, _ = self._pre_squash(sample_shape, generator, weights)
        y = ops.tanh(u) if self.squash_output else u
        self._cache = (y, u)
        return y

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None,
               weights: Any = None) -> Tensor:
        from rlgrad.tracer import no_grad

        with no_grad():
            u, _ = self._pre_squash(sample_shape, generator, weights)
        u = _const(u._value)
        y = _const(np.tanh(u._value)) if self.squash_output else u
        self._cache = (y, u)
        return mark_cut(y, "sample", (self.mean_actions, self.log_std))

    def rsample_and_log_prob(self, weights: Any = None, generator: GeneratorLike = None
                             ) -> tuple[Tensor, Tensor]:
        """A reparameterized action and its log-probability, shape ``(batch,)`` (SAC's pair)."""
        u, noise = self._pre_squash((), generator, weights)
        z = noise / self.scale
        log_prob = self._gauss_log_prob(z)
        if self.squash_output:
            return ops.tanh(u), log_prob - self._squash_correction(u)
        return u, log_prob

    # ---- densities -------------------------------------------------------------------------
    def _gauss_log_prob(self, z: Any) -> Tensor:
        lp = -0.5 * ops.square(z) - ops.log(self.scale)
        return ops.sum(lp, axis=-1) - _HALF_LOG_2PI * self.n_actions

    def _squash_correction(self, u: Any) -> Tensor:
        return ops.sum(ops.log(1.0 - ops.square(ops.tanh(u)) + self.epsilon), axis=-1)

    def log_prob(self, value: Any) -> Tensor:
        """``log p(value)`` summed over the action dimension: shape ``(batch,)``.

        Squashed values are mapped back with ``atanh`` of the value clipped to
        ``[-1 + eps, 1 - eps]`` (float eps), except the distribution's own last draw, whose
        pre-``tanh`` value is remembered.
        """
        u = None
        cache = self._cache
        if cache is not None:
            if value is cache[0]:
                u = cache[1]
            elif _data(value) is cache[0]._value:
                u = _const(cache[1]._value)
        if u is None:
            if self._validate_args:
                self._validate_sample(value)
            if self.squash_output:
                eps = float(np.finfo(self.mean_actions._value.dtype).eps)
                u = ops.arctanh(ops.clip(value, -1.0 + eps, 1.0 - eps))
            else:
                u = value
        out = self._gauss_log_prob((u - self.mean_actions) / self.scale)
        if self.squash_output:
            out = out - self._squash_correction(u)
        return out

    def entropy(self) -> Tensor:
        if self.squash_output:
            raise NotImplementedError(
                "the squashed gSDE distribution's entropy has no closed form; use the one-sample "
                "estimate -log_prob(a) with a, log_prob = rsample_and_log_prob() (what SAC does)"
            )
        return ops.sum(ops.log(self.scale), axis=-1) + (0.5 + _HALF_LOG_2PI) * self.n_actions

    @property
    def mode(self) -> Tensor:
        return ops.tanh(self.mean_actions) if self.squash_output else self.mean_actions

    @property
    def mean(self) -> Tensor:
        if self.squash_output:
            raise NotImplementedError("the squashed gSDE distribution's mean has no closed form; "
                                      "use mode (tanh of the mean action)")
        return self.mean_actions

    @property
    def variance(self) -> Tensor:
        if self.squash_output:
            raise NotImplementedError("the squashed gSDE distribution's variance has no closed "
                                      "form; estimate it by sampling")
        return ops.square(self.scale)

    @property
    def stddev(self) -> Tensor:
        if self.squash_output:
            raise NotImplementedError("the squashed gSDE distribution's stddev has no closed form")
        return self.scale

    def __repr__(self) -> str:
        return (f"StateDependentNoiseDistribution(mean_actions: {self.mean_actions.shape}, "
                f"log_std: {self.log_std.shape}, latent_sde: {self.latent_sde.shape}"
                f"{', squashed' if self.squash_output else ''})")


def _as_tensor(v: Any, dtype: np.dtype) -> Tensor:
    if isinstance(v, Tensor):
        return v
    return _const(np.asarray(v, dtype=dtype))

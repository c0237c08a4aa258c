"""Trust Region Policy Optimization (Schulman et al., 2015), as sb3-contrib's ``TRPO``.

Each update, on the whole rollout (every ``sub_sampling_factor``-th row):

* the policy step maximises the surrogate ``L = mean(A * pi/pi_old)`` under
  ``mean KL(pi || pi_old) <= target_kl``: the direction ``x = F^-1 g`` (``g = dL/dtheta``) by
  conjugate gradient on Fisher-vector products ``F v = d/dtheta (dKL/dtheta . v) + damping v``,
  computed by differentiating the KL's gradient again (the engine's double backward), the
  step ``sqrt(2 target_kl / x.Fx) x``, shrunk by ``line_search_shrinking_factor`` until the KL
  holds and L improved (else the policy is left as it was);
* the critic takes ``n_critic_updates`` epochs of Adam on the value MSE in minibatches of
  ``batch_size`` (its optimizer holds the critic's parameters only: the actor moves by the
  trust-region step alone).

The actor's parameters are those of the policy head and tower (``mlp_extractor.policy_net``,
``action_net``, ``log_std``, a shared CNN trunk), the critic's ``mlp_extractor.value_net``,
``value_net`` (and its own CNN), as sb3-contrib splits them by the name ``value``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

import rlgrad
from rlgrad import autograd, ops, optim
from rlgrad.distributions import Distribution, Normal, kl_divergence
from rlgrad.distributions.sde import StateDependentNoiseDistribution
from rlgrad.rl.action_dists import MultiCategorical
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.on_policy import OnPolicyAlgorithm, explained_variance
from rlgrad.rl.ranges import ROLLOUT_BATCH
from rlgrad.rl.recurrent_policies import InvalidArgumentError
from rlgrad.rl.schedules import ScheduleLike
from rlgrad.tensor import Tensor


def conjugate_gradient(matvec: Callable[[np.ndarray], np.ndarray], b: np.ndarray,
                       max_iter: int | None = None, residual_tol: float = 1e-10) -> np.ndarray:
    """An approximate ``x`` with ``A x = b`` for symmetric positive definite ``A`` given as
    ``matvec(v) = A v``, from ``x = 0`` in at most ``max_iter`` steps (``len(b)``: exact up to
    rounding); stops early when the squared residual is below ``residual_tol``. Arithmetic
    operators only, so ``b`` may be a NumPy array or any array type ``matvec`` takes (sb3-contrib's
    ``conjugate_gradient_solver`` is called with torch tensors)."""
    x = b * 0
    r = b - x  # (a copy: b stays as given)
    p = r * 1
    rr = float((r * r).sum())
    n = len(b) if max_iter is None else int(max_iter)
    for i in range(n):
        if rr < residual_tol:
            break
        ap = matvec(p)
        alpha = rr / float((p * ap).sum())
        x = x + alpha * p
        if i == n - 1:
            break
        r = r - alpha * ap
        rr_new = float((r * r).sum())
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


def policy_kl(dist: Distribution | MultiCategorical, old: Distribution | MultiCategorical
              ) -> Tensor:
    """KL(dist || old) per row: a MultiDiscrete head's (``action_dists.MultiCategorical``, no
    registered KL) is the sum over its independent parts."""
    if isinstance(dist, MultiCategorical) or isinstance(old, MultiCategorical):
        if not (isinstance(dist, MultiCategorical) and isinstance(old, MultiCategorical)):
            raise TypeError("policy_kl: both distributions must be MultiDiscrete heads")
        total = kl_divergence(dist.parts[0], old.parts[0])
        for p, q in zip(dist.parts[1:], old.parts[1:]):
            total = total + kl_divergence(p, q)
        return total
    if isinstance(dist, StateDependentNoiseDistribution):  # gSDE: its Gaussian's KL (SB3's)
        if not isinstance(old, StateDependentNoiseDistribution):
            raise TypeError("policy_kl: both distributions must be gSDE distributions")
        return kl_divergence(Normal(dist.mean_actions, dist.scale),
                             Normal(old.mean_actions, old.scale)).sum(-1)
    return kl_divergence(dist, old)


def _flat(arrays: Any) -> np.ndarray:
    return np.concatenate([np.asarray(getattr(a, "_value", a), dtype=np.float64).ravel()
                           for a in arrays])


class TRPO(OnPolicyAlgorithm):
    """sb3-contrib's ``TRPO`` (its defaults), on ``ActorCriticPolicy``."""

    action_spaces = (spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)

    # batch_size is the critic's minibatch: above the rollout it is the whole rollout
    relations_not_applying = (ROLLOUT_BATCH,)

    def __init__(self, env: EnvLike, learning_rate: ScheduleLike = 1e-3, n_steps: int = 2048,
                 batch_size: int = 128, gamma: float = 0.99, cg_max_steps: int = 15,
                 cg_damping: float = 0.1, line_search_shrinking_factor: float = 0.8,
                 line_search_max_iter: int = 10, n_critic_updates: int = 10,
                 gae_lambda: float = 0.95, normalize_advantage: bool = True,
                 target_kl: float = 0.01, sub_sampling_factor: int = 1, n_envs: int = 1,
                 normalize: bool | dict = False, policy_kwargs: dict | None = None,
                 seed: int | None = None, verbose: int = 0, **env_options: Any) -> None:
        super().__init__(env, learning_rate, n_steps, gamma, gae_lambda, 0.0, 0.0, None,
                         normalize_advantage, n_envs, normalize, policy_kwargs, seed, verbose,
                         **env_options)
        self.batch_size = int(batch_size)
        self.cg_max_steps, self.cg_damping = int(cg_max_steps), float(cg_damping)
        self.line_search_shrinking_factor = float(line_search_shrinking_factor)
        self.line_search_max_iter = int(line_search_max_iter)
        self.n_critic_updates = int(n_critic_updates)
        self.target_kl = float(target_kl)
        self.sub_sampling_factor = int(sub_sampling_factor)
        self._check_rollout_size(normalize_advantage)
        p = self.policy
        critic = ("mlp_extractor.value_net.", "value_net.", "vf_features_extractor.")  # SB3's keys
        self.actor_params = [q for n, q in p.named_parameters() if not n.startswith(critic)]
        self.critic_params = [q for n, q in p.named_parameters() if n.startswith(critic)]
        self.optimizer = optim.Adam(self.critic_params, lr=self.lr_schedule(1.0))

    def _check_rollout_size(self, normalize_advantage: bool) -> None:
        """sb3-contrib's checks: a one-row rollout has no advantage std (its assert), and a
        rollout that is not a multiple of the critic's minibatch ends in a shorter one (a
        warning)."""
        rows = self.n_steps * self.n_envs
        if normalize_advantage and rows <= 1:
            raise InvalidArgumentError(
                f"TRPO: n_steps * n_envs must be greater than 1 to normalise the advantages; "
                f"n_steps={self.n_steps}, n_envs={self.n_envs}: use more steps, or "
                "normalize_advantage=False")
        if rows % self.batch_size:
            warnings.warn(f"TRPO: batch_size={self.batch_size} does not divide the rollout of "
                          f"n_steps * n_envs = {rows} rows: every pass over it ends with a "
                          f"minibatch of {rows % self.batch_size}; a batch_size that divides "
                          "it is recommended", UserWarning, stacklevel=4)

    # ---- the policy step ---------------------------------------------------------------------
    def _surrogate_and_kl(self, obs: np.ndarray, actions: np.ndarray, old_log_prob: np.ndarray,
                          adv: np.ndarray, old: Any) -> tuple[Any, Any]:
        dist = self.policy.distribution(obs)
        ratio = ops.exp(dist.log_prob(actions) - old_log_prob)
        return (adv * ratio).mean(), policy_kl(dist, old).mean()

    def fisher_vector_product(self, grad_kl: list[Any]) -> Callable[[np.ndarray], np.ndarray]:
        """``v -> F v + cg_damping v``: the gradient of ``grad_kl . v`` (``grad_kl`` built with
        ``create_graph=True``), i.e. the KL's Hessian times ``v``."""
        shapes = [g.shape for g in grad_kl]
        sizes = [int(np.prod(s)) for s in shapes]
        dt = np.asarray(grad_kl[0]._value).dtype

        def fvp(v: np.ndarray) -> np.ndarray:
            parts = np.split(v.astype(dt, copy=False), np.cumsum(sizes)[:-1])
            dot = sum((g * p.reshape(s)).sum() for g, p, s in zip(grad_kl, parts, shapes))
            hv = autograd.grad(dot, self.actor_params, retain_graph=True, allow_unused=True,
                               materialize_grads=True)
            return _flat(hv) + self.cg_damping * v

        return fvp

    def _set_actor(self, flat: np.ndarray) -> None:
        i = 0
        for q in self.actor_params:
            n = q._value.size
            q._value[...] = flat[i:i + n].reshape(q._value.shape)
            i += n

    def _policy_step(self, obs: np.ndarray, actions: np.ndarray, old_log_prob: np.ndarray,
                     adv: np.ndarray) -> dict[str, Any]:
        with rlgrad.no_grad():
            old = self.policy.distribution(obs)
        objective, kl = self._surrogate_and_kl(obs, actions, old_log_prob, adv, old)
        g = _flat(autograd.grad(objective, self.actor_params, retain_graph=True,
                                allow_unused=True, materialize_grads=True))
        grad_kl = autograd.grad(kl, self.actor_params, create_graph=True, allow_unused=True,
                                materialize_grads=True)
        fvp = self.fisher_vector_product(list(grad_kl))
        direction = conjugate_gradient(fvp, g, self.cg_max_steps)
        step = np.sqrt(2 * self.target_kl / float(direction @ fvp(direction)))
        start, coeff, ok = _flat(self.actor_params), 1.0, False
        obj0 = float(objective._value)
        with rlgrad.no_grad():
            for _ in range(self.line_search_max_iter):
                self._set_actor(start + coeff * step * direction)
                new_obj, new_kl = self._surrogate_and_kl(obs, actions, old_log_prob, adv, old)
                if float(new_kl._value) < self.target_kl and float(new_obj._value) > obj0:
                    ok = True
                    break
                coeff *= self.line_search_shrinking_factor
            if not ok:
                self._set_actor(start)
                new_obj, new_kl = objective, kl
        return {"policy_objective": obj0, "kl_divergence_loss": float(new_kl._value),
                "is_line_search_success": float(ok)}

    # ---- the update ------------------------------------------------------------------------------
    def train(self) -> None:
        self._set_lr()
        buf = self.rollout_buffer
        data, valid = buf.flat(), buf.valid_indices()
        rows = valid[::self.sub_sampling_factor]
        adv = data.advantages[rows]
        if self.normalize_advantage and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
        stats = self._policy_step(data.observations[rows],
                                  self.policy.actions_for_loss(data.actions[rows]),
                                  data.old_log_prob[rows], adv.astype(np.float32))
        value_losses = []
        for _ in range(self.n_critic_updates):
            for mb in buf.get(self.batch_size, self.rng):
                self.optimizer.zero_grad()
                loss = ops.square(mb.returns - self.policy.value(mb.observations)).mean()
                loss.backward()
                self.optimizer.step()
                value_losses.append(float(loss._value))
        self._n_updates += 1
        lg = self.logger
        for k, v in stats.items():
            lg.record(f"train/{k}", v)
        lg.record("train/value_loss", float(np.mean(value_losses)))
        lg.record("train/explained_variance",
                  explained_variance(data.old_values[valid], data.returns[valid]))
        lg.record("train/n_updates", self._n_updates)
        if hasattr(self.policy, "log_std"):  # (Box actions: a Gaussian)
            lg.record("train/std", float(np.exp(self.policy.log_std._value).mean()))

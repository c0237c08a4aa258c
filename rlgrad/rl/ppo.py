"""Proximal Policy Optimization (Schulman et al., 2017) with SB3's defaults and loss layout.

Each update: ``n_epochs`` passes over the rollout in shuffled minibatches of the clipped surrogate

    L = -E[min(r A, clip(r, 1 - eps, 1 + eps) A)] + vf_coef * E[(R - V)^2] - ent_coef * H,

``r = pi(a|s) / pi_old(a|s)``, advantages from GAE(lambda) normalised per minibatch, optional value
clipping around the old values, and early stopping when the approximate KL exceeds
``1.5 * target_kl``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import rlgrad
from rlgrad import autograd, ops, optim
from rlgrad.nn import functional as F
from rlgrad.rl.base import constructor_hyperparams, get_schedule_fn
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.on_policy import OnPolicyAlgorithm, as_float, explained_variance
from rlgrad.tracer import defvjp, primitive


def _surrogate(log_prob: Any, old_log_prob: Any, adv: Any, clip: Any, w: Any) -> Any:
    ratio = np.exp(log_prob - old_log_prob)
    clipped = ops.clip(ratio, 1 - clip, 1 + clip)  # on arrays: NumPy's clip without its wrapper
    return -np.add.reduce(w * np.minimum(adv * ratio, adv * clipped), axis=None)


def _surrogate_vjp(g: Any, ans: Any, log_prob: Any, old_log_prob: Any, adv: Any, clip: Any,
                   w: Any) -> Any:
    # min() passes the gradient of the unclipped term r*A wherever that term is the smaller one
    # (inside the clip interval both are equal); d(r A)/d log_prob = r A.
    ratio = ops.exp(log_prob - old_log_prob)
    unclipped = adv * ratio
    active = unclipped <= adv * ops.clip(ratio, 1 - clip, 1 + clip)
    return ops.where(active, unclipped, 0.0) * (-g * w)


# The clipped surrogate as one fused node (it sits in every PPO gradient step); ``w`` weighs the
# rows (1/n each: the mean; 0 for the NEXT_STEP reset rows of a fixed-shape batch).
_surrogate_p = primitive(_surrogate, "ppo_clipped_surrogate")
defvjp(_surrogate_p, _surrogate_vjp, None, None, None, None)


def clipped_surrogate_loss(log_prob: Any, old_log_prob: np.ndarray, advantages: np.ndarray,
                           clip: Any, weights: Any = None) -> Any:
    """``-mean(min(r A, clip(r, 1 - clip, 1 + clip) A))``, ``r = exp(log_prob - old_log_prob)``
    (a weighted sum with ``weights``)."""
    if weights is None:
        weights = np.full(len(advantages), 1.0 / max(len(advantages), 1), dtype=np.float32)
    return _surrogate_p(log_prob, old_log_prob, advantages, clip, weights)


class PPO(OnPolicyAlgorithm):
    def __init__(self, env: EnvLike, learning_rate: Any = 3e-4, n_steps: int = 2048,
                 batch_size: int = 64, n_epochs: int = 10, gamma: float = 0.99,
                 gae_lambda: float = 0.95, clip_range: Any = 0.2, clip_range_vf: Any = None,
                 normalize_advantage: bool = True, ent_coef: float = 0.0, vf_coef: float = 0.5,
                 max_grad_norm: float | None = 0.5, target_kl: float | None = None,
                 n_envs: int = 1, normalize: bool | dict = False,
                 policy_kwargs: dict | None = None, seed: int | None = 0, verbose: int = 0,
                 **env_options: Any) -> None:
        self._hyperparams = constructor_hyperparams(locals())
        super().__init__(env, learning_rate, n_steps, gamma, gae_lambda, ent_coef, vf_coef,
                         max_grad_norm, normalize_advantage, n_envs, normalize, policy_kwargs,
                         seed, verbose, **env_options)
        if batch_size < 2 and normalize_advantage:
            raise ValueError("batch_size must be at least 2 when normalize_advantage is on")
        self.batch_size = int(batch_size)
        self.n_epochs = int(n_epochs)
        self.clip_range = get_schedule_fn(clip_range)
        self.clip_range_vf = None if clip_range_vf is None else get_schedule_fn(clip_range_vf)
        self.target_kl = target_kl
        self._params = list(self.policy.parameters())
        self.optimizer = optim.Adam(self._params, lr=self.lr_schedule(1.0), eps=1e-5)
        self._ppo_step: Any = None  # the compiled full-batch update, built on first use

    def losses(self, b: Any, clip: float, clip_vf: float | None) -> tuple[Any, ...]:
        """(policy_loss, value_loss, entropy_loss, ratio, log_ratio) on minibatch ``b``.

        The losses are Tensors (``entropy_loss`` a plain number when ``ent_coef`` is 0: it then
        takes no part in the gradient); ``ratio`` and ``log_ratio`` are arrays, for statistics.
        """
        values, log_prob, entropy = self.policy.evaluate_actions(
            b.observations, b.actions, entropy_grad=self.ent_coef != 0)
        adv = b.advantages
        if self.normalize_advantage and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        policy_loss = clipped_surrogate_loss(log_prob, b.old_log_prob, adv, float(clip))
        if clip_vf is not None:  # keep the new value within clip_vf of the old one
            values = b.old_values + (values - b.old_values).clip(-clip_vf, clip_vf)
        value_loss = F.mse_loss(values, b.returns)
        entropy_loss = -entropy.mean()
        log_ratio = log_prob.data - b.old_log_prob
        return policy_loss, value_loss, entropy_loss, np.exp(log_ratio), log_ratio

    def train(self) -> None:
        p = self._current_progress_remaining
        self._set_lr()
        clip = float(self.clip_range(p))
        clip_vf = None if self.clip_range_vf is None else float(self.clip_range_vf(p))
        pg_losses, value_losses, entropy_losses, clip_fractions, kls = [], [], [], [], []
        loss_v = 0.0
        continue_training = True
        buf = self.rollout_buffer
        if self.batch_size >= len(buf.valid_indices()) and clip_vf is None:
            # one minibatch = the whole rollout (its order is irrelevant): a compiled step
            self._train_full_batch(clip)
            return
        for _epoch in range(self.n_epochs):
            for b in buf.get(self.batch_size, self.rng):
                policy_loss, value_loss, entropy_loss, ratio, log_ratio = self.losses(b, clip,
                                                                                      clip_vf)
                loss = policy_loss + self.vf_coef * value_loss
                if self.ent_coef != 0:
                    loss = loss + self.ent_coef * entropy_loss
                r, lr_ = ratio, log_ratio
                approx_kl = float(np.mean((r - 1) - lr_))  # Schulman's low-variance estimator
                pg_losses.append(float(policy_loss.data))
                value_losses.append(float(value_loss.data))
                entropy_losses.append(as_float(entropy_loss))
                clip_fractions.append(float(np.mean(np.abs(r - 1) > clip)))
                kls.append(approx_kl)
                loss_v = float(loss.data)
                if self.target_kl is not None and approx_kl > 1.5 * self.target_kl:
                    continue_training = False
                    break
                self._step(loss)
            self._n_updates += 1
            if not continue_training:
                break
        self._log_train(pg_losses, value_losses, entropy_losses, clip_fractions, kls, loss_v,
                        clip, clip_vf)

    def _train_full_batch(self, clip: float) -> None:
        """``n_epochs`` gradient steps on the whole rollout as one ``rlgrad.jit``-compiled step
        (fixed shape: the reset rows weigh 0), the same operations as the eager path."""
        data, w, valid = self._full_batch()
        adv = self._advantages(data.advantages, valid)
        policy = self.policy
        if self._ppo_step is None:
            params = self._params

            def step(obs: Any, act_in: Any, old_logp: Any, adv: Any, returns: Any, w: Any,
                     clip: Any, coefs: Any, use_entropy: bool) -> Any:
                values, log_prob, entropy = policy.evaluate_traceable(obs, act_in)
                pl = _surrogate_p(log_prob, old_logp, adv, clip, w)
                vl = (w * ops.square(returns - values)).sum()
                el = -(w * entropy).sum()
                loss = pl + coefs[0] * vl
                if use_entropy:
                    loss = loss + coefs[1] * el
                return pl, vl, el, log_prob, autograd.grad(loss, params)

            self._ppo_step = rlgrad.jit(step, static_argnums=(8,))
        act_in = policy.action_input(data.actions)
        clip_a = np.float32(clip)
        coefs = np.array([self.vf_coef, self.ent_coef], dtype=np.float32)
        use_ent = self.ent_coef != 0
        old_logp = data.old_log_prob
        losses, log_probs = [], []
        for _epoch in range(self.n_epochs):
            pl, vl, el, log_prob, grads = self._ppo_step(
                data.observations, act_in, old_logp, adv, data.returns, w, clip_a, coefs, use_ent)
            losses.append((pl, vl, el))
            log_probs.append(log_prob)
            if self.target_kl is not None:
                log_ratio = (log_prob - old_logp)[valid]
                if np.mean(np.expm1(log_ratio) - log_ratio) > 1.5 * self.target_kl:
                    break
            self._apply_grads(grads)
            self._n_updates += 1
        # statistics of all epochs at once (one pass instead of one per epoch)
        log_ratio = (np.stack(log_probs) - old_logp)[:, valid]
        r = np.exp(log_ratio)
        kls = np.mean((r - 1) - log_ratio, axis=1)
        cfs = np.mean(np.abs(r - 1) > clip, axis=1)
        pl, vl, el = (np.asarray(x, dtype=np.float64) for x in zip(*losses))
        loss_v = float(pl[-1] + self.vf_coef * vl[-1] + self.ent_coef * el[-1])
        self._log_train(pl, vl, el, cfs, kls, loss_v, clip, None)

    def _log_train(self, pg_losses: list, value_losses: list, entropy_losses: list,
                   clip_fractions: list, kls: list, loss_v: float, clip: float,
                   clip_vf: float | None) -> None:
        flat = self.rollout_buffer.flat()
        idx = self.rollout_buffer.valid_indices()
        lg = self.logger
        lg.record("train/entropy_loss", float(np.mean(entropy_losses)))
        lg.record("train/policy_gradient_loss", float(np.mean(pg_losses)))
        lg.record("train/policy_loss", float(np.mean(pg_losses)))
        lg.record("train/value_loss", float(np.mean(value_losses)))
        lg.record("train/approx_kl", float(np.mean(kls)))
        lg.record("train/clip_fraction", float(np.mean(clip_fractions)))
        lg.record("train/loss", loss_v)
        lg.record("train/explained_variance",
                  explained_variance(flat.old_values[idx], flat.returns[idx]))
        if not self.policy.discrete:
            lg.record("train/std", float(np.exp(self.policy.log_std.data).mean()))
        lg.record("train/n_updates", self._n_updates)
        lg.record("train/clip_range", clip)
        if clip_vf is not None:
            lg.record("train/clip_range_vf", clip_vf)

"""The on-policy loop shared by REINFORCE, A2C and PPO: collect ``n_steps`` from every env copy
with the current policy, compute GAE(lambda), then let the subclass ``train()`` on the rollout.

The per-step loop is kept lean: one batched policy forward over all env copies in NumPy (no
graph), one vector-env step, one row written into preallocated arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

import rlgrad
from rlgrad import autograd, ops
from rlgrad.nn import functional as F
from rlgrad.rl.base import BaseAlgorithm, set_grads
from rlgrad.rl.buffers import RolloutBuffer
from rlgrad.rl.callbacks import BaseCallback
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.policies import ActorCriticPolicy
from rlgrad.tensor import Tensor


def as_float(x: Any) -> float:
    """A loss as a Python float, whether a Tensor or (no graph needed) a NumPy value."""
    return float(x.data) if isinstance(x, Tensor) else float(x)


def explained_variance(y_pred: np.ndarray, y_true: np.ndarray) -> float:
    """1 - Var[y_true - y_pred] / Var[y_true] (1: perfect, 0: no better than a constant)."""
    var_y = np.var(y_true)
    return float("nan") if var_y == 0 else float(1 - np.var(y_true - y_pred) / var_y)


class OnPolicyAlgorithm(BaseAlgorithm):
    log_interval = 1

    def __init__(self, env: EnvLike, learning_rate: Any, n_steps: int, gamma: float,
                 gae_lambda: float, ent_coef: float, vf_coef: float, max_grad_norm: float | None,
                 normalize_advantage: bool = True, n_envs: int = 1,
                 normalize: bool | dict[str, Any] = False, policy_kwargs: dict | None = None,
                 seed: int | None = 0, verbose: int = 0, **env_options: Any) -> None:
        super().__init__(env, seed=seed, n_envs=n_envs, normalize=normalize,
                         learning_rate=learning_rate, gamma=gamma, policy_kwargs=policy_kwargs,
                         verbose=verbose, **env_options)
        self.n_steps = int(n_steps)
        self.gae_lambda = float(gae_lambda)
        self.ent_coef = float(ent_coef)
        self.vf_coef = float(vf_coef)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self.normalize_advantage = bool(normalize_advantage)
        self._iteration_num = 0
        self._pg_step: Any = None  # the compiled update, built on first use
        self.policy = ActorCriticPolicy(self.observation_space, self.action_space,
                                        **self.policy_kwargs)
        a_space = self.action_space
        if isinstance(a_space, spaces.Discrete):
            a_shape, a_dtype = (), np.int64
        else:
            a_shape, a_dtype = a_space.shape, np.float32
        self.rollout_buffer = RolloutBuffer(self.n_steps, self.n_envs, self.obs_dim, a_shape,
                                            a_dtype, self.gamma, self.gae_lambda)
        self._clip_actions = isinstance(a_space, spaces.Box)
        if self._clip_actions:
            self._low, self._high = a_space.low, a_space.high

    # ---- collection --------------------------------------------------------------------------
    def _to_env(self, actions: np.ndarray) -> np.ndarray:
        # the Gaussian policy is unbounded: clip to the box, store the unclipped action
        return np.clip(actions, self._low, self._high) if self._clip_actions else actions

    def collect_rollouts(self, callback: BaseCallback | None) -> bool:
        buf, policy, adapter, norm = self.rollout_buffer, self.policy, self._adapter, self.normalizer
        buf.reset()
        obs = self._obs(self._last_obs, update=False)
        rng, n = self.rng, self.n_envs
        same_step = not adapter.next_step
        fused = policy.fused_numpy()
        with rlgrad.no_grad():
            for _ in range(self.n_steps):
                actions, values, log_probs = policy.act(obs, rng, fused)
                raw, rew, term, trunc, valid, final = adapter.step(self._to_env(actions))
                self.num_timesteps += n
                done = term | trunc
                next_obs = self._obs(raw, update=True)
                if norm is not None:
                    rew = norm.process_reward(rew, done, valid)
                if same_step and trunc.any():  # bootstrap from the final observation
                    rows = np.flatnonzero(trunc)
                    buf.bootstrap[buf.pos, rows] = policy.predict_values(
                        self._obs(final[rows], update=False))
                buf.add(obs, actions, rew, term, done, values, log_probs, valid)
                obs = next_obs
                if callback is not None and not callback.on_step():
                    self._last_obs = raw
                    return False
            self._last_obs = raw
            buf.compute_returns_and_advantage(policy.predict_values(obs))
        if callback is not None:
            callback.on_rollout_end()
        return True

    def _iteration(self, callback: BaseCallback | None) -> bool:
        if not self.collect_rollouts(callback):
            return False
        self._update_progress()
        self.train()
        log = self._will_log()
        self._iteration_num += 1
        if log:
            self._record_rollout_stats()
            self.logger.dump(self.num_timesteps)
        return True

    def train(self) -> None:
        raise NotImplementedError

    def _will_log(self) -> bool:
        """Whether the current iteration's statistics will be dumped (computed only then)."""
        return bool(self.log_interval) and (self._iteration_num + 1) % self.log_interval == 0

    # ---- shared pieces of the updates -------------------------------------------------------
    def _set_lr(self) -> float:
        lr = self.lr_schedule(self._current_progress_remaining)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.logger.record("train/learning_rate", lr)
        return lr

    def _step(self, loss: Any) -> float | None:
        """zero_grad, backward, clip the gradient norm, step; returns the pre-clip norm."""
        self.optimizer.zero_grad()
        loss.backward()
        norm = None
        if self.max_grad_norm is not None:
            norm = float(rlgrad.optim.clip_grad_norm_(self._params, self.max_grad_norm))
        self.optimizer.step()
        return norm

    def _apply_grads(self, grads: Any) -> None:
        """Gradients computed by a compiled step -> .grad, clip the norm, optimizer step."""
        set_grads(self._params, grads, self.max_grad_norm)
        self.optimizer.step()

    def _full_batch(self) -> tuple[Any, np.ndarray, np.ndarray]:
        """(every row of the rollout, weights, valid mask): a fixed shape, for compiled steps.

        The NEXT_STEP reset rows stay in place with weight 0, so the shape never changes and
        ``rlgrad.jit`` compiles the update once; weights are 1 / (number of valid rows).
        """
        buf = self.rollout_buffer
        valid = buf.valid.reshape(-1)
        w = valid.astype(np.float32) / max(int(valid.sum()), 1)
        return buf.flat(), w, valid

    def _advantages(self, adv: np.ndarray, valid: np.ndarray) -> np.ndarray:
        if self.normalize_advantage and valid.sum() > 1:
            a = adv[valid]
            adv = (adv - a.mean()) / (a.std() + 1e-8)
        return np.where(valid, adv, 0.0).astype(np.float32)

    def _predict(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        if deterministic:
            actions = self.policy.mode(obs)
        else:
            actions = self.policy.act(obs, self.rng)[0]
        return self._to_env(actions)

    def _modules(self) -> dict[str, Any]:
        return {"policy": self.policy}

    def _optimizers(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer}

    def _extra_state(self) -> dict[str, Any]:
        return {"iteration": {"num": self._iteration_num}}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        self._iteration_num = int(state.get("iteration", {}).get("num", 0))


def policy_gradient_losses(policy: ActorCriticPolicy, b: Any, normalize_advantage: bool,
                           ent_coef: float = 1.0) -> tuple[Any, Any, Any]:
    """(policy, value, entropy) losses of the score-function estimator on batch ``b``."""
    values, log_prob, entropy = policy.evaluate_actions(b.observations, b.actions,
                                                        entropy_grad=ent_coef != 0)
    adv = b.advantages
    if normalize_advantage and len(adv) > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    policy_loss = -(log_prob * adv).mean()  # grad: -E[grad log pi(a|s) * A]
    value_loss = F.mse_loss(values, b.returns)
    entropy_loss = -entropy.mean()
    return policy_loss, value_loss, entropy_loss


def policy_gradient_update(algo: OnPolicyAlgorithm, ent_coef: float) -> None:
    """One gradient step on the whole rollout (A2C, REINFORCE), losses logged apart.

    The loss and its gradient run as one ``rlgrad.jit``-compiled step (straight-line NumPy, the
    same operations as eager execution without the per-operation bookkeeping).
    """
    data, w, valid = algo._full_batch()
    adv = algo._advantages(data.advantages, valid)
    policy = algo.policy
    if algo._pg_step is None:
        params = algo._params

        def step(obs: Any, act_in: Any, adv: Any, returns: Any, w: Any, coefs: Any,
                 use_entropy: bool) -> Any:
            values, log_prob, entropy = policy.evaluate_traceable(obs, act_in)
            pl = -(w * log_prob * adv).sum()  # grad: -E[grad log pi(a|s) * A]
            vl = (w * ops.square(returns - values)).sum()
            el = -(w * entropy).sum()
            loss = pl + coefs[0] * vl
            if use_entropy:
                loss = loss + coefs[1] * el
            return pl, vl, el, autograd.grad(loss, params)

        algo._pg_step = rlgrad.jit(step, static_argnums=(6,))
    coefs = np.array([algo.vf_coef, ent_coef], dtype=np.float32)
    pl, vl, el, grads = algo._pg_step(data.observations, policy.action_input(data.actions), adv,
                                      data.returns, w, coefs, ent_coef != 0)
    algo._apply_grads(grads)
    algo._n_updates += 1
    if algo._will_log():
        lg = algo.logger
        lg.record("train/policy_loss", float(pl))
        lg.record("train/value_loss", float(vl))
        lg.record("train/entropy_loss", float(el))
        lg.record("train/loss", float(pl + algo.vf_coef * vl + ent_coef * el))
        lg.record("train/explained_variance",
                  explained_variance(data.old_values[valid], data.returns[valid]))
        lg.record("train/n_updates", algo._n_updates)
        if not policy.discrete:
            lg.record("train/std", float(np.exp(policy.log_std.data).mean()))

"""The on-policy loop shared by REINFORCE, A2C and PPO: collect ``n_steps`` from every env copy
with the current policy, compute GAE(lambda), then ``train()`` on the rollout.

Each algorithm writes its loss once, ``loss(batch, use_entropy) -> (loss, stats)`` on
``policy.distribution(obs)``; the base class's is the score-function loss of A2C and REINFORCE,
PPO overrides it with the clipped surrogate. The trainer runs that function through
``rlgrad.rl.steps.grad_step``, compiled by ``rlgrad.jit``: for the fixed-shape whole rollout,
and for PPO's shuffled minibatches padded to one shape.

The per-step loop is kept lean: one batched policy forward over all env copies in NumPy (no
graph), one vector-env step, one row written into preallocated arrays.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

import rlgrad
from rlgrad import ops
from rlgrad.nn.functional import weights_fixed
from rlgrad.optim.optimizer import Optimizer
from rlgrad.rl import action_dists
from rlgrad.rl.base import BaseAlgorithm
from rlgrad.rl.buffers import RolloutBatch, RolloutBuffer
from rlgrad.rl.callbacks import BaseCallback
from rlgrad.rl.envs import (
    EnvLike,
    dict_has_images,
    flat_obs_dim,
    is_image_space,
    obs_rows,
    obs_shape,
    preprocess_obs,
)
from rlgrad.rl.finite import check_update
from rlgrad.rl.layers import STATEFUL_LAYERS
from rlgrad.rl.policies import ActorCriticPolicy
from rlgrad.rl.sb3_args import PolicySlot, buffer_class
from rlgrad.rl.schedules import ScheduleLike
from rlgrad.rl.steps import apply_grads, grad_step, optimized_params, same_params
from rlgrad.tensor import Tensor


def explained_variance(y_pred: np.ndarray, y_true: np.ndarray) -> float:
    """1 - Var[y_true - y_pred] / Var[y_true] (1: perfect, 0: no better than a constant)."""
    var_y = np.var(y_true)
    return float("nan") if var_y == 0 else float(1 - np.var(y_true - y_pred) / var_y)


_LOSS_TERMS = ("policy_loss", "value_loss", "entropy_loss")


def _array(x: Any) -> np.ndarray:
    """An rlgrad Tensor's, a torch tensor's (a custom policy's) or an array's values."""
    return np.asarray(x.detach() if hasattr(x, "detach") else x)


def _entropy_of(dist: Any, log_prob: Any) -> Any:
    """``dist``'s entropy, or SB3's one-sample estimate ``-log_prob`` of the batch's actions when
    it has no closed form (gSDE's tanh-squashed actions)."""
    if getattr(dist, "squash_output", False) and log_prob is not None:
        return -log_prob
    return dist.entropy()


def with_value_and_entropy(policy_loss: Any, values: Any, dist: Any, b: dict[str, Any],
                           use_entropy: bool, log_prob: Tensor | None = None
                           ) -> tuple[Any, dict[str, Any]]:
    """``policy_loss + vf_coef * value loss (- ent_coef * entropy)``, the terms every on-policy
    loss shares (rows weighted by ``b["weights"]``, coefficients in ``b["coefs"]``), and the
    terms to log."""
    w = b["weights"]
    value_loss = (w * ops.square(b["returns"] - values)).sum()
    entropy_loss = -(w * _entropy_of(dist, log_prob)).sum()
    loss = policy_loss + b["coefs"][0] * value_loss
    if use_entropy:
        loss = loss + b["coefs"][1] * entropy_loss
    return loss, {"policy_loss": policy_loss, "value_loss": value_loss,
                  "entropy_loss": entropy_loss}


#: the ActorCriticPolicy arguments ``policy_kwargs`` may set, with the algorithms' defaults
POLICY_DEFAULTS: dict[str, Any] = {
    "net_arch": None, "activation_fn": "tanh", "ortho_init": True, "log_std_init": 0.0,
    "init_seed": None, "features_extractor_class": None, "features_extractor_kwargs": None,
    "share_features_extractor": True, "normalize_images": None,
    "full_std": True, "use_expln": False, "squash_output": False,  # gSDE's (with use_sde)
}


class OnPolicyAlgorithm(BaseAlgorithm):
    _abstract = True  # the loop; its arguments come from the algorithm (rlgrad.rl.hyperparams)
    log_interval = 1
    cnn_policy = True  # ActorCriticPolicy has SB3's CnnPolicy form for image observations
    dict_images = True  # and CombinedExtractor for Dict observations with image entries
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete, spaces.Box,
                                                               *action_dists.MULTI_ACTION_SPACES)
    optimizer: Optimizer  # (each algorithm makes its own: PPO's Adam, A2C's RMSprop ...)
    policy: PolicySlot[ActorCriticPolicy] = PolicySlot()  # (th.compile(model.policy): ours kept)
    env_runner_sampling = True  # env_runners > 0: rollouts on Ray actors (rlgrad.rl.distributed)

    def __init__(self, env: EnvLike, learning_rate: ScheduleLike, n_steps: int, gamma: float,
                 gae_lambda: float, ent_coef: float, vf_coef: float, max_grad_norm: float | None,
                 normalize_advantage: bool = True, n_envs: int = 1,
                 normalize: bool | dict[str, Any] = False, policy_kwargs: dict | None = None,
                 seed: int | None = None, verbose: int = 0, rollout_buffer_class: str | None = None,
                 rollout_buffer_kwargs: dict[str, Any] | None = None,
                 use_sde: bool = False, sde_sample_freq: int = -1,
                 compile_loop: bool = False, **env_options: Any) -> None:
        self.compile_loop = bool(compile_loop)
        if self.compile_loop and isinstance(env, str) and env_options.get("vectorization_mode") is None:
            env_options["vectorization_mode"] = "functional"  # the id's functional form
        super().__init__(env, seed=seed, n_envs=n_envs, normalize=normalize,
                         learning_rate=learning_rate, gamma=gamma, policy_kwargs=policy_kwargs,
                         verbose=verbose, **env_options)
        # gSDE: exploration matrices drawn per rollout, or every sde_sample_freq steps (> 0)
        self.use_sde, self.sde_sample_freq = bool(use_sde), int(sde_sample_freq)
        self.n_steps = int(n_steps)
        self.gae_lambda = float(gae_lambda)
        self.ent_coef = float(ent_coef)
        self.vf_coef = float(vf_coef)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)
        self.normalize_advantage = bool(normalize_advantage)
        self._iteration_num = 0
        self._loss_steps: dict[bool, Any] = {}  # compiled / eager (step, its parameters), on first use
        self.policy = self._make_policy()
        a_space = self.action_space
        a_shape: tuple[int, ...] | None
        a_dtype: type
        if isinstance(a_space, spaces.Discrete):
            a_shape, a_dtype = (), np.int64
        elif isinstance(a_space, action_dists.MULTI_ACTION_SPACES):
            a_shape, a_dtype = action_dists.storage(a_space)
        else:
            a_shape, a_dtype = a_space.shape, np.float32
        self.rollout_buffer = self._make_rollout_buffer(
            self.n_steps, self.n_envs, obs_shape(self.observation_space), a_shape, a_dtype,
            self.gamma, self.gae_lambda,
            obs_dtype=np.uint8 if is_image_space(self.observation_space) else np.float32)
        self.rollout_buffer_class = rollout_buffer_class
        self.rollout_buffer_kwargs = dict(rollout_buffer_kwargs or {})
        if rollout_buffer_class is not None:
            self._check_rollout_buffer_class()
        # Box: clipped; MultiDiscrete / MultiBinary: converted to the space's integers
        self._clip_actions = isinstance(a_space, (spaces.Box, *action_dists.MULTI_ACTION_SPACES))
        if isinstance(a_space, spaces.Box):
            self._low, self._high = a_space.low, a_space.high

    def _check_compile_loop(self) -> None:
        """compile_loop=True: refused in one line unless the env is functional (at the end of
        the algorithm's constructor, when the optimizer exists)."""
        if self.compile_loop:
            from rlgrad.rl.compiled_loop import loop_spec

            loop_spec(self)

    def _compiled_iteration(self, callback: BaseCallback | None) -> bool:
        """compile_loop=True: the whole remaining budget as one compiled program
        (``rlgrad.rl.compiled_loop``), which calls no callback."""
        if callback is not None:
            raise ValueError(f"{type(self).__name__}(compile_loop=True) runs the whole training "
                             "as one program and calls no callback: pass callback=None, or "
                             "leave compile_loop False")
        from rlgrad.rl.compiled_loop import learn_compiled

        learn_compiled([self], self._total_timesteps - self.num_timesteps)
        self.logger.dump(self.num_timesteps)
        return True

    def _make_policy(self) -> ActorCriticPolicy:
        """The algorithm's ActorCriticPolicy from ``policy_kwargs``, or the user's policy class
        (SB3's ``PPO(CustomPolicy, env)``: its constructor takes ``policy_kwargs`` as SB3's)."""
        if self.policy_class is not None:
            kw = self.net_kwargs(**{k: None for k in self.policy_kwargs})
            if self.use_sde:
                kw["use_sde"] = True
            return self.policy_class(self.observation_space, self.action_space, self.lr_schedule,
                                     **kw)
        cnn = self.policy_name == "CnnPolicy"
        extra = {"features_dim": None} if cnn else {}
        return self._build_policy(cnn, extra)

    def _build_policy(self, cnn: bool, extra: dict[str, Any]) -> ActorCriticPolicy:
        """The actor-critic network, ``policy_kwargs`` over its defaults (RecurrentPPO's and
        MaskablePPO's hook). Dict observations reach it flattened (``envs.preprocess_obs``: the
        entries side by side), so its network reads vector-only ones as one Box; with image
        entries it keeps the Dict space and ``CombinedExtractor`` reshapes each image back."""
        return ActorCriticPolicy(self._policy_observation_space(), self.action_space, cnn=cnn,
                                 use_sde=self.use_sde,
                                 **self.net_kwargs(**POLICY_DEFAULTS, **extra))

    def _policy_observation_space(self) -> spaces.Space:
        """The observation space the policy network reads: a vector-only Dict's entries reach it
        flattened side by side (``envs.preprocess_obs``), as one Box; a Dict with image entries
        stays a Dict, for ``CombinedExtractor``'s CNNs on the flat rows."""
        space = self.observation_space
        if isinstance(space, spaces.Dict) and not dict_has_images(space):
            return spaces.Box(-np.inf, np.inf, (flat_obs_dim(space),), np.float32)
        return space

    def _make_rollout_buffer(self, *args: Any, **kwargs: Any) -> RolloutBuffer:
        """The rollout storage (``RolloutBuffer``'s arguments)."""
        return RolloutBuffer(*args, **kwargs)

    def _check_rollout_buffer_class(self) -> None:
        """SB3's ``rollout_buffer_class`` (RolloutBuffer or DictRolloutBuffer): built once as SB3
        builds it, for SB3's errors (a wrong keyword, ``gamma`` twice: TypeError; Dict class
        and space disagreeing: AssertionError). The loop keeps its own storage, which holds the
        same rollout and computes the same GAE (``rlgrad.rl.buffers``)."""
        assert self.rollout_buffer_class is not None  # (called when one is given)
        buffer_class(self.rollout_buffer_class)(
            self.n_steps, self.observation_space, self.action_space, gamma=self.gamma,
            gae_lambda=self.gae_lambda, n_envs=self.n_envs, **self.rollout_buffer_kwargs)

    # ---- collection --------------------------------------------------------------------------
    def _to_env(self, actions: np.ndarray) -> np.ndarray:
        if not self._clip_actions:
            return actions
        if self.policy.multi:
            return action_dists.to_env(self.action_space, actions)
        if self.policy.squash_output:  # gSDE's tanh-squashed actions, onto the bounds
            return self.policy.unscale_action(actions)
        # the Gaussian policy is unbounded: clip to the box, store the unclipped action
        return np.clip(actions, self._low, self._high)

    def collect_rollouts(self, env: object = None, callback: BaseCallback | None = None,
                         rollout_buffer: object = None, n_rollout_steps: int | None = None) -> bool:
        """SB3's: fill the rollout buffer with ``n_steps`` steps of every env copy; False when a
        callback stopped it. The env, buffer and step count are the model's own (SB3's code passes
        them as arguments: anything else is refused in one line)."""
        self._check_rollout_args(env, rollout_buffer, n_rollout_steps)
        return self._collect(callback)

    def _check_rollout_args(self, env: object, rollout_buffer: object,
                            n_rollout_steps: int | None) -> None:
        own_envs = (None, self.env, self.vector_env, getattr(self, "_vec_env", None))
        if not any(env is e for e in own_envs) and env is not self.get_env():
            raise ValueError("collect_rollouts: env must be the model's own (model.get_env()); "
                             "use model.set_env(env) to train on another")
        if rollout_buffer is not None and rollout_buffer is not self.rollout_buffer:
            raise ValueError("collect_rollouts: rollout_buffer must be model.rollout_buffer")
        if n_rollout_steps is not None and n_rollout_steps != self.n_steps:
            raise ValueError(f"collect_rollouts: n_rollout_steps={n_rollout_steps} but the model "
                             f"was built with n_steps={self.n_steps}; build it with that n_steps")

    def _collect(self, callback: BaseCallback | None) -> bool:
        if self.env_runners:  # the same rollout, sampled by Ray actors (started on first use)
            from rlgrad.rl.distributed.sampler import RaySampler

            return self._env_runner_sampler(RaySampler).collect(callback)
        buf, policy, adapter, norm = self.rollout_buffer, self.policy, self._adapter, self.normalizer
        policy.set_training_mode(False)  # SB3's: BatchNorm's running statistics, no dropout
        buf.reset()
        if callback is not None:
            callback.on_rollout_start()
        want_locals = callback is not None and callback.wants_locals()
        forget = callback is not None and callback.may_write_weights()
        obs = self._obs(self._last_obs, update=False)
        rng, n, space = self.rng, self.n_envs, self.observation_space
        same_step = not adapter.next_step
        fused = policy.fused_numpy()
        act, step, add = self._rollout_actor(), adapter.step, buf.add  # bound once: every step
        clip = self._to_env if self._clip_actions else None
        sde_freq = self.sde_sample_freq if self.use_sde else 0
        if self.use_sde:
            policy.reset_noise(n, rng)
        # the weights stay as they are while acting: conv weights' GEMM columns made once
        # (forgotten after a callback that may write them: a user's, not rlgrad's own)
        with rlgrad.no_grad(), weights_fixed() as kept:
            for t in range(self.n_steps):
                if sde_freq > 0 and t > 0 and t % sde_freq == 0:
                    policy.reset_noise(n, rng)
                actions, values, log_probs = act(obs, rng, fused)
                raw, rew, term, trunc, valid, final = step(actions if clip is None
                                                           else clip(actions))
                done = adapter.prev_done  # term | trunc, as the adapter computed it
                if norm is None:
                    next_obs = preprocess_obs(raw, space)  # what self._obs does without one
                else:
                    next_obs = self._obs(raw, update=True)
                    rew = norm.process_reward(rew, done, valid)
                if same_step and adapter.any_done and trunc.any():  # bootstrap from the final obs
                    rows = np.flatnonzero(trunc)
                    buf.bootstrap[buf.pos, rows] = self._bootstrap_values(
                        self._obs(obs_rows(final, rows), update=False), rows)
                add(obs, actions, rew, term, done, values, log_probs, valid)
                obs = next_obs
                self.num_timesteps += n
                if callback is not None:
                    go_on = self._callback_step(callback, want_locals, raw, rew, done, actions)
                    if forget:  # (the callback may have written the weights)
                        kept.clear()
                    if not go_on:
                        return False
            self._last_obs = raw
            buf.compute_returns_and_advantage(self._bootstrap_values(obs, None))
        if callback is not None:
            callback.on_rollout_end()
        return True

    def _rollout_actor(self) -> Any:
        """``act(obs, rng, fused) -> (actions, values, log_probs)`` for one rollout step (a
        recurrent policy's carries its hidden state from step to step). A custom policy class
        that overrides SB3's ``forward`` acts through it, as SB3's loop does (the plain path)."""
        if self.policy_class is not None and (type(self.policy).forward
                                              is not ActorCriticPolicy.forward):
            return self._act_through_forward
        return self.policy.act

    def _act_through_forward(self, obs: np.ndarray, rng: Any, fused: Any = None
                             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``policy(obs)``'s (actions, values, log-probabilities) as arrays (the reference the
        NumPy acting of ``ActorCriticPolicy.act`` is tested against)."""
        with rlgrad.no_grad():
            actions, values, log_prob = self.policy(rlgrad.as_tensor(obs))
        actions = _array(actions).reshape(len(obs), *self.rollout_buffer.actions.shape[2:])
        return actions, _array(values).reshape(-1), _array(log_prob).reshape(-1)

    def _bootstrap_values(self, obs: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """V(obs) after the rollout's last step (``rows`` None), or of the final observations of
        the env copies ``rows`` that were truncated."""
        return self.policy.values_numpy(obs)

    def _iteration(self, callback: BaseCallback | None) -> bool:
        if self.compile_loop:
            return self._compiled_iteration(callback)
        if not self._collect(callback):
            return False
        self._update_progress()
        self._iteration_num += 1
        if self.log_interval and self._iteration_num % self.log_interval == 0:
            # SB3's order: the row is written before the update, with the previous update's
            # train/ values; the last update's stay in logger.name_to_value after learn
            self._record_rollout_stats()
            self.logger.dump(self.num_timesteps)
        self.policy.set_training_mode(True)  # (SB3's train() sets it)
        self.train()
        return True

    # ---- the loss and the update --------------------------------------------------------------
    def loss(self, b: dict[str, Any], use_entropy: bool) -> tuple[Any, dict[str, Any]]:
        """The score-function loss of A2C and REINFORCE on batch ``b`` (``_loss_batch``):

            -sum_i w_i log pi(a_i|s_i) A_i + vf_coef sum_i w_i (R_i - V(s_i))^2 - ent_coef sum_i w_i H_i

        (weights ``w``: 1/n per row, 0 for padding). Returns the loss and the terms to log.
        """
        dist, values = self.policy.distribution_and_value(b["obs"])  # a CNN trunk runs once
        w = b["weights"]
        log_prob = dist.log_prob(b["actions"])
        policy_loss = -(w * log_prob * b["advantages"]).sum()
        return with_value_and_entropy(policy_loss, values, dist, b, use_entropy, log_prob)

    def _loss_step(self, compiled: bool) -> Any:
        """``self.loss`` and its gradient w.r.t. the optimizer's parameters as one step, compiled
        or eager (built once each, and again if the user replaced the optimizer). The step only
        reads the weights (the optimizer writes them after it): the updates call it inside
        ``nn.functional.weights_fixed()``, so a conv weight's columns are made once per step,
        for the forward and the input gradient."""
        params = optimized_params((self.optimizer,))
        compiled = compiled and not self._stateful_training()
        entry = self._loss_steps.get(compiled)
        if entry is None or not same_params(entry[1], params):
            step = grad_step(self.loss, params, compiled, static_argnums=(1,))
            entry = self._loss_steps[compiled] = (step, params)
        return entry[0]

    def _stateful_training(self) -> bool:
        """Whether the policy holds a layer that training runs eagerly (not under rlgrad.jit):
        BatchNorm writes its running statistics in place, Dropout draws a new mask per call
        (SB3's test_train_eval_mode extractor has both)."""
        return any(isinstance(m, STATEFUL_LAYERS) for m in self.policy.modules())

    def train(self) -> None:
        """One gradient step on the whole rollout (A2C, REINFORCE), compiled; losses logged."""
        self._set_lr()
        b, valid = self._full_batch()
        with weights_fixed():  # (the step reads the weights: see _loss_step)
            loss, stats, grads = self._loss_step(compiled=True)(b, self.ent_coef != 0)
        self._apply_grads(grads, loss, stats)
        self._n_updates += 1
        if self._will_log():
            lg = self.logger
            for k in ("policy_loss", "value_loss", "entropy_loss"):
                lg.record(f"train/{k}", float(stats[k]))
            lg.record("train/loss", float(loss))
            self._log_common(valid)

    def _log_common(self, valid: Any) -> None:
        flat, lg = self.rollout_buffer.flat(), self.logger
        lg.record("train/explained_variance",
                  explained_variance(flat.old_values[valid], flat.returns[valid]))
        lg.record("train/n_updates", self._n_updates)
        if self.use_sde:
            lg.record("train/std", float(self.policy.sde_std().mean()))
        elif not self.policy.discrete and not self.policy.multi:
            lg.record("train/std", float(np.exp(self.policy.log_std._value).mean()))

    def _will_log(self) -> bool:
        """Whether this update's statistics are read (computed only then): the next
        iteration's row holds them, or it is the last update of ``learn`` (they stay in
        ``logger.name_to_value``); an update in between would be overwritten unseen."""
        return ((bool(self.log_interval) and (self._iteration_num + 1) % self.log_interval == 0)
                or self.num_timesteps >= self._total_timesteps)

    # ---- shared pieces of the updates -------------------------------------------------------
    def _set_lr(self) -> float:
        lr = self.lr_schedule(self._current_progress_remaining)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.logger.record("train/learning_rate", lr)
        return lr

    def _apply_grads(self, grads: Any, loss: Any, stats: dict[str, Any]) -> None:
        """Clip the norm of the gradients computed by a step, optimizer step (reading the arrays:
        ``.grad`` is not set); a non-finite loss term stops training before the weights take it."""
        check_update({"loss": loss, **{k: stats[k] for k in _LOSS_TERMS}})
        apply_grads(self.optimizer, grads, self.max_grad_norm)

    def _full_batch(self) -> tuple[dict[str, Any], np.ndarray]:
        """(the loss batch of every row of the rollout, valid mask): a fixed shape, compiled once.

        The NEXT_STEP reset rows stay in place with weight 0, so the shape never changes and
        ``rlgrad.jit`` compiles the update once; weights are 1 / (number of valid rows).
        """
        buf = self.rollout_buffer
        valid = buf.valid.reshape(-1)
        w = valid.astype(np.float32) / max(int(valid.sum()), 1)
        data = buf.flat()
        return self._loss_batch(data, self._advantages(data.advantages, valid), w), valid

    def _loss_batch(self, data: RolloutBatch, adv: np.ndarray, w: np.ndarray) -> dict[str, Any]:
        """What ``loss`` reads: arrays only, so the same dict feeds the eager and compiled step."""
        return {"obs": data.observations, "actions": self.policy.actions_for_loss(data.actions),
                "advantages": adv, "returns": data.returns, "weights": w,
                "old_log_prob": data.old_log_prob, "old_values": data.old_values,
                "coefs": self._coefs()}

    def _coefs(self) -> np.ndarray:
        """``[vf_coef, ent_coef]`` as the loss reads them (one array, rebuilt when they change)."""
        key = (self.vf_coef, self.ent_coef)
        if getattr(self, "_coefs_key", None) != key:
            self._coefs_key, self._coefs_arr = key, np.array(key, dtype=np.float32)
        return self._coefs_arr

    def _advantages(self, adv: np.ndarray, valid: np.ndarray) -> np.ndarray:
        if self.normalize_advantage and valid.sum() > 1:
            a = adv[valid]
            adv = (adv - a.mean()) / (a.std(ddof=1) + 1e-8)  # unbiased, as SB3 (torch) has it
        return np.where(valid, adv, 0.0).astype(np.float32)

    def _predict(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        self.policy.set_training_mode(False)  # (SB3's predict leaves it in evaluation mode)
        if deterministic:
            actions = self.policy.mode(obs)
        else:
            actions = self.policy.act(obs, self.rng)[0]
        return self._to_env(actions)

    def _modules(self) -> dict[str, Any]:
        return {"policy": self.policy}

    def _upgrade_state(self, state: dict[str, Any]) -> dict[str, Any]:
        # checkpoints written before the towers took SB3's names ("pi_net.0.weight")
        renames = (("pi_net.", "mlp_extractor.policy_net."), ("vf_net.", "mlp_extractor.value_net."))
        pol = state.get("modules", {}).get("policy", {})
        if any(k.startswith(old) for k in pol for old, _ in renames):
            pol = {next((new + k[len(old):] for old, new in renames if k.startswith(old)), k): v
                   for k, v in pol.items()}
            state = {**state, "modules": {**state["modules"], "policy": pol}}
        return super()._upgrade_state(state)

    def _optimizers(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer}

    def _extra_state(self) -> dict[str, Any]:
        return {"iteration": {"num": self._iteration_num}, "log_row": self._pending_log_row(),
                **self._env_runner_state()}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        self._iteration_num = int(state.get("iteration", {}).get("num", 0))
        row = state.get("log_row", {})
        for k, v, ex in zip(row.get("keys", []), row.get("values", []), row.get("exclude", [])):
            self.logger.record(k, np.asarray(v).item(), exclude=tuple(ex) or None)
        self._set_env_runner_state(state)

    def _pending_log_row(self) -> dict[str, list[Any]]:
        """The last update's values, waiting in the logger for the next row (SB3's order: a row
        is written before its update): kept in checkpoints, so that a resumed run writes the
        rows of the uninterrupted one."""
        lg = self.logger
        keys = [k for k, v in lg.name_to_value.items()
                if isinstance(v, int | float | np.number) and not isinstance(v, bool)]
        return {"keys": keys, "values": [np.asarray(lg.name_to_value[k]) for k in keys],
                "exclude": [list(lg.name_to_excluded.get(k, ())) for k in keys]}

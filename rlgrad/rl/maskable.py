"""PPO with invalid-action masking, as sb3-contrib's ``MaskablePPO``.

The environment says which actions are allowed now (``env.action_masks()``, or the
``ActionMasker`` wrapper's function): the policy's logits of the others are replaced by -1e8
(``MaskableCategorical``), so they are never sampled, get no gradient, and the entropy counts
the allowed actions only. ``MaskablePPO`` is ``PPO`` with four hooks overridden: the rollout's
actor reads the masks and stores them (``MaskableRolloutBuffer``), the loss batch carries them,
the loss's distribution is masked, and ``predict`` takes ``action_masks=``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import numpy as np
from gymnasium import spaces

from rlgrad import ops
from rlgrad.distributions import Categorical
from rlgrad.rl import action_dists
from rlgrad.rl.buffers import RolloutBuffer
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.on_policy import POLICY_DEFAULTS
from rlgrad.rl.policies import ActorCriticPolicy
from rlgrad.rl.ppo import PPO
from rlgrad.rl.ranges import ROLLOUT_BATCH
from rlgrad.tensor import Tensor, _shape

#: the logit of a masked action (sb3-contrib's): exp of it is 0 in float32, so is p log p
HUGE_NEG = -1e8


class MaskableCategorical(Categorical):
    """A Categorical whose masked actions (``masks`` False) have logit -1e8: probability 0, no
    gradient, no share of the entropy. ``apply_masking(None)`` removes the mask."""

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None,
                 masks: Any = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("MaskableCategorical: give either probs or logits, not both")
        if logits is None:  # torch's probs_to_logits: log of probs clamped to [eps, 1 - eps]
            p = probs if isinstance(probs, Tensor) else np.asarray(probs)
            eps = float(np.finfo(p.dtype).eps)
            logits = ops.log(ops.clip(p, eps, 1.0 - eps))
        self._raw_logits = logits
        self._validate = validate_args
        self.masks: np.ndarray | None = None
        self.apply_masking(masks)

    def apply_masking(self, masks: Any) -> None:
        """Mask the logits given at construction with ``masks`` (True: allowed), or unmask."""
        logits = self._raw_logits
        self.masks = masks
        if masks is not None:
            if not isinstance(masks, Tensor):  # (inside a compiled step: the loss's own masks)
                m = np.asarray(masks, dtype=bool).reshape(_shape(logits))
                if not m.any(axis=-1).all():
                    raise ValueError("MaskableCategorical: a row of the action mask allows no "
                                     "action; at least one action must stay valid")
                self.masks = masks = m
            logits = ops.where(masks, logits, HUGE_NEG)
        super().__init__(logits=logits, validate_args=self._validate)


def get_action_masks(env: Any) -> np.ndarray:
    """The current masks of every copy of a vector env (one row each), or of one Gymnasium env:
    ``action_masks()`` of the env or of a wrapper around it (``ActionMasker``)."""
    if hasattr(env, "vec_env"):  # a VecEnv (SubprocVecEnv, ...) behind Gymnasium's vector API
        return get_action_masks(env.vec_env)
    if hasattr(env, "env_method"):  # SB3's VecEnv
        try:
            masks = env.env_method("action_masks")
        except AttributeError:  # (a wrapper without the method, e.g. Monitor, or copies in
            inner = getattr(env, "venv", None)  # other processes): the vector env it wraps
            if inner is None:
                raise
            return get_action_masks(inner)
        return np.stack([_flat_mask(m) for m in masks])
    if hasattr(env, "call"):  # Gymnasium's vector env
        return np.stack([_flat_mask(m) for m in env.call("action_masks")])
    fn = env.get_wrapper_attr("action_masks") if hasattr(env, "get_wrapper_attr") else (
        env.action_masks)
    return np.asarray(fn(), dtype=bool)


def _flat_mask(mask: Any) -> np.ndarray:
    """One env's mask as one row (a MultiDiscrete mask may come as one list per part)."""
    if isinstance(mask, list | tuple) and mask and isinstance(mask[0], list | tuple | np.ndarray):
        return np.concatenate([np.asarray(m, dtype=bool).ravel() for m in mask])
    return np.asarray(mask, dtype=bool).ravel()


def is_masking_supported(env: Any) -> bool:
    """Whether ``env`` (or every copy of a vector env) gives ``action_masks()``: asked without
    calling it (an AttributeError in a subprocess copy would stop that copy)."""
    inner = getattr(env, "vec_env", None) or getattr(env, "venv", None)
    if inner is not None:  # a VecEnv over a Gymnasium vector env, or a VecEnv wrapper
        return is_masking_supported(inner)
    if hasattr(env, "call"):  # Gymnasium's vector env: each copy answers
        return all(env.call("has_wrapper_attr", "action_masks"))
    if hasattr(env, "has_attr"):
        return bool(env.has_attr("action_masks"))
    if hasattr(env, "has_wrapper_attr"):
        return bool(env.has_wrapper_attr("action_masks"))
    return callable(getattr(env, "action_masks", None))


def masking_error(what: str) -> ValueError:
    return ValueError(f"{what}: the environment gives no action_masks(); add that method to it, "
                      "wrap it in rlgrad.rl.contrib.common.wrappers.ActionMasker(env, mask_fn), "
                      "or pass use_masking=False")


def masked_head_space(space: spaces.Space) -> spaces.Space:
    """The action space of the masked policy head: MultiBinary(n) as MultiDiscrete([2] * n)
    (sb3-contrib's: two logits per bit, each maskable), the others as they are."""
    if isinstance(space, spaces.MultiBinary):
        return spaces.MultiDiscrete(np.full(int(np.prod(space.shape)), 2))
    return space


class MaskableActorCriticPolicy(ActorCriticPolicy):
    """``ActorCriticPolicy`` whose Categorical heads take action masks: Discrete, MultiDiscrete
    (one mask slot per choice of each part) and MultiBinary (built as MultiDiscrete([2] * n):
    two slots per bit)."""

    def distribution_and_value_masked(self, obs: Any, masks: Any) -> tuple[Any, Any]:
        """(the masked pi(.|obs), V(obs)), the trunk run once."""
        f = self._features(obs)
        logits = self.action_net(self.pi_net(f))
        values = self.value_net(self.vf_net(self._vf_features(obs, f))).reshape(-1)
        if self.multi:
            if masks is not None:
                masks = masks if isinstance(masks, Tensor) else np.asarray(
                    masks, dtype=bool).reshape(_shape(logits))
                logits = ops.where(masks, logits, HUGE_NEG)
            return action_dists.distribution(self.action_space, logits), values
        return MaskableCategorical(logits=logits, masks=masks), values

    def actions_for_loss(self, actions: np.ndarray) -> np.ndarray:
        """Stored actions as indices (a MultiBinary rollout stores its bits as float32)."""
        return np.asarray(actions, dtype=np.int64) if self.multi else actions

    def act_masked(self, obs: np.ndarray, masks: np.ndarray | None, rng: np.random.Generator,
                   fused: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``act`` with the masked logits set to -1e8 (never drawn)."""
        out, values = self.heads_numpy(obs, fused)
        if masks is not None:
            out = np.where(masks, out, np.float32(HUGE_NEG))
        actions, log_prob = self.sample_numpy(out, rng)
        return actions, values, log_prob

    def mode_masked(self, obs: np.ndarray, masks: np.ndarray | None) -> np.ndarray:
        out = self._head_np(obs)
        if masks is not None:
            out = np.where(masks, out, np.float32(HUGE_NEG))
        return action_dists.mode_numpy(self.action_space, out) if self.multi else out.argmax(1)


class MaskableRolloutBatch(NamedTuple):
    observations: np.ndarray
    actions: np.ndarray
    old_values: np.ndarray
    old_log_prob: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    action_masks: np.ndarray


class MaskableRolloutBuffer(RolloutBuffer):
    """A rollout with each step's action masks (T, n_envs, n_actions)."""

    def __init__(self, *args: Any, n_actions: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.action_masks = np.ones((self.n_steps, self.n_envs, n_actions), dtype=bool)

    def flat(self) -> MaskableRolloutBatch:  # type: ignore[override]  # RolloutBatch + masks (a NamedTuple)
        R = self.n_steps * self.n_envs
        return MaskableRolloutBatch(*super().flat(), self.action_masks.reshape(R, -1))


class MaskablePPO(PPO):
    """sb3-contrib's ``MaskablePPO``: PPO over Discrete, MultiDiscrete or MultiBinary actions
    with invalid-action masks."""

    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (
        spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
    env_runner_sampling = False
    action_space: spaces.Discrete
    policy: MaskableActorCriticPolicy
    rollout_buffer: MaskableRolloutBuffer
    cnn_policy = True
    # a batch_size above the rollout trains on the whole rollout, with SB3's truncated
    # mini-batch warning (sb3-contrib's test_invalid_actions builds one)
    relations_not_applying = (ROLLOUT_BATCH,)

    def __init__(self, env: EnvLike, **kwargs: Any) -> None:
        self._use_masking = True
        self._predict_masks: Any = None
        super().__init__(env, **kwargs)

    def _make_policy(self) -> ActorCriticPolicy:
        cls = self.policy_class
        if cls is not None and not issubclass(cls, MaskableActorCriticPolicy):
            raise ValueError(f"MaskablePPO: policy {cls.__name__} is not a "
                             "MaskableActorCriticPolicy; subclass rlgrad.rl.contrib.ppo_mask."
                             "MaskableActorCriticPolicy (its distribution takes the masks)")
        return super()._make_policy()

    def _build_policy(self, cnn: bool, extra: dict[str, Any]) -> MaskableActorCriticPolicy:
        return MaskableActorCriticPolicy(
            self._policy_observation_space(), masked_head_space(self.action_space), cnn=cnn,
            **self.net_kwargs(**POLICY_DEFAULTS, **extra))

    def _make_rollout_buffer(self, *args: Any, **kwargs: Any) -> RolloutBuffer:
        return MaskableRolloutBuffer(*args, n_actions=self.policy.act_dim, **kwargs)

    # sb3-contrib's order of arguments: use_masking before progress_bar
    def learn(self, total_timesteps: int, callback: Any = None,  # type: ignore[override]
              log_interval: int | None = None, tb_log_name: str | None = None,
              reset_num_timesteps: bool = True, use_masking: bool = True,
              progress_bar: bool = False) -> MaskablePPO:
        """``PPO.learn``; ``use_masking=False`` trains as plain PPO (every action allowed)."""
        self._use_masking = bool(use_masking)
        if use_masking and not is_masking_supported(self._mask_source()):
            raise masking_error("MaskablePPO.learn")
        return super().learn(total_timesteps, callback, log_interval, tb_log_name,
                             reset_num_timesteps, progress_bar)

    def _mask_source(self) -> Any:
        return self.vector_env

    # ---- collection and the loss: the masks ----------------------------------------------
    def _rollout_actor(self) -> Callable[..., Any]:
        buf, policy = self.rollout_buffer, self.policy
        if not self._use_masking:
            buf.action_masks.fill(True)
            return policy.act
        env = self._mask_source()

        def act(obs: np.ndarray, rng: np.random.Generator, fused: Any) -> Any:
            masks = get_action_masks(env)
            buf.action_masks[buf.pos] = masks
            return policy.act_masked(obs, masks, rng, fused)

        return act

    def _loss_batch(self, data: Any, adv: np.ndarray, w: np.ndarray) -> dict[str, Any]:
        b = super()._loss_batch(data, adv, w)
        b["action_masks"] = data.action_masks
        return b

    def _distribution_and_value(self, b: dict[str, Any]) -> tuple[Any, Any]:
        return self.policy.distribution_and_value_masked(b["obs"], b["action_masks"])

    # ---- predict: sb3-contrib's action_masks= ------------------------------------------------
    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False, action_masks: Any = None) -> tuple[np.ndarray, None]:
        """``PPO.predict``; ``action_masks`` (one row per observation, True: allowed) keeps the
        masked actions from being chosen."""
        self._predict_masks = action_masks
        try:
            return super().predict(observation, state, episode_start, deterministic)
        finally:
            self._predict_masks = None

    def _predict(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        self.policy.set_training_mode(False)  # (SB3's predict leaves it in evaluation mode)
        masks = self._predict_masks
        if masks is not None:
            masks = np.asarray(masks, dtype=bool).reshape(len(obs), -1)
        if deterministic:
            return self._to_env(self.policy.mode_masked(obs, masks))
        return self._to_env(self.policy.act_masked(obs, masks, self.rng)[0])

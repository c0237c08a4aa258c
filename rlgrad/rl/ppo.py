"""Proximal Policy Optimization (Schulman et al., 2017) with SB3's defaults and loss layout.

Each update: ``n_epochs`` passes over the rollout in shuffled minibatches of the clipped surrogate

    L = -E[min(r A, clip(r, 1 - eps, 1 + eps) A)] + vf_coef * E[(R - V)^2] - ent_coef * H,

``r = pi(a|s) / pi_old(a|s)``, advantages from GAE(lambda) normalised per minibatch, optional value
clipping around the old values (SB3's; ``clip_vf_max=True``: PureJaxRL's and CleanRL's larger of
the clipped and unclipped errors), and early stopping when the approximate KL exceeds
``1.5 * target_kl``.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np

from rlgrad import ops
from rlgrad.nn.functional import weights_fixed
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.on_policy import OnPolicyAlgorithm, with_value_and_entropy
from rlgrad.rl.schedules import FloatSchedule, ScheduleLike, get_schedule_fn
from rlgrad.tracer import defbatch, defjvp, defvjp, primitive
from rlgrad.typing import Array


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
defbatch(_surrogate_p, "ppo_clipped_surrogate")
defvjp(_surrogate_p, _surrogate_vjp, None, None, None, None)
defjvp(_surrogate_p, lambda t, ans, *args: ops.sum(_surrogate_vjp(t, ans, *args)), None, None, None, None)


def clipped_surrogate_loss(log_prob: Any, old_log_prob: np.ndarray, advantages: np.ndarray,
                           clip: Any, weights: Any = None) -> Any:
    """``-mean(min(r A, clip(r, 1 - clip, 1 + clip) A))``, ``r = exp(log_prob - old_log_prob)``
    (a weighted sum with ``weights``)."""
    if weights is None:
        weights = np.full(len(advantages), 1.0 / max(len(advantages), 1), dtype=np.float32)
    return _surrogate_p(log_prob, old_log_prob, advantages, clip, weights)


def _approx_kl(log_prob: np.ndarray, old_log_prob: np.ndarray, valid: Any,
               clip: float = 0.0) -> tuple[Any, Any]:
    """(approximate KL, clip fraction) of the valid rows, per row of ``log_prob`` if it is
    stacked (epochs, rows); the KL is Schulman's low-variance estimator ``(r - 1) - log r``."""
    log_ratio = (log_prob - old_log_prob)[..., valid]
    ratio = np.exp(log_ratio)
    return (np.mean((ratio - 1) - log_ratio, axis=-1),
            np.mean(np.abs(ratio - 1) > clip, axis=-1))


def _approx_kl_padded(log_prob: np.ndarray, old_log_prob: np.ndarray, n_real: np.ndarray,
                      clip: float) -> tuple[np.ndarray, np.ndarray]:
    """``_approx_kl`` of every padded minibatch of an update at once: row ``i`` of the stacked
    (steps, batch_size) arrays counts its first ``n_real[i]`` entries (the rest are padding)."""
    real = np.arange(log_prob.shape[1]) < n_real[:, None]
    log_ratio = log_prob - old_log_prob
    ratio = np.exp(log_ratio)
    kl = np.where(real, (ratio - 1) - log_ratio, 0.0).sum(axis=1) / n_real
    return kl, (real & (np.abs(ratio - 1) > clip)).sum(axis=1) / n_real


def clipped_values(values: Array, old_values: Array, returns: Array, clip: Array | float,
                   pessimistic: bool = False) -> Array:
    """The values the value loss compares with the returns under ``clip_range_vf``: SB3's
    ``old + clip(values - old, -clip, clip)``; ``pessimistic`` (PureJaxRL's and CleanRL's
    ``clip_vloss``): per row whichever of ``values`` and that lies farther from the return, so the
    squared error is the larger of the unclipped and the clipped one, and its gradient that
    one's (SB3's form has none once a value left the clip range)."""
    clipped = old_values + ops.clip(values - old_values, -clip, clip)
    if not pessimistic:
        return clipped
    farther = ops.abs(returns - values) >= ops.abs(returns - clipped)
    return ops.where(farther, values, clipped)


class PPO(OnPolicyAlgorithm):
    #: minibatches of one shape (the ragged last one padded): the compiled step, and the whole
    #: rollout as one batch when it fits; False (RecurrentPPO's padded sequences): eager
    fixed_shape_batches: ClassVar[bool] = True
    #: the policy loss the compiled loop (rlgrad.rl.compiled_loop) traces
    clipped_surrogate = staticmethod(clipped_surrogate_loss)
    #: the clipped values of the value loss (the compiled loop traces it too)
    clipped_values = staticmethod(clipped_values)

    def __init__(self, env: EnvLike, learning_rate: ScheduleLike = 3e-4, n_steps: int = 2048,
                 batch_size: int = 64, n_epochs: int = 10, gamma: float = 0.99,
                 gae_lambda: float = 0.95, clip_range: ScheduleLike = 0.2, clip_range_vf: Any = None,
                 normalize_advantage: bool = True, ent_coef: float = 0.0, vf_coef: float = 0.5,
                 max_grad_norm: float | None = 0.5, target_kl: float | None = None,
                 rollout_buffer_class: str | None = None,
                 rollout_buffer_kwargs: dict | None = None, n_envs: int = 1,
                 normalize: bool | dict = False, policy_kwargs: dict | None = None,
                 seed: int | None = None, verbose: int = 0, compile_loop: bool = False,
                 clip_vf_max: bool = False, **env_options: Any) -> None:
        if clip_vf_max and clip_range_vf is None:
            raise ValueError("clip_vf_max=True takes the larger of the clipped and unclipped value "
                             "errors and needs clip_range_vf: set clip_range_vf (e.g. 0.2)")
        self.clip_vf_max = bool(clip_vf_max)
        super().__init__(env, learning_rate, n_steps, gamma, gae_lambda, ent_coef, vf_coef,
                         max_grad_norm, normalize_advantage, n_envs, normalize, policy_kwargs,
                         seed, verbose, rollout_buffer_class=rollout_buffer_class,
                         rollout_buffer_kwargs=rollout_buffer_kwargs,
                         compile_loop=compile_loop, **env_options)
        self.batch_size = int(batch_size)
        self.n_epochs = int(n_epochs)
        rollout = self.n_steps * self.n_envs
        if rollout % self.batch_size:  # SB3's warning: the last minibatch is smaller (here padded)
            warnings.warn(f"You have specified a mini-batch size of {self.batch_size}, but "
                          f"because the rollout is of size n_steps * n_envs = {rollout}, after "
                          f"every {rollout // self.batch_size} untruncated mini-batches, there "
                          f"will be a truncated mini-batch of size {rollout % self.batch_size}; "
                          "a batch_size that is a factor of n_steps * n_envs avoids it",
                          UserWarning, stacklevel=3)
        self.clip_range = FloatSchedule(get_schedule_fn(clip_range))  # SB3's types
        self.clip_range_vf = (None if clip_range_vf is None
                              else FloatSchedule(get_schedule_fn(clip_range_vf)))
        self.target_kl = target_kl
        self._params = list(self.policy.parameters())
        self.optimizer = self.make_optimizer(self._params, eps=1e-5)
        self.policy.optimizer = self.optimizer  # SB3's model.policy.optimizer
        self._check_compile_loop()

    def _maybe_recommend_cpu(self, mlp_class_name: str = "ActorCriticPolicy") -> None:
        """SB3's warning for an MLP policy on a GPU (rlgrad computes on the CPU, so only a
        ``model.device`` set by hand to CUDA gets it)."""
        if getattr(self.device, "type", str(self.device)) == "cuda" and not self.policy.cnn:
            warnings.warn(f"You are trying to run {type(self).__name__} on the GPU, but it is "
                          "primarily intended to run on the CPU when not using a CNN policy "
                          f"(you are using {mlp_class_name} which should be a MlpPolicy)",
                          UserWarning, stacklevel=2)

    # ---- the update: the loss once, run compiled (whole rollout) or eager (minibatches) -----
    def loss(self, b: dict[str, Any], use_entropy: bool) -> tuple[Any, dict[str, Any]]:
        """Clipped surrogate + vf_coef * value loss - ent_coef * entropy, weighted rows."""
        dist, values = self._distribution_and_value(b)
        log_prob = dist.log_prob(b["actions"])
        w = b["weights"]
        policy_loss = _surrogate_p(log_prob, b["old_log_prob"], b["advantages"], b["clip"], w)
        if "clip_vf" in b:  # keep the new value within clip_vf of the old one
            values = clipped_values(values, b["old_values"], b["returns"], b["clip_vf"],
                                    self.clip_vf_max)
        loss, terms = with_value_and_entropy(policy_loss, values, dist, b, use_entropy, log_prob)
        return loss, {**terms, "log_prob": log_prob}

    def _distribution_and_value(self, b: dict[str, Any]) -> tuple[Any, Any]:
        """pi(.|s) and V(s) of the batch's rows (a CNN trunk runs once)."""
        return self.policy.distribution_and_value(b["obs"])

    def train(self) -> None:
        p = self._current_progress_remaining
        self._set_lr()
        # 0-d arrays, not NumPy scalars: a batch of arrays only finds its compiled step fastest
        clip = np.array(self.clip_range(p), dtype=np.float32)
        clip_vf = (None if self.clip_range_vf is None
                   else np.array(self.clip_range_vf(p), dtype=np.float32))
        # one minibatch = the whole rollout (its order is irrelevant): one compiled step; else
        # shuffled minibatches of one shape (the ragged last one padded), compiled as well
        fixed = self.fixed_shape_batches
        full = (fixed and clip_vf is None
                and self.batch_size >= len(self.rollout_buffer.valid_indices()))
        step = self._loss_step(compiled=fixed)
        whole = [self._full_batch()] if full else None
        stats, stop = [], False
        for _epoch in range(self.n_epochs):
            for b, valid in whole or self._minibatches():
                b["clip"] = clip
                if clip_vf is not None:
                    b["clip_vf"] = clip_vf
                with weights_fixed():  # (the step reads the weights: see _loss_step)
                    loss, s, grads = step(b, self.ent_coef != 0)
                stats.append((loss, s, b["old_log_prob"], valid))
                stop = (self.target_kl is not None
                        and _approx_kl(s["log_prob"], b["old_log_prob"], valid)[0]
                        > 1.5 * self.target_kl)
                if stop:  # early stopping: this minibatch's step is not taken
                    break
                self._apply_grads(grads, loss, s)
            self._n_updates += 1
            if stop:
                break
        self._log_train(stats, self.clip_range(p),
                        None if self.clip_range_vf is None else self.clip_range_vf(p))

    def _minibatches(self) -> Any:
        """Shuffled minibatches of the valid rows, advantages normalised per minibatch (SB3).

        Every minibatch has ``batch_size`` rows, so the compiled step is traced once: the ragged
        last one is padded with rows of weight 0 (and advantage 0), which add nothing to the loss
        or its gradient; its real rows keep the weight 1 / (their number), as unpadded. An
        epoch's rows are gathered at once and its full minibatches normalised in one pass (row
        by row the same reductions as one minibatch at a time).
        """
        bs = self.batch_size
        rows, n = self.rollout_buffer.padded_epoch(bs, self.rng)
        adv = rows.advantages.reshape(-1, bs)  # a fresh gather: ours to normalise in place
        k_full, r = divmod(n, bs)
        if r:
            adv[-1, r:] = 0.0
        if self.normalize_advantage:
            if k_full and bs > 1:
                a = adv[:k_full]
                mean, std = a.mean(axis=1, keepdims=True), a.std(axis=1, ddof=1, keepdims=True)
                a -= mean
                a /= std + 1e-8  # unbiased, as SB3 (torch) has it
            if r > 1:
                a = adv[-1, :r]
                mean, std = a.mean(), a.std(ddof=1)
                a -= mean
                a /= std + 1e-8
        weights = self._minibatch_weights(bs, r)
        for i in range(len(adv)):
            sl = slice(i * bs, (i + 1) * bs)
            m = i < k_full
            w = weights[0 if m else 1]
            assert w is not None  # (a ragged last batch has its weights)
            yield (self._loss_batch(type(rows)(*(x[sl] for x in rows)), adv[i], w),
                   slice(None, bs if m else r))

    def _minibatch_weights(self, bs: int, r: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(weights of a full minibatch, of the ragged last one with ``r`` real rows), kept."""
        key = (bs, r)
        if getattr(self, "_weights_key", None) != key:
            full = np.full(bs, 1.0 / bs, dtype=np.float32)
            ragged = None
            if r:
                ragged = np.zeros(bs, dtype=np.float32)
                ragged[:r] = 1.0 / r
            self._weights_key, self._weights = key, (full, ragged)
        return self._weights

    def _log_train(self, stats: list[tuple[Any, ...]], clip: float,
                   clip_vf: float | None) -> None:
        # the ratio statistics of all steps at once when they share the rollout (full batch)
        loss, s, old, valid = zip(*stats)
        if all(o is old[0] for o in old):
            kl, cf = _approx_kl(np.stack([x["log_prob"] for x in s]), old[0], valid[0], clip)
        elif all(isinstance(v, slice) and v.start is None for v in valid) \
                and len({x["log_prob"].shape for x in s}) == 1:
            kl, cf = _approx_kl_padded(np.stack([x["log_prob"] for x in s]), np.stack(old),
                                       np.array([v.stop for v in valid]), clip)
        else:
            kl, cf = zip(*(_approx_kl(x["log_prob"], o, v, clip) for _, x, o, v in stats))
        pl, vl, el = (np.asarray([x[k] for x in s], dtype=np.float64)
                      for k in ("policy_loss", "value_loss", "entropy_loss"))
        lg = self.logger
        lg.record("train/entropy_loss", float(np.mean(el)))
        lg.record("train/policy_gradient_loss", float(np.mean(pl)))
        lg.record("train/policy_loss", float(np.mean(pl)))
        lg.record("train/value_loss", float(np.mean(vl)))
        lg.record("train/approx_kl", float(np.mean(kl)))
        lg.record("train/clip_fraction", float(np.mean(cf)))
        lg.record("train/loss", float(loss[-1]))
        self._log_common(self.rollout_buffer.valid_indices())
        lg.record("train/clip_range", clip)
        if clip_vf is not None:
            lg.record("train/clip_range_vf", float(clip_vf))

"""Soft Actor-Critic (Haarnoja et al., 2018) with automatic entropy tuning.

* critics: ``y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log pi(a'|s'))``,
  ``a' ~ pi(.|s')``;
* actor: ``a = tanh(mu + sigma * eps)`` drawn with ``rsample()`` (the pathwise gradient through the
  ``TanhNormal``, whose log-probability carries the tanh log-det correction), minimising
  ``E[alpha log pi(a|s) - min_i Q_i(s, a)]``;
* temperature: ``log alpha`` minimises ``-log alpha * (log pi(a|s) + target_entropy)`` with
  ``target_entropy = -dim(A)`` (``ent_coef="auto"``), or ``ent_coef`` is a fixed number.

``use_sde=True`` explores with generalized State-Dependent Exploration (gSDE, as in
Stable-Baselines3): the action is ``tanh(mu(s) + h(s) @ W)``, ``h`` the actor's last hidden layer
and ``W = std * E`` an exploration matrix whose standard-normal ``E`` is drawn at the start of
every rollout (``train_freq`` steps) and, if ``sde_sample_freq > 0``, every ``sde_sample_freq``
steps within it (one matrix per environment copy); each gradient step draws a fresh ``E`` for
its minibatch (used for both the actor's and the target's actions). ``use_sde_at_warmup``
replaces the uniformly random warm-up actions by gSDE ones. ``policy_kwargs`` then also takes
``log_std_init`` (-3), ``full_std`` (True), ``use_expln`` (False) and ``clip_mean`` (2.0).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

import rlgrad
from rlgrad import nn, ops, optim
from rlgrad.rl.buffers import ReplayBatch
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.layers import EXTRACTOR_DEFAULTS, get_actor_critic_arch
from rlgrad.rl.network_policy import SACActor, attach
from rlgrad.rl.off_policy import (
    OffPolicyAlgorithm,
    make_action_noise,
    min_of,
    target_network,
    td_target_of,
)
from rlgrad.rl.policies import ContinuousCritic, upgrade_critic_keys
from rlgrad.rl.schedules import ScheduleLike
from rlgrad.tensor import Tensor


class SAC(OffPolicyAlgorithm):
    action_space: spaces.Box
    cnn_policy = True  # images: a CNN extractor per network (SB3's CnnPolicy)
    dict_images = True  # Dict image entries: CombinedExtractor
    log_ent_coef: nn.Parameter | None  # (None with a fixed ent_coef, as SB3's)

    def __init__(self, env: EnvLike, learning_rate: ScheduleLike = 3e-4, buffer_size: int = 1_000_000,
                 learning_starts: int = 100, batch_size: int = 256, tau: float = 0.005,
                 gamma: float = 0.99, train_freq: Any = 1, gradient_steps: int = 1,
                 ent_coef: str | float = "auto", target_update_interval: int = 1,
                 target_entropy: str | float = "auto", n_critics: int = 2,
                 use_sde: bool = False, sde_sample_freq: int = -1,
                 use_sde_at_warmup: bool = False, noise_type: str | None = None,
                 noise_std: float = 0.1, n_steps: int = 1,
                 replay_buffer_class: str | None = None,
                 replay_buffer_kwargs: dict | None = None, n_envs: int = 1,
                 normalize: bool | dict = False, policy_kwargs: dict | None = None,
                 seed: int | None = None, verbose: int = 0, **env_options: Any) -> None:
        super().__init__(env, learning_rate, buffer_size, learning_starts, batch_size, tau, gamma,
                         train_freq, gradient_steps, n_envs, normalize, policy_kwargs, seed,
                         verbose, n_steps=n_steps, replay_buffer_class=replay_buffer_class,
                         replay_buffer_kwargs=replay_buffer_kwargs, **env_options)
        self.target_update_interval = int(target_update_interval)
        kw = self.net_kwargs(net_arch=[256, 256], activation_fn="relu", log_std_init=-3.0,
                             full_std=True, use_expln=False, clip_mean=2.0, n_critics=n_critics,
                             **EXTRACTOR_DEFAULTS)
        n_critics = int(kw.pop("n_critics"))  # SB3 takes it in policy_kwargs
        pi_arch, qf_arch = get_actor_critic_arch(kw.pop("net_arch"))
        act_fn = kw.pop("activation_fn")
        fx = {k: kw.pop(k) for k in EXTRACTOR_DEFAULTS}
        self.use_sde = bool(use_sde)
        self.sde_sample_freq = int(sde_sample_freq)
        self.use_sde_at_warmup = bool(use_sde_at_warmup)
        actor_fx, critic_fx, in_dim = self.make_extractors(fx)
        self.actor = attach(SACActor(in_dim, self.act_dim, pi_arch, act_fn, use_sde=self.use_sde,
                                     features_extractor=actor_fx, **kw),  # kw: gSDE's options
                            self.observation_space, self.action_space)
        self.critic = self._make_critic(qf_arch, n_critics, act_fn, critic_fx,
                                        bool(fx["share_features_extractor"]))
        self.critic_target = target_network(self.critic)
        self._critic_params = list(self.critic.parameters())  # cached for the Polyak update
        self._critic_target_params = list(self.critic_target.parameters())
        lr = self.lr_schedule(1.0)
        self.actor_optimizer = self.make_optimizer(self.actor.parameters())
        self.critic_optimizer = self.make_optimizer(self.critic.own_parameters())
        self.target_entropy = (-float(self.act_dim) if target_entropy == "auto"
                               else float(target_entropy))
        self.auto_ent = isinstance(ent_coef, str) and ent_coef.startswith("auto")
        self._ent_coef_arg = ent_coef
        if self.auto_ent and isinstance(ent_coef, str):  # "auto", "auto_0.1": learned, from 1.0 or 0.1
            init = float(ent_coef.split("_")[1]) if "_" in ent_coef else 1.0
            self.log_ent_coef = nn.Parameter(np.array([np.log(init)], dtype=np.float32))
            self.ent_coef_optimizer = optim.Adam([self.log_ent_coef], lr=lr)
            self._ent_coef = init
        else:
            self.log_ent_coef = None  # (SB3's: none to learn)
            self._ent_coef = float(ent_coef)
        self._sde_steps = 0  # steps since the rollout's start (gSDE's sde_sample_freq)
        # SB3's action_noise (noise_type / noise_std): added to the sampled action, clipped
        self.action_noise = make_action_noise(noise_type, noise_std, self.act_dim, self.n_envs)
        # gSDE's distribution takes the exploration matrix as data (not traced): eager updates
        self.compile_updates = not self.use_sde
        if self.use_sde:
            self.actor.reset_noise(self.rng, self.n_envs)
        # SB3's action_noise: added to the sampled action (then clipped), as in TD3
        self.action_noise = make_action_noise(noise_type, noise_std, self.act_dim, self.n_envs)

    def _make_critic(self, arch: list[int], n_critics: int, activation_fn: Any,
                     extractor: nn.Module | None = None, shared: bool = False) -> Any:
        """The critics (TQC's give quantiles), on ``extractor``'s features when there is one."""
        return ContinuousCritic(self.features_width(extractor), self.act_dim, arch, n_critics,
                                activation_fn, extractor, shared)

    def _actor_step_due(self) -> bool:
        """Whether this gradient step also updates the actor (CrossQ: every policy_delay-th)."""
        return True

    def _update_target(self) -> None:
        """Move the target critics toward the critics (CrossQ has none)."""
        optim.polyak_update(self._critic_params, self._critic_target_params, self.tau)
        self._sync_running_stats((self.critic, self.critic_target))

    def _q_pi(self, obs: Any, actions: Any) -> Any:
        """The value the actor ascends: the critics' minimum (TQC: the mean of the quantiles)."""
        return min_of(self.critic(obs, actions))

    @property
    def ent_coef(self) -> str | float:
        """The entropy coefficient as given (SB3's attribute): ``"auto..."`` when learned, else
        the fixed number, which may be set (the next update uses it)."""
        return self._ent_coef_arg if self.auto_ent else self._ent_coef

    @ent_coef.setter
    def ent_coef(self, value: float) -> None:
        if self.auto_ent or isinstance(value, str):
            raise ValueError("ent_coef can be set only to a number on a SAC built with a fixed "
                             "ent_coef (a learned one starts from ent_coef='auto_<value>')")
        self._ent_coef = float(value)

    @property
    def ent_coef_tensor(self) -> Tensor:
        """SB3's: the fixed entropy coefficient as a 0-d float32 Tensor (a learned one is
        ``log_ent_coef.exp()``)."""
        if self.auto_ent:
            raise AttributeError("ent_coef_tensor: this SAC learns its entropy coefficient; "
                                 "read log_ent_coef.exp()")
        return rlgrad.tensor(self._ent_coef, dtype=np.float32)

    def _log_alpha(self) -> nn.Parameter:
        """``log_ent_coef``, learned (``auto_ent``)."""
        if self.log_ent_coef is None:
            raise AttributeError("this SAC has a fixed ent_coef: it has no log_ent_coef")
        return self.log_ent_coef

    # ---- acting -------------------------------------------------------------------------------
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        return self.actor.numpy(obs, None if deterministic else self.rng)

    def _explore(self, obs: np.ndarray) -> np.ndarray:
        act = self.actor.numpy(obs, self.rng)
        if self.action_noise is not None:
            act = np.clip(act + self.action_noise(self.rng, len(obs)), -1.0, 1.0)
        return act.astype(np.float32)

    def collect_rollouts(self, callback: Any) -> tuple[int, bool]:
        if self.use_sde:  # a new exploration matrix per rollout (SB3: reset_noise(n_envs))
            self.actor.reset_noise(self.rng, self.n_envs)
            self._sde_steps = 0
        return super().collect_rollouts(callback)

    def _sample_action(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.use_sde:
            return super()._sample_action(obs)
        freq = self.sde_sample_freq
        if freq > 0 and self._sde_steps > 0 and self._sde_steps % freq == 0:
            self.actor.reset_noise(self.rng, self.n_envs)
        self._sde_steps += 1
        if self.use_sde_at_warmup and self.num_timesteps < self.learning_starts:
            act = self._explore(obs)
            return act, self.unscale_action(act).reshape(len(obs), *self.action_space.shape)
        return super()._sample_action(obs)

    # ---- learning -------------------------------------------------------------------------------
    def _rsample(self, obs: Any, noise: Any) -> tuple[Any, Any]:
        """``a ~ pi(.|s)`` (pathwise) and ``log pi(a|s)`` summed over the action: ``tanh(mu +
        sigma * noise)`` with standard-normal ``noise`` (gSDE: the exploration matrix)."""
        dist = self.actor.distribution(obs)
        if self.use_sde:  # log-prob already summed
            return dist.rsample_and_log_prob(weights=noise)
        u = dist.loc + dist.scale * noise
        return ops.tanh(u), (dist.base_dist.log_prob(u) - dist.log_abs_det_jacobian(u)).sum(-1)

    def next_q(self, b: dict[str, Any]) -> Any:
        """``min_i Q'_i(s', a') - alpha log pi(a'|s')``, ``a' ~ pi(.|s')`` drawn with
        ``b["next_noise"]``, ``alpha = b["ent_coef"]``."""
        next_a, next_logp = self._rsample(b["next_obs"], b["next_noise"])
        return min_of(self.critic_target(b["next_obs"], next_a)) - b["ent_coef"] * next_logp

    def td_target(self, b: ReplayBatch, ent_coef: float) -> np.ndarray:
        """The critics' regression target ``r + gamma (1 - terminated) next_q`` of a minibatch
        (the noise of ``a'`` drawn here)."""
        bd = self.batch_dict(b)
        bd["next_noise"] = self._noise(len(b.rewards))
        bd["ent_coef"] = np.array(ent_coef, dtype=np.float32)
        return self.regression_target(bd)

    def _noise(self, n: int) -> np.ndarray:
        """The standard-normal noise of ``n`` actions (gSDE: one exploration matrix)."""
        if self.use_sde:
            return self.actor.sample_sde_weights(self.rng)
        return self.rng.standard_normal((n, self.act_dim), dtype=np.float32)

    def critic_loss(self, b: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``0.5 sum_i mean (Q_i(s, a) - y)^2``, ``y = r + gamma (1 - terminated) next_q``."""
        target = td_target_of(b, self.next_q(b))
        qs = self.critic(b["obs"], b["actions"])
        loss = 0.5 * sum(ops.square(q - target).mean() for q in qs)
        return loss, {"critic_loss": loss}

    def actor_loss(self, b: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``mean(alpha log pi(a|s) - min_i Q_i(s, a))``, ``a ~ pi(.|s)`` drawn pathwise; with
        ``ent_coef="auto"`` plus the temperature's ``-log alpha (log pi(a|s) + target_entropy)``
        (only ``log alpha`` gets its gradient)."""
        a_pi, log_pi = self._rsample(b["obs"], b["noise"])
        actor_loss = (b["ent_coef"] * log_pi - self._q_pi(b["obs"], a_pi)).mean()
        if not self.auto_ent:
            return actor_loss, {"actor_loss": actor_loss}
        ent_loss = -(self.log_ent_coef * (ops.stop_gradient(log_pi) + b["target_entropy"])).mean()
        return actor_loss + ent_loss, {"actor_loss": actor_loss, "ent_coef_loss": ent_loss}

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        opts = [self.actor_optimizer, self.critic_optimizer]
        if self.auto_ent:
            opts.append(self.ent_coef_optimizer)
        self._set_lr(*opts)
        actor_opts = opts[::2]  # the actor's, and the temperature's with "auto"
        ent_coefs, ent_losses, actor_losses, critic_losses = [], [], [], []
        for _ in range(gradient_steps):
            b = self.batch_dict(self.sample(batch_size))
            # the noise of a ~ pi(.|s), then of a' ~ pi(.|s') (gSDE: SB3 draws one matrix per
            # gradient step, log_std has moved, for both)
            b["noise"] = self._noise(batch_size)
            b["next_noise"] = b["noise"] if self.use_sde else self._noise(batch_size)
            ent_coef = (float(np.exp(self._log_alpha()._value[0])) if self.auto_ent
                        else self._ent_coef)
            b["ent_coef"] = np.array(ent_coef, dtype=np.float32)
            ent_coefs.append(ent_coef)
            st = self.gradient_step("critic", self.critic_loss, b, self.critic_optimizer)
            critic_losses.append(float(st["critic_loss"]))
            # the temperature's step comes after the critic's: neither reads the other's result
            if self._actor_step_due():
                st = self.gradient_step("actor", self.actor_loss, {
                    "obs": b["obs"], "noise": b["noise"], "ent_coef": b["ent_coef"],
                    "target_entropy": np.array(self.target_entropy, dtype=np.float32)},
                    *actor_opts)
                actor_losses.append(float(st["actor_loss"]))
                if self.auto_ent:
                    ent_losses.append(float(st["ent_coef_loss"]))
            self._n_updates += 1
            if self._n_updates % self.target_update_interval == 0:
                self._update_target()
        lg = self.logger
        lg.record("train/n_updates", self._n_updates)
        lg.record("train/ent_coef", float(np.mean(ent_coefs)))
        if actor_losses:
            lg.record("train/actor_loss", float(np.mean(actor_losses)))
        lg.record("train/critic_loss", float(np.mean(critic_losses)))
        if ent_losses:
            lg.record("train/ent_coef_loss", float(np.mean(ent_losses)))
        if self.use_sde:
            lg.record("train/std", float(self.actor.sde_std().mean()))

    def _modules(self) -> dict[str, Any]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target}

    def _upgrade_state(self, state: dict[str, Any]) -> dict[str, Any]:
        return super()._upgrade_state(upgrade_critic_keys(state))

    def _optimizers(self) -> dict[str, Any]:
        out = {"actor": self.actor_optimizer, "critic": self.critic_optimizer}
        if self.auto_ent:
            out["ent_coef"] = self.ent_coef_optimizer
        return out

    def _extra_state(self) -> dict[str, Any]:
        out = super()._extra_state()
        sac: dict[str, Any] = {}
        if self.auto_ent:
            sac["log_ent_coef"] = self._log_alpha()._value.copy()
        if self.use_sde:
            sac["sde_weights"] = self.actor.sde_weights.copy()
            sac["sde_steps"] = self._sde_steps
        if sac:
            out["sac"] = sac
        return out

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        super()._set_extra_state(state)
        sac = state.get("sac", {})
        if self.auto_ent and "log_ent_coef" in sac:
            self._log_alpha()._value[...] = sac["log_ent_coef"]
        if self.use_sde and "sde_weights" in sac:
            self.actor.sde_weights = np.array(sac["sde_weights"], dtype=np.float32)
            self._sde_steps = int(sac["sde_steps"])

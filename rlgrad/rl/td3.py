"""Twin Delayed DDPG (Fujimoto et al., 2018).

The critic regresses on ``y = r + gamma (1 - terminated) min_i Q'_i(s', clip(mu'(s') + eps))``,
``eps`` clipped Gaussian noise (target policy smoothing); the actor follows ``dQ_1/da`` at
``a = mu(s)``, i.e. minimises ``-Q_1(s, mu(s))``, every ``policy_delay`` critic updates, when the
target networks are also Polyak-averaged. DDPG is the special case of one critic, no delay and no
smoothing (``rlgrad.rl.DDPG``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import ops, optim
from rlgrad.rl.buffers import ReplayBatch
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.layers import EXTRACTOR_DEFAULTS, get_actor_critic_arch
from rlgrad.rl.network_policy import TD3Actor, attach
from rlgrad.rl.off_policy import (
    OffPolicyAlgorithm,
    make_action_noise,
    min_of,
    target_networks,
    td_target_of,
)
from rlgrad.rl.policies import ContinuousCritic, upgrade_critic_keys
from rlgrad.rl.schedules import ScheduleLike


class TD3(OffPolicyAlgorithm):
    cnn_policy = True  # images: a CNN extractor per network (SB3's CnnPolicy)
    dict_images = True  # Dict image entries: CombinedExtractor
    def __init__(self, env: EnvLike, learning_rate: ScheduleLike = 1e-3, buffer_size: int = 1_000_000,
                 learning_starts: int = 100, batch_size: int = 256, tau: float = 0.005,
                 gamma: float = 0.99, train_freq: Any = 1, gradient_steps: int = 1,
                 noise_type: str | None = None, noise_std: float = 0.1, policy_delay: int = 2,
                 target_policy_noise: float = 0.2, target_noise_clip: float = 0.5,
                 n_critics: int = 2, n_steps: int = 1,
                 replay_buffer_class: str | None = None,
                 replay_buffer_kwargs: dict | None = None, n_envs: int = 1,
                 normalize: bool | dict = False, policy_kwargs: dict | None = None,
                 seed: int | None = None, verbose: int = 0, **env_options: Any) -> None:
        super().__init__(env, learning_rate, buffer_size, learning_starts, batch_size, tau, gamma,
                         train_freq, gradient_steps, n_envs, normalize, policy_kwargs, seed,
                         verbose, n_steps=n_steps, replay_buffer_class=replay_buffer_class,
                         replay_buffer_kwargs=replay_buffer_kwargs, **env_options)
        self.policy_delay = int(policy_delay)
        self.target_policy_noise = float(target_policy_noise)
        self.target_noise_clip = float(target_noise_clip)
        kw = self.net_kwargs(net_arch=[400, 300], activation_fn="relu", n_critics=n_critics,
                             **EXTRACTOR_DEFAULTS)
        n_critics = int(kw["n_critics"])  # SB3 takes it in policy_kwargs
        pi_arch, qf_arch = get_actor_critic_arch(kw["net_arch"])
        act_fn = kw["activation_fn"]
        actor_fx, critic_fx, in_dim = self.make_extractors(kw)
        self.actor = attach(TD3Actor(in_dim, self.act_dim, pi_arch, act_fn, actor_fx),
                            self.observation_space, self.action_space)
        self.critic = ContinuousCritic(in_dim, self.act_dim, qf_arch, n_critics, act_fn,
                                       critic_fx, bool(kw["share_features_extractor"]))
        self.actor_target, self.critic_target = target_networks(self.actor, self.critic)
        self.actor_optimizer = self.make_optimizer(self.actor.parameters())
        self.critic_optimizer = self.make_optimizer(self.critic.own_parameters())
        # (online, target) parameter lists, cached: the targets are averaged after every update
        self._pairs = ([*self.critic.parameters(), *self.actor.parameters()],
                       [*self.critic_target.parameters(), *self.actor_target.parameters()])
        self.action_noise = make_action_noise(noise_type, noise_std, self.act_dim, self.n_envs)

    # ---- acting -------------------------------------------------------------------------------
    def _act(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        return self.actor.numpy(obs)

    def _explore(self, obs: np.ndarray) -> np.ndarray:
        act = self.actor.numpy(obs)
        if self.action_noise is not None:
            act = np.clip(act + self.action_noise(self.rng, len(obs)), -1.0, 1.0)
        return act.astype(np.float32)

    # ---- learning -------------------------------------------------------------------------------
    def next_q(self, b: dict[str, Any]) -> Any:
        """``min_i Q'_i(s', a')``, ``a' = clip(mu'(s') + noise, -1, 1)`` the smoothed target action
        (``b["noise"]``: the clipped smoothing noise, absent without smoothing)."""
        next_a = self.actor_target(b["next_obs"])
        if "noise" in b:
            next_a = ops.clip(next_a + b["noise"], -1.0, 1.0)
        return min_of(self.critic_target(b["next_obs"], next_a))

    def td_target(self, b: ReplayBatch) -> np.ndarray:
        """The critics' regression target ``r + gamma (1 - terminated) next_q`` of a minibatch."""
        return self.regression_target(self._with_noise(self.batch_dict(b)))

    def _with_noise(self, b: dict[str, Any]) -> dict[str, Any]:
        if self.target_policy_noise > 0:
            c = self.target_noise_clip
            eps = self.rng.normal(0.0, self.target_policy_noise, b["actions"].shape)
            b["noise"] = np.clip(eps, -c, c).astype(np.float32)
        return b

    def critic_loss(self, b: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``sum_i mean (Q_i(s, a) - y)^2``, ``y = r + gamma (1 - terminated) next_q``."""
        target = td_target_of(b, self.next_q(b))
        qs = self.critic(b["obs"], b["actions"])
        loss = sum(ops.square(q - target).mean() for q in qs)
        return loss, {"critic_loss": loss}

    def actor_loss(self, b: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``-Q_1(s, mu(s))``: dQ/da flows to the actor (only its parameters are updated)."""
        loss = -self.critic.q1_forward(b["obs"], self.actor(b["obs"])).mean()
        return loss, {"actor_loss": loss}

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        self._set_lr(self.actor_optimizer, self.critic_optimizer)
        actor_losses, critic_losses = [], []
        for _ in range(gradient_steps):
            self._n_updates += 1
            b = self._with_noise(self.batch_dict(self.sample(batch_size)))
            st = self.gradient_step("critic", self.critic_loss, b, self.critic_optimizer)
            critic_losses.append(float(st["critic_loss"]))
            if self._n_updates % self.policy_delay == 0:
                st = self.gradient_step("actor", self.actor_loss, {"obs": b["obs"]},
                                        self.actor_optimizer)
                actor_losses.append(float(st["actor_loss"]))
                optim.polyak_update(self._pairs[0], self._pairs[1], self.tau)
                self._sync_running_stats((self.actor, self.actor_target),
                                         (self.critic, self.critic_target))
        lg = self.logger
        lg.record("train/n_updates", self._n_updates)
        if actor_losses:
            lg.record("train/actor_loss", float(np.mean(actor_losses)))
        lg.record("train/critic_loss", float(np.mean(critic_losses)))

    def _modules(self) -> dict[str, Any]:
        return {"actor": self.actor, "critic": self.critic, "actor_target": self.actor_target,
                "critic_target": self.critic_target}

    def _upgrade_state(self, state: dict[str, Any]) -> dict[str, Any]:
        return super()._upgrade_state(upgrade_critic_keys(state))

    def _optimizers(self) -> dict[str, Any]:
        return {"actor": self.actor_optimizer, "critic": self.critic_optimizer}

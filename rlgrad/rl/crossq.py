"""CrossQ (Bhatt et al., 2024), as sb3-contrib's ``CrossQ``: SAC without target networks, whose
actor and critics normalise their inputs and hidden layers with Batch Renormalization.

The critics see ``(s, a)`` and ``(s', a')`` in one batch (train mode), so both halves are
normalised with the same statistics; ``y = r + gamma (1 - terminated) (min_i Q_i(s', a') -
alpha log pi(a'|s'))`` from that same forward, with the gradient stopped. The actor ascends the
critics in eval mode (running statistics), every ``policy_delay``-th step; Adam's betas are
(0.5, 0.999). sb3-contrib's defaults: learning rate 1e-3, critics of [1024, 1024], actor
[256, 256], momentum 0.01 and eps 0.001 of the normalisation, warm-up of 100k steps. As
sb3-contrib's, the actor and the critics normalise with Batch Renormalization
(``rlgrad.rl.batch_renorm.BatchRenorm1d``: batch normalisation during its warm-up, then the
running statistics with clipped r/d corrections): the actor's layers are in training
mode (moving their statistics) only in the actor's update; ``a'`` of the critics' target and
acting read its running statistics. The module structure and state-dict keys are sb3-contrib's
(``actor.latent_pi.0.scale``, ``critic.qf0.0.ra_mean``...). Checkpoints of the older critics
(``BatchNorm1d``'s keys) load into the new ones; an older checkpoint's actor, which had no
normalisation, does not (a one-line error).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from rlgrad import nn, ops, optim
from rlgrad.rl.batch_renorm import BatchRenorm1d
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.hyperparams import apply_defaults
from rlgrad.rl.layers import _act_cls
from rlgrad.rl.off_policy import min_of, td_target_of
from rlgrad.rl.policies import FeaturesNet, _cat
from rlgrad.rl.sac import SAC

#: sb3-contrib's CrossQ policy_kwargs for the critics' normalisation, and their defaults
_NORM_DEFAULTS: dict[str, Any] = {"batch_norm": True, "batch_norm_momentum": 0.01,
                                  "batch_norm_eps": 0.001, "renorm_warmup_steps": 100_000}


def renorm_tower(in_dim: int, net_arch: list[int], activation_fn: str | type,
                 norm: dict[str, Any] | None) -> list[nn.Module]:
    """sb3-contrib's ``create_mlp(..., pre_linear_modules=[BatchRenorm1d])`` without its output
    layer: per hidden size, BatchRenorm1d, Linear and the activation (no BatchRenorm1d where
    ``norm`` is None: sb3-contrib's ``batch_norm=False``)."""
    act, layers, last = _act_cls(activation_fn), [], in_dim
    for h in net_arch:
        layers += [*_renorm(last, norm), nn.Linear(last, h), act()]
        last = h
    return layers


def _renorm(features: int, norm: dict[str, Any] | None) -> list[nn.Module]:
    return [] if norm is None else [BatchRenorm1d(features, **norm)]


def set_bn_training_mode(module: nn.Module, mode: bool) -> None:
    """sb3-contrib's ``set_bn_training_mode``: only the BatchRenorm1d layers' mode."""
    for m in module.modules():
        if isinstance(m, BatchRenorm1d):
            m.train(mode)


class BatchNormCritic(FeaturesNet):
    """sb3-contrib's ``CrossQCritic``: ``n_critics`` Q(s, a) networks ``qf0``, ``qf1``, ...,
    BatchRenorm1d before every Linear unless ``batch_norm`` is False (``forward`` returns a list
    of (batch,))."""

    def __init__(self, in_dim: int, net_arch: list[int], n_critics: int, activation_fn: Any,
                 momentum: float = 0.01, eps: float = 0.001,
                 warmup_steps: int = 100_000, batch_norm: bool = True) -> None:
        super().__init__()
        self._set_extractor(None)  # vector observations only
        self.n_critics = int(n_critics)
        norm: dict[str, Any] | None = {"momentum": momentum, "eps": eps,
                                       "warmup_steps": warmup_steps} if batch_norm else None
        last = net_arch[-1] if net_arch else in_dim
        for i in range(self.n_critics):
            layers = renorm_tower(in_dim, net_arch, activation_fn, norm)
            setattr(self, f"qf{i}", nn.Sequential(*layers, *_renorm(last, norm),
                                                  nn.Linear(last, 1)))

    @property
    def q_networks(self) -> list[nn.Module]:
        return [getattr(self, f"qf{i}") for i in range(self.n_critics)]

    def forward(self, obs: Any, actions: Any) -> list[Any]:
        x = _cat(obs, actions)
        return [q(x).reshape(-1) for q in self.q_networks]


class CrossQ(SAC):
    """sb3-contrib's ``CrossQ`` over rlgrad's ``SAC``."""

    default_hyperparams: ClassVar[dict[str, Any]] = {"learning_rate": 1e-3}
    cnn_policy = False  # batch-normalised critics on vector observations only
    dict_images = False

    def __init__(self, env: EnvLike, policy_delay: int = 3, **kwargs: Any) -> None:
        self.policy_delay = int(policy_delay)
        kwargs = apply_defaults(CrossQ, kwargs)
        pk = dict(kwargs.pop("policy_kwargs", None) or {})
        # sb3-contrib's normalisation keys: read here, not by SAC's networks
        norm = {k: pk.pop(k, v) for k, v in _NORM_DEFAULTS.items()}
        self.batch_norm = bool(norm["batch_norm"])
        self.batch_norm_momentum = float(norm["batch_norm_momentum"])
        self.batch_norm_eps = float(norm["batch_norm_eps"])
        self.renorm_warmup_steps = int(norm["renorm_warmup_steps"])
        super().__init__(env, policy_kwargs=pk, **kwargs)
        self._renorm_actor()
        self.policy_kwargs.update(norm)  # saved with the model, read again at load
        self.compile_updates = False  # BatchNorm's running statistics change in the forward
        lr = self.lr_schedule(1.0)
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=lr, betas=(0.5, 0.999))
        self.critic_optimizer = optim.Adam(self.critic.parameters(), lr=lr, betas=(0.5, 0.999))
        if self.auto_ent:
            self.ent_coef_optimizer = optim.Adam([self._log_alpha()], lr=lr, betas=(0.5, 0.999))

    def _norm(self) -> dict[str, Any] | None:
        """BatchRenorm1d's arguments; None without normalisation (``batch_norm=False``)."""
        if not self.batch_norm:
            return None
        return {"momentum": self.batch_norm_momentum, "eps": self.batch_norm_eps,
                "warmup_steps": self.renorm_warmup_steps}

    def _renorm_actor(self) -> None:
        """sb3-contrib's CrossQ ``Actor``: ``latent_pi`` with BatchRenorm1d before every Linear
        and after the last hidden layer; its layers in evaluation mode but in the actor's
        update (acting and ``a'`` read the running statistics)."""
        arch = [m.out_features for m in self.actor.latent_pi.modules() if isinstance(m, nn.Linear)]
        act_fn = self.policy_kwargs.get("activation_fn", "relu")
        layers = renorm_tower(self.obs_dim, arch, act_fn, self._norm())
        if arch:
            layers += _renorm(arch[-1], self._norm())
        self.actor.latent_pi = nn.Sequential(*layers)
        set_bn_training_mode(self.actor, False)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        set_bn_training_mode(self.actor, False)  # (moved in the actor's update only)
        super().train(gradient_steps, batch_size)

    def actor_loss(self, b: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """SAC's, with the actor's BatchRenorm1d layers in training mode (sb3-contrib's)."""
        set_bn_training_mode(self.actor, True)
        try:
            return super().actor_loss(b)
        finally:
            set_bn_training_mode(self.actor, False)

    def _make_critic(self, arch: list[int], n_critics: int, activation_fn: Any,
                     extractor: nn.Module | None = None, shared: bool = False) -> Any:
        if extractor is not None:
            raise ValueError("CrossQ: its batch-normalised critics read vector observations; "
                             "a features extractor (CNN, CombinedExtractor) is not supported")
        arch = arch if "net_arch" in self.policy_kwargs else [1024, 1024]
        norm = self._norm()
        return BatchNormCritic(self.obs_dim + self.act_dim, arch, n_critics, activation_fn,
                               batch_norm=norm is not None, **(norm or {}))

    def _upgrade_state(self, state: dict[str, Any]) -> dict[str, Any]:
        actor = state.get("modules", {}).get("actor", {})
        if self.batch_norm and "latent_pi.0.weight" in actor:  # a Linear first: no BatchRenorm1d in the actor
            raise ValueError("CrossQ: this checkpoint's actor has no Batch Renormalization "
                             "layers (written by an older rlgrad); its actor cannot be loaded "
                             "into sb3-contrib's CrossQ actor: train it again")
        return super()._upgrade_state(state)

    def _actor_step_due(self) -> bool:
        return (self._n_updates + 1) % self.policy_delay == 0

    def _update_target(self) -> None:
        pass  # no target networks

    def _modules(self) -> dict[str, Any]:
        """The actor and the critic (sb3-contrib's policy holds no target network: SAC's copy
        is neither saved nor listed; older checkpoints' copy is ignored at load)."""
        return {k: m for k, m in super()._modules().items() if k != "critic_target"}

    def _q_pi(self, obs: Any, actions: Any) -> Any:
        self.critic.eval()  # the running statistics; the update does not move them
        try:
            return min_of(self.critic(obs, actions))
        finally:
            self.critic.train()

    def next_q(self, b: dict[str, Any]) -> Any:
        """``min_i Q_i(s', a') - alpha log pi(a'|s')`` from the critics in eval mode (for
        inspection: the update takes it from its joint forward)."""
        next_a, next_logp = self._rsample(b["next_obs"], b["next_noise"])
        return self._q_pi(b["next_obs"], next_a) - b["ent_coef"] * next_logp

    def critic_loss(self, b: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``0.5 sum_i mean (Q_i(s, a) - y)^2`` with ``Q_i(s', a')`` of ``y`` from the same
        batch-normalised forward as ``Q_i(s, a)``."""
        n = b["obs"].shape[0]
        next_a, next_logp = self._rsample(b["next_obs"], b["next_noise"])
        obs = np.concatenate([b["obs"], b["next_obs"]])
        actions = ops.concatenate([b["actions"], ops.stop_gradient(next_a)], axis=0)
        qs = self.critic(obs, actions)
        nxt = min_of([ops.stop_gradient(q[n:]) for q in qs])
        target = ops.stop_gradient(td_target_of(b, nxt - b["ent_coef"] * next_logp))
        loss = 0.5 * sum(ops.square(q[:n] - target).mean() for q in qs)
        return loss, {"critic_loss": loss}

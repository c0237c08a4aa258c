"""CrossQ (Bhatt et al., 2024), as sb3-contrib's ``CrossQ``: SAC without target networks, whose
critics normalise their inputs and hidden layers with batch normalisation.

The critics see ``(s, a)`` and ``(s', a')`` in one batch (train mode), so both halves are
normalised with the same statistics; ``y = r + gamma (1 - terminated) (min_i Q_i(s', a') -
alpha log pi(a'|s'))`` from that same forward, with the gradient stopped. The actor ascends the
critics in eval mode (running statistics), every ``policy_delay``-th step; Adam's betas are
(0.5, 0.999). sb3-contrib's defaults: learning rate 1e-3, critics of [1024, 1024], actor
[256, 256], momentum 0.01 and eps 0.001 of the normalisation. Differences: sb3-contrib's
critics use Batch Renormalization (which is batch normalisation during its first 100k
steps); here ``rlgrad.nn.BatchNorm1d``, and the actor has no normalisation layers.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar

import numpy as np

from rlgrad import nn, ops, optim
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.hyperparams import apply_defaults
from rlgrad.rl.layers import _act_cls
from rlgrad.rl.off_policy import min_of, td_target_of
from rlgrad.rl.policies import FeaturesNet, _cat
from rlgrad.rl.sac import SAC

#: sb3-contrib's CrossQ policy_kwargs for the critics' normalisation, and their defaults
_NORM_DEFAULTS: dict[str, Any] = {"batch_norm": True, "batch_norm_momentum": 0.01,
                                  "batch_norm_eps": 0.001, "renorm_warmup_steps": 100_000}


class BatchNormCritic(FeaturesNet):
    """``n_critics`` Q(s, a) networks: BatchNorm on the input, then Linear, activation and
    BatchNorm per hidden layer, and a linear output (``forward`` returns a list of (batch,))."""

    def __init__(self, in_dim: int, net_arch: list[int], n_critics: int, activation_fn: Any,
                 momentum: float = 0.01, eps: float = 0.001) -> None:
        super().__init__()
        self._set_extractor(None)  # vector observations only
        act = _act_cls(activation_fn)
        self.n_critics = int(n_critics)
        for i in range(self.n_critics):
            layers: list[nn.Module] = [nn.BatchNorm1d(in_dim, eps=eps, momentum=momentum)]
            last = in_dim
            for h in net_arch:
                layers += [nn.Linear(last, h), act(), nn.BatchNorm1d(h, eps=eps, momentum=momentum)]
                last = h
            # sb3-contrib's keys: critic.qf0.0.weight, ... (SAC's critics' names)
            setattr(self, f"qf{i}", nn.Sequential(*layers, nn.Linear(last, 1)))

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
        if not norm["batch_norm"]:
            raise ValueError("CrossQ: batch_norm=False is not supported: rlgrad's CrossQ critics "
                             "are batch-normalised (drop the key)")
        self.batch_norm_momentum = float(norm["batch_norm_momentum"])
        self.batch_norm_eps = float(norm["batch_norm_eps"])
        self.renorm_warmup_steps = int(norm["renorm_warmup_steps"])
        self._renorm_warned = False
        super().__init__(env, policy_kwargs=pk, **kwargs)
        self.policy_kwargs.update(norm)  # saved with the model, read again at load
        self.compile_updates = False  # BatchNorm's running statistics change in the forward
        lr = self.lr_schedule(1.0)
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=lr, betas=(0.5, 0.999))
        self.critic_optimizer = optim.Adam(self.critic.parameters(), lr=lr, betas=(0.5, 0.999))
        if self.auto_ent:
            self.ent_coef_optimizer = optim.Adam([self._log_alpha()], lr=lr, betas=(0.5, 0.999))

    def _make_critic(self, arch: list[int], n_critics: int, activation_fn: Any,
                     extractor: nn.Module | None = None, shared: bool = False) -> Any:
        if extractor is not None:
            raise ValueError("CrossQ: its batch-normalised critics read vector observations; "
                             "a features extractor (CNN, CombinedExtractor) is not supported")
        arch = arch if "net_arch" in self.policy_kwargs else [1024, 1024]
        return BatchNormCritic(self.obs_dim + self.act_dim, arch, n_critics, activation_fn,
                               momentum=self.batch_norm_momentum, eps=self.batch_norm_eps)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        super().train(gradient_steps, batch_size)
        if self._n_updates > self.renorm_warmup_steps and not self._renorm_warned:
            self._renorm_warned = True
            warnings.warn(f"CrossQ: {self._n_updates} updates, past renorm_warmup_steps="
                          f"{self.renorm_warmup_steps}: sb3-contrib's Batch Renormalization now "
                          "normalises with its running statistics, rlgrad's critics keep batch "
                          "normalisation (the warm-up's behaviour)", stacklevel=2)

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

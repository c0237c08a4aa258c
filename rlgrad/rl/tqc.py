"""Truncated Quantile Critics (Kuznetsov et al., 2020), as sb3-contrib's ``TQC``.

SAC whose ``n_critics`` critics each give ``n_quantiles`` quantiles of the return (levels
``tau_i = (2i + 1) / (2 n_quantiles)``, QR-DQN's). The target pools the target critics'
quantiles at ``(s', a')``, sorts them and drops the ``top_quantiles_to_drop_per_net * n_critics``
largest (the overestimation control), then ``y = r + gamma (1 - terminated) (z - alpha log
pi(a'|s'))``; each critic's quantiles regress on all of ``y`` with QR-DQN's quantile Huber loss,
averaged over quantiles (sb3-contrib's ``sum_over_quantiles=False``). The actor ascends the mean
of all quantiles. Everything else (replay, the actor, the temperature, the compiled steps) is
SAC's; ``policy_kwargs`` also takes ``n_quantiles`` (25) and ``n_critics`` (2), as sb3-contrib's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import nn, ops
from rlgrad import numpy as rnp
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.policies import FeaturesNet, _cat, mlp
from rlgrad.rl.qrdqn import quantile_huber_loss, quantile_midpoints
from rlgrad.rl.sac import SAC


class QuantileCritics(FeaturesNet):
    """``n_critics`` networks on ``[s, a]``, each giving ``n_quantiles`` values: forward returns
    them side by side, (batch, n_critics * n_quantiles), critic ``k`` in columns
    ``k * n_quantiles ...`` (``s``: ``features_extractor``'s features when there is one). The
    networks are ``qf0``, ``qf1``, ... as sb3-contrib's (keys ``qf0.0.weight``); checkpoints
    with the older ``q_networks.<k>.`` keys are renamed on load (SAC's ``upgrade_critic_keys``)."""

    def __init__(self, obs_dim: int, act_dim: int, net_arch: list[int], n_critics: int,
                 n_quantiles: int, activation_fn: Any = "relu",
                 features_extractor: nn.Module | None = None, shared: bool = False) -> None:
        super().__init__()
        self._set_extractor(features_extractor, shared)
        self.n_critics, self.n_quantiles = int(n_critics), int(n_quantiles)
        for i in range(self.n_critics):
            setattr(self, f"qf{i}", mlp([obs_dim + act_dim, *net_arch, n_quantiles], activation_fn))

    @property
    def q_networks(self) -> list[nn.Module]:
        return [getattr(self, f"qf{i}") for i in range(self.n_critics)]

    def forward(self, obs: Any, actions: Any) -> Any:
        x = _cat(self.extract_features(obs), actions)
        return ops.concatenate([q(x) for q in self.q_networks], axis=1)


class TQC(SAC):
    """sb3-contrib's ``TQC`` (its defaults) over rlgrad's ``SAC``."""

    def __init__(self, env: EnvLike, top_quantiles_to_drop_per_net: int = 2,
                 **kwargs: Any) -> None:
        pk = dict(kwargs.pop("policy_kwargs", None) or {})
        self.n_quantiles = int(pk.pop("n_quantiles", 25))
        if "n_critics" in pk:  # sb3-contrib passes it in policy_kwargs
            kwargs["n_critics"] = pk.pop("n_critics")
        self.top_quantiles_to_drop_per_net = int(top_quantiles_to_drop_per_net)
        super().__init__(env, policy_kwargs=pk, **kwargs)
        n_critics = self.critic.n_critics
        self.n_target_quantiles = (self.n_quantiles - self.top_quantiles_to_drop_per_net) * n_critics
        if self.n_target_quantiles < 1:
            raise ValueError(f"TQC: top_quantiles_to_drop_per_net={top_quantiles_to_drop_per_net} "
                             f"drops every one of the {self.n_quantiles} quantiles per critic; "
                             f"drop fewer than n_quantiles")
        # the quantile levels of every critic's columns, side by side
        self.taus = np.tile(quantile_midpoints(self.n_quantiles), n_critics)

    def _make_critic(self, arch: list[int], n_critics: int, activation_fn: Any,
                     extractor: nn.Module | None = None, shared: bool = False) -> Any:
        return QuantileCritics(self.features_width(extractor), self.act_dim, arch, n_critics,
                               self.n_quantiles, activation_fn, extractor, shared)

    def _q_pi(self, obs: Any, actions: Any) -> Any:
        return ops.mean(self.critic(obs, actions), axis=1)

    def next_q(self, b: dict[str, Any]) -> Any:
        """The pooled target quantiles at ``(s', a')``, sorted, the largest dropped, minus
        ``alpha log pi(a'|s')``: (batch, n_target_quantiles)."""
        next_a, next_logp = self._rsample(b["next_obs"], b["next_noise"])
        z = rnp.sort(self.critic_target(b["next_obs"], next_a), axis=1)
        z = z[:, :self.n_target_quantiles]
        return z - b["ent_coef"] * ops.reshape(next_logp, (-1, 1))

    def critic_loss(self, b: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Quantile Huber loss of every critic's quantiles against the truncated target
        ``y = r + gamma (1 - terminated) next_q``, averaged over the quantiles."""
        target = (ops.reshape(b["rewards"], (-1, 1)) + b["gamma"]
                  * ops.reshape(b["not_terminated"], (-1, 1)) * self.next_q(b))
        current = self.critic(b["obs"], b["actions"])
        loss = quantile_huber_loss(current, ops.stop_gradient(target), self.taus) / len(self.taus)
        return loss, {"critic_loss": loss}

    def regression_target(self, b: dict[str, Any]) -> np.ndarray:
        """The critics' target rows of a ``batch_dict`` (batch, n_target_quantiles)."""
        import rlgrad

        with rlgrad.no_grad():
            nq = self.next_q(b)
            r = np.asarray(b["rewards"]).reshape(-1, 1)
            return (r + b["gamma"] * np.asarray(b["not_terminated"]).reshape(-1, 1)
                    * nq._value)

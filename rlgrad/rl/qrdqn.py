"""Quantile Regression DQN (Dabney et al., 2018), as SB3-contrib's ``QRDQN``.

The network gives ``n_quantiles`` values per action: the quantiles of the return at the
midpoints ``tau_i = (2i + 1) / (2 n_quantiles)``. Acting and the target's greedy action use their
mean (the Q-value); the target is the whole row of quantiles of that action at s',
``r + gamma (1 - terminated) theta'_j(s', a*)``, and the loss is the quantile Huber loss

    sum_i mean_{b, j} |tau_i - 1{u_bij < 0}| huber_kappa(u_bij),   u_bij = y_bj - theta_i(s_b, a_b)

(SB3-contrib's ``quantile_huber_loss(..., sum_over_quantiles=True)``; ``kappa = clip_delta``, 1 as
there). It is DQN with its hooks overridden (``make_q_net``, ``q_values``, ``bootstrap_target``,
``loss``): replay, exploration, target sync, the compiled gradient step and
checkpoints are DQN's.
``policy_kwargs`` takes ``n_quantiles`` (200, SB3-contrib's default), ``net_arch`` and
``activation_fn``; the defaults that differ from DQN's are SB3-contrib's (``default_hyperparams``),
and Adam's ``eps`` is ``0.01 / batch_size`` as in the paper.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from rlgrad import nn, ops
from rlgrad.nn import functional as F
from rlgrad.rl.dqn import DQN, bootstrap, gather_actions
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.hyperparams import apply_defaults
from rlgrad.rl.network_policy import attach
from rlgrad.rl.policies import mlp_numpy
from rlgrad.typing import Array


def quantile_midpoints(n: int) -> np.ndarray:
    """``tau_i = (2i + 1) / (2n)``, i = 0..n-1: the quantile levels the network estimates."""
    return ((np.arange(n) + 0.5) / n).astype(np.float32)


def quantile_huber_loss(current: Any, target: Any, taus: np.ndarray, kappa: float = 1.0) -> Any:
    """Quantile Huber loss of ``current`` (batch, N) quantile estimates at levels ``taus`` (N,)
    against ``target`` (batch, N') samples: summed over the N estimates, averaged over the batch
    and the N' targets. The weights ``|tau - 1{u < 0}|`` carry no gradient."""
    b, n = current.shape
    u = ops.reshape(target, (b, 1, target.shape[1])) - ops.reshape(current, (b, n, 1))
    tau = taus.reshape(n, 1)
    weight = ops.where(u < 0, 1.0 - tau, tau)
    pairwise = weight * F.huber_loss(u, 0.0, reduction="none", delta=kappa)
    return ops.mean(ops.sum(pairwise, axis=1))


class QRDQN(DQN):
    #: SB3-contrib's QRDQN defaults where they differ from DQN's
    default_hyperparams: ClassVar[dict[str, Any]] = {
        "learning_rate": 5e-5, "exploration_fraction": 0.005, "exploration_final_eps": 0.01,
        "max_grad_norm": None}
    #: sb3-contrib's name of the network in the policy's keys (``quantile_net.quantile_net.0.weight``)
    sb3_q_net_name: ClassVar[str] = "quantile_net"

    def __init__(self, env: EnvLike, **kwargs: Any) -> None:
        super().__init__(env, **apply_defaults(type(self), kwargs))
        self.taus = quantile_midpoints(self.n_quantiles)
        self.optimizer = self.make_optimizer(self._params, eps=0.01 / self.batch_size)

    def make_q_net(self) -> nn.Module:
        """``obs -> (batch, n_actions * n_quantiles)``: per action, its quantiles."""
        self.n_quantiles = int(self.policy_kwargs.get("n_quantiles", 200))
        return self.q_network(self.n_actions * self.n_quantiles, n_quantiles=200)

    def network_policy(self, net: nn.Module) -> nn.Module:
        """sb3-contrib's ``QuantileNetwork.predict``: the greedy action of the quantiles' mean."""
        return attach(net, self.observation_space, self.action_space, self.n_quantiles)

    @property
    def quantile_net(self) -> nn.Module:
        """sb3-contrib's name of the online network (``q_net``)."""
        return self.q_net

    @property
    def quantile_net_target(self) -> nn.Module:
        """sb3-contrib's name of the target network (``q_net_target``)."""
        return self.q_net_target

    def sb3_rows(self, net: nn.Module, key: str) -> np.ndarray | None:
        """sb3-contrib's output rows of the last layer (quantile-major: row ``i * n_actions +
        a``), as indices of rlgrad's (action-major: ``a * n_quantiles + i``); None for the
        other entries. The policy's state dict is in sb3-contrib's order."""
        last = len(list(net.children())) - 1  # (a Sequential: its last Linear)
        if not key.startswith(f"{last}."):
            return None
        s = np.arange(self.n_actions * self.n_quantiles)
        return (s % self.n_actions) * self.n_quantiles + s // self.n_actions

    def quantiles(self, obs: np.ndarray, net: nn.Module | None = None) -> np.ndarray:
        """(batch, n_actions, n_quantiles) in NumPy (the online network by default)."""
        out = mlp_numpy(self.q_net if net is None else net, obs)
        return out.reshape(len(obs), self.n_actions, self.n_quantiles)

    def q_values(self, obs: np.ndarray, net: nn.Module | None = None) -> np.ndarray:
        return self.quantiles(obs, net).mean(axis=2)

    def q_of(self, out: Array) -> Array:
        return ops.mean(ops.reshape(out, (out.shape[0], self.n_actions, self.n_quantiles)), axis=2)

    def bootstrap_target(self, b: dict[str, Any], target_out: Any,
                         online_out: Callable[[], Any]) -> Any:
        """``r + gamma (1 - terminated) theta'_j(s', a*)``: the target network's quantiles of the
        greedy action a* at s' (by their mean; with ``double_q`` the online network's mean picks
        it), shape (batch, n_quantiles)."""
        shape = (target_out.shape[0], self.n_actions, self.n_quantiles)
        theta = ops.reshape(target_out, shape)
        q = ops.mean(ops.reshape(online_out(), shape) if self.double_q else theta, axis=2)
        return bootstrap(b, gather_actions(theta, ops.argmax(q, axis=1)))

    def loss(self, batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Quantile Huber loss of the taken action's quantiles against the target rows."""
        return self.loss_of(self.q_net(batch["obs"]), batch), {}

    def loss_of(self, out: Array, batch: dict[str, Any]) -> Array:
        theta = ops.reshape(out, (out.shape[0], self.n_actions, self.n_quantiles))
        current = gather_actions(theta, batch["actions"])
        return quantile_huber_loss(current, batch["target"], self.taus, self.clip_delta)

"""Categorical DQN, C51 (Bellemare, Dabney & Munos, 2017), as CleanRL's ``c51.py``.

The network gives, per action, the logits of a distribution p over ``n_atoms`` returns
``z_i`` evenly spaced on ``[v_min, v_max]``; ``Q(s, a) = sum_i p_i(s, a) z_i`` (acting, and the
greedy action a* at s'). The target of a transition is the target network's distribution of a*
at s' with its atoms moved to ``r + gamma (1 - terminated) z_j``, clipped to the support and
projected back onto the atoms (``categorical_projection``); the loss is the cross-entropy
``-sum_i m_i log p_i(s, a)``, averaged over the batch. It is DQN with its hooks overridden
(``make_q_net``, ``q_values``, ``bootstrap_target``, ``loss``). ``policy_kwargs`` takes
``n_atoms``, ``v_min``, ``v_max`` (51, -10, 10: the paper's), ``net_arch`` and
``activation_fn``; Adam's ``eps`` is ``0.01 / batch_size`` as in the paper and CleanRL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad import nn, ops
from rlgrad.rl.dqn import DQN, bootstrap, gather_actions
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.policies import mlp_numpy
from rlgrad.typing import Array

#: The support's defaults (the paper's), read from ``policy_kwargs``.
SUPPORT: dict[str, Any] = {"n_atoms": 51, "v_min": -10.0, "v_max": 10.0}


def categorical_projection(tz: Any, p: Any, atoms: np.ndarray) -> Any:
    """``m_i = sum_j p_j max(0, 1 - |clip(tz_j) - z_i| / dz)``: each mass ``p_j`` (batch, k) at
    ``tz_j`` (batch, k), clipped to ``[z_0, z_k-1]``, split between the two atoms around it in
    proportion to closeness (the paper's Algorithm 1; CleanRL's floor/ceil scatter written as a
    sum, so it traces). Engine operations: arrays or Tensors."""
    n, k = p.shape
    dz = float(atoms[1] - atoms[0])
    tz = ops.clip(tz, float(atoms[0]), float(atoms[-1]))
    dist = ops.abs(ops.reshape(tz, (n, k, 1)) - atoms.reshape(1, 1, k))
    return ops.sum(ops.reshape(p, (n, k, 1)) * ops.maximum(1.0 - dist / dz, 0.0), axis=1)


def categorical_loss(logits: Any, actions: Any, target: Any) -> Any:
    """``mean_b -sum_i target_bi log softmax(logits[b, actions_b])_i``; logits (batch, A, k)."""
    return -ops.mean(ops.sum(target * gather_actions(ops.log_softmax(logits, axis=2), actions),
                             axis=1))


class C51(DQN):
    def __init__(self, env: EnvLike, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        self.optimizer = self.make_optimizer(self._params, eps=0.01 / self.batch_size)

    def make_q_net(self) -> nn.Module:
        """``obs -> (batch, n_actions * n_atoms)``: per action, the logits over the atoms."""
        kw = {**SUPPORT, **self.policy_kwargs}
        n, lo, hi = kw["n_atoms"], kw["v_min"], kw["v_max"]
        if not (isinstance(n, int) and n >= 2 and float(lo) < float(hi)):
            raise ValueError(f"C51: policy_kwargs n_atoms={n!r}, v_min={lo!r}, v_max={hi!r}: "
                             "n_atoms must be an integer >= 2 and v_min < v_max")
        self.n_atoms = n
        self.atoms = np.linspace(float(lo), float(hi), n, dtype=np.float32)
        return self.q_network(self.n_actions * n, **SUPPORT)

    def probs(self, out: Any) -> Any:
        """The distributions of a network output, (batch, n_actions, n_atoms)."""
        return ops.softmax(ops.reshape(out, (out.shape[0], self.n_actions, self.n_atoms)), axis=2)

    def network_policy(self, net: nn.Module) -> nn.Module:
        return net  # (its distribution's head: model.predict acts on its expectations)

    def q_values(self, obs: np.ndarray, net: nn.Module | None = None) -> np.ndarray:
        return np.asarray(self.q_of(mlp_numpy(self.q_net if net is None else net, obs)))

    def q_of(self, out: Array) -> Array:
        return ops.sum(self.probs(out) * self.atoms, axis=2)

    def bootstrap_target(self, b: dict[str, Any], target_out: Any,
                         online_out: Callable[[], Any]) -> Any:
        """The projected distribution m (batch, n_atoms) of ``r + gamma (1 - terminated) z``
        under the target network's distribution of a* (by its mean; with ``double_q`` the online
        network's mean picks it)."""
        p = self.probs(target_out)
        q = ops.sum((self.probs(online_out()) if self.double_q else p) * self.atoms, axis=2)
        p_next = gather_actions(p, ops.argmax(q, axis=1))
        return categorical_projection(bootstrap(b, self.atoms.reshape(1, -1)), p_next, self.atoms)

    def loss(self, batch: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Cross-entropy of the taken action's distribution against the target's."""
        return self.loss_of(self.q_net(batch["obs"]), batch), {}

    def loss_of(self, out: Array, batch: dict[str, Any]) -> Array:
        logits = ops.reshape(out, (out.shape[0], self.n_actions, self.n_atoms))
        return categorical_loss(logits, batch["actions"], batch["target"])

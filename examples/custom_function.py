"""DQN 3.0's "backward from the output layer with a given gradient", as a custom gradient.

DeepMind's DQN 3.0 computes the TD error outside autodiff, clips it to [-1, 1], writes it at the
actions taken (`targets[i][a[i]] = delta[i]`) and calls `network:backward(s, targets)`.
examples/dqn_backward_from_output.py does that with `q.backward(-targets)`. Here the same step is
one differentiable function whose gradient is that given one, written twice:

* PyTorch's way: `rlgrad.autograd.Function` with `forward`/`backward` and `ctx.save_for_backward`;
* JAX's way: `rlgrad.custom_vjp` with `defvjp(fwd, bwd)` and the clipped error as residual.

Its value is the (unclipped) squared TD error DQN logs; its gradient w.r.t. Q is the clipped one.
All three give the parameters the same gradient, asserted below.

Run: python examples/custom_function.py
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import numpy as np

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import nn
from rlgrad.autograd import Function

nn.init.manual_seed(0)
B, S, A, GAMMA, CLIP = 32, 4, 3, 0.99, 1.0
rng = np.random.default_rng(0)
network = nn.MLP([S, 64, A], activation=nn.ReLU)
target_network = copy.deepcopy(network)
for p in target_network.parameters():
    p.data += 0.1 * rng.standard_normal(p.shape).astype(p.dtype)
s = rng.standard_normal((B, S)).astype(np.float32)
s2 = rng.standard_normal((B, S)).astype(np.float32)
a = rng.integers(0, A, B)
r = 3.0 * rng.standard_normal(B).astype(np.float32)  # large rewards: some errors get clipped
term = (rng.random(B) < 0.2).astype(np.float32)
with rlgrad.no_grad():
    y = (r + GAMMA * (1 - term) * target_network(s2).max(axis=1)).detach().numpy()


def _targets(q: np.ndarray, y: np.ndarray, a: np.ndarray) -> np.ndarray:
    """DQN 3.0's targets: the clipped TD error at the actions taken, zero elsewhere."""
    delta = np.clip(y - q[np.arange(len(a)), a], -CLIP, CLIP)
    targets = np.zeros_like(q)
    targets[np.arange(len(a)), a] = delta
    return targets


class ClippedTD(Function):
    """loss = 0.5 * sum(delta^2); its gradient w.r.t. Q is -clip(delta) at the taken actions."""

    @staticmethod
    def forward(ctx: Any, q: rlgrad.Tensor, y: np.ndarray, a: np.ndarray) -> rlgrad.Tensor:
        qv = q.detach().numpy()
        ctx.save_for_backward(rlgrad.tensor(_targets(qv, y, a)))
        return rlgrad.tensor(0.5 * np.sum((y - qv[np.arange(len(a)), a]) ** 2))

    @staticmethod
    def backward(ctx: Any, g: rlgrad.Tensor) -> tuple:
        (targets,) = ctx.saved_tensors
        return -targets * g, None, None  # no gradient for the targets or the actions


@functools.partial(rlgrad.custom_vjp, nondiff_argnums=(2,))
def clipped_td(q: Any, y: Any, a: np.ndarray) -> Any:
    return 0.5 * rnp.sum((y - q[np.arange(len(a)), a]) ** 2)


def _clipped_td_fwd(q: Any, y: Any, a: np.ndarray) -> tuple:
    qv = np.asarray(q.detach().numpy() if isinstance(q, rlgrad.Tensor) else q)
    return clipped_td(q, y, a), _targets(qv, np.asarray(y), a)


def _clipped_td_bwd(a: np.ndarray, targets: np.ndarray, g: Any) -> tuple:
    return -targets * g, None


clipped_td.defvjp(_clipped_td_fwd, _clipped_td_bwd)


def param_grads(loss_of_q: Any) -> tuple[float, list[np.ndarray]]:
    """The loss and the parameters' gradients, from a loss built on the Q-values."""
    network.zero_grad()
    loss = loss_of_q(network(s))
    loss.backward()
    return float(loss.detach().numpy()), [p.grad.numpy().copy() for p in network.parameters()]


network.zero_grad()  # DQN 3.0 as in dqn_backward_from_output.py: backward seeded at Q
q_all = network(s)
q_all.backward(-_targets(q_all.detach().numpy(), y, a))
g_seed = [p.grad.numpy().copy() for p in network.parameters()]
v_fn, g_fn = param_grads(lambda q: ClippedTD.apply(q, y, a))
v_vjp, g_vjp = param_grads(lambda q: clipped_td(q, rlgrad.tensor(y), a))
print(f"{int(np.sum(np.abs(_targets(network(s).detach().numpy(), y, a)) == CLIP))}/{B} "
      f"TD errors clipped; loss (unclipped, as DQN logs it) {v_fn:.4f} / {v_vjp:.4f}")
assert abs(v_fn - v_vjp) <= 1e-4 * abs(v_fn)
for (name, _), g0, g1, g2 in zip(network.named_parameters(), g_seed, g_fn, g_vjp):
    np.testing.assert_allclose(g1, g0, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(g2, g0, rtol=1e-6, atol=1e-7)
    print(f"{name:9s} max |Function - seeded| = {np.abs(g1 - g0).max():.1e}   "
          f"max |custom_vjp - seeded| = {np.abs(g2 - g0).max():.1e}")
print("identical gradients: autograd.Function and custom_vjp == backward(-targets)")

"""DQN 3.0's update in rlgrad: backprop started at the output layer, vs the Huber-loss version.

DeepMind's DQN 3.0 (Lua Torch) never builds a loss. It computes the TD error outside autodiff,

    delta = r + gamma * (1 - term) * max_a' Q_target(s2, a') - Q(s, a)      (clipped to [-1, 1])

writes it into a zero matrix at the actions taken (`targets[i][a[i]] = delta[i]`) and calls
`network:backward(s, targets)`: the backward pass is seeded at the Q-values instead of at a scalar.
In rlgrad that is `q_values.backward(gradient)` with gradient = dloss/dQ. For the Huber loss
(delta = 1, summed) dloss/dQ(s, a) = -clip(delta, -1, 1) at the taken action and 0 elsewhere,
which is exactly -targets: so both ways give identical parameter gradients. The target side is
computed under no_grad: it is a constant in the update (a semi-gradient method).

Run: python examples/dqn_backward_from_output.py
"""

from __future__ import annotations

import copy

import numpy as np

import rlgrad
from rlgrad import nn
from rlgrad.nn import functional as F

nn.init.manual_seed(0)
B, S, A, GAMMA, CLIP_DELTA = 32, 4, 3, 0.99, 1.0
rng = np.random.default_rng(0)

network = nn.MLP([S, 64, A], activation=nn.ReLU)
target_network = copy.deepcopy(network)
for p in target_network.parameters():  # a different target net, as after some training
    p.data += 0.1 * rng.standard_normal(p.shape).astype(p.dtype)

s = rng.standard_normal((B, S)).astype(np.float32)
s2 = rng.standard_normal((B, S)).astype(np.float32)
a = rng.integers(0, A, B)
r = 3.0 * rng.standard_normal(B).astype(np.float32)  # large rewards, so some deltas get clipped
term = (rng.random(B) < 0.2).astype(np.float32)


def grads() -> list[np.ndarray]:
    return [p.grad.detach().numpy().copy() for p in network.parameters()]


# ---- 1. DQN 3.0: TD error outside autodiff, backward seeded at the output layer ---------------
with rlgrad.no_grad():
    q2_max = target_network(s2).detach().numpy().max(axis=1)
q_all = network(s)  # recorded: the only part that is differentiated
delta = r + GAMMA * (1 - term) * q2_max - q_all.detach().numpy()[np.arange(B), a]  # plain NumPy
delta = np.clip(delta, -CLIP_DELTA, CLIP_DELTA)
targets = np.zeros((B, A), dtype=np.float32)
targets[np.arange(B), a] = delta
network.zero_grad()
# DQN 3.0 adds +lr * dw (gradient ascent on Q along delta); backward(-targets) gives the
# gradient of a loss instead, for a descent optimizer
q_all.backward(-targets)
g_dqn3 = grads()
print(f"{int(np.sum(np.abs(delta) == CLIP_DELTA))}/{B} TD errors clipped to +-{CLIP_DELTA}")

# ---- 2. the same update as a Huber loss on Q(s, a) ----------------------------------------
def huber_td_loss() -> rlgrad.Tensor:
    with rlgrad.no_grad():
        y = r + GAMMA * (1 - term) * target_network(s2).max(axis=1)
    q = rlgrad.gather(network(s), 1, a[:, None]).squeeze(1)
    return F.huber_loss(q, y, reduction="sum", delta=CLIP_DELTA)


loss = huber_td_loss()
network.zero_grad()
loss.backward()
g_huber = grads()

for (name, _), g1, g2 in zip(network.named_parameters(), g_dqn3, g_huber):
    np.testing.assert_allclose(g1, g2, rtol=1e-5, atol=1e-6)
    print(f"{name:9s} max |backward(-targets) - Huber grad| = {np.abs(g1 - g2).max():.2e}")
print("identical gradients: seeding backward at Q with -clip(delta) == Huber loss (sum, delta=1)")

# the explainer shows where the target network drops out: its path was computed under no_grad.
# Given a function, it traces every op, so it also follows the constant y back to the target net.
report = rlgrad.explain(huber_td_loss,
                        {**{f"online.{n}": p for n, p in network.named_parameters()},
                         **{f"target.{n}": p for n, p in target_network.named_parameters()}})
print(report)
assert all(rec.has_grad for rec in report if rec.name.startswith("online"))
assert all(rec.reason == "no_grad" for rec in report if rec.name.startswith("target"))

"""Optimizing a frozen model's input: the fixed point x* = f(x*), and the state a Q-network likes.

To optimize an input instead of the weights, make the input the only tensor that requires grad:
freeze the parameters (requires_grad_(False)), give the optimizer [x] and minimize a function of
f(x). The gradient then flows *through* the network to x (the chain rule through every layer)
while the weights are read as constants. rlgrad.analysis.optimize_input does exactly that and
restores every parameter's requires_grad flag afterwards; the weights never change.

Run: python examples/optimize_input.py
"""

from __future__ import annotations

import numpy as np

from rlgrad import nn
from rlgrad.analysis import optimize_input

nn.init.manual_seed(0)
D = 4

# ---- 1. the fixed point of f: minimize ||x - f(x)||^2 ---------------------------------------
f = nn.Sequential(nn.Linear(D, D, dtype=np.float64), nn.Tanh())
w = f[0].weight.detach().numpy()
w *= 0.8 / np.linalg.norm(w, 2)  # make f a contraction, so the fixed point is unique
f[0].bias.data[...] = [0.5, -0.3, 0.2, 0.1]
before = {n: p.detach().numpy().copy() for n, p in f.named_parameters()}

res = optimize_input(f, lambda x, fx: ((x - fx) ** 2).sum(), np.zeros(D), steps=300, lr=0.05)
x_star = res.x.detach().numpy()
print(f"x* = {np.round(x_star, 5)}, ||x* - f(x*)||^2 = {res.loss:.2e} after {res.steps} steps")

reference = np.zeros(D)
for _ in range(300):  # the same point by iterating the contraction x <- f(x)
    reference = np.tanh(w @ reference + f[0].bias.detach().numpy())
np.testing.assert_allclose(x_star, reference, atol=1e-5)
for n, p in f.named_parameters():  # frozen: unchanged, no .grad, flag restored
    np.testing.assert_array_equal(p.detach().numpy(), before[n])
    assert p.grad is None and p.requires_grad
print("matches fixed-point iteration; the weights are unchanged and still require grad")

# ---- 2. the state a Q-network values most for action 1, inside the box [-1, 1]^D -----------
q_net = nn.MLP([D, 32, 2], activation=nn.Tanh, dtype=np.float64)
q_net[2].bias.requires_grad_(False)  # a flag that must come back as False
res2 = optimize_input(q_net, lambda x, q: -q[1], np.zeros(D), steps=200, lr=0.05,
                      bounds=(-1.0, 1.0))
q_best = float(q_net(res2.x).detach().numpy()[1])
rng = np.random.default_rng(0)
q_random = q_net(rng.uniform(-1, 1, (2000, D))).detach().numpy()[:, 1].max()
print(f"Q(x, a=1): optimized {q_best:.4f} >= best of 2000 random states {q_random:.4f}")
assert q_best >= q_random - 1e-9 and np.all(np.abs(res2.x.detach().numpy()) <= 1.0)
assert q_net[0].weight.requires_grad and not q_net[2].bias.requires_grad

"""Per-sample gradients with vmap: one gradient per transition, in one batched pass.

`torch.func.vmap(torch.func.grad(loss))` is PyTorch's way to get the gradient of every sample's
loss separately (for per-sample gradient clipping, gradient-norm priorities in a replay buffer,
or the variance of a policy-gradient estimate). rlgrad's `rlgrad.func` is the same API: `vmap`
batches through a rule per primitive (no Python loop over samples), and `grad` inside it
differentiates each sample's loss with respect to parameters shared by all.

Here a 64-64 Q-network's TD loss on a batch of 128 transitions: per-sample gradients by vmap,
checked against a Python loop of `grad`; their norms (a priority per transition); per-sample
clipping before averaging (as DP-SGD does); and an ensemble of 5 Q-networks evaluated as one
vmapped call with `stack_module_state`.

Run: python examples/per_sample_gradients.py
"""

from __future__ import annotations

import numpy as np

import rlgrad
from rlgrad import nn
from rlgrad.func import functional_call, grad, stack_module_state, vmap

nn.init.manual_seed(0)
rng = np.random.default_rng(0)
OBS, ACTIONS, BATCH, GAMMA = 4, 2, 128, 0.99


def q_network() -> nn.Module:
    return nn.Sequential(nn.Linear(OBS, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, ACTIONS)).double()


q = q_network()
params = {k: v.detach() for k, v in q.named_parameters()}
obs = rlgrad.tensor(rng.standard_normal((BATCH, OBS)))
actions = rlgrad.tensor(rng.integers(0, ACTIONS, BATCH))
targets = rlgrad.tensor(rng.standard_normal(BATCH))  # r + gamma * max_a' Q_target(s', a')


def td_loss(p: dict, o: rlgrad.Tensor, a: rlgrad.Tensor, y: rlgrad.Tensor) -> rlgrad.Tensor:
    """One transition's squared TD error (vmap adds the batch)."""
    q_values = functional_call(q, p, (o,))
    return (rlgrad.gather(q_values, 0, a[None])[0] - y) ** 2


# ---- every transition's gradient, in one pass --------------------------------------------------
per_sample = vmap(grad(td_loss), in_dims=(None, 0, 0, 0))(params, obs, actions, targets)
for name, g in per_sample.items():
    assert g.shape == (BATCH,) + params[name].shape

# the plain reference: a Python loop of grad, one transition at a time
for i in (0, 17, BATCH - 1):
    one = grad(td_loss)(params, obs[i], actions[i], targets[i])
    for name in params:
        np.testing.assert_allclose(per_sample[name][i].numpy(), one[name].numpy(), rtol=1e-10, atol=1e-12)

# their mean is the batch loss's gradient
batch_grad = grad(lambda p: vmap(td_loss, in_dims=(None, 0, 0, 0))(p, obs, actions, targets).mean())(params)
for name in params:
    np.testing.assert_allclose(per_sample[name].mean(0).numpy(), batch_grad[name].numpy(), rtol=1e-10,
                               atol=1e-12)

# ---- what per-sample gradients are for ----------------------------------------------------------
norms = np.sqrt(sum((g.reshape(BATCH, -1) ** 2).sum(1).numpy() for g in per_sample.values()))
print(f"per-transition gradient norms: min {norms.min():.3g}, median {np.median(norms):.3g}, "
      f"max {norms.max():.3g}  (a priority per transition)")

clip = float(np.median(norms))
scale = np.minimum(1.0, clip / norms)  # each transition's gradient clipped to norm <= clip
clipped = {k: (g * rlgrad.tensor(scale.reshape((BATCH,) + (1,) * (g.ndim - 1)))).mean(0)
           for k, g in per_sample.items()}
total = np.sqrt(sum(float((c ** 2).sum()) for c in clipped.values()))
assert total <= clip + 1e-9
print(f"mean of per-transition gradients clipped to norm {clip:.3g}: norm {total:.3g}")

# ---- an ensemble of Q-networks as one call --------------------------------------------------------
ensemble = [q_network() for _ in range(5)]
stacked, buffers = stack_module_state(ensemble)
all_q = vmap(lambda p, b, o: functional_call(ensemble[0], (p, b), (o,)), in_dims=(0, 0, None))(
    stacked, buffers, obs)
assert all_q.shape == (5, BATCH, ACTIONS)
for k, member in enumerate(ensemble):
    np.testing.assert_allclose(all_q[k].detach().numpy(), member(obs).detach().numpy(), rtol=1e-12)
spread = all_q.detach().numpy().std(0).mean()
print(f"ensemble of 5 Q-networks in one vmapped call: mean disagreement (std) {spread:.3g}")

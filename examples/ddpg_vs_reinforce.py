"""Two ways to write a policy-gradient update, and why they give the same parameter gradients.

1. Seed the backward pass at the policy's output with a gradient computed elsewhere:
   `action.backward(-dQ/da)` (DDPG's actor update as TF1 code wrote it:
   `tf.gradients(actor_out, actor_params, -dQ_da)`), or `logits.backward(dL/dlogits)` with
   dL/dlogits = -(onehot(a) - softmax(logits)) * advantage (REINFORCE written by hand).
2. Write a surrogate loss whose gradient is the same: `-Q(s, actor(s)).mean()`, or
   `-(advantage * log_softmax(logits)[a]).mean()`, and call backward() on it.
Both are the chain rule: dL/dtheta = dL/dout * dout/dtheta. Way 1 supplies dL/dout itself; way 2
lets autodiff compute it. The critic (or the advantage) is a constant for the actor's update:
freeze it, or it would receive gradients too.

Run: python examples/ddpg_vs_reinforce.py
"""

from __future__ import annotations

import numpy as np

import rlgrad
from rlgrad import autograd, nn
from rlgrad.analysis import frozen
from rlgrad.nn import functional as F

nn.init.manual_seed(0)
rng = np.random.default_rng(0)
B, S, A = 16, 3, 2
s = rng.standard_normal((B, S)).astype(np.float32)

# ---- DDPG: a deterministic actor and a critic Q(s, a) ----------------------------------------
actor = nn.MLP([S, 32, A], activation=nn.ReLU, output_activation=nn.Tanh)
critic = nn.MLP([S + A, 32, 1], activation=nn.ReLU)


def q_value(states: np.ndarray, actions: object) -> rlgrad.Tensor:
    return critic(rlgrad.cat([rlgrad.tensor(states), actions], dim=1)).squeeze(-1)


# way 1: dQ/da from the critic, at a = actor(s) as a constant leaf, fed into the actor's backward
a = actor(s)
a_leaf = rlgrad.tensor(a.detach().numpy(), requires_grad=True)
(dq_da,) = autograd.grad(q_value(s, a_leaf).mean(), [a_leaf])
actor.zero_grad()
a.backward(-dq_da)  # ascend Q: the gradient of the loss -Q is -dQ/da
way1 = [p.grad.detach().numpy().copy() for p in actor.parameters()]

# way 2: the surrogate loss -Q(s, actor(s)), with the critic frozen for this update
actor.zero_grad()
with frozen(critic):
    loss = -q_value(s, actor(s)).mean()
    loss.backward()
way2 = [p.grad.detach().numpy().copy() for p in actor.parameters()]
assert all(p.grad is None for p in critic.parameters())  # frozen: the critic got nothing
for (name, _), g1, g2 in zip(actor.named_parameters(), way1, way2):
    np.testing.assert_allclose(g1, g2, rtol=1e-5, atol=1e-7)
    print(f"DDPG actor {name:9s}: max |backward(-dQ/da) - surrogate| = {np.abs(g1 - g2).max():.1e}")

# ---- REINFORCE: a softmax policy, dL/dlogits by hand vs the surrogate loss ----------------
policy = nn.MLP([S, 32, A], activation=nn.Tanh)
actions = rng.integers(0, A, B)
advantages = rng.standard_normal(B).astype(np.float32)

logits = policy(s)
probs = F.softmax(logits, dim=-1).detach().numpy()
onehot = np.eye(A, dtype=np.float32)[actions]
d_logits = -(onehot - probs) * advantages[:, None] / B  # d/dlogits of -mean(adv * log pi(a|s))
policy.zero_grad()
logits.backward(d_logits)
way1 = [p.grad.detach().numpy().copy() for p in policy.parameters()]

policy.zero_grad()
log_pi = rlgrad.gather(F.log_softmax(policy(s), dim=-1), 1, actions[:, None]).squeeze(1)
(-(advantages * log_pi).mean()).backward()
way2 = [p.grad.detach().numpy().copy() for p in policy.parameters()]
for (name, _), g1, g2 in zip(policy.named_parameters(), way1, way2):
    np.testing.assert_allclose(g1, g2, rtol=1e-5, atol=1e-7)
    print(f"REINFORCE  {name:9s}: max |backward(dL/dlogits) - surrogate| = {np.abs(g1 - g2).max():.1e}")
print("same parameter gradients both ways")

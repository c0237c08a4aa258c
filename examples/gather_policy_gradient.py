"""Why is gather_nd differentiable? A REINFORCE loss on CartPole-v1 built with gather_nd.

    pi_taken = gather_nd(probs, [[t, a_t], ...])        # pick the probability of each action taken
    loss     = -mean(log(pi_taken) * return)

gather_nd is a function of the *values* it reads: out[t] = probs[t, a_t]. Its derivative w.r.t.
probs is 1 at each gathered entry and 0 elsewhere (a sparse one-hot matrix), so the backward pass
scatters dloss/dpi_taken back into a zero matrix at the taken actions. The *indices* are integers
chosen by sampling: the loss is piecewise constant in them, so they get no gradient at all, and
rlgrad refuses to differentiate w.r.t. an integer tensor with an error that says so.

Run: python examples/gather_policy_gradient.py
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import rlgrad
from rlgrad import autograd, nn
from rlgrad.nn import functional as F

rlgrad.random.seed(0)
nn.init.manual_seed(0)
GAMMA = 0.99

policy = nn.MLP([4, 32, 2], activation=nn.Tanh)

# ---- one episode with the current policy (acting needs no graph) ------------------------------
env = gym.make("CartPole-v1")
obs, _ = env.reset(seed=0)
rng = np.random.default_rng(0)
states, actions, rewards = [], [], []
done = False
while not done:
    with rlgrad.no_grad():
        p = F.softmax(policy(obs[None].astype(np.float32)), dim=-1).detach().numpy()[0]
    a = int(rng.choice(2, p=p / p.sum()))
    states.append(obs)
    actions.append(a)
    obs, r, terminated, truncated, _ = env.step(a)
    rewards.append(r)
    done = terminated or truncated
env.close()

returns = np.zeros(len(rewards), dtype=np.float32)
g = 0.0
for t in reversed(range(len(rewards))):
    g = rewards[t] + GAMMA * g
    returns[t] = g
returns = (returns - returns.mean()) / (returns.std() + 1e-8)  # a baseline: lower variance
T = len(actions)
print(f"episode of {T} steps")

# ---- the loss from the question, with gather_nd --------------------------------------------
s = np.asarray(states, dtype=np.float32)
probs = F.softmax(policy(s), dim=-1)
actions_array = rlgrad.tensor(np.stack([np.arange(T), actions], axis=1))  # int64 [[t, a_t]]
pi_taken = rlgrad.gather_nd(probs, actions_array)
loss = -(rlgrad.numpy.log(pi_taken) * returns).mean()

# the gradient that reaches the probabilities: nonzero only at the gathered entries
d_probs, d_pi = autograd.grad(loss, [probs, pi_taken], retain_graph=True)
expected = np.zeros((T, 2), dtype=np.float32)
expected[np.arange(T), actions] = -returns / (T * pi_taken.detach().numpy())  # d/dp of -log(p) R / T
np.testing.assert_allclose(d_probs.detach().numpy(), expected, rtol=1e-5, atol=1e-7)
# ... which is dloss/dpi_taken scattered back into a zero matrix (gather's one-hot Jacobian)
scattered = np.zeros((T, 2), dtype=np.float32)
scattered[np.arange(T), actions] = d_pi.detach().numpy()
np.testing.assert_array_equal(d_probs.detach().numpy(), scattered)
untaken = d_probs.detach().numpy()[np.arange(T), 1 - np.asarray(actions)]
assert np.all(untaken == 0)
print("dloss/dprobs, first 4 steps (zero where the action was not taken):")
print(np.round(d_probs.detach().numpy()[:4], 5))

# the indices get none: asking for it is an error that says why
try:
    autograd.grad(loss, [actions_array], retain_graph=True)
    raise AssertionError("differentiating w.r.t. integer indices should fail")
except TypeError as err:
    print("grad w.r.t. the action indices ->", err)

# rlgrad.explain: every weight gets a gradient, the indices never do
report = rlgrad.explain(loss, dict(policy.named_parameters()) | {"actions": actions_array})
print(report)
assert all(r.has_grad for r in report if r.name != "actions")
assert report["actions"].reason == "integer"

# one REINFORCE step: d(-loss) moves probability toward actions with a positive return
opt = rlgrad.optim.SGD(policy.parameters(), lr=0.5)
opt.zero_grad()
loss.backward()
opt.step()
with rlgrad.no_grad():
    new = F.softmax(policy(s), dim=-1).detach().numpy()[np.arange(T), actions]
better = (np.log(new) - np.log(pi_taken.detach().numpy())) * returns
assert better.mean() > 0, better.mean()
print(f"after one step, mean change of log pi(a_t) * R_t = {better.mean():+.4f} (> 0)")

"""An A2C update whose policy, value and entropy losses are kept apart, logged and plotted.

Keras' `compile(loss=[...])` wants one loss per output with the signature (y_true, y_pred), so
A2C code packs actions and advantages into "targets" and only gets the summed loss back. With
define-by-run autodiff the loss is just a function: it takes the actions and advantages directly
and returns every term as a Tensor. The update differentiates their weighted sum; the parts are
read with float() for logging. The gradient of the sum is the sum of the parts' gradients, and
each part reaches only the parameters it depends on: the value loss never touches the policy
head, the policy and entropy losses never touch the value head (rlgrad.explain shows it).

Run: python examples/a2c_losses.py [--out a2c_losses.png]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import gymnasium as gym
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import rlgrad  # noqa: E402
from rlgrad import autograd, nn  # noqa: E402
from rlgrad.distributions import Categorical  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "rlgrad_a2c_losses.png"))
parser.add_argument("--updates", type=int, default=60)
args = parser.parse_args()

rlgrad.random.seed(0)
nn.init.manual_seed(0)
GAMMA, N_STEPS, VF_COEF, ENT_COEF = 0.99, 32, 0.5, 0.01


class ActorCritic(nn.Module):
    """A shared trunk with two heads: action logits and a state value."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(4, 64), nn.Tanh())
        self.policy = nn.Linear(64, 2)
        self.value = nn.Linear(64, 1)

    def forward(self, obs: object) -> tuple[rlgrad.Tensor, rlgrad.Tensor]:
        h = self.trunk(obs)
        return self.policy(h), self.value(h).squeeze(-1)


def a2c_loss(logits: rlgrad.Tensor, values: rlgrad.Tensor, actions: np.ndarray,
             advantages: np.ndarray, returns: np.ndarray) -> dict[str, rlgrad.Tensor]:
    """Every term separately; actions and advantages are plain arguments, not packed targets."""
    dist = Categorical(logits=logits)
    policy_loss = -(dist.log_prob(actions) * advantages).mean()  # advantages: constants
    value_loss = ((returns - values) ** 2).mean()
    entropy = dist.entropy().mean()
    total = policy_loss + VF_COEF * value_loss - ENT_COEF * entropy
    return {"total": total, "policy": policy_loss, "value": value_loss, "entropy": entropy}


model = ActorCritic()
opt = rlgrad.optim.Adam(model.parameters(), lr=3e-3)
env = gym.make("CartPole-v1")
obs, _ = env.reset(seed=0)
history: dict[str, list[float]] = {"policy": [], "value": [], "entropy": []}

for update in range(args.updates):
    states, actions, rewards, dones = [], [], [], []
    for _ in range(N_STEPS):
        with rlgrad.no_grad():
            logits, _ = model(obs[None].astype(np.float32))
            a = int(Categorical(logits=logits[0]).sample())
        states.append(obs)
        actions.append(a)
        obs, r, term, trunc, _ = env.step(a)
        rewards.append(r)
        dones.append(term)
        if term or trunc:
            obs, _ = env.reset()
    with rlgrad.no_grad():
        _, last_v = model(obs[None].astype(np.float32))
    ret, returns = float(last_v.detach().numpy()[0]), np.zeros(N_STEPS, np.float32)
    for t in reversed(range(N_STEPS)):  # n-step returns, bootstrapped from V(s_N)
        ret = rewards[t] + GAMMA * ret * (1.0 - dones[t])
        returns[t] = ret

    s = np.asarray(states, dtype=np.float32)
    logits, values = model(s)
    advantages = returns - values.detach().numpy()  # a constant: computed outside autodiff
    losses = a2c_loss(logits, values, np.asarray(actions), advantages, returns)

    if update == 0:  # the gradient of the sum is the sum of the parts' gradients
        params = list(model.parameters())
        parts = {k: autograd.grad(losses[k], params, retain_graph=True, materialize_grads=True)
                 for k in ("total", "policy", "value", "entropy")}  # zeros where unused
        for g, gp, gv, ge in zip(*parts.values()):
            np.testing.assert_allclose(g.numpy(), gp.numpy() + VF_COEF * gv.numpy() - ENT_COEF * ge.numpy(),
                                       rtol=1e-4, atol=1e-6)
        rep_value = rlgrad.explain(losses["value"], model)
        rep_policy = rlgrad.explain(losses["policy"], model)
        print("value loss ->", {r.name: r.reason or "grad" for r in rep_value})
        print("policy loss ->", {r.name: r.reason or "grad" for r in rep_policy})
        assert rep_value["policy.weight"].reason == "unused" and rep_value["value.weight"].has_grad
        assert rep_policy["value.weight"].reason == "unused" and rep_policy["policy.weight"].has_grad

    opt.zero_grad()
    losses["total"].backward()
    opt.step()
    for k in history:
        history[k].append(float(losses[k].detach().numpy()))
    total = float(losses["total"].detach().numpy())
    recombined = history["policy"][-1] + VF_COEF * history["value"][-1] - ENT_COEF * history["entropy"][-1]
    assert abs(total - recombined) < 1e-4 * max(1.0, abs(total))
env.close()

print(f"{args.updates} updates; last: " + ", ".join(f"{k} {v[-1]:.4f}" for k, v in history.items()))
fig, axes = plt.subplots(1, 3, figsize=(11, 3))
for ax, (k, v) in zip(axes, history.items()):
    ax.plot(v)
    ax.set_title(f"{k} loss" if k != "entropy" else "entropy")
    ax.set_xlabel("update")
fig.tight_layout()
fig.savefig(args.out, dpi=80)
assert os.path.getsize(args.out) > 0
print("losses plotted to", args.out)

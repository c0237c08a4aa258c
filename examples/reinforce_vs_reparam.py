"""How does a gradient get through a random sample? Two answers on a Normal-policy toy problem.

Maximize J = E_{a ~ N(mu, sigma)}[r(a)] with r(a) = -(y - a)^2, y = 3. Sampling is not a
differentiable function of (mu, sigma), and the gradient does NOT go through sample():
* score function (REINFORCE): grad J = E[r(a) grad log p(a)]. The loss -r * log_prob(a) carries the
  gradient through log_prob; `a` and r(a) are constants. Works for any r, even a black box.
* reparameterization: a = mu + sigma * eps, eps ~ N(0, 1) drawn outside the graph (rsample()).
  Now a IS a differentiable function of (mu, sigma), and grad J = E[r'(a) da/dtheta]. Needs a
  differentiable r; usually has a much lower variance.
Detaching (mu, sigma) before building the distribution cuts the only path the score function
has (through log_prob), so backward() fails: rlgrad says so, and rlgrad.explain says where.

Run: python examples/reinforce_vs_reparam.py
"""

from __future__ import annotations

import numpy as np

import rlgrad
from rlgrad import autograd, nn
from rlgrad.distributions import Normal
from rlgrad.nn import functional as F

rlgrad.random.seed(0)
nn.init.manual_seed(0)
Y = 3.0


def reward(a: object) -> object:
    return -((Y - a) ** 2)


# ---- 1. the two estimators, one gradient per sample, against the exact gradient --------------
# J(mu, log_sigma) = -((y - mu)^2 + sigma^2): dJ/dmu = 2 (y - mu), dJ/dlog_sigma = -2 sigma^2
N, MU, LOG_SIGMA = 20000, 0.5, np.log(0.8)
true = np.array([2 * (Y - MU), -2 * np.exp(2 * LOG_SIGMA)])


def per_sample_grads(reparam: bool) -> np.ndarray:
    # every sample gets its own copy of the parameters, so grad() returns per-sample gradients
    mu = rlgrad.tensor(np.full(N, MU), requires_grad=True)
    log_sigma = rlgrad.tensor(np.full(N, LOG_SIGMA), requires_grad=True)
    dist = Normal(mu, rlgrad.numpy.exp(log_sigma))
    if reparam:
        objective = reward(dist.rsample())  # differentiable through a = mu + sigma * eps
    else:
        a = dist.sample()  # a constant: no gradient through the draw
        baseline = -((Y - MU) ** 2 + np.exp(2 * LOG_SIGMA))  # E[r]: lowers variance, no bias
        objective = (reward(a) - baseline) * dist.log_prob(a)  # the score-function surrogate
    g_mu, g_ls = autograd.grad(objective.sum(), [mu, log_sigma])
    return np.stack([g_mu.detach().numpy(), g_ls.detach().numpy()], axis=1)


for name, reparam in (("score function", False), ("reparameterized", True)):
    g = per_sample_grads(reparam)
    mean, var = g.mean(axis=0), g.var(axis=0)
    print(f"{name:16s} mean {np.round(mean, 3)} (exact {np.round(true, 3)})  "
          f"variance per sample {np.round(var, 2)}")
    assert np.all(np.abs(mean - true) < 5 * np.sqrt(var / N))  # unbiased
    if reparam:
        var_reparam = var
    else:
        var_score = var
assert np.all(var_reparam < var_score)
print(f"reparameterization lowers the variance {np.round(var_score / var_reparam, 1)}x here")


# ---- 2. solve the toy problem of the question with a network, both ways --------------------
def policy(net: nn.Module) -> Normal:
    out = net(np.ones((1, 1), np.float32))[0]
    return Normal(out[0], F.softplus(out[1]) + 1e-3)


for name in ("score function", "reparameterized"):
    nn.init.manual_seed(1)
    net = nn.MLP([1, 16, 2], activation=nn.ReLU)
    opt = rlgrad.optim.Adam(net.parameters(), lr=0.02)
    for _ in range(400):
        dist = policy(net)
        if name == "score function":
            a = dist.sample((32,))
            r = reward(a)
            loss = -((r - r.mean()) * dist.log_prob(a)).mean()  # batch-mean baseline
        else:
            loss = -reward(dist.rsample((32,))).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    mu = float(policy(net).loc.detach().numpy())
    print(f"{name:16s} after 400 steps: mu = {mu:.3f} (optimum {Y})")
    assert abs(mu - Y) < 0.3


# ---- 3. the detach mistake ----------------------------------------------------------------
nn.init.manual_seed(2)
net = nn.MLP([1, 16, 2], activation=nn.ReLU)


def reinforce_loss(detach: bool) -> rlgrad.Tensor:
    out = net(np.ones((1, 1), np.float32))[0]
    if detach:
        out = out.detach()  # the mistake: (mu, sigma) become constants
    dist = Normal(out[0], F.softplus(out[1]) + 1e-3)
    a = dist.sample()
    return -(reward(a) * dist.log_prob(a))


try:
    reinforce_loss(detach=True).backward()
    raise AssertionError("backward through a fully detached loss should fail")
except RuntimeError as err:
    print("backward() ->", str(err).split(". ")[0] + ".")

report = rlgrad.explain(lambda: reinforce_loss(detach=True), net)
print(report)
assert all(r.reason == "detach" for r in report)

# without the mistake, every weight gets a gradient through log_prob; the draw itself is a cut
report = rlgrad.explain(reinforce_loss(detach=False), net)
print(report)
assert all(r.has_grad and any(c.kind == "sample" for c in r.cuts) for r in report)

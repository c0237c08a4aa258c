"""Gradient of the output probability vs gradient of the loss, w.r.t. the input features.

`tf.gradients(y, x)` / `rlgrad.autograd.grad(y, x)` differentiate whatever `y` you give them.
For a binary classifier with p = sigmoid(logit(x)) and the cross-entropy loss L(p, y):

    dp/dx = p (1 - p) dlogit/dx          dL/dx = (p - y) dlogit/dx

Both point along dlogit/dx; they differ in sign and scale. The probability gradient (saliency)
says which features move the *prediction*; it saturates (p (1 - p) -> 0) on every confident
prediction, right or wrong. The loss gradient is scaled by the error (p - y): it says how to
change x to reduce the *error*, is large on confident mistakes and vanishes only on confident
correct answers. For attribution use the output; for "what would fix this mistake" use the
loss. Integrated gradients add up to p(x) - p(baseline) exactly (completeness), which a plain
gradient does not.

Run: python examples/saliency.py [--out saliency.png]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import rlgrad  # noqa: E402
from rlgrad import nn  # noqa: E402
from rlgrad.analysis import integrated_gradients, saliency  # noqa: E402
from rlgrad.nn import functional as F  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "rlgrad_saliency.png"))
args = parser.parse_args()

nn.init.manual_seed(0)
rng = np.random.default_rng(0)
N, D = 512, 6
X = rng.standard_normal((N, D)).astype(np.float32)
Y = (X[:, 0] - 2 * X[:, 1] > 0).astype(np.float32)  # only features 0 and 1 matter

model = nn.MLP([D, 16, 1], activation=nn.Tanh)
opt = rlgrad.optim.Adam(model.parameters(), lr=0.03)
for _ in range(150):
    opt.zero_grad()
    loss = F.binary_cross_entropy_with_logits(model(X).squeeze(-1), Y)
    loss.backward()
    opt.step()
acc = ((model(X).detach().numpy()[:, 0] > 0) == (Y > 0)).mean()
print(f"train loss {float(loss.detach().numpy()):.3f}, accuracy {acc:.3f}")
assert acc > 0.95


def prob(x: rlgrad.Tensor) -> rlgrad.Tensor:
    return rlgrad.numpy.sigmoid(model(x)).squeeze(-1)


xs, ys = X[:8], Y[:8].copy()
ys[4:] = 1 - ys[4:]  # pretend the last four are labelled wrongly: confident mistakes
g_prob = saliency(prob, xs, target=lambda p: p.sum()).detach().numpy()  # d p / d x, one row per input
g_loss = saliency(lambda x: model(x).squeeze(-1), xs,
                  target=lambda z: F.binary_cross_entropy_with_logits(z, ys, reduction="sum")).numpy()

# the two differ by the factor (p - y) / (p (1 - p)), row by row
p = prob(rlgrad.tensor(xs)).detach().numpy()
factor = ((p - ys) / (p * (1 - p)))[:, None]
np.testing.assert_allclose(g_loss, factor * g_prob, rtol=1e-3, atol=1e-6)
n_prob, n_loss = np.linalg.norm(g_prob, axis=1), np.linalg.norm(g_loss, axis=1)
for i in range(8):
    print(f"x{i}: p={p[i]:.3f} y={ys[i]:.0f}  ||dp/dx||={n_prob[i]:.2e}  ||dL/dx||={n_loss[i]:.2e}")
wrong = np.abs(p - ys) > 0.9
assert wrong.sum() >= 3 and np.all(n_loss[wrong] > 10 * n_prob[wrong])  # mistakes: loss grad big

# saliency finds the two features the label depends on
mean_sal = np.abs(g_prob).mean(axis=0)
assert set(np.argsort(-mean_sal)[:2]) == {0, 1}, mean_sal
print("mean |dp/dx| per feature:", np.round(mean_sal, 3))

# integrated gradients: attributions add up to p(x) - p(0)
attr, delta = integrated_gradients(prob, xs[0], np.zeros(D, np.float32), steps=32,
                                   target=lambda q: q.sum(), return_delta=True)
p0 = float(prob(rlgrad.tensor(np.zeros((1, D), np.float32))).detach().numpy()[0])
print(f"integrated gradients {np.round(attr.detach().numpy(), 3)}: sum {attr.detach().numpy().sum():.4f} "
      f"= p(x) - p(0) = {p[0] - p0:.4f}")
assert abs(delta) < 1e-3

fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
k = np.arange(D)
axes[0].bar(k - 0.2, np.abs(g_prob).mean(0), 0.4, label="|dp/dx| (output)")
axes[0].bar(k + 0.2, np.abs(g_loss).mean(0), 0.4, label="|dL/dx| (loss)")
axes[0].set_xlabel("input feature")
axes[0].set_title("mean gradient magnitude over 8 inputs")
axes[0].legend()
axes[1].scatter(np.abs(p - ys), n_loss / n_prob)
axes[1].set_yscale("log")
axes[1].set_xlabel("|p - y| (error)")
axes[1].set_ylabel("||dL/dx|| / ||dp/dx||")
axes[1].set_title("the loss gradient scales with the error")
fig.tight_layout()
fig.savefig(args.out, dpi=80)
assert os.path.getsize(args.out) > 0
print("picture saved to", args.out)

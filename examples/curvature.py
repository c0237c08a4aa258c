"""Second-order gradients of a small network's loss: a Hessian-vector product, the top eigenvalue.

Differentiating a gradient needs the gradient to be recorded: `grad(loss, params,
create_graph=True)` returns Tensors with their own graph, which can be differentiated again.
Dotting that gradient with a constant vector v and differentiating once more gives the
Hessian-vector product H v = d/dtheta (g . v) at the cost of about two backward passes, without
ever forming H. Power iteration and Lanczos need nothing but H v, so the sharpness of the loss
(its top eigenvalue) and Hutchinson's trace estimate scale to any model; here the network is
small enough to check everything against the dense Hessian.

Run: python examples/curvature.py
"""

from __future__ import annotations

import numpy as np

import rlgrad
from rlgrad import autograd, nn
from rlgrad.analysis import (
    HessianOperator,
    hessian_vector_product,
    hutchinson_trace,
    top_hessian_eigenvalues,
)

nn.init.manual_seed(0)
rng = np.random.default_rng(0)
net = nn.MLP([3, 8, 1], activation=nn.Tanh, dtype=np.float64)  # float64: exact comparisons
params = list(net.parameters())
x = rng.standard_normal((32, 3))
y = np.sin(x.sum(axis=1, keepdims=True))


def loss_fn() -> rlgrad.Tensor:
    return ((net(x) - y) ** 2).mean()


# ---- second order by hand: the gradient of the squared gradient norm (a gradient penalty) ----
loss = loss_fn()
grads = autograd.grad(loss, params, create_graph=True)  # recorded: differentiable again
penalty = sum((g ** 2).sum() for g in grads)
d_penalty = autograd.grad(penalty, params)
# that is 2 H g: check it against the Hessian-vector product with v = g
flat_g = np.concatenate([g.detach().numpy().ravel() for g in grads])
hg = hessian_vector_product(loss_fn(), params, flat_g)
np.testing.assert_allclose(np.concatenate([d.detach().numpy().ravel() for d in d_penalty]),
                           2 * np.concatenate([h.detach().numpy().ravel() for h in hg]), rtol=1e-10)
print(f"d ||g||^2 / dtheta == 2 H g  (n = {flat_g.size} parameters)")

# ---- Hessian-vector product vs finite differences of the gradient --------------------------
v = rng.standard_normal(flat_g.size)
hv = np.concatenate([h.detach().numpy().ravel() for h in hessian_vector_product(loss_fn(), params, v)])


def flat_grad() -> np.ndarray:
    return np.concatenate([g.detach().numpy().ravel() for g in autograd.grad(loss_fn(), params)])


def shift(eps: float) -> None:
    i = 0
    for p in params:
        p.data += eps * v[i:i + p.numel()].reshape(p.shape)
        i += p.numel()


eps = 1e-5
shift(eps)
g_plus = flat_grad()
shift(-2 * eps)
g_minus = flat_grad()
shift(eps)
fd = (g_plus - g_minus) / (2 * eps)
np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-8)
print(f"H v matches finite differences of the gradient: max diff {np.abs(hv - fd).max():.1e}")

# ---- the spectrum: dense Hessian vs power iteration / Lanczos / Hutchinson ------------------
H = HessianOperator(loss_fn(), params).dense()
eig = np.linalg.eigvalsh(H)
top = eig[np.argmax(np.abs(eig))]
power = top_hessian_eigenvalues(loss_fn(), params, method="power", iters=500, tol=1e-12)[0]
lanczos = top_hessian_eigenvalues(loss_fn(), params, k=3, method="lanczos", which="LA", iters=40)
trace = hutchinson_trace(loss_fn(), params, samples=300, seed=0)
print(f"top eigenvalue: dense {top:.6f}, power iteration {power:.6f}")
print(f"top 3 (Lanczos, 40 HVPs): {np.round(lanczos, 6)} vs dense {np.round(eig[::-1][:3], 6)}")
print(f"trace: dense {np.trace(H):.4f}, Hutchinson (300 samples) {trace:.4f}")
print(f"negative eigenvalues: {(eig < -1e-9).sum()} of {eig.size} (not a minimum yet)")
np.testing.assert_allclose(power, top, rtol=1e-6)
np.testing.assert_allclose(lanczos, eig[::-1][:3], rtol=1e-6)
assert abs(trace - np.trace(H)) < 0.15 * abs(np.trace(H))

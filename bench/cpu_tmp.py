import _timing, numpy as np, time
import vmap as B
import rlgrad, rlgrad.func as rf
rng = np.random.default_rng(0)
x = rng.standard_normal((256, 8)).astype(np.float32); y = rng.standard_normal((256, 1)).astype(np.float32)
impls, net = B.rlgrad_impls(x, y)
params = {k: v.detach() for k, v in net.named_parameters()}
X, Y = rlgrad.tensor(x), rlgrad.tensor(y)
def loss(p, xb, yb):
    return ((rf.functional_call(net, p, (xb[None],)) - yb[None]) ** 2).mean()
fwd = rf.vmap(loss, in_dims=(None, 0, 0))
def batch_grad():
    net.zero_grad(); ((net(X) - Y) ** 2).mean().backward()
g1 = rf.grad(lambda p: loss(p, X[0], Y[0]))
t = B.cpu_times({"vmap(grad)": impls["rlgrad.func vmap(grad)"], "vmap fwd": lambda: fwd(params, X, Y),
                 "batch loss.backward()": batch_grad, "grad of one sample": lambda: g1(params)}, 9)
print({k: round(float(np.median(v)) * 1e3, 3) for k, v in t.items()})

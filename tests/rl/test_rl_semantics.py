"""The gradient semantics RL code relies on, each asserted with numbers: picking the value of the
action taken, cutting gradients on purpose, seeding backpropagation at an intermediate output,
gradients w.r.t. inputs, frozen parameters, and second order through all of these."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import Tensor, autograd, no_grad, stop_gradient, tensor
from rlgrad.indexing import gather, gather_nd, one_hot, take_along_axis

N, D, H, A = 12, 5, 7, 4
GAMMA = 0.9


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def net_arrays(seed: int) -> list[np.ndarray]:
    r = rng(seed)
    return [0.6 * r.standard_normal((D, H)), 0.1 * r.standard_normal(H),
            0.6 * r.standard_normal((H, A)), 0.1 * r.standard_normal(A)]


def as_params(arrays: list[np.ndarray], requires_grad: bool = True) -> list[Tensor]:
    return [tensor(a.copy(), requires_grad=requires_grad) for a in arrays]


def q_net(params: list, s) -> Tensor:
    """A 2-layer Q-network from rlgrad operations directly (smooth, for finite differences)."""
    w1, b1, w2, b2 = params
    return rnp.tanh(s @ w1 + b1) @ w2 + b2


def q_np(arrays: list[np.ndarray], s: np.ndarray) -> np.ndarray:
    w1, b1, w2, b2 = arrays
    return np.tanh(s @ w1 + b1) @ w2 + b2


def batch(seed: int = 1) -> dict[str, np.ndarray]:
    r = rng(seed)
    return {
        "s": r.standard_normal((N, D)),
        "a": r.integers(0, A, N),
        "r": 2.0 * r.standard_normal(N),  # large enough that some TD errors get clipped
        "s2": r.standard_normal((N, D)),
        "term": (r.random(N) < 0.3).astype(np.float64),
    }


def numeric_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of scalar ``f`` at ``x``, element by element."""
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        old = x[i]
        x[i] = old + eps
        up = f(x)
        x[i] = old - eps
        down = f(x)
        x[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


def softmax_np(z: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---- the softmax policy-gradient loss of the TensorFlow question --------------------------------
@pytest.mark.parametrize("select", ["gather_nd", "gather", "take_along_axis", "fancy"])
def test_policy_loss_gradient_is_closed_form(select: str) -> None:
    r = rng(2)
    z = r.standard_normal((N, A))
    actions = r.integers(0, A, N)
    actions[:3] = actions[0]  # repeated actions, repeated rows of the one-hot
    reward = r.standard_normal(N)
    rows = np.arange(N)
    logits = tensor(z, requires_grad=True)
    probs = rnp.softmax(logits, axis=1)
    if select == "gather_nd":
        picked = gather_nd(probs, np.stack([rows, actions], axis=1))
    elif select == "gather":
        picked = gather(probs, 1, actions[:, None])[:, 0]
    elif select == "take_along_axis":
        picked = take_along_axis(probs, actions[:, None], 1)[:, 0]
    else:
        picked = probs[rows, actions]
    loss = -rnp.mean(rnp.log(picked) * reward)
    loss.backward()
    closed = (softmax_np(z) - one_hot(actions, A)) * reward[:, None] / N
    np.testing.assert_allclose(logits.grad._value, closed, rtol=1e-10, atol=1e-14)


def test_policy_loss_transposed_layout_as_in_the_question() -> None:
    # y = softmax(W h + b, dim=0): columns are samples, index rows are (action, sample)
    r = rng(3)
    z = r.standard_normal((A, N))
    actions = r.integers(0, A, N)
    reward = r.standard_normal(N)

    def loss_fn(logits):
        y = rnp.softmax(logits, axis=0)
        pai = gather_nd(y, np.stack([actions, np.arange(N)], axis=1))
        return -rnp.mean(rnp.log(pai) * reward)

    closed = ((softmax_np(z, axis=0) - one_hot(actions, A).T) * reward / N)
    np.testing.assert_allclose(rlgrad.grad(loss_fn)(z), closed, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(numeric_grad(lambda v: float(loss_fn(v)), z.copy()), closed,
                               rtol=1e-6, atol=1e-9)


# ---- DQN: Huber on a stopped target == DQN 3.0's backward(-targets) -----------------------------
def huber(d):
    ad = rnp.abs(d)
    return rnp.where(ad._value <= 1.0, 0.5 * d * d, ad - 0.5)


def dqn_huber_grads(online: list[Tensor], target_arrays: list[np.ndarray] | None, b: dict,
                    cut: str) -> None:
    """(a): Huber loss on Q(s, a) against a target the gradient must not flow into."""
    q = q_net(online, b["s"])
    q_sa = gather(q, 1, b["a"][:, None])[:, 0]
    if cut == "no_grad":
        with no_grad():
            q2 = q_net(as_params(target_arrays, False), b["s2"]).max(axis=1)
    elif cut == "stop_gradient":  # the online network itself as target, cut by stop_gradient
        q2 = stop_gradient(q_net(online, b["s2"]).max(axis=1))
    else:  # detach
        q2 = q_net(online, b["s2"]).max(axis=1).detach()
    y = b["r"] + GAMMA * (1 - b["term"]) * q2
    huber(y - q_sa).sum().backward()


def dqn3_targets(q_all: np.ndarray, q2_all: np.ndarray, b: dict) -> np.ndarray:
    """(b): DQN 3.0's getQUpdate in NumPy, outside autodiff."""
    rows = np.arange(N)
    delta = b["r"] + GAMMA * (1 - b["term"]) * q2_all.max(axis=1) - q_all[rows, b["a"]]
    delta = np.clip(delta, -1.0, 1.0)
    targets = np.zeros_like(q_all)
    targets[rows, b["a"]] = delta
    return targets


@pytest.mark.parametrize("cut", ["no_grad", "stop_gradient", "detach"])
def test_dqn_update_two_ways_same_gradients(cut: str) -> None:
    b = batch()
    arrays, target_arrays = net_arrays(10), net_arrays(11)
    online = as_params(arrays)
    dqn_huber_grads(online, target_arrays, b, cut)

    net2 = as_params(arrays)
    q_all = q_net(net2, b["s"])  # the network's output layer: backpropagation starts here
    q2_all = q_np(target_arrays if cut == "no_grad" else arrays, b["s2"])
    targets = dqn3_targets(q_all._value, q2_all, b)
    assert np.any(np.abs(targets) == 1.0), "the batch should exercise the clipping"
    q_all.backward(-targets, retain_graph=True)
    for p, p2 in zip(online, net2):
        np.testing.assert_allclose(p.grad._value, p2.grad._value, rtol=1e-12, atol=1e-14)

    # the same through autograd.grad(..., grad_outputs=) and functionally through vjp
    grads = autograd.grad(q_all, net2, grad_outputs=-targets)
    for p, g in zip(online, grads):
        np.testing.assert_allclose(p.grad._value, g._value, rtol=1e-12, atol=1e-14)
    _, vjp_fn = rlgrad.vjp(lambda *ps: q_net(list(ps), b["s"]), *arrays)
    for p, g in zip(online, vjp_fn(-targets)):
        np.testing.assert_allclose(p.grad._value, g, rtol=1e-12, atol=1e-14)


def test_dqn_gradient_matches_finite_differences_with_target_held() -> None:
    b = batch(4)
    arrays, target_arrays = net_arrays(12), net_arrays(13)
    online = as_params(arrays)
    dqn_huber_grads(online, target_arrays, b, "no_grad")
    q2 = q_np(target_arrays, b["s2"]).max(axis=1)
    y = b["r"] + GAMMA * (1 - b["term"]) * q2

    def loss_w2(w2: np.ndarray) -> float:
        d = y - q_np([arrays[0], arrays[1], w2, arrays[3]], b["s"])[np.arange(N), b["a"]]
        return float(np.sum(np.where(np.abs(d) <= 1, 0.5 * d * d, np.abs(d) - 0.5)))

    np.testing.assert_allclose(online[2].grad._value, numeric_grad(loss_w2, arrays[2].copy()),
                               rtol=1e-6, atol=1e-8)


def test_frozen_parameter_gets_no_gradient_and_no_error() -> None:
    b = batch()
    arrays, target_arrays = net_arrays(10), net_arrays(11)
    ref = as_params(arrays)
    dqn_huber_grads(ref, target_arrays, b, "no_grad")
    frozen = as_params(arrays)
    frozen[0].requires_grad_(False)  # freeze the first layer's weights
    dqn_huber_grads(frozen, target_arrays, b, "no_grad")
    assert frozen[0].grad is None
    for p, r in zip(frozen[1:], ref[1:]):
        np.testing.assert_allclose(p.grad._value, r.grad._value, rtol=1e-12)
    # the DQN 3.0 path too, and autograd.grad over the trainable ones only
    q_all = q_net(frozen, b["s"])
    targets = dqn3_targets(q_all._value, q_np(target_arrays, b["s2"]), b)
    for p in frozen:
        p.grad = None
    q_all.backward(-targets)
    assert frozen[0].grad is None
    np.testing.assert_allclose(frozen[2].grad._value, ref[2].grad._value, rtol=1e-12)
    with pytest.raises(RuntimeError, match="does not require grad"):
        autograd.grad(q_net(frozen, b["s"]).sum(), [frozen[0]])


# ---- backpropagation seeded at an intermediate tensor -------------------------------------------
def test_backward_from_hidden_layer_with_given_gradient() -> None:
    r = rng(5)
    s = r.standard_normal((N, D))
    arrays = net_arrays(14)
    w1, b1, w2, b2 = as_params(arrays)
    hidden = rnp.tanh(s @ w1 + b1)
    q = hidden @ w2 + b2
    g_hidden = r.standard_normal(hidden.shape)  # "computed elsewhere"
    pre = 1 - hidden._value**2
    want_w1, want_b1 = s.T @ (g_hidden * pre), (g_hidden * pre).sum(axis=0)
    # tf.gradients(ys=hidden, xs=[w1, b1], grad_ys=g_hidden)
    gw1, gb1 = autograd.grad(hidden, [w1, b1], grad_outputs=g_hidden, retain_graph=True)
    np.testing.assert_allclose(gw1._value, want_w1, rtol=1e-12)
    np.testing.assert_allclose(gb1._value, want_b1, rtol=1e-12)
    hidden.backward(tensor(g_hidden))
    np.testing.assert_allclose(w1.grad._value, want_w1, rtol=1e-12)
    assert w2.grad is None and b2.grad is None  # below the seed only
    # functional: make_vjp returns (vjp, ans)
    vjp_fn, ans = rlgrad.make_vjp(lambda w: rnp.tanh(s @ w + arrays[1]))(arrays[0])
    np.testing.assert_allclose(ans, hidden._value, rtol=1e-14)
    np.testing.assert_allclose(vjp_fn(g_hidden), want_w1, rtol=1e-12)
    del q


def test_backward_seed_errors_are_clear() -> None:
    w = tensor(rng(6).standard_normal((3, 2)), requires_grad=True)
    out = w * 2
    with pytest.raises(RuntimeError, match="gradient="):
        out.backward()
    with pytest.raises(RuntimeError, match=r"shape \(2, 3\).*\(3, 2\)"):
        out.backward(np.ones((2, 3)))
    with pytest.raises(RuntimeError, match="does not require grad"):
        out.detach().backward(np.ones((3, 2)))


# ---- gradients with respect to inputs (saliency, optimizing an input) ---------------------------
def test_saliency_of_probability_and_loss_vs_finite_differences() -> None:
    b = batch(7)
    arrays = net_arrays(15)
    params = as_params(arrays, requires_grad=False)  # a trained, frozen model
    x = tensor(b["s"].copy()).requires_grad_()
    probs = rnp.softmax(q_net(params, x), axis=1)
    p0 = probs[3, b["a"][3]]
    (g_prob,) = autograd.grad(p0, x, retain_graph=True)
    num = numeric_grad(lambda v: softmax_np(q_np(arrays, v))[3, b["a"][3]], b["s"].copy())
    np.testing.assert_allclose(g_prob._value, num, rtol=1e-6, atol=1e-9)
    assert np.all(g_prob._value[np.arange(N) != 3] == 0)  # other samples do not matter

    reward = b["r"]
    loss = -rnp.mean(rnp.log(gather_nd(probs, np.stack([np.arange(N), b["a"]], 1))) * reward)
    loss.backward()
    assert all(p.grad is None for p in params)

    def loss_np(v: np.ndarray) -> float:
        pr = softmax_np(q_np(arrays, v))
        return float(-np.mean(np.log(pr[np.arange(N), b["a"]]) * reward))

    num = numeric_grad(loss_np, b["s"].copy())
    np.testing.assert_allclose(x.grad._value, num, rtol=1e-6, atol=1e-9)
    # functional: grad over the input argument, the parameters untouched
    f = lambda ps, v: -rnp.mean(rnp.log(gather_nd(rnp.softmax(q_net(ps, v), axis=1),  # noqa: E731
                                                  np.stack([np.arange(N), b["a"]], 1))) * reward)
    np.testing.assert_allclose(rlgrad.grad(f, argnum=1)(arrays, b["s"]), num, rtol=1e-6, atol=1e-9)


def test_optimize_the_input_of_a_frozen_model() -> None:
    arrays = net_arrays(16)
    params = as_params(arrays)
    for p in params:
        p.requires_grad_(False)
    x = tensor(np.zeros((1, D))).requires_grad_()
    before = None
    for _ in range(30):  # raise Q(x, action 2) by gradient ascent on x
        q = q_net(params, x)[0, 2]
        before = q.item() if before is None else before
        q.backward()
        x._value += 0.1 * x.grad._value
        x.grad = None
    assert q_np(arrays, x._value)[0, 2] > before + 0.1
    np.testing.assert_array_equal(params[0]._value, arrays[0])


# ---- stop_gradient / detach at every nesting level ----------------------------------------------
def test_stop_gradient_every_nesting_level() -> None:
    f = lambda x: x**3 * stop_gradient(x)  # noqa: E731 - d/dx = 3x^2 sg(x), d2 = 6x sg(x), d3 = 6 sg
    assert rlgrad.grad(f)(2.0) == pytest.approx(24.0)
    assert rlgrad.grad(rlgrad.grad(f))(2.0) == pytest.approx(24.0)
    assert rlgrad.grad(rlgrad.grad(rlgrad.grad(f)))(2.0) == pytest.approx(12.0)
    # an inner transform stopping the *outer* variable: d/da sum(grad_b(b sg(a) a)) = sg(a)
    outer = lambda a: rnp.sum(rlgrad.grad(lambda bb: rnp.sum(bb * stop_gradient(a) * a))(a))  # noqa: E731
    np.testing.assert_allclose(rlgrad.grad(outer)(np.array([1.0, -2.0])), [1.0, -2.0])
    hess = rlgrad.hessian(lambda v: rnp.sum(v**2 * stop_gradient(v)))(np.array([1.0, 3.0]))
    np.testing.assert_allclose(hess, np.diag([2.0, 6.0]))
    # Tensor.detach inside a transform behaves the same
    hess = rlgrad.hessian(lambda v: rnp.sum(v**2 * v.detach()))(np.array([1.0, 3.0]))
    np.testing.assert_allclose(hess, np.diag([2.0, 6.0]))
    # and stop_gradient under no_grad / on plain arrays is the identity on values
    with no_grad():
        assert stop_gradient(tensor(np.ones(2), requires_grad=True)).requires_grad is False
    np.testing.assert_array_equal(stop_gradient(np.arange(3.0)), np.arange(3.0))


def test_detach_with_create_graph() -> None:
    x = tensor(np.array([2.0, -1.0]), requires_grad=True)
    y = (x**3 * x.detach()).sum()
    (g,) = autograd.grad(y, x, create_graph=True)
    np.testing.assert_allclose(g._value, 3 * x._value**2 * x._value)
    (h,) = autograd.grad(g.sum(), x, create_graph=True)
    np.testing.assert_allclose(h._value, 6 * x._value * x._value)
    (t,) = autograd.grad(h.sum(), x)
    np.testing.assert_allclose(t._value, 6 * x._value)
    z = (x**2 * stop_gradient(x * 5)).sum()
    (gz,) = autograd.grad(z, x, create_graph=True)
    (hz,) = autograd.grad(gz.sum(), x)
    np.testing.assert_allclose(hz._value, 2 * 5 * x._value)


# ---- second order through gather and through stop_gradient --------------------------------------
def unflatten(theta, shapes=((D, H), (H,), (H, A), (A,))) -> list:
    out, pos = [], 0
    for shp in shapes:
        n = int(np.prod(shp))
        out.append(theta[pos:pos + n].reshape(shp))
        pos += n
    return out


def test_hessian_vector_product_through_gather_nd() -> None:
    r = rng(8)
    b = batch(8)
    idx = np.stack([np.arange(N), b["a"]], axis=1)
    reward = r.standard_normal(N)

    def loss(theta):
        probs = rnp.softmax(q_net(unflatten(theta), b["s"]), axis=1)
        return -rnp.mean(rnp.log(gather_nd(probs, idx)) * reward)

    theta = np.concatenate([a.ravel() for a in net_arrays(17)])
    v = r.standard_normal(theta.shape)
    hv = rlgrad.hvp(loss)(theta, v)
    eps = 1e-5
    g = rlgrad.grad(loss)
    fd = (g(theta + eps * v) - g(theta - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-8)
    # and PyTorch-style, with create_graph=True
    t = tensor(theta, requires_grad=True)
    (gt,) = autograd.grad(loss(t), t, create_graph=True)
    (hv2,) = autograd.grad((gt * v).sum(), t)
    np.testing.assert_allclose(hv2._value, hv, rtol=1e-10, atol=1e-12)


def test_second_order_through_stop_gradient_holds_the_target_constant() -> None:
    # TD loss whose target uses the online network itself, cut by stop_gradient: its Hessian is
    # that of the same loss with the target frozen as a constant (and not the full Hessian).
    b = batch(9)
    rows = np.arange(N)
    theta0 = np.concatenate([a.ravel() for a in net_arrays(18)])

    def td(theta, target):
        q_sa = q_net(unflatten(theta), b["s"])[rows, b["a"]]
        return 0.5 * rnp.sum((target - q_sa) ** 2)

    def target_of(theta):
        return b["r"] + GAMMA * (1 - b["term"]) * rnp.max(q_net(unflatten(theta), b["s2"]), axis=1)

    cut = lambda th: td(th, stop_gradient(target_of(th)))  # noqa: E731
    full = lambda th: td(th, target_of(th))  # noqa: E731
    held = target_of(theta0)  # plain array: a constant
    frozen = lambda th: td(th, held)  # noqa: E731

    v = rng(9).standard_normal(theta0.shape)
    hv_cut = rlgrad.hvp(cut)(theta0, v)
    eps = 1e-5
    g_frozen = rlgrad.grad(frozen)
    fd = (g_frozen(theta0 + eps * v) - g_frozen(theta0 - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv_cut, fd, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(rlgrad.grad(cut)(theta0), g_frozen(theta0), rtol=1e-12)
    assert not np.allclose(hv_cut, rlgrad.hvp(full)(theta0, v), rtol=1e-3)


def test_check_grads_order_two_through_gather() -> None:
    # (finite differences cannot see a stop_gradient, so it is checked against a held constant
    # in the test above rather than with check_grads)
    r = rng(10)
    actions = r.integers(0, A, N)
    baseline = 0.3

    def f(z):
        picked = gather(rnp.softmax(z, axis=1), 1, actions[:, None])
        return rnp.sum((picked - baseline) ** 2 * rnp.log(picked))

    rlgrad.check_grads(f, order=2)(r.standard_normal((N, A)))

"""rlgrad.analysis checked with numbers: attributions against finite differences and the
completeness axiom, curvature against a dense Hessian built independently, frozen-model input
optimization against a known fixed point, and the explainer against each way a path gets cut."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import Tensor, autograd, no_grad, tensor
from rlgrad.analysis import (
    HessianOperator,
    dense_hessian,
    explain,
    frozen,
    hessian_vector_product,
    hutchinson_trace,
    integrated_gradients,
    optimize_input,
    saliency,
    top_hessian_eigenvalues,
)

D, H, A = 4, 5, 3


def _arrays(seed: int = 0) -> list[np.ndarray]:
    r = np.random.default_rng(seed)
    return [0.7 * r.standard_normal((D, H)), 0.2 * r.standard_normal(H),
            0.7 * r.standard_normal((H, A)), 0.2 * r.standard_normal(A)]


def _net(params: list, x: object) -> object:
    w1, b1, w2, b2 = params
    return rnp.tanh(x @ w1 + b1) @ w2 + b2


def _params(seed: int = 0) -> list[Tensor]:
    return [tensor(a.copy(), requires_grad=True) for a in _arrays(seed)]


def _fd_input_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


# ---- attributions ---------------------------------------------------------------------------
def test_saliency_of_an_output_matches_finite_differences() -> None:
    arrs = _arrays()
    x = np.random.default_rng(1).standard_normal((2, D))
    model = lambda t: _net([tensor(a) for a in arrs], t)  # noqa: E731
    s = saliency(model, x, target=1)
    fd = _fd_input_grad(lambda z: _net(arrs, z)[:, 1].sum(), x)
    np.testing.assert_allclose(s._value, fd, rtol=1e-6, atol=1e-8)
    # one index per row (the action taken) and the greedy output
    acts = np.array([2, 0])
    s2 = saliency(model, x, target=acts)
    fd2 = _fd_input_grad(lambda z: _net(arrs, z)[np.arange(2), acts].sum(), x)
    np.testing.assert_allclose(s2._value, fd2, rtol=1e-6, atol=1e-8)
    greedy = _net(arrs, x).argmax(-1)
    s3 = saliency(model, x, target="max")
    fd3 = _fd_input_grad(lambda z: _net(arrs, z)[np.arange(2), greedy].sum(), x)
    np.testing.assert_allclose(s3._value, fd3, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(saliency(model, x, target=1, absolute=True)._value, np.abs(fd), rtol=1e-6)


def test_saliency_of_a_loss_matches_finite_differences_and_leaves_params_alone() -> None:
    ps = _params()
    x = np.random.default_rng(2).standard_normal((3, D))
    y = np.random.default_rng(3).standard_normal((3, A))
    s = saliency(lambda t: _net(ps, t), x, target=lambda q: ((q - y) ** 2).mean())
    arrs = _arrays()
    fd = _fd_input_grad(lambda z: ((_net(arrs, z) - y) ** 2).mean(), x)
    np.testing.assert_allclose(s._value, fd, rtol=1e-6, atol=1e-9)
    assert all(p.grad is None for p in ps)


def test_saliency_needs_a_target_for_vector_outputs() -> None:
    ps = _params()
    with pytest.raises(ValueError, match="target="):
        saliency(lambda t: _net(ps, t), np.ones(D))


@pytest.mark.parametrize("method", ["gausslegendre", "trapezoid", "midpoint"])
def test_integrated_gradients_completeness(method: str) -> None:
    arrs = _arrays(4)
    model = lambda t: _net([tensor(a) for a in arrs], t)  # noqa: E731
    x = np.random.default_rng(5).standard_normal(D)
    base = np.full(D, 0.1)
    attr, delta = integrated_gradients(model, x, base, steps=64, target=2, method=method,
                                       return_delta=True)
    expected = _net(arrs, x)[2] - _net(arrs, base)[2]
    tol = 1e-9 if method == "gausslegendre" else 2e-3 * max(1.0, abs(expected))
    assert abs(attr._value.sum() - expected) < tol
    assert abs(delta) < tol
    assert attr.shape == x.shape


# ---- curvature --------------------------------------------------------------------------------
def _loss_setup(seed: int = 0) -> tuple[list[Tensor], Tensor, np.ndarray]:
    """A small network's MSE loss, and its dense Hessian computed independently: rlgrad.hessian
    (jacobian of jacobian) of the same loss written as a function of one flat vector."""
    arrs = _arrays(seed)
    r = np.random.default_rng(seed + 10)
    x, y = r.standard_normal((6, D)), r.standard_normal((6, A))
    sizes = [a.size for a in arrs]
    splits = np.cumsum(sizes)[:-1]

    def flat_loss(theta: object) -> object:
        parts = rnp.split(theta, splits)
        ps = [p.reshape(a.shape) for p, a in zip(parts, arrs)]
        return ((_net(ps, x) - y) ** 2).mean()

    theta0 = np.concatenate([a.ravel() for a in arrs])
    h_ref = np.asarray(rlgrad.hessian(flat_loss)(theta0))
    ps = [tensor(a.copy(), requires_grad=True) for a in arrs]
    loss = ((_net(ps, x) - y) ** 2).mean()
    return ps, loss, h_ref


def test_hvp_and_dense_hessian_match_the_reference_hessian() -> None:
    ps, loss, h_ref = _loss_setup()
    n = h_ref.shape[0]
    assert n == sum(p._value.size for p in ps)
    v = np.random.default_rng(0).standard_normal(n)
    hv = hessian_vector_product(loss, ps, v)
    np.testing.assert_allclose(np.concatenate([h._value.ravel() for h in hv]), h_ref @ v,
                               rtol=1e-8, atol=1e-10)
    # given per parameter, the result is per parameter too
    per = np.split(v, np.cumsum([p._value.size for p in ps])[:-1])
    hv2 = hessian_vector_product(loss, ps, [c.reshape(p.shape) for c, p in zip(per, ps)])
    assert [h.shape for h in hv2] == [p.shape for p in ps]
    np.testing.assert_allclose(dense_hessian(loss, ps), h_ref, rtol=1e-8, atol=1e-10)
    assert all(p.grad is None for p in ps)


@pytest.mark.parametrize("method", ["power", "lanczos"])
def test_top_eigenvalue_matches_eigvalsh(method: str) -> None:
    ps, loss, h_ref = _loss_setup(1)
    ev = np.linalg.eigvalsh(h_ref)
    top_lm = ev[np.argmax(np.abs(ev))]
    got = top_hessian_eigenvalues(loss, ps, k=1, method=method, iters=300, tol=1e-10)
    np.testing.assert_allclose(got[0], top_lm, rtol=1e-5)


def test_lanczos_top_k_and_eigenvectors() -> None:
    ps, loss, h_ref = _loss_setup(2)
    ev = np.linalg.eigvalsh(h_ref)
    vals, vecs = top_hessian_eigenvalues(loss, ps, k=3, method="lanczos", which="LA",
                                         iters=h_ref.shape[0], return_eigenvectors=True)
    np.testing.assert_allclose(vals, ev[::-1][:3], rtol=1e-6, atol=1e-9)
    for lam, u in zip(vals, vecs):
        np.testing.assert_allclose(h_ref @ u, lam * u, atol=1e-6)
    lm = top_hessian_eigenvalues(loss, ps, k=2, method="power", iters=2000, tol=1e-12)
    np.testing.assert_allclose(lm, ev[np.argsort(-np.abs(ev))][:2], rtol=1e-4)


def test_hutchinson_trace_estimate() -> None:
    ps, loss, h_ref = _loss_setup(3)
    true = np.trace(h_ref)
    est, se = hutchinson_trace(loss, ps, samples=800, seed=0, return_std=True)
    assert abs(est - true) < 4 * se
    assert abs(est - true) < 0.1 * abs(true)
    est_n = hutchinson_trace(loss, ps, samples=800, seed=1, distribution="normal")
    assert abs(est_n - true) < 0.2 * abs(true)


def test_hessian_operator_zero_blocks_for_unused_params() -> None:
    w = tensor(np.array([1.0, 2.0]), requires_grad=True)
    u = tensor(np.array([3.0]), requires_grad=True)
    loss = (w ** 3).sum()
    h = HessianOperator(loss, {"w": w, "u": u}).dense()
    np.testing.assert_allclose(h, np.diag([6.0, 12.0, 0.0]))


# ---- optimize_input -----------------------------------------------------------------------
def test_optimize_input_finds_the_fixed_point_with_the_model_frozen() -> None:
    nn = pytest.importorskip("rlgrad.nn")
    lin = nn.Linear(3, 3, dtype=np.float64)
    w = np.random.default_rng(0).standard_normal((3, 3))
    lin.weight._value[...] = 0.5 * w / np.linalg.norm(w, 2)  # a contraction: one fixed point
    lin.bias._value[...] = [0.3, -0.2, 0.1]
    lin.bias.requires_grad_(False)  # a flag that must come back as it was (False)

    def f(x: object) -> object:
        return rnp.tanh(lin(x))

    before = [p._value.copy() for p in lin.parameters()]
    res = optimize_input(f, lambda x, y: ((x - y) ** 2).sum(), np.zeros(3), steps=400,
                         optimizer="adam", lr=0.05, params=lin)
    star = np.zeros(3)
    for _ in range(200):  # the fixed point by iterating the contraction itself
        star = np.tanh(lin.weight._value @ star + lin.bias._value)
    np.testing.assert_allclose(res.x._value, star, atol=1e-4)
    assert res.loss < 1e-8 and res.losses[0] > res.loss
    for p, b in zip(lin.parameters(), before):
        np.testing.assert_array_equal(p._value, b)
        assert p.grad is None
    assert lin.weight.requires_grad is True and lin.bias.requires_grad is False
    assert not res.x.requires_grad


def test_optimize_input_restores_flags_on_error_and_accepts_params() -> None:
    ps = _params()
    with pytest.raises(ValueError, match="scalar"):
        optimize_input(lambda t: _net(ps, t), lambda x, y: y, np.ones(D), params=ps, steps=2)
    assert all(p.requires_grad for p in ps)
    with frozen(ps):
        assert not any(p.requires_grad for p in ps)
    assert all(p.requires_grad for p in ps)
    res = optimize_input(lambda t: _net(ps, t), lambda x, y: (y ** 2).sum(), np.ones(D),
                         params=ps, steps=50, optimizer="sgd", lr=0.05)
    assert res.losses[-1] < res.losses[0] and all(p.grad is None for p in ps)


# ---- explain ---------------------------------------------------------------------------------
def _true_norm(loss: Tensor, p: Tensor) -> float:
    (g,) = autograd.grad(loss, [p], retain_graph=True)
    return float(np.linalg.norm(g._value))


def _cut_graph(seed: int = 0) -> tuple[dict[str, Tensor], object]:
    r = np.random.default_rng(seed)
    t = lambda *s: tensor(r.standard_normal(s), requires_grad=True)  # noqa: E731
    ps = {"w": t(D, H), "b": t(H), "w_detach": t(D), "w_nograd": t(D), "w_argmax": t(D, A),
          "w_cast": t(D), "table": t(A), "mu": t(), "log_std": t(), "logits": t(A), "unused": t(2),
          "frozen": tensor(r.standard_normal(D)), "actions": tensor(np.array([0, 2, 1]))}
    x = tensor(r.standard_normal((3, D)))

    def loss_fn() -> Tensor:
        h = rnp.tanh(x @ ps["w"] + ps["b"])  # gets a gradient
        loss = (h ** 2).mean()
        target = (x @ ps["w_detach"]).detach()  # cut: detach
        loss = loss + (h.sum(-1) * target).mean()
        with no_grad():
            baseline = x @ ps["w_nograd"]  # cut: no_grad
        loss = loss + (h.sum(-1) * baseline).mean()
        greedy = (x @ ps["w_argmax"]).argmax(-1)  # cut: argmax, then used as an index
        loss = loss + ps["table"][greedy].sum()
        cell = (rnp.abs(x @ ps["w_cast"]) * 2).astype(np.int64) % A  # cut: integer cast
        loss = loss + ps["table"][cell].sum()
        dist = rlgrad.distributions.Normal(ps["mu"], rnp.exp(ps["log_std"]))
        a = dist.sample((3,))  # cut: sample
        loss = loss + (h.sum(-1) * a).mean()
        k = rlgrad.distributions.Categorical(logits=ps["logits"]).sample((3,))
        loss = loss + ps["table"][k].sum() + (x @ ps["frozen"]).sum() * h.mean()
        return loss + rlgrad.gather(h, 1, ps["actions"][:, None]).sum()

    return ps, loss_fn


def test_explain_names_every_cut_when_tracing_a_function() -> None:
    pytest.importorskip("rlgrad.distributions")
    ps, loss_fn = _cut_graph()
    rep = explain(loss_fn, ps)
    loss = rep.loss  # the traced loss, with its graph kept
    for name in ("w", "b", "table"):
        assert rep[name].status == "grad"
        np.testing.assert_allclose(rep[name].grad_norm, _true_norm(loss, ps[name]), rtol=1e-12)
    assert rep["w_detach"].reason == "detach" and rep["w_detach"].cuts[0].op == "stop_gradient"
    assert rep["w_nograd"].reason == "no_grad" and rep["w_nograd"].cuts[0].op == "matmul"
    assert rep["w_argmax"].reason == "argmax" and rep["w_argmax"].cuts[0].op == "argmax"
    assert rep["w_cast"].reason == "integer cast" and rep["w_cast"].cuts[0].op == "astype"
    for name in ("mu", "log_std", "logits"):
        assert rep[name].status == "cut" and rep[name].reason == "sample", rep[name]
    assert rep["log_std"].cuts[0].path == ["log_std", "exp", "sample"]
    assert rep["unused"].reason == "unused"
    assert rep["frozen"].reason == "frozen"
    assert rep["actions"].reason == "integer"
    text = str(rep)
    for word in ("detach", "no_grad", "argmax", "sample", "unused", "integer"):
        assert word in text
    assert [r.name for r in rep] == list(ps)


def test_explain_on_a_loss_tensor_keeps_the_graph_and_grads_untouched() -> None:
    ps = _params()
    x = tensor(np.random.default_rng(0).standard_normal((3, D)))
    extra = tensor(np.ones(D), requires_grad=True)
    q = _net(ps, x)
    target = (q * 0.9).detach()  # a semi-gradient TD target: the cut is on another path
    loss = ((q - target) ** 2).mean() + (q.sum(-1) * (x @ extra).detach()).mean()
    rep = explain(loss, ps + [extra])
    assert [r.name for r in rep] == ["p0", "p1", "p2", "p3", "p4"]
    for p, r in zip(ps, rep):
        np.testing.assert_allclose(r.grad_norm, _true_norm(loss, p), rtol=1e-12)
        assert r.cuts and r.cuts[0].kind == "detach"  # it also feeds the (cut) target
        assert p.grad is None
    assert rep["p4"].status == "cut" and rep["p4"].cuts[0].path == ["p4", "matmul", "stop_gradient"]
    loss.backward()  # the graph was not freed by explain
    assert all(p.grad is not None for p in ps)
    with pytest.raises(RuntimeError, match="before"):
        explain(loss, ps)  # backward freed it now


def test_explain_with_a_module_and_constant_loss_hint() -> None:
    nn = pytest.importorskip("rlgrad.nn")
    net = nn.Linear(D, 2)
    x = np.ones((1, D), dtype=np.float32)
    rep = explain(net(x).sum(), net)
    assert [r.name for r in rep] == ["weight", "bias"]
    assert all(r.has_grad for r in rep)
    const = (net(x).detach() * 2).sum()  # every path cut, then more ops on the constant
    rep2 = explain(const, net)  # the engine keeps the way back to the cut: the loss alone says it
    assert all(r.reason == "detach" for r in rep2)
    rep3 = explain(lambda: (net(x).detach() * 2).sum(), net)
    assert all(r.reason == "detach" for r in rep3)


def test_dot_output_draws_cut_edges_dashed(tmp_path, monkeypatch) -> None:
    pytest.importorskip("rlgrad.distributions")
    ps, loss_fn = _cut_graph(1)
    rep = explain(loss_fn, ps)
    dot = rep.to_dot()
    assert dot.startswith("digraph")
    cut_lines = [ln for ln in dot.splitlines() if "style=dashed" in ln and "->" in ln]
    labels = " ".join(cut_lines)
    for op in ("stop_gradient", "argmax", "astype", "sample", "matmul (no_grad)"):
        assert f"cut: {op}" in labels, op
    assert "style=dotted" in dot  # constants flowing on after a cut
    out = rep.write(tmp_path / "graph.dot")
    assert out.read_text() == dot
    monkeypatch.setattr("shutil.which", lambda name: None)
    out = rep.write(tmp_path / "graph.svg")  # no Graphviz: the .dot source only
    assert out == tmp_path / "graph.dot" and out.exists()
    # with a `dot` program (a stand-in that copies its input) the picture is rendered
    fake = tmp_path / "dot"
    fake.write_text(f"#!{sys.executable}\nimport shutil, sys\n"
                    "assert sys.argv[1] == '-Tpng' and sys.argv[3] == '-o'\n"
                    "shutil.copy(sys.argv[2], sys.argv[4])\n")
    fake.chmod(0o755)
    monkeypatch.setattr("shutil.which", lambda name: str(fake))
    out = rep.write(tmp_path / "pic.png")
    assert out == tmp_path / "pic.png" and out.read_text() == dot
    assert (tmp_path / "pic.dot").read_text() == dot


def test_rlgrad_explain_is_wired() -> None:
    assert rlgrad.explain is explain


def test_explain_names_no_grad_through_later_ops_on_the_target() -> None:
    # DQN's target network: computed under no_grad, then max and arithmetic on constants; the
    # loss tensor alone must still say why the target's parameters get no gradient
    from rlgrad import nn as rnn

    online = rnn.Sequential(rnn.Linear(3, 4), rnn.Tanh(), rnn.Linear(4, 2))
    target = rnn.Sequential(rnn.Linear(3, 4), rnn.Tanh(), rnn.Linear(4, 2))
    x = rlgrad.tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    with rlgrad.no_grad():
        q_next = target(x).max(1)[0]
    loss = ((online(x).max(1)[0] - (1.0 + 0.9 * q_next)) ** 2).mean()
    params = dict(online.named_parameters()) | {f"t.{k}": v for k, v in target.named_parameters()}
    report = rlgrad.explain(loss, params)
    text = str(report)
    for name in ("t.0.weight", "t.0.bias", "t.2.weight", "t.2.bias"):
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(name))
        assert "cut by no_grad" in line, line
    assert "0.weight" in text and "|grad| =" in text


def test_explain_takes_a_where_condition_for_a_mask_not_a_cut() -> None:
    """softplus's threshold and leaky_relu's sign are comparisons the user never wrote: they
    choose between values the gradient flows through, so they are no cut; a comparison used
    as a value still is."""
    import rlgrad.nn.functional as F

    w = tensor(np.array([[0.5, -1.0], [2.0, 0.3]]), requires_grad=True)
    x = tensor(np.array([[1.0, -2.0], [0.5, 3.0]]))
    for act in (F.softplus, F.leaky_relu):
        report = explain(lambda act=act: act(x @ w).sum(), {"w": w})
        assert report.cuts == [] and report["w"].has_grad and report["w"].cuts == []
        # a real cut after it: named alone (was: also "cut by greater: a comparison ...")
        cut = explain(lambda act=act: act(x @ w).detach().sum() * 1.0 + (w * 0).sum().detach(),
                      {"w": w})
        assert [c.kind for c in cut["w"].cuts] == ["detach"], cut["w"].describe()
        assert "comparison" not in str(cut)
    # softplus's gradient is still the sigmoid, checked against the closed form
    g = autograd.grad(F.softplus(x @ w).sum(), [w])[0]._value
    s = 1.0 / (1.0 + np.exp(-(x._value @ w._value)))
    np.testing.assert_allclose(g, x._value.T @ s, rtol=1e-12)
    # a comparison whose booleans are the value is a cut
    value = explain(lambda: (x @ w > 0).astype(np.float64).sum(), {"w": w})
    assert value["w"].status == "cut" and value["w"].cuts[0].kind == "comparison"

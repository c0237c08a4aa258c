"""``lax.scan``'s VJP over saved residuals (``lax._Lin``, JAX's partial evaluation of the
linearized body) against its plain reference, the VJP that runs the body again on the saved
carries (``lax.scan_residuals(False)``): the same gradients bit for bit, eagerly (``nodes_eagerly``)
and under ``rlgrad.jit``; finite differences in float64 to second order; PyTorch's GRU; and the
backward body, which must not hold the forward's operations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import lax, nn
from rlgrad import numpy as rnp

RNG = np.random.default_rng(3)
W = RNG.standard_normal((3, 3)) * 0.5


def _step(w: Any) -> Callable:
    def step(c: Any, x: Any) -> tuple[Any, Any]:
        h, k = c
        h2 = rnp.tanh(h @ w + x) * rnp.exp(-0.1 * h)
        return (h2, k + 1), rnp.sum(h2 * h, axis=-1)
    return step


def _loss(w: Any, h0: Any, xs: Any) -> Any:
    (h, k), ys = lax.scan(_step(w), (h0, np.int32(0)), xs)
    return rnp.sum(h * h) + rnp.sum(ys ** 3) + k.astype(np.float64)


def _args(T: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(T)
    return W.copy(), rng.standard_normal((2, 3)), rng.standard_normal((T, 2, 3))


def _both(fn: Callable[[], Any], hoist: bool = False) -> tuple[Any, Any]:
    """``fn()`` with residuals saved, then recomputed (the reference); hoisting as asked (it
    batches the recomputation too: another order of sums, so bits only without it)."""
    with lax.scan_hoisting(hoist):
        with lax.scan_residuals(True):
            saved = fn()
        with lax.scan_residuals(False):
            recomputed = fn()
    return saved, recomputed


def _same_bits(a: Any, b: Any) -> None:
    for x, y in zip(a if isinstance(a, tuple | list) else [a], b if isinstance(b, tuple | list) else [b]):
        x, y = np.asarray(getattr(x, "_value", x)), np.asarray(getattr(y, "_value", y))
        assert x.dtype == y.dtype and np.array_equal(x, y), np.abs(x - y).max()


@pytest.mark.parametrize("reverse", [False, True])
def test_saved_residuals_give_the_reference_s_gradients_bit_for_bit(reverse: bool) -> None:
    def loss(w: Any, h0: Any, xs: Any) -> Any:
        (h, _), ys = lax.scan(_step(w), (h0, np.int32(0)), xs, reverse=reverse)
        return rnp.sum(h * h) + rnp.sum(ys ** 3)

    args = _args()
    with lax.nodes_eagerly():
        _same_bits(*_both(lambda: rlgrad.grad(loss, (0, 1, 2))(*args)))
    _same_bits(*_both(lambda: rlgrad.jit(rlgrad.grad(loss, (0, 1, 2)), check=True)(*args)))
    eager = rlgrad.grad(loss, (0, 1, 2))(*args)  # a Python loop: the same values, not the same sums
    for a, b in zip(rlgrad.jit(rlgrad.grad(loss, (0, 1, 2)))(*args), eager):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_saved_residuals_match_finite_differences_to_second_order() -> None:
    args = _args(4)
    with lax.nodes_eagerly():
        rlgrad.check_grads(_loss, modes=("rev",), order=2)(*args)
        rlgrad.check_grads(lambda w: _loss(w, args[1], args[2]), modes=("rev", "fwd"), order=2)(args[0])


def test_grad_of_grad_through_saved_residuals_equals_the_reference() -> None:
    """The first backward (recorded) reads the residuals: the second one must give them their
    gradients (the node's VJP then takes the reference path over its residual outputs)."""
    def inner(w: Any, h0: Any, xs: Any) -> Any:
        g = rlgrad.grad(_loss, 0)(w, h0, xs)
        return rnp.sum(g * g) + rnp.sum(g * h0[0])

    args = _args(4)
    with lax.nodes_eagerly():
        saved, recomputed = _both(lambda: rlgrad.grad(inner, (0, 1, 2))(*args))
    for a, b in zip(saved, recomputed):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    jitted = _both(lambda: rlgrad.jit(rlgrad.grad(inner, (0, 1, 2)), check=True)(*args))
    for a, b, c in zip(*jitted, saved):
        np.testing.assert_allclose(a, c, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(b, c, rtol=1e-10, atol=1e-10)


def _gru_train(cell: Any) -> Callable[[Any], Any]:
    def step(x: Any) -> Any:
        cell.zero_grad()
        h, out = lax.scan(lambda h, xt: (cell(xt, h),) * 2,
                          rlgrad.zeros(x.shape[1], cell.hidden_size, dtype=cell.weight_ih.dtype), x)
        loss = (out * out).sum() + (h ** 3).sum()
        loss.backward()
        return loss
    return step


def _grads(cell: Any) -> list[np.ndarray]:
    return [p.grad.numpy().copy() for p in cell.parameters()]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gru_cell_scan_saved_equals_recomputed_bits_and_pytorch(dtype: Any) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tm = torch.nn.GRU(5, 4).to(torch.float64 if dtype == np.float64 else torch.float32)
    cell = nn.GRUCell(5, 4).to(rlgrad.float64 if dtype == np.float64 else rlgrad.float32)
    cell.load_state_dict({k[:-3]: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((7, 3, 5)).astype(dtype)

    def run() -> tuple[Any, list[np.ndarray]]:
        f = rlgrad.jit(_gru_train(cell))
        f(x)
        return f(x), _grads(cell)

    (l_s, g_s), (l_r, g_r) = _both(run)
    _same_bits(l_s, l_r)
    _same_bits(g_s, g_r)
    with lax.scan_hoisting(True):  # the input projection once for all steps: other sums
        l_h, g_h = run()
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(l_h, l_s, rtol=tol)
    for a, b in zip(g_h, g_s):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    tx = torch.from_numpy(x)
    out, h = tm(tx)
    ((out * out).sum() + (h ** 3).sum()).backward()
    tol = 1e-10 if dtype == np.float64 else 2e-5
    for got, p in zip(g_s, tm.parameters()):
        np.testing.assert_allclose(got, p.grad.numpy(), rtol=tol, atol=tol)


def test_the_backward_body_reads_residuals_instead_of_running_the_cell_again() -> None:
    cell = nn.GRUCell(4, 4).double()
    x = np.random.default_rng(2).standard_normal((6, 2, 4))
    ctxs: list[Any] = []
    orig = lax._scan_p.primitive.fwd

    def spy(*a: Any, ctx: Any) -> Any:
        ctxs.append(ctx)
        return orig(*a, ctx=ctx)

    lax._scan_p.primitive.fwd = spy
    try:
        with lax.scan_fusion(False):  # (a loop of cells, not gru_seq: test_lax_fusion.py)
            rlgrad.jit(_gru_train(cell))(x)
    finally:
        lax._scan_p.primitive.fwd = orig
    fwd, bwd = ctxs[0], ctxs[1]
    assert fwd.lin is not None and fwd.n_res > 0
    names = [e[0].name for e in bwd.body.tape]
    assert "gru_cell_grad" in names and "gru_cell" not in names and "linear" not in names, names
    # the input projection, hoisted before the loop (lax._Hoist), is read where it is
    assert any(src == "x" for src, _ in fwd.lin.res_src)
    assert "linear" not in [e[0].name for e in fwd.body.tape]


def test_a_scan_not_differentiated_saves_nothing() -> None:
    cell = nn.GRUCell(4, 4).double()
    ctxs: list[Any] = []
    orig = lax._scan_p.primitive.fwd

    def spy(*a: Any, ctx: Any) -> Any:
        ctxs.append(ctx)
        return orig(*a, ctx=ctx)

    def fwd_only(x: Any) -> Any:
        with rlgrad.no_grad():
            return lax.scan(lambda h, xt: (cell(xt, h),) * 2, rlgrad.zeros(2, 4, dtype=rlgrad.float64),
                            x)[1]

    lax._scan_p.primitive.fwd = spy
    try:
        with lax.scan_fusion(False):
            rlgrad.jit(fwd_only)(np.ones((3, 2, 4)))
    finally:
        lax._scan_p.primitive.fwd = orig
    assert ctxs[0].lin is None and not ctxs[0].save


def test_native_lowering_runs_the_residual_scan() -> None:
    """The forward with residuals and the backward over them are ordinary scan nodes: the
    native backend lowers them (when a compiler is there) and agrees with the NumPy replay."""
    def loss(w: Any, h0: Any, xs: Any) -> Any:
        h, ys = lax.scan(lambda h, x: (rnp.tanh(h @ w + x),) * 2, h0, xs)
        return rnp.sum(h * h) + rnp.sum(ys ** 3)

    args = _args(6)
    g = rlgrad.grad(loss, (0, 1, 2))
    want = rlgrad.jit(g)(*args)
    native = rlgrad.jit(g, backend="auto")
    for a, b in zip(native(*args), want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("save", [True, False])
def test_top_level_backward_through_a_node_matches_the_python_loop(save: bool) -> None:
    """``loss.backward()`` with no transform around (the node's rule runs at depth 0): the
    bodies its VJP traces still record their cotangents (the reference path baked them once)."""
    w0, h0, xs = _args(3)

    def grads(nodes: bool) -> list[np.ndarray]:
        w, h = rlgrad.tensor(w0, requires_grad=True), rlgrad.tensor(h0, requires_grad=True)
        x = rlgrad.tensor(xs, requires_grad=True)
        if nodes:
            with lax.nodes_eagerly(), lax.scan_residuals(save):
                loss = _loss(w, h, x)
        else:
            loss = _loss(w, h, x)
        loss.backward()
        return [t.grad.numpy() for t in (w, h, x)]

    for a, b in zip(grads(True), grads(False)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_hoisting_gives_the_per_step_values_and_gradients() -> None:
    """What reads no carry (here x @ U, exp(x)) runs once for all steps under vmap; values and
    gradients as the loop running it at every step, to rounding; first and second order."""
    U = RNG.standard_normal((3, 3))

    def loss(w: Any, h0: Any, xs: Any) -> Any:
        def body(h: Any, x: Any) -> tuple[Any, Any]:
            h = rnp.tanh(h @ w + x @ U) * rnp.exp(-x * x)
            return h, rnp.sum(h, axis=-1)
        h, ys = lax.scan(body, h0, xs)
        return rnp.sum(h * h) + rnp.sum(ys ** 3)

    args = _args(6)
    g2 = rlgrad.grad(lambda *a: rnp.sum(rlgrad.grad(loss, 0)(*a) ** 2), (0, 1, 2))
    want = [rlgrad.grad(loss, (0, 1, 2))(*args), g2(*args)]  # eager: a Python loop
    for hoist in (True, False):
        with lax.scan_hoisting(hoist):
            got = [rlgrad.jit(rlgrad.grad(loss, (0, 1, 2)), check=True)(*args), rlgrad.jit(g2)(*args)]
        for a, b in zip([*got[0], *got[1]], [*want[0], *want[1]]):
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-11)
    with lax.nodes_eagerly():
        rlgrad.check_grads(loss, modes=("rev", "fwd"), order=2)(*args)


def test_a_part_without_a_batching_rule_stays_in_the_loop() -> None:
    """A loop inside the body over x alone is a node vmap cannot batch: nothing is hoisted."""
    def loss(h0: Any, xss: Any) -> Any:
        def body(h: Any, xs: Any) -> tuple[Any, Any]:
            s, _ = lax.scan(lambda c, x: (c + rnp.sin(x), None), rnp.zeros_like(h), xs)
            h = rnp.tanh(h + s)
            return h, h
        return rnp.sum(lax.scan(body, h0, xss)[1] ** 2)

    h0, xss = np.ones((2, 3)) * 0.1, RNG.standard_normal((4, 5, 2, 3))
    want = rlgrad.grad(loss, (0, 1))(h0, xss)
    for a, b in zip(rlgrad.jit(rlgrad.grad(loss, (0, 1)), check=True)(h0, xss), want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    outer = [b for b, _ in lax._BODIES.values() if "scan" in [e[0].name for e in b.tape]]
    assert outer and all(h is None for b in outer for h in b.hoists.values())


def test_the_residual_path_is_chosen_per_node_not_per_ctx(monkeypatch: Any) -> None:
    """After grad of grad through one node (its residuals read by a recorded VJP: the reference
    path for it), a second node made with the same ctx (as a tape run again makes it) still
    takes the saved path, with the same first-order gradients."""
    w0, h0, xs = _args(4)
    made: list[tuple[tuple, Any]] = []
    scan_p, saved_path = lax._scan_p, lax._scan_grads_saved
    calls: list[int] = []

    def record(*a: Any, ctx: Any) -> Any:
        made.append((a, ctx))
        return scan_p(*a, ctx=ctx)

    def counted(*a: Any) -> Any:
        calls.append(1)
        return saved_path(*a)

    monkeypatch.setattr(lax, "_scan_p", record)
    monkeypatch.setattr(lax, "_scan_grads_saved", counted)
    w = rlgrad.tensor(w0, requires_grad=True)

    def loss_of(node: Any, ctx: Any) -> Any:
        h, ys = ctx.unpack(node, count=ctx.n_carry + 1)[::ctx.n_carry]  # h, then ys
        return (h * h).sum() + (ys ** 3).sum()

    with lax.nodes_eagerly():
        (_h, _k), _ys = lax.scan(_step(w), (rlgrad.tensor(h0), np.int32(0)), rlgrad.tensor(xs))
    (args, ctx), = made
    assert ctx.lin is not None
    g1, = rlgrad.autograd.grad(loss_of(scan_p(*args, ctx=ctx), ctx), [w], create_graph=True)
    (g1 * g1).sum().backward()  # grad of grad: node 1's second VJP is the reference one
    assert len(ctx.res_read) == 1 and len(calls) == 1
    want = [d.numpy() for d in rlgrad.autograd.grad(loss_of(scan_p(*args, ctx=ctx), ctx), [w])]
    assert len(calls) == 2  # a new node with the same ctx: the saved path again
    np.testing.assert_allclose(want[0], g1.detach().numpy(), rtol=1e-12, atol=1e-12)

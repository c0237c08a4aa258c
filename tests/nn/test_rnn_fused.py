"""The fused recurrent primitives (rlgrad/nn/cells.py): ``lstm_cell``, ``gru_cell`` (a step) and
``lstm_seq``, ``gru_seq`` (a sequence), against their plain references (values and gradients of
every argument, float64), finite differences to second order in reverse and forward mode, torch
2.13 (values, gradients, double backward of the layers and cells), vmap against the loop, and the
NumPy acting step of RecurrentPPO against the module; the cells' kernels of rlgrad._kernels
against their NumPy lines (bits) and what they refuse."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import nn
from rlgrad.func import vmap
from rlgrad.nn import cells
from rlgrad.rl.recurrent_policies import lstm_numpy

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(30)
H, B, T = 3, 2, 4
#: name -> (cell, its reference, gates, width of the wide output) in units of H
CELLS = {"lstm": (cells.lstm_cell, cells._lstm_cell_reference, 4, 6),
         "gru": (cells.gru_cell, cells._gru_cell_reference, 3, 5)}
SEQS = {"lstm": (cells.lstm_seq, cells._lstm_seq_reference, 4, 2),
        "gru": (cells.gru_seq, cells._gru_seq_reference, 3, 1)}


def _args(gates: int, width: int, lead: tuple[int, ...] = (B,)) -> list[np.ndarray]:
    return [RNG.standard_normal(lead + (gates * H,)), RNG.standard_normal(lead[-1:] + (width * H,)),
            RNG.standard_normal((gates * H, H)), RNG.standard_normal(gates * H)]


def _same_as_reference(fast: Any, ref: Any, args: list[np.ndarray], tol: float = 1e-13) -> None:
    """Values, and the gradient of every argument for a random cotangent."""
    out = fast(*args)
    np.testing.assert_allclose(out, np.asarray(ref(*[rlgrad.tensor(a) for a in args])._value),
                               rtol=tol, atol=tol)
    v = RNG.standard_normal(out.shape)
    for k in range(len(args)):
        got = rlgrad.grad(lambda *a: (fast(*a) * v).sum(), k)(*args)
        want = rlgrad.grad(lambda *a: (ref(*a) * v).sum(), k)(*args)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", sorted(CELLS))
@pytest.mark.parametrize("state", ["pair", "wide"])
def test_cell_equals_its_reference(name: str, state: str) -> None:
    cell, ref, gates, wide = CELLS[name]
    width = wide if state == "wide" else (2 if name == "lstm" else 1)
    _same_as_reference(cell, ref, _args(gates, width))
    _same_as_reference(lambda *a: cell(*a[:3]), lambda *a: ref(*a[:3]), _args(gates, width)[:3])


@pytest.mark.parametrize("name", sorted(CELLS))
def test_cell_by_finite_differences_to_second_order(name: str) -> None:
    cell, _, gates, wide = CELLS[name]
    rlgrad.check_grads(cell, modes=["rev", "fwd"], order=2)(*_args(gates, wide))
    rlgrad.check_grads(cell, modes=["rev", "fwd"], order=2)(*_args(gates, 1 if name == "gru" else 2))


@pytest.mark.parametrize("name", sorted(SEQS))
@pytest.mark.parametrize("reverse", [False, True])
def test_sequence_equals_the_loop_of_cells(name: str, reverse: bool) -> None:
    seq, ref, gates, width = SEQS[name]
    args = _args(gates, width, (T, B))
    _same_as_reference(lambda *a: seq(*a, reverse=reverse), lambda *a: ref(*a, reverse=reverse),
                       args)
    # bitwise: the same kernel, step after step (the sequence keeps each step's blocks gate first)
    s, want = args[1], [None] * T
    cell, K = CELLS[name][0], CELLS[name][3]
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        s = cell(args[0][t], s, *args[2:])
        want[t] = s.reshape(B, K, H).transpose(1, 0, 2)
    np.testing.assert_array_equal(seq(*args, reverse=reverse), np.stack(want))


@pytest.mark.parametrize("name", sorted(SEQS))
def test_sequence_by_finite_differences_to_second_order(name: str) -> None:
    seq, _, gates, width = SEQS[name]
    args = _args(gates, width, (3, B))
    rlgrad.check_grads(seq, modes=["rev", "fwd"], order=2)(*args)
    rlgrad.check_grads(lambda *a: seq(*a, reverse=True), modes=["rev"], order=2)(*args[:3])


@pytest.mark.parametrize("name", sorted(CELLS))
def test_vmap_of_the_cells_equals_the_loop(name: str) -> None:
    cell, _, gates, wide = CELLS[name]
    V = 3
    xp, hs, w, b = _args(gates, wide, (V, B))
    hs = RNG.standard_normal((V, B, wide * H))
    got = vmap(cell, in_dims=(0, 0, None, None))(xp, hs, w, b)
    np.testing.assert_allclose(np.asarray(got), np.stack([cell(xp[v], hs[v], w, b)
                                                           for v in range(V)]), rtol=1e-12, atol=1e-14)
    ws = RNG.standard_normal((V,) + w.shape)  # an ensemble: batched weights
    got = vmap(cell, in_dims=(0, None, 0, None))(xp, hs[0], ws, b)
    np.testing.assert_allclose(np.asarray(got), np.stack([cell(xp[v], hs[0], ws[v], b)
                                                           for v in range(V)]), rtol=1e-12, atol=1e-14)
    grads = vmap(rlgrad.grad(lambda x, h: cell(x, h, w, b).sum()), in_dims=(0, 0))(xp, hs)
    want = [rlgrad.grad(lambda x, h: cell(x, h, w, b).sum())(xp[v], hs[v]) for v in range(V)]
    np.testing.assert_allclose(np.asarray(grads), np.stack(want), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(SEQS))
def test_vmap_of_the_sequences_equals_the_loop(name: str) -> None:
    seq, _, gates, width = SEQS[name]
    V = 3
    xp = RNG.standard_normal((V, T, B, gates * H))
    s0 = RNG.standard_normal((V, B, width * H))
    _, _, w, b = _args(gates, width)
    for dims, pick in (((0, 0, None, None), lambda v: (xp[v], s0[v])),
                       ((0, None, None, None), lambda v: (xp[v], s0[0])),
                       ((None, 0, None, None), lambda v: (xp[0], s0[v]))):
        got = vmap(seq, in_dims=dims)(xp if dims[0] is not None else xp[0],
                                      s0 if dims[1] is not None else s0[0], w, b)
        want = np.stack([seq(*pick(v), w, b) for v in range(V)])
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-14)
    grads = vmap(rlgrad.grad(lambda x, s: (seq(x, s, w, b) ** 2).sum(), (0, 1)),
                 in_dims=(None, 0))(xp[0], s0)  # xp broadcast along V: its gradient summed
    want = [rlgrad.grad(lambda x, s: (seq(x, s, w, b) ** 2).sum(), (0, 1))(xp[0], s0[v])
            for v in range(V)]
    np.testing.assert_allclose(np.asarray(grads[0]), np.stack([g[0] for g in want]), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grads[1]), np.stack([g[1] for g in want]), rtol=1e-12)
    ws = RNG.standard_normal((V,) + w.shape)
    got = vmap(seq, in_dims=(None, None, 0, None))(xp[0], s0[0], ws, b)
    want = np.stack([seq(xp[0], s0[0], ws[v], b) for v in range(V)])
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-14)


# ---- against torch ---------------------------------------------------------------------------
def _pair(name: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    tm = getattr(torch.nn, name)(*args, **kwargs).double()
    rm = getattr(nn, name)(*args, dtype=np.float64, **kwargs)
    rm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return rm, tm


def _penalty(module: Any, x: Any, lib: Any, grad: Any) -> Any:
    """A gradient penalty: |d(sum of outputs squared)/dx|^2, whose gradient w.r.t. the
    parameters is a double backward through every step."""
    out = module(x)
    y = out[0] if isinstance(out, tuple) else out
    (gx,) = grad((y * y).sum(), [x], create_graph=True)
    return (gx * gx).sum()


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
@pytest.mark.parametrize("kw", [{}, {"num_layers": 2, "bidirectional": True}])
def test_layers_double_backward_equals_torch(name: str, kw: dict) -> None:
    rm, tm = _pair(name, 3, H, **kw)
    x = RNG.standard_normal((T, B, 3))
    rx, tx = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    rp = _penalty(rm, rx, rlgrad, rlgrad.autograd.grad)
    tp = _penalty(tm, tx, torch, torch.autograd.grad)
    np.testing.assert_allclose(float(rp.detach()), float(tp.detach()), rtol=1e-11)
    rp.backward()
    tp.backward()
    for (k, p), q in zip(rm.named_parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("name", ["LSTMCell", "GRUCell"])
def test_cells_values_grads_and_double_backward_equal_torch(name: str) -> None:
    rm, tm = _pair(name, 3, H)
    x, h, c = RNG.standard_normal((B, 3)), RNG.standard_normal((B, H)), RNG.standard_normal((B, H))
    rx, tx = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    rh, th = rlgrad.tensor(h, requires_grad=True), torch.tensor(h, requires_grad=True)
    rs = (rh, rlgrad.tensor(c)) if name == "LSTMCell" else rh
    ts = (th, torch.tensor(c)) if name == "LSTMCell" else th
    ro, to = rm(rx, rs), tm(tx, ts)
    ro, to = (ro if name == "GRUCell" else ro[1] * ro[0]), (to if name == "GRUCell" else to[1] * to[0])
    np.testing.assert_allclose(ro.detach().numpy(), to.detach().numpy(), rtol=1e-12)
    rg = rlgrad.autograd.grad((ro * ro).sum(), [rx, rh], create_graph=True)
    tg = torch.autograd.grad((to * to).sum(), [tx, th], create_graph=True)
    for a, b in zip(rg, tg):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-11)
    (sum((g * g).sum() for g in rg)).backward()
    (sum((g * g).sum() for g in tg)).backward()
    for (k, p), q in zip(rm.named_parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_layers_float32_equal_torch(name: str) -> None:
    tm = getattr(torch.nn, name)(8, 16, num_layers=2)
    rm = getattr(nn, name)(8, 16, num_layers=2)
    rm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = RNG.standard_normal((6, 5, 8)).astype(np.float32)
    ro, to = rm(x)[0], tm(torch.from_numpy(x))[0]
    assert ro.dtype == np.float32
    np.testing.assert_allclose(ro.detach().numpy(), to.detach().numpy(), rtol=1e-5, atol=1e-6)
    (ro * ro).sum().backward()
    (to * to).sum().backward()
    for p, q in zip(rm.parameters(), tm.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5)


# ---- the NumPy acting path ---------------------------------------------------------------------
@pytest.mark.parametrize("layers", [1, 2])
def test_lstm_numpy_is_the_modules_step_bit_for_bit(layers: int) -> None:
    lstm = nn.LSTM(5, 7, num_layers=layers)
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    h, c = (RNG.standard_normal((layers, 3, 7)).astype(np.float32) for _ in range(2))
    out, h2, c2 = lstm_numpy(lstm, x, h, c)
    with rlgrad.no_grad():
        ref, (rh, rc) = lstm(x[None], (h, c))
    np.testing.assert_array_equal(out, ref.numpy()[0])
    np.testing.assert_array_equal(h2, rh.numpy())
    np.testing.assert_array_equal(c2, rc.numpy())


# ---- the cells' kernels (rlgrad._kernels: lstm_*, gru_*) against their NumPy lines ---------------
#: name -> (sequence, its NumPy backward, cell, its NumPy backward, gates, output blocks)
KERNELED = {"lstm": (cells._lstm_seq, cells._lstm_seq_grads, cells._lstm_cell, cells._lstm_grads, 4, 6),
            "gru": (cells._gru_seq, cells._gru_seq_grads, cells._gru_cell, cells._gru_grads, 3, 5)}


def _seq_and_grads(name: str, args: list[Any], G: np.ndarray, Gc: np.ndarray,
                   reverse: bool) -> list[np.ndarray]:
    seq, seq_grads, cell, cell_grads, _, _ = KERNELED[name]
    ans = seq(*args, reverse=reverse)
    cell_args = [args[0][0], *args[1:]]
    cell_ans = cell(*cell_args)
    return [d for d in (ans, *seq_grads(G, ans, *args, reverse), cell_ans,
                        *cell_grads(Gc, cell_ans, *cell_args)) if d is not None]


@pytest.mark.skipif(cells.ops._kernels is None, reason="rlgrad._kernels not built (or turned off)")
@pytest.mark.parametrize("name", sorted(KERNELED))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reverse,bias", [(False, True), (True, True), (False, False)])
def test_cell_kernels_give_the_numpy_paths_bits(monkeypatch: Any, name: str, dtype: type,
                                                reverse: bool, bias: bool) -> None:
    monkeypatch.setattr(cells, "LOOP_IN_C", False)  # (the C loops: tests/nn/test_lstm_loop.py)
    rng = np.random.default_rng(5)
    h, n, t = 8, 5, 6
    gates, width = KERNELED[name][4], KERNELED[name][5]
    state = 2 * h if name == "lstm" else h
    args: list[Any] = [(rng.standard_normal(s) * 3).astype(dtype) for s in
                       ((t, n, gates * h), (n, state), (gates * h, h), (gates * h,))]
    args[0][0, 0, :3] = (1e4, -1e4, 0.0)  # saturated gates
    if not bias:
        args[3] = None
    G = rng.standard_normal((t, width, n, h)).astype(dtype)
    Gc = rng.standard_normal((n, width * h)).astype(dtype)
    with_c = _seq_and_grads(name, args, G, Gc, reverse)
    monkeypatch.setattr(cells.ops, "_kernels", None)
    without = _seq_and_grads(name, args, G, Gc, reverse)
    for a, b in zip(with_c, without, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.skipif(cells.ops._kernels is None, reason="rlgrad._kernels not built (or turned off)")
def test_cell_kernels_refuse_what_does_not_fit() -> None:
    k = cells.ops._kernels
    f4, f8 = np.zeros((4, 2, 3), np.float32), np.zeros((4, 2, 3))
    c, c8 = np.zeros((2, 3), np.float32), np.zeros((2, 3))
    assert not k.lstm_gates(f8, c, c)  # dtypes differ
    assert not k.lstm_gates(f4[:3], c, c.copy())  # three gates
    assert not k.lstm_gates(f4[..., ::2], c[:, ::2], c[:, ::2].copy())  # rows not contiguous
    assert not k.lstm_gates(f4, np.zeros((2, 4), np.float32), c)  # shapes differ
    assert not k.lstm_gates(f4.astype(np.int64), c, c)
    assert not k.lstm_gates(f4, c, np.zeros((2, 3), np.float32)[::-1].copy().view(np.int32))
    a6 = np.zeros((6, 2, 3))
    assert not k.lstm_dgates(a6, None, None, a6, c8, c8, f4, c8.copy())  # d's dtype
    assert not k.lstm_dgates(a6, None, None, a6[:5], c8, c8, f8, c8.copy())  # 5 blocks
    assert not k.lstm_dgates(a6, np.zeros((2, 4)), None, a6, c8, c8, f8, c8.copy())  # dh's shape
    assert k.lstm_dgates(a6, None, c8, a6, c8, c8, f8, c8.copy())
    x = np.full((4, 2, 3), 0.25, np.float32)
    assert k.lstm_gates(x, c + 1, c) and np.all(x[[0, 1, 3]] == 0.625) and np.all(c == 0.625 + 0.25 * 0.625)
    wide = np.full((2, 12), 0.25, np.float32)  # a (rows, 4H) GEMM block, its gates as columns
    acts = wide.reshape(2, 4, 3).transpose(1, 0, 2)
    out = np.zeros((6, 2, 3), np.float32)
    one = np.ones((2, 3), np.float32)
    assert not k.lstm_gates(acts, one, c, acts)  # gates written over what the pass reads
    assert not k.lstm_gates(acts, one, out[1], out[1:5])  # over c_new
    assert not k.lstm_gates(acts, one, c, out[2:5])  # three blocks
    assert k.lstm_gates(acts, one, out[1], out[2:]) and np.all(wide == 0.25)
    assert np.all(out[[2, 3, 5]] == 0.625) and np.all(out[4] == 0.25)
    assert np.all(out[1] == 0.625 + 0.25 * 0.625)
    o5, x3 = np.zeros((5, 2, 3), np.float32), np.zeros((3, 2, 3), np.float32)
    assert not k.gru_gates(o5[:4], x3)  # four blocks
    assert not k.gru_gates(o5, x3.astype(np.float64))
    assert not k.gru_state(o5, np.zeros((2, 4), np.float32))
    assert not k.gru_dgates(o5, None, o5, c, x3, x3[:2], c.copy())  # dhp has two blocks
    assert not k.gru_dgates(o5, None, o5, c8, x3, x3, c.copy())  # h's dtype
    assert k.gru_dgates(o5, c, o5, c, x3, x3.copy(), c.copy())
    o5[2], o5[4] = 0.5, 2.0  # z, n
    assert k.gru_state(o5, np.full((2, 3), 4, np.float32)) and np.all(o5[0] == 3.0)  # (4 - 2) / 2 + 2


# ---- the packed VJP of the sequences (jit's node): written in place, as the plain concatenation --
@pytest.mark.parametrize("name", sorted(KERNELED))
@pytest.mark.parametrize("broadcast,bias,dtype", [(False, True, np.float32), (True, True, np.float64),
                                                  (False, False, np.float64)])
def test_sequence_packed_grads_equal_the_concatenation(name: str, broadcast: bool, bias: bool,
                                                       dtype: type) -> None:
    seq, seq_grads, _, _, gates, width = KERNELED[name]
    packed_p = {"lstm": cells.lstm_seq_grad, "gru": cells.gru_seq_grad}[name]
    rng = np.random.default_rng(8)
    h, n, t = 4, 3, 5
    state = 2 * h if name == "lstm" else h
    xp = rng.standard_normal((t, 1 if broadcast else n, gates * h)).astype(dtype)
    s0, w = (rng.standard_normal(s).astype(dtype) for s in ((n, state), (gates * h, h)))
    b = rng.standard_normal(gates * h).astype(dtype) if bias else None
    ans = seq(xp, s0, w, b)
    G = rng.standard_normal(ans.shape).astype(dtype)
    want = np.concatenate([np.ravel(d) for d in seq_grads(G, ans, xp, s0, w, b, False)
                           if d is not None])
    got = np.asarray(packed_p(G, ans, xp, s0, w, b, reverse=False))
    assert got.dtype == want.dtype and np.array_equal(got, want)

"""The LSTM sequence's C loops (rlgrad._kernels ``lstm_seq_fwd``/``lstm_seq_bwd``, taken by
``cells._lstm_seq``/``_lstm_seq_grads`` for float32 when ``cells.LOOP_IN_C``): their tanh against
float64's within 3 ulp, the sequence and its gradients against the NumPy loops (the reference,
``LOOP_IN_C = False``) at float32 precision, the layer's gradients against torch's, eagerly and
under ``rlgrad.jit``, and what the kernels refuse."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import nn
from rlgrad.nn import cells

K = cells.ops._kernels
GEMM = cells._sgemm() if K is not None else 0
needs_loop = pytest.mark.skipif(not GEMM, reason="rlgrad._kernels or NumPy's OpenBLAS missing")


def _run(args: list[Any], G: np.ndarray, reverse: bool, in_c: bool,
         monkeypatch: Any) -> list[np.ndarray]:
    monkeypatch.setattr(cells, "LOOP_IN_C", in_c)
    ans = cells._lstm_seq(*args, reverse=reverse)
    return [ans, *(d for d in cells._lstm_seq_grads(G, ans, *args, reverse) if d is not None)]


@needs_loop
def test_tanh_within_three_ulp_of_float64() -> None:
    """g = tanh(xp's g block) when h0 = c0 = 0 and W_hh = 0: the kernel's tanh alone."""
    v = np.concatenate([np.linspace(-12, 12, 20001), np.geomspace(1e-38, 30, 4000),
                        -np.geomspace(1e-38, 30, 4000), [0.0, -0.0, 1e-45, np.inf, -np.inf]])
    v = v.astype(np.float32)
    xp = np.zeros((1, v.size, 4), np.float32)
    xp[0, :, 2] = v
    out = cells._lstm_seq(xp, np.zeros((v.size, 2), np.float32), np.zeros((4, 1), np.float32))
    exact = np.tanh(v.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert (np.abs(out[0, 4, :, 0] - exact) / ulp).max() <= 3.0
    xp[0, :2, 2] = np.nan
    out = cells._lstm_seq(xp, np.zeros((v.size, 2), np.float32), np.zeros((4, 1), np.float32))
    assert np.isnan(out[0, [0, 1, 4], :2]).all()  # h', c', g of those rows; i, f, o not
    assert np.isfinite(out[0, [2, 3, 5], :2]).all() and np.isfinite(out[0, :, 2:]).all()


@needs_loop
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("lead,state", [((5,), (5,)), ((2, 3), (3,)), ((4,), (1,))])
def test_loops_equal_the_numpy_loops(monkeypatch: Any, reverse: bool, bias: bool,
                                     lead: tuple[int, ...], state: tuple[int, ...]) -> None:
    """Values and the gradients of xp, hc0, W_hh, b_hh at float32 precision, broadcast states
    and several row dimensions included, saturated gates too."""
    rng = np.random.default_rng(7)
    T, H = 6, 8
    args: list[Any] = [(rng.standard_normal(s) * 2).astype(np.float32) for s in
                       ((T,) + lead + (4 * H,), state + (2 * H,), (4 * H, H), (4 * H,))]
    args[0][0, ..., :3] = (1e4, -1e4, 0.0)
    if not bias:
        args[3] = None
    G = rng.standard_normal((T, 6) + lead + (H,)).astype(np.float32)
    fast = _run(args, G, reverse, True, monkeypatch)
    ref = _run(args, G, reverse, False, monkeypatch)
    for a, b in zip(fast, ref, strict=True):
        assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6 * np.abs(b).max())


@needs_loop
def test_loops_take_a_broadcast_gradient(monkeypatch: Any) -> None:
    rng = np.random.default_rng(8)
    T, N, H = 5, 3, 4
    args = [rng.standard_normal(s).astype(np.float32) for s in
            ((T, N, 4 * H), (N, 2 * H), (4 * H, H), (4 * H,))]
    G = np.broadcast_to(rng.standard_normal((1, 6, 1, H)).astype(np.float32), (T, 6, N, H))
    for a, b in zip(_run(args, G, False, True, monkeypatch),
                    _run(args, np.ascontiguousarray(G), False, False, monkeypatch), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6 * np.abs(b).max())


def test_float64_keeps_the_numpy_loops_bits(monkeypatch: Any) -> None:
    rng = np.random.default_rng(9)
    args = [rng.standard_normal(s) for s in ((4, 3, 8), (3, 4), (8, 2), (8,))]
    G = rng.standard_normal((4, 6, 3, 2))
    for a, b in zip(_run(args, G, False, True, monkeypatch),
                    _run(args, G, False, False, monkeypatch), strict=True):
        assert np.array_equal(a, b)


@needs_loop
@pytest.mark.parametrize("kw", [{}, {"num_layers": 2, "bidirectional": True, "batch_first": True}])
def test_layer_grads_equal_torch_eager_and_jit(kw: dict) -> None:
    torch = pytest.importorskip("torch")
    tm = torch.nn.LSTM(16, 32, **kw)
    rm = nn.LSTM(16, 32, **kw)
    rm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    x = np.random.default_rng(10).standard_normal((12, 5, 16)).astype(np.float32)
    to = tm(torch.from_numpy(x))[0]
    want = (to * to).sum()
    want.backward()

    def step(x: Any) -> Any:
        for p in rm.parameters():
            p.grad = None
        out = rm(x)[0]
        loss = (out * out).sum()
        loss.backward()
        return loss

    for run in (step, rlgrad.jit(step), rlgrad.jit(step)):  # eager, trace, replay
        loss = run(x)
        got = loss.detach().numpy() if hasattr(loss, "detach") else np.asarray(loss)
        np.testing.assert_allclose(float(got), want.item(), rtol=1e-5)
        for p, q in zip(rm.parameters(), tm.parameters(), strict=True):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5)


@needs_loop
def test_kernels_refuse_what_does_not_fit() -> None:
    T, N, H = 2, 3, 4
    f4 = np.float32
    xp, h0, c0 = np.zeros((T, N, 4 * H), f4), np.zeros((N, H), f4), np.zeros((N, H), f4)
    wq, half, out = np.zeros((H, 4 * H), f4), np.ones(4 * H, f4), np.empty((T, 6, N, H), f4)
    assert K.lstm_seq_fwd(xp, None, h0, c0, wq, half, out, GEMM, False)
    assert not K.lstm_seq_fwd(xp, None, h0, c0, wq, half, out, 0, False)  # no BLAS
    assert not K.lstm_seq_fwd(xp.astype(np.float64), None, h0, c0, wq, half, out, GEMM, False)
    assert not K.lstm_seq_fwd(xp[:, :, :-1], None, h0, c0, wq, half, out, GEMM, False)
    assert not K.lstm_seq_fwd(xp, None, h0[:, ::2], c0, wq, half, out, GEMM, False)
    assert not K.lstm_seq_fwd(xp, np.zeros(4 * H), h0, c0, wq, half, out, GEMM, False)  # b's dtype
    assert not K.lstm_seq_fwd(xp, None, h0, c0, wq.T, half, out, GEMM, False)
    assert not K.lstm_seq_fwd(xp, None, h0, c0, wq, half, out[:, :5], GEMM, False)
    assert not K.lstm_seq_fwd(out[:, :4].reshape(T, N, 4 * H), None, h0, c0, wq, half, out, GEMM,
                              False)  # reads what it writes
    G, d = np.zeros((T, 6, N, H), f4), np.empty((T, N, 4 * H), f4)
    w, dh, dc = np.zeros((4 * H, H), f4), h0.copy(), c0.copy()
    assert K.lstm_seq_bwd(G, out, c0, w, d, dh, dc, GEMM, False)
    assert not K.lstm_seq_bwd(G, out, c0, w, d, dh, dc, 0, False)
    assert not K.lstm_seq_bwd(G, out, c0, w.T, d, dh, dc, GEMM, False)
    assert not K.lstm_seq_bwd(G, out, c0, w, d[:, :, ::2], dh, dc, GEMM, False)
    assert not K.lstm_seq_bwd(G, out, c0, w, d, dh, dh, GEMM, False)  # outputs overlap
    assert not K.lstm_seq_bwd(G, out, c0, w, out[:, :4].reshape(T, N, 4 * H), dh, dc, GEMM,
                              False)  # writes what it reads
    assert not K.lstm_seq_bwd(G.astype(np.float64), out, c0, w, d, dh, dc, GEMM, False)
    with pytest.raises(TypeError, match="9 arguments"):
        K.lstm_seq_fwd(xp)


class _Spy:
    """``ops._kernels`` with ``lstm_seq_fwd``/``lstm_seq_bwd``'s answers recorded."""

    def __init__(self, kernels: Any) -> None:
        self._k, self.answers = kernels, {"lstm_seq_fwd": [], "lstm_seq_bwd": []}

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._k, name)
        if name not in self.answers:
            return fn

        def call(*args: Any) -> Any:
            self.answers[name].append(fn(*args))
            return self.answers[name][-1]
        return call


@needs_loop
@pytest.mark.parametrize("kw", [{}, {"batch_first": True, "bidirectional": True}])
def test_a_float32_layer_takes_the_loops(monkeypatch: Any, kw: dict) -> None:
    """nn.LSTM's own arrays fit the kernels (a silent fallback would only be slower)."""
    spy = _Spy(K)
    monkeypatch.setattr(cells.ops, "_kernels", spy)
    m = nn.LSTM(6, 5, **kw)
    out = m(np.random.default_rng(11).standard_normal((4, 3, 6)).astype(np.float32))[0]
    (out * out).sum().backward()
    dirs = 2 if kw else 1
    assert spy.answers == {"lstm_seq_fwd": [True] * dirs, "lstm_seq_bwd": [True] * dirs}

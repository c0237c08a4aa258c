"""The LSTM and GRU cells as one primitive each: a step's hidden projection (one GEMM) and its
gate nonlinearities in one recorded node, instead of ~15 (what ``nn.LSTM``/``GRU`` and their
cells run eagerly, and the body of their ``lax.scan`` under ``rlgrad.jit``).

``lstm_cell(xp, hc, w_hh, b_hh)``: ``xp`` is the step's input projection ``W_ih x + b_ih``
(B, 4H), ``hc`` the state: ``h`` in its first H columns and ``c`` in the next H (a (B, 2H) pair,
or a previous step's output). The output is *wide*, (B, 6H): ``[h' | c' | i | f | g | o]``, the
gates after their nonlinearities kept beside the new state, so that the backward pass reads them
instead of computing them again. ``gru_cell(xp, hs, w_hh, b_hh)``: ``xp`` (B, 3H), ``h`` in the
first H columns of ``hs``; output (B, 5H) ``[h' | r | z | n | W_hn h + b_hn]``. Gates in PyTorch's
order (i, f, g, o and r, z, n). Leading dimensions before B are batch dimensions too.

Derivatives: the VJP is, at first order (plain arrays), one NumPy pass shared by the four
arguments (``_lstm_grads``: the gates' gradient, then ``dh = dgates @ W``, ``dW = dgates.T @ h``,
``db``); given Tensors (``create_graph``, a trace) the same formula in rlgrad's operations
(``_lstm_grads_ops``), so it can be differentiated again. The JVP pushes the gates' tangent through
the cell's Jacobian; vmap merges its dimension into the rows, or (batched weights) runs the
reference. ``_lstm_cell_reference``/``_gru_cell_reference``, the cell as plain recorded
operations, are what the primitives are tested against (tests/test_rnn_fused.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.batching import Level, align, bcast, decomposed
from rlgrad.nn.functional import _dense_grad_input_p, _dense_grad_weight_p, _dtype, _linear_p, _rows
from rlgrad.tensor import _shape
from rlgrad.tracer import Primitive, defbatch, defjvp, defvjp, primitive
from rlgrad.transforms import jvp, vjp

__all__ = ["lstm_cell", "gru_cell", "lstm_seq", "gru_seq", "lstm_step_numpy", "gru_step_numpy"]


def _sigmoid_(a: np.ndarray) -> None:
    """sigmoid(a) in place, as (tanh(a / 2) + 1) / 2: no overflow, four passes, no temporary."""
    a *= 0.5
    np.tanh(a, out=a)
    a *= 0.5
    a += 0.5


def _lead(*arrays: Any) -> tuple[int, ...]:
    return np.broadcast_shapes(*(_shape(a)[:-1] for a in arrays))


def _hidden_rows(h: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
    """``h`` as (rows, H) over the output's leading dimensions (broadcast if it has fewer)."""
    if h.shape[:-1] != lead:
        h = np.broadcast_to(h, lead + h.shape[-1:])
    return h.reshape(-1, h.shape[-1])


class _Memo:
    """The four VJP rules of one node share one computation: the engine calls them one after
    another with the same ``g`` and ``ans``, so the last result is kept for the next rule."""

    def __init__(self) -> None:
        self.key: tuple[Any, Any] | None = None
        self.value: Any = None

    def get(self, g: Any, ans: Any, compute: Any) -> Any:
        if self.key is None or self.key[0] is not g or self.key[1] is not ans:
            self.key, self.value = None, None  # (a failed compute leaves nothing stale)
            self.value = compute()
            self.key = (g, ans)
        return self.value


def _plain(*xs: Any) -> bool:
    return all(x is None or type(x) is np.ndarray for x in xs)


# ---- LSTM --------------------------------------------------------------------------------------
def _lstm_cell(xp: Any, hc: Any, w: Any, b: Any = None) -> np.ndarray:
    H = w.shape[-1]
    out = np.empty(_lead(xp, hc) + (6 * H,), np.result_type(xp, hc, w))
    return _lstm_into(out, xp, hc, w, b)


def _lstm_into(out: np.ndarray, xp: Any, hc: Any, w: Any, b: Any) -> np.ndarray:
    """The cell's forward written into ``out``."""
    H = w.shape[-1]
    acts = out[..., 2 * H:]
    np.add(hc[..., :H] @ w.T, xp, out=acts)  # the step's one GEMM, and the input projection
    if b is not None:
        acts += b
    g = np.tanh(acts[..., 2 * H:3 * H])
    _sigmoid_(acts)  # i, f, o (g's column block is overwritten next)
    acts[..., 2 * H:3 * H] = g
    i, f, o = acts[..., :H], acts[..., H:2 * H], acts[..., 3 * H:]
    c2, h2 = out[..., H:2 * H], out[..., :H]
    np.multiply(f, hc[..., H:2 * H], out=c2)
    c2 += i * g
    np.tanh(c2, out=h2)
    h2 *= o
    return out


def _lstm_dpre(Gh: np.ndarray, Gc: np.ndarray, Gacts: np.ndarray, ans: np.ndarray,
               c: np.ndarray, dpre: np.ndarray) -> np.ndarray:
    """The gradient of the gates' pre-activations (written into ``dpre``) for the gradients
    ``Gh``, ``Gc``, ``Gacts`` of h', c' and the gates; returns that of the state c."""
    H = Gh.shape[-1]
    acts = ans[..., 2 * H:]
    i, f, g, o = (acts[..., k * H:(k + 1) * H] for k in range(4))
    tc = np.tanh(ans[..., H:2 * H])
    dc2 = tc * tc
    np.subtract(1.0, dc2, out=dc2)
    dc2 *= o
    dc2 *= Gh
    dc2 += Gc
    np.multiply(dc2, g, out=dpre[..., :H])
    np.multiply(dc2, c, out=dpre[..., H:2 * H])
    np.multiply(dc2, i, out=dpre[..., 2 * H:3 * H])
    np.multiply(Gh, tc, out=dpre[..., 3 * H:])
    dpre += Gacts
    slope = 1.0 - acts  # the gates' derivatives: s (1 - s), and 1 - g^2 for g
    slope *= acts
    np.multiply(g, g, out=slope[..., 2 * H:3 * H])
    np.subtract(1.0, slope[..., 2 * H:3 * H], out=slope[..., 2 * H:3 * H])
    dpre *= slope
    dc2 *= f
    return dc2


def _lstm_grads(G: np.ndarray, ans: np.ndarray, hc: np.ndarray, w: np.ndarray,
                b: Any) -> tuple[np.ndarray, ...]:
    """(d xp, d hc, d w, d b) for the output's gradient ``G``, in NumPy (first order)."""
    H = w.shape[-1]
    dpre = np.empty(ans.shape[:-1] + (4 * H,), ans.dtype)
    dc = _lstm_dpre(G[..., :H], G[..., H:2 * H], G[..., 2 * H:], ans, hc[..., H:2 * H], dpre)
    dhc = np.zeros(ans.shape[:-1] + hc.shape[-1:], ans.dtype)
    np.matmul(dpre, w, out=dhc[..., :H])
    dhc[..., H:2 * H] = dc
    rows = _rows(dpre)
    dw = rows.T @ _hidden_rows(hc[..., :H], ans.shape[:-1])
    return dpre, dhc, dw, (None if b is None else ops._sum(rows, axis=0))


def _lstm_grads_ops(G: Any, ans: Any, hc: Any, w: Any, b: Any) -> tuple[Any, ...]:
    """``_lstm_grads`` in rlgrad's operations (recorded: differentiable again)."""
    H = _shape(w)[-1]
    i, f, g, o = (ans[..., (2 + k) * H:(3 + k) * H] for k in range(4))
    Gh = G[..., :H]
    tc = ops.tanh(ans[..., H:2 * H])
    dc2 = G[..., H:2 * H] + Gh * o * (1.0 - tc * tc)
    Gi, Gf, Gg, Go = (G[..., (2 + k) * H:(3 + k) * H] for k in range(4))
    c = hc[..., H:2 * H]
    dpre = ops.concatenate([(dc2 * g + Gi) * i * (1.0 - i), (dc2 * c + Gf) * f * (1.0 - f),
                            (dc2 * i + Gg) * (1.0 - g * g), (Gh * tc + Go) * o * (1.0 - o)],
                           axis=-1)
    dhc = [_dense_grad_input_p(dpre, w), dc2 * f]
    width = _shape(hc)[-1]
    if width > 2 * H:  # the gates' columns of a wide state are not read
        dhc.append(np.zeros(_shape(ans)[:-1] + (width - 2 * H,), _dtype(ans)))
    h = hc[..., :H]
    if _shape(h)[:-1] != _shape(dpre)[:-1]:
        h = ops.broadcast_to(h, _shape(dpre)[:-1] + (H,))
    db = None if b is None else ops.sum(ops.reshape(dpre, (-1, 4 * H)), axis=0)
    return dpre, ops.concatenate(dhc, axis=-1), _dense_grad_weight_p(dpre, h), db


_LSTM_MEMO = _Memo()


def _lstm_vjp(k: int) -> Any:
    def rule(g: Any, ans: Any, xp: Any, hc: Any, w: Any, b: Any = None) -> Any:
        if _plain(g, ans, hc, w):
            return _LSTM_MEMO.get(g, ans, lambda: _lstm_grads(g, ans, hc, w, b))[k]
        return _LSTM_MEMO.get(g, ans, lambda: _lstm_grads_ops(g, ans, hc, w, b))[k]
    return rule


def _lstm_tangent(tpre: Any, tc: Any, ans: Any, hc: Any, H: int) -> Any:
    """The output's tangent from the tangent ``tpre`` of the gates' pre-activations and ``tc``
    of the cell state (None: zero)."""
    i, f, g, o = (ans[..., (2 + k) * H:(3 + k) * H] for k in range(4))
    di, df, dg, do = (tpre[..., k * H:(k + 1) * H] for k in range(4))
    di, df, dg, do = di * i * (1.0 - i), df * f * (1.0 - f), dg * (1.0 - g * g), do * o * (1.0 - o)
    dc2 = df * hc[..., H:2 * H] + di * g + i * dg
    if tc is not None:
        dc2 = dc2 + f * tc
    t2 = ops.tanh(ans[..., H:2 * H])
    dh2 = do * t2 + o * (1.0 - t2 * t2) * dc2
    return ops.concatenate([dh2, dc2, di, df, dg, do], axis=-1)


def _lstm_jvp_hc(t: Any, ans: Any, xp: Any, hc: Any, w: Any, b: Any = None) -> Any:
    H = _shape(w)[-1]
    return _lstm_tangent(_linear_p(t[..., :H], w), t[..., H:2 * H], ans, hc, H)


def _lstm_cell_reference(xp: Any, hc: Any, w: Any, b: Any = None) -> Any:
    """The cell as plain recorded operations (the reference the primitive is tested against)."""
    H = _shape(w)[-1]
    pre = xp + _linear_p(hc[..., :H], w, b)
    i, f, o = (ops.sigmoid(pre[..., k * H:(k + 1) * H]) for k in (0, 1, 3))
    g = ops.tanh(pre[..., 2 * H:3 * H])
    c2 = f * hc[..., H:2 * H] + i * g
    return ops.concatenate([o * ops.tanh(c2), c2, i, f, g, o], axis=-1)


lstm_cell = primitive(_lstm_cell, "lstm_cell")
defvjp(lstm_cell, *(_lstm_vjp(k) for k in range(4)))
defjvp(lstm_cell,
       lambda t, ans, xp, hc, w, b=None: _lstm_tangent(t, None, ans, hc, _shape(w)[-1]),
       _lstm_jvp_hc,
       lambda t, ans, xp, hc, w, b=None: _lstm_tangent(
           _linear_p(hc[..., :_shape(w)[-1]], t), None, ans, hc, _shape(w)[-1]),
       lambda t, ans, xp, hc, w, b=None: _lstm_tangent(t, None, ans, hc, _shape(w)[-1]))


# ---- GRU ---------------------------------------------------------------------------------------
def _gru_cell(xp: Any, hs: Any, w: Any, b: Any = None) -> np.ndarray:
    H = w.shape[-1]
    out = np.empty(_lead(xp, hs) + (5 * H,), np.result_type(xp, hs, w))
    return _gru_into(out, xp, hs, w, b)


def _gru_into(out: np.ndarray, xp: Any, hs: Any, w: Any, b: Any) -> np.ndarray:
    """The cell's forward written into ``out``."""
    H = w.shape[-1]
    h = hs[..., :H]
    hp = h @ w.T  # the step's one GEMM
    if b is not None:
        hp += b
    rz = out[..., H:3 * H]
    np.add(xp[..., :2 * H], hp[..., :2 * H], out=rz)
    _sigmoid_(rz)
    hn, n = out[..., 4 * H:], out[..., 3 * H:4 * H]
    np.add(hp[..., 2 * H:], 0.0, out=hn)  # (broadcast to the output's rows)
    np.multiply(rz[..., :H], hn, out=n)  # r gates W_hn h + b_hn, as PyTorch
    n += xp[..., 2 * H:]
    np.tanh(n, out=n)
    h2 = out[..., :H]
    np.subtract(h, n, out=h2)  # (1 - z) n + z h = n + z (h - n)
    h2 *= rz[..., H:]
    h2 += n
    return out


def _gru_dpre(G: np.ndarray, Gh: np.ndarray, ans: np.ndarray, h: np.ndarray, dxp: np.ndarray,
              dhp: np.ndarray) -> np.ndarray:
    """The gradients of ``xp`` and of ``W_hh h + b_hh`` (written into ``dxp``, ``dhp``) for the
    output's gradient ``G`` (its h' part replaced by ``Gh``); returns h's own part, Gh z."""
    H = Gh.shape[-1]
    r, z, n, hn = (ans[..., (1 + k) * H:(2 + k) * H] for k in range(4))
    dr, dz, dn = dxp[..., :H], dxp[..., H:2 * H], dxp[..., 2 * H:]
    np.subtract(1.0, z, out=dn)
    dn *= Gh
    dn += G[..., 3 * H:4 * H]
    slope = n * n
    np.subtract(1.0, slope, out=slope)
    dn *= slope  # d pre-activation of n
    np.subtract(h, n, out=dz)
    dz *= Gh
    dz += G[..., 2 * H:3 * H]
    np.multiply(dn, hn, out=dr)
    dr += G[..., H:2 * H]
    slope = 1.0 - ans[..., H:3 * H]  # r (1 - r), z (1 - z)
    slope *= ans[..., H:3 * H]
    dxp[..., :2 * H] *= slope
    dhp[..., :2 * H] = dxp[..., :2 * H]  # r, z as dxp's; n's through r
    np.multiply(dn, r, out=dhp[..., 2 * H:])
    dhp[..., 2 * H:] += G[..., 4 * H:]
    return Gh * z


def _gru_grads(G: np.ndarray, ans: np.ndarray, hs: np.ndarray, w: np.ndarray,
               b: Any) -> tuple[np.ndarray, ...]:
    """(d xp, d hs, d w, d b) for the output's gradient ``G``, in NumPy (first order)."""
    H = w.shape[-1]
    h = hs[..., :H]
    dxp = np.empty(ans.shape[:-1] + (3 * H,), ans.dtype)
    dhp = np.empty_like(dxp)
    dh = _gru_dpre(G, G[..., :H], ans, h, dxp, dhp)
    dhs = np.zeros(ans.shape[:-1] + hs.shape[-1:], ans.dtype)
    np.matmul(dhp, w, out=dhs[..., :H])
    dhs[..., :H] += dh
    rows = _rows(dhp)
    dw = rows.T @ _hidden_rows(h, ans.shape[:-1])
    return dxp, dhs, dw, (None if b is None else ops._sum(rows, axis=0))


def _gru_grads_ops(G: Any, ans: Any, hs: Any, w: Any, b: Any) -> tuple[Any, ...]:
    """``_gru_grads`` in rlgrad's operations (recorded: differentiable again)."""
    H = _shape(w)[-1]
    r, z, n, hn = (ans[..., (1 + k) * H:(2 + k) * H] for k in range(4))
    Gh, Gr, Gz, Gn, Ghn = (G[..., k * H:(k + 1) * H] for k in range(5))
    h = hs[..., :H]
    dn = (Gh * (1.0 - z) + Gn) * (1.0 - n * n)
    dr = (dn * hn + Gr) * r * (1.0 - r)
    dz = (Gh * (h - n) + Gz) * z * (1.0 - z)
    dxp = ops.concatenate([dr, dz, dn], axis=-1)
    dhp = ops.concatenate([dr, dz, dn * r + Ghn], axis=-1)
    dhs = [_dense_grad_input_p(dhp, w) + Gh * z]
    width = _shape(hs)[-1]
    if width > H:  # the gates' columns of a wide state are not read
        dhs.append(np.zeros(_shape(ans)[:-1] + (width - H,), _dtype(ans)))
    if _shape(h)[:-1] != _shape(dhp)[:-1]:
        h = ops.broadcast_to(h, _shape(dhp)[:-1] + (H,))
    db = None if b is None else ops.sum(ops.reshape(dhp, (-1, 3 * H)), axis=0)
    return dxp, ops.concatenate(dhs, axis=-1), _dense_grad_weight_p(dhp, h), db


_GRU_MEMO = _Memo()


def _gru_vjp(k: int) -> Any:
    def rule(g: Any, ans: Any, xp: Any, hs: Any, w: Any, b: Any = None) -> Any:
        if _plain(g, ans, hs, w):
            return _GRU_MEMO.get(g, ans, lambda: _gru_grads(g, ans, hs, w, b))[k]
        return _GRU_MEMO.get(g, ans, lambda: _gru_grads_ops(g, ans, hs, w, b))[k]
    return rule


def _gru_tangent(tx: Any, thp: Any, th: Any, ans: Any, hs: Any, H: int) -> Any:
    """The output's tangent from the tangents of ``xp`` (``tx``), of ``W_hh h + b_hh``
    (``thp``) and of ``h`` itself (``th``); None: zero."""
    r, z, n, hn = (ans[..., (1 + k) * H:(2 + k) * H] for k in range(4))

    def part(t: Any, k: int) -> Any:
        return 0.0 if t is None else t[..., k * H:(k + 1) * H]

    dr = (part(tx, 0) + part(thp, 0)) * r * (1.0 - r)
    dz = (part(tx, 1) + part(thp, 1)) * z * (1.0 - z)
    dhn = hn * 0.0 if thp is None else part(thp, 2)
    if _shape(dhn) != _shape(hn):  # a bias's tangent: one row
        dhn = ops.broadcast_to(dhn, _shape(hn))
    dn = (part(tx, 2) + dr * hn + r * dhn) * (1.0 - n * n)
    dh2 = dn + dz * (hs[..., :H] - n) - z * dn
    if th is not None:
        dh2 = dh2 + z * th
    return ops.concatenate([dh2, dr, dz, dn, dhn], axis=-1)


def _gru_jvp_hs(t: Any, ans: Any, xp: Any, hs: Any, w: Any, b: Any = None) -> Any:
    H = _shape(w)[-1]
    return _gru_tangent(None, _linear_p(t[..., :H], w), t[..., :H], ans, hs, H)


def _gru_cell_reference(xp: Any, hs: Any, w: Any, b: Any = None) -> Any:
    """The cell as plain recorded operations (the reference the primitive is tested against)."""
    H = _shape(w)[-1]
    h = hs[..., :H]
    hp = _linear_p(h, w, b)
    r = ops.sigmoid(xp[..., :H] + hp[..., :H])
    z = ops.sigmoid(xp[..., H:2 * H] + hp[..., H:2 * H])
    hn = hp[..., 2 * H:]
    if _shape(hn) != _shape(r):  # a state with fewer leading dimensions than the input
        hn = ops.broadcast_to(hn, _shape(r))
    n = ops.tanh(xp[..., 2 * H:] + r * hn)
    return ops.concatenate([n + z * (h - n), r, z, n, hn], axis=-1)


gru_cell = primitive(_gru_cell, "gru_cell")
defvjp(gru_cell, *(_gru_vjp(k) for k in range(4)))
defjvp(gru_cell,
       lambda t, ans, xp, hs, w, b=None: _gru_tangent(t, None, None, ans, hs, _shape(w)[-1]),
       _gru_jvp_hs,
       lambda t, ans, xp, hs, w, b=None: _gru_tangent(
           None, _linear_p(hs[..., :_shape(w)[-1]], t), None, ans, hs, _shape(w)[-1]),
       lambda t, ans, xp, hs, w, b=None: _gru_tangent(None, t, None, ans, hs, _shape(w)[-1]))


# ---- a whole sequence as one node: what nn.LSTM / nn.GRU run eagerly ---------------------------
# ``lstm_seq(xp, hc0, w_hh, b_hh, reverse=False)``: the cell over ``xp`` (T, B, 4H), from the
# state ``hc0``, every step's wide output stacked (T, B, 6H) (``gru_seq`` likewise). One node for
# the loop: the backward pass walks the steps in NumPy with the cells' own kernels and makes the
# weights' gradient one GEMM over all steps, where T cell nodes made T. Given Tensors (higher
# order, forward mode) it is the loop of cell primitives (``_seq_reference``) differentiated.
def _order(T: int, reverse: bool) -> range:
    return range(T - 1, -1, -1) if reverse else range(T)


def _seq_fwd(into: Any, width: int) -> Any:
    def fwd(xp: Any, s0: Any, w: Any, b: Any = None, reverse: bool = False) -> np.ndarray:
        T = xp.shape[0]
        out = np.empty((T,) + _lead(xp[0], s0) + (width * w.shape[-1],),
                       np.result_type(xp, s0, w))
        s = s0
        for t in _order(T, reverse):
            s = into(out[t], xp[t], s, w, b)
        return out
    return fwd


def _prev(ans: np.ndarray, s0: np.ndarray, t: int, reverse: bool) -> np.ndarray:
    """The state step ``t`` read."""
    first = ans.shape[0] - 1 if reverse else 0
    return s0 if t == first else ans[t + 1 if reverse else t - 1]


def _seq_weight_grads(dpre: np.ndarray, ans: np.ndarray, s0: np.ndarray, w: np.ndarray,
                      b: Any, reverse: bool) -> tuple[Any, Any]:
    """d w (one GEMM of every step's gradient with the h it read) and d b."""
    H = w.shape[-1]
    h0 = np.broadcast_to(s0[..., :H], ans.shape[1:-1] + (H,))[None]
    hs = ans[1:, ..., :H] if reverse else ans[:-1, ..., :H]
    h_read = np.concatenate([hs, h0] if reverse else [h0, hs])
    rows = _rows(dpre)
    dw = rows.T @ h_read.reshape(-1, H)
    return dw, (None if b is None else ops._sum(rows, axis=0))


def _lstm_seq_grads(G: np.ndarray, ans: np.ndarray, hc0: np.ndarray, w: np.ndarray, b: Any,
                    reverse: bool) -> tuple[Any, ...]:
    """(d xp, d hc0, d w, d b) of ``lstm_seq`` in NumPy (first order)."""
    H = w.shape[-1]
    dpre = np.empty(ans.shape[:-1] + (4 * H,), ans.dtype)
    dh = dc = None  # the gradient reaching the state from the later steps
    for t in _order(ans.shape[0], not reverse):
        Gh = G[t, ..., :H] if dh is None else G[t, ..., :H] + dh
        Gc = G[t, ..., H:2 * H] if dc is None else G[t, ..., H:2 * H] + dc
        c = _prev(ans, hc0, t, reverse)[..., H:2 * H]
        dc = _lstm_dpre(Gh, Gc, G[t, ..., 2 * H:], ans[t], c, dpre[t])
        dh = dpre[t] @ w
    dhc0 = np.zeros(ans.shape[1:-1] + hc0.shape[-1:], ans.dtype)
    dhc0[..., :H], dhc0[..., H:2 * H] = dh, dc
    return (dpre, dhc0, *_seq_weight_grads(dpre, ans, hc0, w, b, reverse))


def _gru_seq_grads(G: np.ndarray, ans: np.ndarray, hs0: np.ndarray, w: np.ndarray, b: Any,
                   reverse: bool) -> tuple[Any, ...]:
    """(d xp, d hs0, d w, d b) of ``gru_seq`` in NumPy (first order)."""
    H = w.shape[-1]
    dxp = np.empty(ans.shape[:-1] + (3 * H,), ans.dtype)
    dhp = np.empty_like(dxp)
    dh = None  # the gradient reaching the state from the later steps
    for t in _order(ans.shape[0], not reverse):
        Gh = G[t, ..., :H] if dh is None else G[t, ..., :H] + dh
        h = _prev(ans, hs0, t, reverse)[..., :H]
        dh = _gru_dpre(G[t], Gh, ans[t], h, dxp[t], dhp[t])
        dh += dhp[t] @ w
    dhs0 = np.zeros(ans.shape[1:-1] + hs0.shape[-1:], ans.dtype)
    dhs0[..., :H] = dh
    return (dxp, dhs0, *_seq_weight_grads(dhp, ans, hs0, w, b, reverse))


def _seq_reference(cell: Any) -> Any:
    def reference(xp: Any, s0: Any, w: Any, b: Any = None, reverse: bool = False) -> Any:
        """The loop of cell primitives, stacked (the reference the sequence is tested against)."""
        states, s = [None] * _shape(xp)[0], s0
        for t in _order(len(states), reverse):
            s = states[t] = cell(xp[t], s, w, b)
        return ops.stack(states, axis=0)
    return reference


def _seq_vjp(grads: Any, reference: Any, memo: _Memo, k: int) -> Any:
    def rule(g: Any, ans: Any, xp: Any, s0: Any, w: Any, b: Any = None,
             reverse: bool = False) -> Any:
        if _plain(g, ans, xp, s0, w, b):
            return memo.get(g, ans, lambda: grads(g, ans, s0, w, b, reverse))[k]

        def ops_grads() -> tuple[Any, ...]:
            args = [xp, s0, w] + ([] if b is None else [b])
            _, back = vjp(lambda *a: reference(*a[:3], a[3] if len(a) > 3 else None, reverse),
                          *args)
            return tuple(back(g)) + (None,) * (4 - len(args))
        return memo.get(g, ans, ops_grads)[k]
    return rule


def _seq_jvp(reference: Any, k: int) -> Any:
    def rule(t: Any, ans: Any, xp: Any, s0: Any, w: Any, b: Any = None,
             reverse: bool = False) -> Any:
        args = [xp, s0, w] + ([] if b is None else [b])
        tans = [t if j == k else np.zeros(_shape(a), _dtype(a)) for j, a in enumerate(args)]
        return jvp(lambda *a: reference(*a[:3], a[3] if len(a) > 3 else None, reverse),
                   args, tans)[1]
    return rule


_lstm_seq_reference = _seq_reference(lstm_cell)
_gru_seq_reference = _seq_reference(gru_cell)
lstm_seq = primitive(_seq_fwd(_lstm_into, 6), "lstm_seq")
gru_seq = primitive(_seq_fwd(_gru_into, 5), "gru_seq")
for _p, _grads, _ref in ((lstm_seq, _lstm_seq_grads, _lstm_seq_reference),
                         (gru_seq, _gru_seq_grads, _gru_seq_reference)):
    _memo = _Memo()
    defvjp(_p, *(_seq_vjp(_grads, _ref, _memo, k) for k in range(4)))
    defjvp(_p, *(_seq_jvp(_ref, k) for k in range(4)))


# ---- vmap ----------------------------------------------------------------------------------------
def _batch_rule(reference: Any) -> Any:
    """Shared weights: the vmapped dimension is one more leading (row) dimension of the input
    and the state, and the cell runs as it is; batched weights (an ensemble): the reference,
    whose matmul batches them."""
    def rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
        if any(d is not None for d in dims[2:]):
            return decomposed(reference)(p, args, dims, level, **kwargs)
        rank = max(len(_shape(a)) - (d is not None) for a, d in zip(args[:2], dims[:2]))
        xp, hs = (align(bcast(a, d, level.size), rank) for a, d in zip(args[:2], dims[:2]))
        return p.call(xp, hs, *args[2:], **kwargs)
    return rule


def _seq_batch_rule(reference: Any) -> Any:
    """As the cells' rule, the vmapped dimension after the time axis (a row dimension)."""
    def rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
        if any(d is not None for d in dims[2:]):
            return decomposed(reference)(p, args, dims, level, **kwargs)
        xp, s0 = args[0], args[1]
        if dims[1] is not None:  # ones after V up to a step's rank: it broadcasts against xp[t]
            s0 = align(s0, len(_shape(xp)) - (dims[0] is not None) - 1)
        if dims[0] is not None:
            xp = ops.swapaxes(xp, 0, 1)
        return ops.swapaxes(p.call(xp, s0, *args[2:], **kwargs), 0, 1)
    return rule


defbatch(lstm_cell, _batch_rule(_lstm_cell_reference))
defbatch(gru_cell, _batch_rule(_gru_cell_reference))
defbatch(lstm_seq, _seq_batch_rule(_lstm_seq_reference))
defbatch(gru_seq, _seq_batch_rule(_gru_seq_reference))


# ---- one step on plain arrays (the NumPy acting paths) -------------------------------------------
def lstm_step_numpy(x: np.ndarray, h: np.ndarray, c: np.ndarray, w_ih: np.ndarray,
                    w_hh: np.ndarray, b_ih: Any, b_hh: Any) -> np.ndarray:
    """One LSTM step on arrays: the cell's own forward (so the acting path computes what the
    module does); the wide output, ``h'`` and ``c'`` in its first 2H columns."""
    xp = x @ w_ih.T
    if b_ih is not None:
        xp += b_ih
    return _lstm_cell(xp, np.concatenate([h, c], axis=-1), w_hh, b_hh)


def gru_step_numpy(x: np.ndarray, h: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray,
                   b_ih: Any, b_hh: Any) -> np.ndarray:
    """One GRU step on arrays (see ``lstm_step_numpy``); ``h'`` in the first H columns."""
    xp = x @ w_ih.T
    if b_ih is not None:
        xp += b_ih
    return _gru_cell(xp, h, w_hh, b_hh)

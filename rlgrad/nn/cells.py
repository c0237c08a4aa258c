"""The LSTM and GRU cells as one primitive each: a step's hidden projection (one GEMM) and its
gate nonlinearities in one recorded node, instead of ~15 (what ``nn.LSTM``/``GRU`` and their
cells run eagerly, and the body of their ``lax.scan`` under ``rlgrad.jit``).

``lstm_cell(xp, hc, w_hh, b_hh)``: ``xp`` is the step's input projection ``W_ih x + b_ih``
(B, 4H), ``hc`` the state: ``h`` in its first H columns and ``c`` in the next H (a (B, 2H) pair,
or a previous step's output). The output is *wide*, (B, 6H): ``[h' | c' | i | f | g | o]``, the
gates after their nonlinearities kept beside the new state, so that the backward pass reads them
instead of computing them again. ``gru_cell(xp, hs, w_hh, b_hh)``: ``xp`` (B, 3H), ``h`` in the
first H columns of ``hs``; output (B, 5H) ``[h' | r | z | W_hn h + b_hn | n]``. Gates in PyTorch's
order (i, f, g, o and r, z, n). Leading dimensions before B are batch dimensions too.

Derivatives: the VJP is, at first order (plain arrays), one NumPy pass shared by the four
arguments (``_lstm_grads``: the gates' gradient, then ``dh = dgates @ W``, ``dW = dgates.T @ h``,
``db``); given Tensors (``create_graph``, jit's trace) that same pass as one node
(``lstm_cell_grad``, its result packed), whose own VJP and JVP are those of the reference's VJP,
so it can be differentiated again. The JVP pushes the gates' tangent through the cell's
Jacobian; vmap merges its dimension into the rows, or (batched weights) runs the reference.
``_lstm_cell_reference``/``_gru_cell_reference``, the cell as plain recorded operations, are
what the primitives are tested against (tests/nn/test_rnn_fused.py). A step's elementwise work
around its GEMM and NumPy's tanh is one C pass each way where ``rlgrad._kernels`` is built
(``lstm_gates``/``lstm_dgates``, ``gru_gates``/``gru_state``/``gru_dgates``: the NumPy lines
beside each call, operation for operation, so the same bits; those lines run without it).
A float32 LSTM sequence runs its whole loop as one C call each way (``lstm_seq_fwd``/
``lstm_seq_bwd``: the step's GEMM through NumPy's OpenBLAS, the gates with the kernel's own tanh,
within 3 ulp of float64's); ``LOOP_IN_C = False`` (or RLGRAD_LSTM_LOOP=0) keeps the NumPy loops,
its reference (tests/nn/test_lstm_loop.py).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from rlgrad import lax, ops
from rlgrad.batching import Level, align, bcast, decomposed
from rlgrad.nn.functional import _dtype, _linear_p
from rlgrad.tensor import _shape
from rlgrad.tracer import (
    Primitive,
    defbatch,
    defjvp,
    defjvp_argnum,
    defvjp,
    defvjp_argnum,
    primitive,
)
from rlgrad.transforms import jvp, vjp

__all__ = ["lstm_cell", "gru_cell", "lstm_seq", "gru_seq", "lstm_seq_grad", "gru_seq_grad",
           "lstm_step_numpy", "gru_step_numpy"]


def _lead(*arrays: Any) -> tuple[int, ...]:
    shapes = [_shape(a)[:-1] for a in arrays]
    if all(s == shapes[0] for s in shapes[1:]):  # (np.broadcast_shapes costs ~5 us)
        return tuple(shapes[0])
    return np.broadcast_shapes(*shapes)


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


def _gates(x: np.ndarray, K: int) -> np.ndarray:
    """(rows, K*H) as a (K, rows, H) view: the kernels below index the gate axis first, which
    a sequence stores contiguously (``_seq``) and a step's (rows, K*H) array as column blocks."""
    return x.reshape(x.shape[0], K, -1).transpose(1, 0, 2)


def _flat_rows(x: np.ndarray, lead: tuple[int, ...]) -> np.ndarray:
    """``x`` broadcast to the leading dimensions ``lead`` and flattened to (rows, n)."""
    if x.shape[:-1] != lead:
        x = np.broadcast_to(x, lead + x.shape[-1:])
    return x.reshape(-1, x.shape[-1])


# ---- LSTM: gates i, f, g, o; a step's output blocks h, c, i, f, g, o ----------------------------
# A step is one 2-D GEMM into a (rows, 4H) scratch (h @ W_hh^T, the weights transposed once per
# call: a batched product of four (H, H) blocks, or W_hh.T as a transposed view, costs 1.3-2.5x
# the GEMM's time), the input projection added and NumPy's tanh in place on that contiguous
# block, then the elementwise rest in one C pass each way where rlgrad._kernels is built
# (``lstm_gates``, which also copies the gates into the output's blocks, ``lstm_dgates``: the
# same operations in the same order, so the same bits); the NumPy lines beside each call are the
# reference, run without it.
_HALF: dict[np.dtype, np.ndarray] = {}
_HALF_COLS: dict[tuple[np.dtype, int], np.ndarray] = {}


def _halves(dtype: np.dtype) -> np.ndarray:
    """(4, 1, 1): 1/2 for the sigmoid gates i, f, o, 1 for g (sigmoid(a) = (tanh(a/2) + 1) / 2)."""
    if dtype not in _HALF:
        _HALF[dtype] = np.array([0.5, 0.5, 1.0, 0.5], dtype).reshape(4, 1, 1)
    return _HALF[dtype]


def _half_columns(dtype: np.dtype, H: int) -> np.ndarray:
    """``_halves`` over a (rows, 4H) array's column blocks: (4H,)."""
    key = (np.dtype(dtype), H)
    if key not in _HALF_COLS:
        _HALF_COLS[key] = np.repeat(_halves(key[0]).ravel(), H)
    return _HALF_COLS[key]


def _lstm_operands(xp: np.ndarray, b: Any, w: np.ndarray, dtype: np.dtype) -> tuple[Any, Any]:
    """What every step reads: ``xq`` = (xp + b_hh) with gates i, f, o halved (a new array of
    xp's shape), and ``wq`` (H, 4H), W_hh^T contiguous with the same columns halved (halving is
    exact: the pre-activations are the bits of halving after the sum)."""
    half = _half_columns(dtype, w.shape[-1])
    xq = np.empty(xp.shape, dtype)
    if b is None:
        np.multiply(xp, half, out=xq)
    else:
        np.add(xp, b, out=xq)
        xq *= half
    wq = np.empty(w.shape[::-1], dtype)
    np.multiply(w.T, half, out=wq)
    return xq, wq


def _lstm_step(o: np.ndarray, xq: np.ndarray, h: np.ndarray, c: np.ndarray, wq: np.ndarray,
               pre: np.ndarray) -> None:
    """One step into ``o`` (6, rows, H) from ``xq`` (rows, 4H) and ``wq`` (``_lstm_operands``),
    the state ``h``, ``c`` (rows, H) and the scratch ``pre`` (rows, 4H)."""
    np.matmul(h, wq, out=pre)  # the step's GEMM
    pre += xq
    np.tanh(pre, out=pre)  # g, and i, f, o up to their last two operations
    acts = _gates(pre, 4)
    k = ops._kernels
    if k is None or not k.lstm_gates(acts, c, o[1], o[2:]):
        acts = o[2:]
        np.copyto(acts, _gates(pre, 4))
        for s in (acts[:2], acts[3]):
            s *= 0.5
            s += 0.5
        np.multiply(acts[1], c, out=o[1])
        o[1] += acts[2] * acts[0]
    np.tanh(o[1], out=o[0])
    o[0] *= o[5]


def _lstm_dstep(G: np.ndarray, dh: Any, dc: Any, a: np.ndarray, c: np.ndarray,
                d: np.ndarray, tc: np.ndarray) -> np.ndarray:
    """The gradient of a step's gate pre-activations, into ``d`` (4, rows, H), for the
    gradient ``G`` of its output ``a`` (6, rows, H), plus ``dh``, ``dc`` (the later steps' share
    of its h' and c'; None: none), from the state c; ``tc`` is tanh(c'). Returns the gradient
    of c."""
    out = np.empty_like(c)
    k = ops._kernels
    if k is not None and k.lstm_dgates(G, dh, dc, a, tc, c, d, out):
        return out
    Gh = G[0] if dh is None else G[0] + dh
    Gc = G[1] if dc is None else G[1] + dc
    i, f, g, o = a[2], a[3], a[4], a[5]
    dc2 = tc * tc
    np.subtract(1.0, dc2, out=dc2)
    dc2 *= o
    dc2 *= Gh
    dc2 += Gc
    np.multiply(dc2, g, out=d[0])
    np.multiply(dc2, c, out=d[1])
    np.multiply(dc2, i, out=d[2])
    np.multiply(Gh, tc, out=d[3])
    d += G[2:]
    slope = 1.0 - a[2:]  # the gates' derivatives: s (1 - s), and 1 - g^2 for g
    slope *= a[2:]
    np.multiply(g, g, out=slope[2])
    np.subtract(1.0, slope[2], out=slope[2])
    d *= slope
    np.multiply(dc2, f, out=out)
    return out


def _hidden_weights(w: np.ndarray, K: int) -> np.ndarray:
    """(K*H, H) as (K, H, H), each gate's block transposed (a view): ``h @ wk[k]`` is its part."""
    H = w.shape[-1]
    return w.reshape(K, H, H).transpose(0, 2, 1)


def _lstm_cell(xp: Any, hc: Any, w: Any, b: Any = None) -> np.ndarray:
    H = w.shape[-1]
    lead = _lead(xp, hc)
    hc2 = _flat_rows(hc, lead)
    dtype = np.result_type(xp, hc, w)
    out = np.empty((hc2.shape[0], 6 * H), dtype)
    xq, wq = _lstm_operands(_flat_rows(xp, lead), b, w, dtype)
    _lstm_step(_gates(out, 6), xq, hc2[:, :H], hc2[:, H:2 * H], wq, np.empty_like(xq))
    return out.reshape(lead + (6 * H,))


def _lstm_grads(G: np.ndarray, ans: np.ndarray, xp: np.ndarray, hc: np.ndarray, w: np.ndarray,
                b: Any, reverse: bool = False) -> tuple[Any, ...]:
    """(d xp, d hc, d w, d b) for the output's gradient ``G``, in NumPy (first order)."""
    H = w.shape[-1]
    lead = ans.shape[:-1]
    a, G2, hc2 = ans.reshape(-1, 6 * H), _flat_rows(G, lead), _flat_rows(hc, lead)
    Gg = _gates(G2, 6)
    dpre = np.empty((a.shape[0], 4 * H), ans.dtype)
    dc = _lstm_dstep(Gg, None, None, _gates(a, 6), hc2[:, H:2 * H], _gates(dpre, 4),
                     np.tanh(a[:, H:2 * H]))
    dhc = np.zeros((a.shape[0], hc.shape[-1]), ans.dtype)
    np.matmul(dpre, w, out=dhc[:, :H])
    dhc[:, H:2 * H] = dc
    dw = dpre.T @ hc2[:, :H]
    db = None if b is None else ops._sum(dpre, axis=0)
    return dpre.reshape(lead + (4 * H,)), dhc.reshape(lead + hc.shape[-1:]), dw, db


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
defjvp(lstm_cell,
       lambda t, ans, xp, hc, w, b=None: _lstm_tangent(t, None, ans, hc, _shape(w)[-1]),
       _lstm_jvp_hc,
       lambda t, ans, xp, hc, w, b=None: _lstm_tangent(
           _linear_p(hc[..., :_shape(w)[-1]], t), None, ans, hc, _shape(w)[-1]),
       lambda t, ans, xp, hc, w, b=None: _lstm_tangent(t, None, ans, hc, _shape(w)[-1]))


# ---- GRU: gates r, z, n; a step's output blocks h, r, z, W_hn h + b_hn, n --------------------
def _gru_step(o: np.ndarray, xg: np.ndarray, h: np.ndarray, wk: np.ndarray, b3: Any,
              halved: bool = False) -> None:
    """One step into ``o`` (5, rows, H) from ``xg`` (3, rows, H), ``h`` (rows, H) and ``wk``.
    ``halved``: ``xg``, ``wk`` and ``b3`` come with gates r, z halved (``_gru_seq``: exact)."""
    np.matmul(h, wk, out=o[1:4])  # the step's GEMM: W_hr h, W_hz h, W_hn h
    k = ops._kernels  # one C pass each (rlgrad._kernels: the same bits) or these NumPy lines
    if k is None or not k.gru_pre(o, xg, b3, not halved):
        if b3 is not None:
            o[1:4] += b3
        o[1:3] += xg[:2]
        if not halved:
            o[1:3] *= 0.5  # sigmoid(a) = (tanh(a / 2) + 1) / 2
    np.tanh(o[1:3], out=o[1:3])
    if k is None or not k.gru_gates(o, xg):
        o[1:3] *= 0.5
        o[1:3] += 0.5
        np.multiply(o[1], o[3], out=o[4])  # r gates W_hn h + b_hn, as PyTorch
        o[4] += xg[2]
    np.tanh(o[4], out=o[4])
    if k is None or not k.gru_state(o, h):
        np.subtract(h, o[4], out=o[0])  # (1 - z) n + z h = n + z (h - n)
        o[0] *= o[2]
        o[0] += o[4]


def _gru_dstep(G: np.ndarray, dh: Any, a: np.ndarray, h: np.ndarray, dx: np.ndarray,
               dhp: np.ndarray) -> np.ndarray:
    """The gradients of a step's ``xp`` and of ``W_hh h + b_hh``, into ``dx``, ``dhp``
    (3, rows, H), for the gradient ``G`` of its output ``a`` (5, rows, H) plus ``dh`` (the later
    steps' share of its h'; None: none) from the state h; returns h's own part, Gh z."""
    out = np.empty(a.shape[1:], a.dtype)
    k = ops._kernels
    if k is not None and k.gru_dgates(G, dh, a, h, dx, dhp, out):
        return out
    Gh = G[0] if dh is None else G[0] + dh
    r, z, hn, n = a[1], a[2], a[3], a[4]
    dn = dx[2]
    np.subtract(1.0, z, out=dn)
    dn *= Gh
    dn += G[4]
    slope = n * n
    np.subtract(1.0, slope, out=slope)
    dn *= slope  # d pre-activation of n
    np.subtract(h, n, out=dx[1])
    dx[1] *= Gh
    dx[1] += G[2]
    np.multiply(dn, hn, out=dx[0])
    dx[0] += G[1]
    slope = 1.0 - a[1:3]  # r (1 - r), z (1 - z)
    slope *= a[1:3]
    dx[:2] *= slope
    dhp[:2] = dx[:2]  # r, z as dx's; n's through r
    np.multiply(dn, r, out=dhp[2])
    dhp[2] += G[3]
    np.multiply(Gh, z, out=out)
    return out


def _gru_cell(xp: Any, hs: Any, w: Any, b: Any = None) -> np.ndarray:
    H = w.shape[-1]
    lead = _lead(xp, hs)
    hs2 = _flat_rows(hs, lead)
    out = np.empty((hs2.shape[0], 5 * H), np.result_type(xp, hs, w))
    _gru_step(_gates(out, 5), _gates(_flat_rows(xp, lead), 3), hs2[:, :H],
              _hidden_weights(w, 3), None if b is None else b.reshape(3, 1, H))
    return out.reshape(lead + (5 * H,))


def _gru_grads(G: np.ndarray, ans: np.ndarray, xp: np.ndarray, hs: np.ndarray, w: np.ndarray,
               b: Any, reverse: bool = False, slots: Any = None) -> tuple[Any, ...]:
    """(d xp, d hs, d w, d b) for the output's gradient ``G``, in NumPy (first order); each
    written into its part of ``slots`` (``_grad_fwd``: the packed result) where it fits."""
    H = w.shape[-1]
    lead = ans.shape[:-1]
    a, G2, hs2 = ans.reshape(-1, 5 * H), _flat_rows(G, lead), _flat_rows(hs, lead)
    h, rows, dt = hs2[:, :H], a.shape[0], ans.dtype
    dxp = _slot(slots, 0, (rows, 3 * H), dt)
    dhp = np.empty((rows, 3 * H), dt)
    dh = _gru_dstep(_gates(G2, 5), None, _gates(a, 5), h, _gates(dxp, 3), _gates(dhp, 3))
    dhs = _slot(slots, 1, (rows, hs.shape[-1]), dt)
    if dhs.shape[1] > H:
        dhs[:, H:] = 0
    np.matmul(dhp, w, out=dhs[:, :H])
    dhs[:, :H] += dh
    dw = np.matmul(dhp.T, h, out=_slot(slots, 2, w.shape, dt))
    db = None if b is None else ops._sum(dhp, axis=0, out=_slot(slots, 3, b.shape, dt))
    return dxp.reshape(lead + (3 * H,)), dhs.reshape(lead + hs.shape[-1:]), dw, db


def _slot(slots: Any, k: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Part ``k`` of a packed result as ``shape``, or a new array where it does not fit."""
    if slots is not None and k < len(slots):
        s = slots[k]
        if s.dtype == dtype and s.size == math.prod(shape):
            return s.reshape(shape)
    return np.empty(shape, dtype)


def _gru_tangent(tx: Any, thp: Any, th: Any, ans: Any, hs: Any, H: int) -> Any:
    """The output's tangent from the tangents of ``xp`` (``tx``), of ``W_hh h + b_hh``
    (``thp``) and of ``h`` itself (``th``); None: zero."""
    r, z, hn, n = (ans[..., (1 + k) * H:(2 + k) * H] for k in range(4))

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
    return ops.concatenate([dh2, dr, dz, dhn, dn], axis=-1)


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
    return ops.concatenate([n + z * (h - n), r, z, hn, n], axis=-1)


gru_cell = primitive(_gru_cell, "gru_cell")
defjvp(gru_cell,
       lambda t, ans, xp, hs, w, b=None: _gru_tangent(t, None, None, ans, hs, _shape(w)[-1]),
       _gru_jvp_hs,
       lambda t, ans, xp, hs, w, b=None: _gru_tangent(
           None, _linear_p(hs[..., :_shape(w)[-1]], t), None, ans, hs, _shape(w)[-1]),
       lambda t, ans, xp, hs, w, b=None: _gru_tangent(None, t, None, ans, hs, _shape(w)[-1]))


# ---- a whole sequence as one node: what nn.LSTM / nn.GRU run ------------------------------------
# ``lstm_seq(xp, hc0, w_hh, b_hh, reverse=False)``: the cell over ``xp`` (T, *rows, 4H) from the
# state ``hc0`` (*rows, W: h, c in its first 2H columns), every step's output stacked gate first,
# (T, 6, *rows, H): h, c, i, f, g, o each a contiguous (rows, H) block, on which NumPy's ufuncs
# run several times faster than on a (rows, 6H) array's column blocks. ``gru_seq`` likewise,
# (T, 5, *rows, H): h, r, z, W_hn h + b_hn, n. One node for the loop, eagerly and under
# ``rlgrad.jit`` (a program of the same size for every T): the backward pass walks the steps in
# NumPy with the cells' kernels and makes the weights' gradient one GEMM over all steps. Given
# Tensors it is one ``*_seq_grad`` node (jit's trace, ``create_graph``), whose own derivatives
# are those of the loop of cell primitives (``_seq_reference``), as are the sequences' JVPs.
def _order(T: int, reverse: bool) -> range:
    return range(T - 1, -1, -1) if reverse else range(T)


class _Seq:
    """A sequence's layout: T steps, leading row dimensions, K output and G gate blocks of H."""

    def __init__(self, xp: np.ndarray, s0: np.ndarray, w: np.ndarray, K: int) -> None:
        self.T, self.H, self.K = xp.shape[0], w.shape[-1], K
        self.G = w.shape[0] // self.H
        self.lead = _lead(xp[0], s0)
        self.N = int(np.prod(self.lead, dtype=np.int64))
        self.dtype = np.result_type(xp, s0, w)

    def rows(self, xp: np.ndarray) -> np.ndarray:
        """``xp`` (T, *rows, G*H) as (T, rows, G*H), broadcast along the rows (a view)."""
        width = int(xp.shape[-1])
        xp = xp.reshape((self.T,) + (1,) * (len(self.lead) + 2 - xp.ndim) + xp.shape[1:])
        src = np.broadcast_to(xp, (self.T,) + self.lead + (width,))
        return src.reshape(self.T, self.N, width)

    def gates_first(self, xp: np.ndarray) -> np.ndarray:
        """``xp`` (T, *rows, G*H) as a contiguous (T, G, rows, H) copy (the caller writes into
        it)."""
        T, G, N, H = self.T, self.G, self.N, self.H
        out = np.empty((T, G, N, H), self.dtype)
        np.copyto(out, self.rows(xp).reshape(T, N, G, H).transpose(0, 2, 1, 3))
        return out

    def state(self, s0: np.ndarray, k: int) -> np.ndarray:
        """Block ``k`` of the initial state as (rows, H)."""
        H = self.H
        return np.broadcast_to(s0[..., k * H:(k + 1) * H], self.lead + (H,)).reshape(self.N, H)

    def read(self, ans: np.ndarray, s0: np.ndarray, t: int, k: int, reverse: bool) -> np.ndarray:
        """Block ``k`` of the state step ``t`` read: the previous step's output, or the initial."""
        if t == (self.T - 1 if reverse else 0):
            return self.state(s0, k)
        return ans[t + 1 if reverse else t - 1, k]

    def flat(self, dg: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """A step's gradient computed gate first (G, rows, H) copied into its (rows, G*H) rows
        (one GEMM then gives the state's gradient, and the whole sequence's is d xp as it is)."""
        np.copyto(rows.reshape(self.N, self.G, self.H), dg.transpose(1, 0, 2))
        return rows

    def weight_grads(self, d: np.ndarray, ans: np.ndarray, s0: np.ndarray, b: Any,
                     reverse: bool, slots: Any = None) -> tuple[np.ndarray, Any]:
        """d w (one GEMM of every step's gradient ``d`` (T, rows, G*H) with the h it read,
        into ``slots[2]`` when given) and d b."""
        T, N, H = self.T, self.N, self.H
        h0 = self.state(s0, 0)[None]
        h_read = np.concatenate([ans[1:, 0], h0] if reverse else [h0, ans[:-1, 0]])
        rows = d.reshape(T * N, -1)
        dw = None if slots is None else slots[2].reshape(rows.shape[1], H)
        return (np.matmul(rows.T, h_read.reshape(T * N, H), out=dw),
                None if b is None else ops._sum(rows, axis=0))

    def step_grads(self, slots: Any) -> np.ndarray:
        """Every step's gradient (T, rows, G*H): in ``slots[0]`` (d xp's place in the packed
        result) when xp was not broadcast, so that d xp is written where it goes."""
        shape = (self.T, self.N, self.G * self.H)
        if slots is not None and slots[0].size == shape[0] * shape[1] * shape[2]:
            return slots[0].reshape(shape)
        return np.empty(shape, self.dtype)

    def outputs(self, d: np.ndarray, ds0: list[np.ndarray], xp: np.ndarray,
                s0: np.ndarray) -> tuple[Any, Any]:
        """d xp (T, *rows, G*H) from ``d`` (T, rows, G*H), summed over the rows ``xp`` was
        broadcast along, and d s0 from its blocks."""
        T, G, H = self.T, self.G, self.H
        dxp = d.reshape((T,) + self.lead + (G * H,))
        if dxp.shape != xp.shape:
            ones: tuple[int, ...] = (T,) + (1,) * (dxp.ndim - xp.ndim) + xp.shape[1:]
            big: tuple[int, ...] = dxp.shape
            axes = tuple(i for i, (m, k) in enumerate(zip(ones, big)) if m == 1 < k)
            dxp = dxp.sum(axis=axes).reshape(xp.shape)
        full = np.zeros((self.N, s0.shape[-1]), self.dtype)
        for k, part in enumerate(ds0):
            full[:, k * H:(k + 1) * H] = part
        return dxp, full.reshape(self.lead + s0.shape[-1:])


#: the LSTM sequence's loop as one C call each way (``_kernels.lstm_seq_fwd``/``lstm_seq_bwd``,
#: float32, through NumPy's OpenBLAS); False, or RLGRAD_LSTM_LOOP=0: the NumPy loops below
LOOP_IN_C = os.environ.get("RLGRAD_LSTM_LOOP", "1") != "0"
_BLAS: list[int] = []


def _sgemm() -> int:
    """cblas_sgemm's address in NumPy's OpenBLAS (0: none; RLGRAD_NATIVE_BLAS=0 says none)."""
    if not _BLAS:
        from rlgrad.native.build import blas_pointers
        _BLAS.append(blas_pointers()[0])
    return _BLAS[0]


def _c_loop(*arrays: Any) -> int:
    """The sgemm address when the C loops apply to these arrays (float32, plain), else 0."""
    if not LOOP_IN_C or ops._kernels is None:
        return 0
    if not all(a is None or (type(a) is np.ndarray and a.dtype == np.float32) for a in arrays):
        return 0
    return _sgemm()


def _lstm_seq_c(L: _Seq, xp: np.ndarray, hc0: np.ndarray, w: np.ndarray, b: Any,
                reverse: bool, out: np.ndarray) -> bool:
    """``_lstm_seq``'s loop as one C call (``LOOP_IN_C``); False: not taken, nothing written."""
    gemm = _c_loop(xp, hc0, w, b)
    if not gemm:
        return False
    half = _half_columns(L.dtype, L.H)
    wq = np.empty(w.shape[::-1], L.dtype)
    np.multiply(w.T, half, out=wq)
    h0 = np.ascontiguousarray(L.state(hc0, 0))
    return bool(ops._kernels.lstm_seq_fwd(L.rows(xp), b, h0, L.state(hc0, 1), wq, half, out,
                                          gemm, reverse))


def _lstm_seq(xp: Any, hc0: Any, w: Any, b: Any = None, reverse: bool = False) -> np.ndarray:
    L = _Seq(xp, hc0, w, 6)
    out = np.empty((L.T, 6, L.N, L.H), L.dtype)
    if _lstm_seq_c(L, xp, hc0, w, b, reverse, out):
        return out.reshape((L.T, 6) + L.lead + (L.H,))
    xq, wq = _lstm_operands(L.rows(xp), b, w, L.dtype)
    h, c, pre = L.state(hc0, 0), L.state(hc0, 1), np.empty_like(xq[0])
    for t in _order(L.T, reverse):
        _lstm_step(out[t], xq[t], h, c, wq, pre)
        h, c = out[t, 0], out[t, 1]
    return out.reshape((L.T, 6) + L.lead + (L.H,))


def _lstm_seq_grads_c(L: _Seq, G: np.ndarray, ans: np.ndarray, hc0: np.ndarray, w: np.ndarray,
                      d: np.ndarray, reverse: bool) -> list[np.ndarray] | None:
    """``_lstm_seq_grads``' loop as one C call (``LOOP_IN_C``): every step's gradient into ``d``
    and [d h0, d c0]; None: not taken."""
    gemm = _c_loop(G, ans, hc0, w)
    if not gemm or not d.flags.c_contiguous:
        return None
    dh, dc = np.empty((L.N, L.H), L.dtype), np.empty((L.N, L.H), L.dtype)
    if not ops._kernels.lstm_seq_bwd(G, ans, L.state(hc0, 1), np.ascontiguousarray(w), d, dh, dc,
                                     gemm, reverse):
        return None
    return [dh, dc]


def _lstm_seq_grads(G: np.ndarray, ans: np.ndarray, xp: np.ndarray, hc0: np.ndarray,
                    w: np.ndarray, b: Any, reverse: bool, slots: Any = None) -> tuple[Any, ...]:
    """(d xp, d hc0, d w, d b) of ``lstm_seq`` in NumPy (first order); the large ones in
    ``slots`` (``_grad_fwd``) when given."""
    L = _Seq(ans[:, 0], hc0, w, 6)
    shape = (L.T, 6, L.N, L.H)
    G, ans = np.broadcast_to(G, ans.shape).reshape(shape), ans.reshape(shape)
    d = L.step_grads(slots)
    ds0 = _lstm_seq_grads_c(L, G, ans, hc0, w, d, reverse)
    if ds0 is not None:
        return (*L.outputs(d, ds0, xp, hc0), *L.weight_grads(d, ans, hc0, b, reverse, slots))
    tcs = np.tanh(ans[:, 1])  # every step's tanh(c'), one call
    dg = np.empty((4, L.N, L.H), L.dtype)  # a step's, gate first (NumPy's path)
    dh: Any = None  # the gradient reaching the state from the later steps
    dc: Any = None
    fused = ops._kernels is not None  # (the C pass writes straight into d's rows)
    for t in _order(L.T, not reverse):
        dc = _lstm_dstep(G[t], dh, dc, ans[t], L.read(ans, hc0, t, 1, reverse),
                         _gates(d[t], 4) if fused else dg, tcs[t])
        dh = (d[t] if fused else L.flat(dg, d[t])) @ w
    return (*L.outputs(d, [dh, dc], xp, hc0), *L.weight_grads(d, ans, hc0, b, reverse, slots))


def _gru_seq(xp: Any, hs0: Any, w: Any, b: Any = None, reverse: bool = False) -> np.ndarray:
    L = _Seq(xp, hs0, w, 5)
    xg = L.gates_first(xp)
    half = _halves(L.dtype)[:3]  # r, z halved once (exact: the same bits), n's blocks not
    xg[:, :2] *= 0.5
    out = np.empty((L.T, 5, L.N, L.H), L.dtype)
    wk, h = _hidden_weights(w, 3) * half, L.state(hs0, 0)
    b3 = None if b is None else b.reshape(3, 1, L.H) * half
    for t in _order(L.T, reverse):
        _gru_step(out[t], xg[t], h, wk, b3, halved=True)
        h = out[t, 0]
    return out.reshape((L.T, 5) + L.lead + (L.H,))


def _gru_seq_grads(G: np.ndarray, ans: np.ndarray, xp: np.ndarray, hs0: np.ndarray,
                   w: np.ndarray, b: Any, reverse: bool, slots: Any = None) -> tuple[Any, ...]:
    """(d xp, d hs0, d w, d b) of ``gru_seq`` in NumPy (first order); see ``_lstm_seq_grads``."""
    L = _Seq(ans[:, 0], hs0, w, 5)
    shape = (L.T, 5, L.N, L.H)
    G, ans = np.broadcast_to(G, ans.shape).reshape(shape), ans.reshape(shape)
    dxg, dhg = np.empty((3, L.N, L.H), L.dtype), np.empty((3, L.N, L.H), L.dtype)
    dx = L.step_grads(slots)
    dhp = np.empty_like(dx)
    dh: Any = None  # the gradient reaching the state from the later steps
    fused = ops._kernels is not None  # (the C pass writes straight into dx's and dhp's rows)
    for t in _order(L.T, not reverse):
        dh = _gru_dstep(G[t], dh, ans[t], L.read(ans, hs0, t, 0, reverse),
                        _gates(dx[t], 3) if fused else dxg, _gates(dhp[t], 3) if fused else dhg)
        if not fused:
            L.flat(dxg, dx[t])
        dh += (dhp[t] if fused else L.flat(dhg, dhp[t])) @ w
    return (*L.outputs(dx, [dh], xp, hs0), *L.weight_grads(dhp, ans, hs0, b, reverse, slots))


def _seq_reference(cell: Any, K: int) -> Any:
    def reference(xp: Any, s0: Any, w: Any, b: Any = None, reverse: bool = False) -> Any:
        """The loop of cell primitives, each step's output gate first (the reference of the
        sequence primitive)."""
        states, s = [None] * _shape(xp)[0], s0
        for t in _order(len(states), reverse):
            s = cell(xp[t], s, w, b)
            lead = _shape(s)[:-1]
            states[t] = ops.moveaxis(ops.reshape(s, lead + (K, _shape(w)[-1])), -2, 0)
        return ops.stack(states, axis=0)
    return reference


def _present(b: Any, *args: Any) -> list[Any]:
    return [*args] + ([] if b is None else [b])


def _grads_of(reference: Any, reverse: bool, has_b: bool) -> Any:
    """(g, xp, s0, w[, b]) -> the reference's VJP of ``g``, packed flat (what ``*_seq_grad``
    computes), in rlgrad's operations."""
    def grads(g: Any, *args: Any) -> Any:
        _, back = vjp(lambda *a: reference(*a[:3], a[3] if has_b else None, reverse), *args)
        return ops.concatenate([ops.ravel(d) for d in back(g)])
    return grads


def _grad_vjp(reference: Any, memo: _Memo) -> Any:
    """``*_seq_grad``'s VJP: that of the reference's VJP (``ans`` is a cache of values the other
    arguments determine: no gradient of its own)."""
    def rule(i: int, c: Any, packed: Any, g: Any, ans: Any, xp: Any, s0: Any, w: Any,
             b: Any = None, reverse: bool = False) -> Any:
        if i == 1:
            return None

        def compute() -> tuple[Any, ...]:
            _, back = vjp(_grads_of(reference, reverse, b is not None), g,
                          *_present(b, xp, s0, w))
            return (back(c)[0], None, *back(c)[1:])
        return memo.get(c, packed, compute)[i]
    return rule


def _grad_jvp(reference: Any) -> Any:
    def rule(i: int, t: Any, packed: Any, g: Any, ans: Any, xp: Any, s0: Any, w: Any,
             b: Any = None, reverse: bool = False) -> Any:
        if i == 1:
            return None
        args = [g, *_present(b, xp, s0, w)]
        k = 0 if i == 0 else i - 1
        tans = [t if j == k else np.zeros(_shape(a), _dtype(a)) for j, a in enumerate(args)]
        return jvp(_grads_of(reference, reverse, b is not None), args, tans)[1]
    return rule


def _unpack(packed: Any, like: list[Any]) -> list[Any]:
    out, off = [], 0
    for a in like:
        n = int(np.prod(_shape(a), dtype=np.int64))
        out.append(ops.reshape(packed[off:off + n], _shape(a)))
        off += n
    return out


def _fused_vjp(grads: Any, grad_p: Any, memo: _Memo, k: int) -> Any:
    def rule(g: Any, ans: Any, xp: Any, s0: Any, w: Any, b: Any = None,
             reverse: bool = False) -> Any:
        if _plain(g, ans, xp, s0, w, b):
            return memo.get(g, ans, lambda: grads(g, ans, xp, s0, w, b, reverse))[k]

        def recorded() -> tuple[Any, ...]:
            args = _present(b, xp, s0, w)
            got = _unpack(grad_p(g, ans, xp, s0, w, b, reverse=reverse), args)
            return tuple(got) + (None,) * (4 - len(args))
        return memo.get(g, ans, recorded)[k]
    return rule


def _seq_jvp(reference: Any, k: int) -> Any:
    def rule(t: Any, ans: Any, xp: Any, s0: Any, w: Any, b: Any = None,
             reverse: bool = False) -> Any:
        args = _present(b, xp, s0, w)
        tans = [t if j == k else np.zeros(_shape(a), _dtype(a)) for j, a in enumerate(args)]
        return jvp(lambda *a: reference(*a[:3], a[3] if len(a) > 3 else None, reverse),
                   args, tans)[1]
    return rule


def _grad_fwd(grads: Any, slotted: bool = False) -> Any:
    """The packed VJP: ``grads``' results one after another in one flat array. ``slotted``:
    ``grads`` takes the packed array's parts (``slots``) and writes its large results there,
    which are then not copied (a sequence's d xp is most of the packed array)."""
    def fwd(g: Any, ans: Any, xp: Any, s0: Any, w: Any, b: Any = None,
            reverse: bool = False) -> np.ndarray:
        args = _present(b, xp, s0, w)
        if not slotted:
            return np.concatenate([np.ravel(d) for d in grads(g, ans, xp, s0, w, b, reverse)
                                   if d is not None])
        sizes = [a.size for a in args]
        packed = np.empty(sum(sizes), np.result_type(ans, s0, w))  # (_Seq.dtype)
        slots, at = [], 0
        for n in sizes:  # (a loop: np.cumsum of a list costs more than the cell's kernels)
            slots.append(packed[at:at + n])
            at += n
        got = [d for d in grads(g, ans, xp, s0, w, b, reverse, slots) if d is not None]
        if (len(got) != len(slots) or np.result_type(*got) != packed.dtype
                or any(d.size != slot.size for d, slot in zip(got, slots))):
            return np.concatenate([np.ravel(d) for d in got])  # (as unslotted: its dtype)
        for d, slot in zip(got, slots):
            if not np.may_share_memory(d, packed):  # (what was not written in its slot)
                np.copyto(slot, np.ravel(d))
        return packed
    return fwd


def _cell_reference(reference: Any) -> Any:
    """A cell's reference with the sequences' signature (``reverse`` has no meaning for a step)."""
    def ref(xp: Any, s0: Any, w: Any, b: Any = None, reverse: bool = False) -> Any:
        return reference(xp, s0, w, b)
    return ref


_lstm_seq_reference = _seq_reference(lstm_cell, 6)
_gru_seq_reference = _seq_reference(gru_cell, 5)
lstm_seq = primitive(_lstm_seq, "lstm_seq")
gru_seq = primitive(_gru_seq, "gru_seq")
# The VJPs of the four, given Tensors: one node each (the NumPy backward, packed), whose own
# derivatives are those of the reference's VJP
lstm_cell_grad = primitive(_grad_fwd(_lstm_grads), "lstm_cell_grad")
gru_cell_grad = primitive(_grad_fwd(_gru_grads, True), "gru_cell_grad")
lstm_seq_grad = primitive(_grad_fwd(_lstm_seq_grads, True), "lstm_seq_grad")
gru_seq_grad = primitive(_grad_fwd(_gru_seq_grads, True), "gru_seq_grad")
_FUSED = ((lstm_cell, lstm_cell_grad, _lstm_grads, _cell_reference(_lstm_cell_reference)),
          (gru_cell, gru_cell_grad, _gru_grads, _cell_reference(_gru_cell_reference)),
          (lstm_seq, lstm_seq_grad, _lstm_seq_grads, _lstm_seq_reference),
          (gru_seq, gru_seq_grad, _gru_seq_grads, _gru_seq_reference))
for _p, _gp, _grads, _ref in _FUSED:
    _memo = _Memo()
    defvjp(_p, *(_fused_vjp(_grads, _gp, _memo, k) for k in range(4)))
    defvjp_argnum(_gp, _grad_vjp(_ref, _Memo()))
    defjvp_argnum(_gp, _grad_jvp(_ref))
for _p, _ref in ((lstm_seq, _lstm_seq_reference), (gru_seq, _gru_seq_reference)):
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
        return cast(Callable[..., Any], p.call)(xp, hs, *args[2:], **kwargs)
    return rule


def _seq_batch_rule(reference: Any) -> Any:
    """As the cells' rule: the vmapped dimension is a row dimension, after the time axis of the
    input and after the time and gate axes of the output."""
    def rule(p: Primitive, args: list, dims: list, level: Level, **kwargs: Any) -> Any:
        if any(d is not None for d in dims[2:]):
            return decomposed(reference)(p, args, dims, level, **kwargs)
        xp, s0 = args[0], args[1]
        if dims[1] is not None:  # ones after V up to a step's rank: it broadcasts against xp[t]
            s0 = align(s0, len(_shape(xp)) - (dims[0] is not None) - 1)
        if dims[0] is not None:
            xp = ops.swapaxes(xp, 0, 1)
        out = cast(Callable[..., Any], p.call)(xp, s0, *args[2:], **kwargs)
        return ops.moveaxis(out, 2, 0)
    return rule


def _grad_batch_rule(reference: Any) -> Any:
    def logical(g: Any, ans: Any, xp: Any, s0: Any, w: Any, b: Any = None,
                reverse: bool = False) -> Any:
        return _grads_of(reference, reverse, b is not None)(g, *_present(b, xp, s0, w))
    return decomposed(logical)


defbatch(lstm_cell, _batch_rule(_lstm_cell_reference))
defbatch(gru_cell, _batch_rule(_gru_cell_reference))
defbatch(lstm_seq, _seq_batch_rule(_lstm_seq_reference))
defbatch(gru_seq, _seq_batch_rule(_gru_seq_reference))
for _p, _gp, _grads, _ref in _FUSED:
    defbatch(_gp, _grad_batch_rule(_ref))


def _gru_states(xp: Any, h0: Any, w: Any, b: Any = None, reverse: bool = False) -> Any:
    """The states h' of ``gru_seq`` over ``xp`` (T, *rows, 3H) from ``h0``: (T, *rows, H)."""
    return ops.getitem(gru_seq(xp, h0, w, b, reverse=reverse), (slice(None), 0))


# a lax.scan whose body is one gru_cell step on its carry runs as one gru_seq node
lax.defsequence(gru_cell, _gru_states)



# ---- one step on plain arrays (the NumPy acting paths) -------------------------------------------
def lstm_step_numpy(x: np.ndarray, h: np.ndarray, c: np.ndarray, w_ih: np.ndarray,
                    w_hh: np.ndarray, b_ih: np.ndarray | None, b_hh: np.ndarray | None) -> np.ndarray:
    """One LSTM step on arrays: the module's own forward, ``lstm_seq`` over one step (so the
    acting path computes what ``nn.LSTM`` does, C loop or not); the wide output (B, 6H),
    ``h'`` and ``c'`` in its first 2H columns."""
    xp = x @ w_ih.T
    if b_ih is not None:
        xp += b_ih
    out = _lstm_seq(xp[None], np.concatenate([h, c], axis=-1), w_hh, b_hh)[0]
    return np.moveaxis(out, 0, -2).reshape(out.shape[1:-1] + (6 * out.shape[-1],))


def gru_step_numpy(x: np.ndarray, h: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray,
                   b_ih: np.ndarray | None, b_hh: np.ndarray | None) -> np.ndarray:
    """One GRU step on arrays (see ``lstm_step_numpy``); ``h'`` in the first H columns."""
    xp = x @ w_ih.T
    if b_ih is not None:
        xp += b_ih
    return _gru_cell(xp, h, w_hh, b_hh)

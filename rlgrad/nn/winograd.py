"""Winograd convolutions for conv2d's batched passes (rlgrad/nn/functional.py dispatches here).

A convolution over a padded channels-last input ``xp`` (N, Hp, Wp, C) with kernel kh x kw and
stride (sh, sw), where kh = r*sh and kw = r*sw for r in {2, 3}, is first a space-to-depth by the
stride: the input becomes (N, Hp/sh, Wp/sw, sh*sw*C) and the kernel r x r at stride 1 (the Nature
CNN's 4x4/2 layer: 2x2 over 4x the channels). That stride-1 convolution runs as Winograd's minimal
filtering F(m x m, r x r) with alpha = m + r - 1 = 4 (F(2x2, 3x3) and F(3x3, 2x2)): the output in
m x m tiles, each read from a 4x4 input tile; per tile point (16 of them) one GEMM of the tiles'
transformed inputs V (tiles, C') by the transformed kernel U (C', O), then the tiles' outputs
Y = A^T M A. The GEMMs do 16 / (m*m*r*r) of im2col's multiplies (F(2,3): 0.44, F(3,2): 0.44).

The transforms use the Toom-Cook points 0, 1, -1 and infinity: B^T and A^T hold only 0 and +-1,
G halves, so they are exact sums and differences (float32 error ~ a few ulp of the inputs'
scale). The backward passes are the adjoints: the input gradient takes the output gradient's
tiles through A (dM = A dY A^T), multiplies by U^T and goes back through B, adding overlapping
tiles, then depth-to-space; the weight gradient is V^T dM per tile point, back through G.

An output whose receptive field is all zeros (a black border, a ReLU's dead region) is written
exactly 0, as im2col's is: the tile sums cancel there only to rounding, and a ReLU at zero bias
would let its gradient through (``output_transform``'s ``zeros``).

The tile transforms are C loops (rlgrad._kernels' wino_in, wino_out; each with its adjoint); the
NumPy lines beside them are the reference (``C_TRANSFORMS`` off; tests/nn/test_winograd.py).
``WINOGRAD`` off: conv2d takes its im2col paths everywhere.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from rlgrad import ops

WINOGRAD = True  # off: every convolution takes conv2d's im2col / folded paths
C_TRANSFORMS = True  # off: the tile transforms in NumPy (the reference)
MIN_TILES = 32  # tiles (N * tile rows * tile columns) for Winograd to be taken: see plan()
MIN_CHANNELS = 32  # space-to-depth channels C' = sh*sw*C: see plan()
BLOCK_BYTES = 1 << 19  # V or M planes per block of samples (see _spans)

ALPHA = 4
# B^T (alpha x alpha), the same for both r; A^T (m x alpha) and G (alpha x r) by r.
_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, -1, 0, 1]], dtype=np.float64)
_AT = {3: np.array([[1, 1, 1, 0], [0, 1, -1, 1]], dtype=np.float64),
       2: np.array([[1, 1, 1, 0], [0, 1, -1, 0], [0, 1, 1, 1]], dtype=np.float64)}
_G = {3: np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]]),
      2: np.array([[1, 0], [.5, .5], [.5, -.5], [0, 1]])}
_GG = {r: np.kron(g, g) for r, g in _G.items()}  # (16, r*r): U = GG @ w per channel pair


class Plan(NamedTuple):
    """The geometry of one Winograd convolution."""

    r: int  # stride-1 kernel size after space-to-depth
    m: int  # outputs per tile side
    sh: int
    sw: int
    oh: int
    ow: int
    th: int  # tile rows
    tw: int  # tile columns
    cp: int  # channels after space-to-depth, sh*sw*C

    @property
    def at(self) -> np.ndarray:
        return _AT[self.r]


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_PLANS: dict[tuple[tuple[int, ...], tuple[int, ...], tuple[int, int]], Plan | None] = {}


def plan(xp_shape: tuple[int, ...], w_shape: tuple[int, ...], st: tuple[int, int],
         dtype: np.dtype) -> Plan | None:
    """The Winograd plan for a convolution of a padded NHWC input of ``xp_shape`` by a weight of
    ``w_shape`` (O, C, kh, kw) at stride ``st`` in ``dtype``, or None where it does not apply or
    pay: float32 or float64; kernels r*s with r in {2, 3}; at least MIN_TILES tiles; at least
    MIN_CHANNELS channels after space-to-depth. Forward CPU time against im2col's (one thread,
    float32, SimpleMultiObsEnv's and Atari's conv2 and conv3): 0.92x-1.45x at batch 1 (4 to 16
    tiles: a rollout's convolutions stay on im2col, their numbers with them), 0.6x-0.85x from 32
    tiles, 0.48x-0.66x in an update. SimpleMultiObsEnv's conv1 (8x8/4 over one channel, 16
    channels after space-to-depth) 0.93x alone, but its PPO run (bench/sb3_multi.py --image)
    took 0.07 s longer with it than without (its planes, 5 MB at batch 64, out of cache where
    the row-folded path's blocks stay in); Atari's conv1 (over 4 frames, 64 channels) 0.81x.
    Plans are kept per shapes (the thresholds are read when a plan is made)."""
    if not WINOGRAD or dtype not in _FLOATS:
        return None
    key = (xp_shape, w_shape, st)
    if key in _PLANS:
        return _PLANS[key]
    p = _make_plan(xp_shape, w_shape, st)
    if len(_PLANS) >= 256:
        _PLANS.clear()
    _PLANS[key] = p
    return p


def _make_plan(xp_shape: tuple[int, ...], w_shape: tuple[int, ...], st: tuple[int, int]
               ) -> Plan | None:
    n, hp, wp, c = xp_shape
    _, _, kh, kw = w_shape
    sh, sw = st
    if kh % sh or kw % sw or kh // sh != kw // sw or kh // sh not in _AT:
        return None
    r = kh // sh
    m = ALPHA - r + 1
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    th, tw = -(-oh // m), -(-ow // m)
    if n * th * tw < MIN_TILES or sh * sw * c < MIN_CHANNELS:
        return None
    return Plan(r, m, sh, sw, oh, ow, th, tw, sh * sw * c)


def weight_transform(cols: np.ndarray, p: Plan) -> np.ndarray:
    """U (16, C', O) = G w' G^T of the space-to-depth kernel w' (r x r over C' = (row, column,
    channel) in the stride block), from the weight's GEMM columns (kh*kw*C, O) (conv2d's
    ``_weight_cols``, rows (kernel row, column, channel)): a copy of C*O blocks, one GEMM."""
    o = cols.shape[1]
    ws = cols.reshape(p.r, p.sh, p.r, p.sw, -1).transpose(0, 2, 1, 3, 4)  # (i, j, p, q, (c, o))
    u = _GG[p.r].astype(cols.dtype) @ np.ascontiguousarray(ws).reshape(p.r * p.r, -1)
    return u.reshape(ALPHA * ALPHA, p.cp, o)


def weight_transform_adjoint(du: np.ndarray, p: Plan, c: int) -> np.ndarray:
    """dw (O, C, kh, kw) from dU (16, C', O): ``weight_transform``'s adjoint."""
    o = du.shape[2]
    dws = (_GG[p.r].T.astype(du.dtype) @ du.reshape(ALPHA * ALPHA, -1)).reshape(
        p.r, p.r, p.sh, p.sw, c * o)
    cols = np.ascontiguousarray(dws.transpose(0, 2, 1, 3, 4))  # (kernel row, column, (c, o))
    return np.ascontiguousarray(cols.reshape(p.r * p.sh, p.r * p.sw, c, o).transpose(3, 2, 0, 1))


def _s2d_rows(p: Plan) -> tuple[int, int]:
    """Space-to-depth rows and columns the tiles read."""
    return p.th * p.m + p.r - 1, p.tw * p.m + p.r - 1


_SKEW = 64  # bytes between planes beyond their size (see _planes)
Planes = tuple[np.ndarray, np.ndarray]
_SCRATCH = threading.local()


def _planes(rows: int, cols: int, dtype: np.dtype, name: str | None = None) -> Planes:
    """16 planes (rows, cols) as the (16, L) buffer the C loops take and its (16, rows, cols)
    view (the GEMMs'). L is 64 bytes more than a plane: planes a power of two bytes apart (as
    (256, 128) float32 ones are) share the same cache sets, and the transforms, which read or
    write all 16 at once, ran 3x slower so. With a ``name``, a scratch buffer of this thread
    kept for the next call of the same name and size (the caller's temporary: V and M never
    leave a call): a fresh megabyte is a fresh mapping from the system, and its page faults
    took longer than the transform that fills it (Atari's conv3 at batch 16: 2x im2col's time)."""
    size = rows * cols + _SKEW // np.dtype(dtype).itemsize
    if name is None:
        flat = np.empty((ALPHA * ALPHA, size), dtype)
    else:
        kept = _SCRATCH.__dict__.setdefault("planes", {})
        key = (name, size, np.dtype(dtype))
        flat = kept.get(key)
        if flat is None:
            if len(kept) >= 16:
                kept.clear()
            flat = kept[key] = np.empty((ALPHA * ALPHA, size), dtype)
    return flat, flat[:, :rows * cols].reshape(ALPHA * ALPHA, rows, cols)


def input_transform(xp: np.ndarray, p: Plan, zeros: np.ndarray | None = None) -> Planes:
    """V (16, N*th*tw, C') = B^T d B of every 4x4 tile d of the space-to-depth input; into
    ``zeros`` (uint16, one per tile) if given, bit u*4+v set where d's pixel (u, v) is all 0."""
    n, _, _, c = xp.shape
    v = _planes(n * p.th * p.tw, p.cp, xp.dtype, "v")
    k = ops._kernels
    if C_TRANSFORMS and k is not None and k.wino_in(xp, v[0], p.sh, p.sw, p.m, p.th, p.tw, False,
                                                    zeros):
        return v
    h2, w2 = _s2d_rows(p)
    xs = np.zeros((n, h2 * p.sh, w2 * p.sw, c), dtype=xp.dtype)
    hh, ww = min(xp.shape[1], h2 * p.sh), min(xp.shape[2], w2 * p.sw)
    xs[:, :hh, :ww] = xp[:, :hh, :ww]
    xs = xs.reshape(n, h2, p.sh, w2, p.sw, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, h2, w2, p.cp)
    s0, s1, s2, s3 = xs.strides
    d = as_strided(xs, (n, p.th, p.tw, ALPHA, ALPHA, p.cp), (s0, s1 * p.m, s2 * p.m, s1, s2, s3))
    bt = _BT.astype(xp.dtype)
    v[1][...] = np.einsum("au,bv,ntsuvc->abntsc", bt, bt, d).reshape(v[1].shape)
    if zeros is not None:
        flat = ~d.any(axis=-1).reshape(-1, ALPHA * ALPHA)
        zeros[...] = (flat.astype(np.uint16) << np.arange(ALPHA * ALPHA, dtype=np.uint16)).sum(
            axis=1, dtype=np.uint16)
    return v


def input_transform_adjoint(dv: Planes, p: Plan, gx: np.ndarray) -> None:
    """``gx`` (N, Hp, Wp, C) += ``input_transform``'s adjoint applied to dV (16, N*th*tw, C')."""
    k = ops._kernels
    if C_TRANSFORMS and k is not None and k.wino_in(gx, dv[0], p.sh, p.sw, p.m, p.th, p.tw, True,
                                                    None):
        return
    n, _, _, c = gx.shape
    h2, w2 = _s2d_rows(p)
    bt = _BT.astype(gx.dtype)
    dd = np.einsum("au,bv,abntsc->ntsuvc", bt, bt,
                   dv[1].reshape(ALPHA, ALPHA, n, p.th, p.tw, p.cp))
    xs = np.zeros((n, h2, w2, p.cp), dtype=gx.dtype)
    for u in range(ALPHA):
        for v in range(ALPHA):
            xs[:, u:u + p.m * p.th:p.m, v:v + p.m * p.tw:p.m] += dd[:, :, :, u, v]
    xs = xs.reshape(n, h2, w2, p.sh, p.sw, c).transpose(0, 1, 3, 2, 4, 5).reshape(
        n, h2 * p.sh, w2 * p.sw, c)
    hh, ww = min(gx.shape[1], h2 * p.sh), min(gx.shape[2], w2 * p.sw)
    gx[:, :hh, :ww] += xs[:, :hh, :ww]


def output_transform(mm: Planes, p: Plan, y: np.ndarray, zeros: np.ndarray | None = None
                     ) -> None:
    """``y`` (N, OH, OW, O) = A^T M A of every tile of M (16, N*th*tw, O), the extra outputs of
    the last tiles dropped; with ``input_transform``'s ``zeros``, 0 where an output's r x r
    window of input pixels is all 0 (exactly, as im2col's: the tile sums cancel there only to
    rounding, and a ReLU after would let the gradient through)."""
    k = ops._kernels
    if C_TRANSFORMS and k is not None and k.wino_out(mm[0], y, p.m, p.th, p.tw, False, zeros):
        return
    n, o = y.shape[0], y.shape[3]
    a = p.at.astype(y.dtype)
    t = np.einsum("ia,jb,abntso->ntisjo", a, a, mm[1].reshape(ALPHA, ALPHA, n, p.th, p.tw, o))
    y[...] = t.reshape(n, p.th * p.m, p.tw * p.m, o)[:, :p.oh, :p.ow]
    if zeros is not None:
        bits = (zeros[:, None] >> np.arange(ALPHA * ALPHA, dtype=np.uint16)) & 1
        z = bits.astype(bool).reshape(n, p.th, p.tw, ALPHA, ALPHA)
        win = np.stack([np.stack([z[..., i:i + p.r, j:j + p.r].all(axis=(-2, -1))
                                  for j in range(p.m)], axis=-1) for i in range(p.m)], axis=-2)
        y[win.transpose(0, 1, 3, 2, 4).reshape(n, p.th * p.m, p.tw * p.m)[:, :p.oh, :p.ow]] = 0


def output_transform_adjoint(gy: np.ndarray, p: Plan) -> Planes:
    """dM (16, N*th*tw, O) = A dY A^T of the output gradient's tiles (zeros past its edge)."""
    n, o = gy.shape[0], gy.shape[3]
    dm = _planes(n * p.th * p.tw, o, gy.dtype, "m")
    k = ops._kernels
    if C_TRANSFORMS and k is not None and k.wino_out(dm[0], gy, p.m, p.th, p.tw, True, None):
        return dm
    gt = np.zeros((n, p.th * p.m, p.tw * p.m, o), dtype=gy.dtype)
    gt[:, :p.oh, :p.ow] = gy
    a = p.at.astype(gy.dtype)
    dm[1][...] = np.einsum("ia,jb,ntisjo->abntso", a, a,
                           gt.reshape(n, p.th, p.m, p.tw, p.m, o)).reshape(dm[1].shape)
    return dm


def _spans(n: int, p: Plan, o: int, itemsize: int) -> list[tuple[int, int]]:
    """(first, last + 1) samples of each block: the tiles of BLOCK_BYTES of V or M planes, so
    that the GEMMs read them from L2 where the transforms wrote them (not from memory)."""
    per = max(1, BLOCK_BYTES // (ALPHA * ALPHA * p.th * p.tw * max(p.cp, o) * itemsize))
    return [(n0, min(n, n0 + per)) for n0 in range(0, n, per)]


def forward(xp: np.ndarray, cols: np.ndarray, p: Plan, y: np.ndarray) -> None:
    """``y`` (N, OH, OW, O), C-contiguous = the convolution of ``xp`` by the weight whose GEMM
    columns are ``cols`` (no bias)."""
    u = weight_transform(cols, p)
    for n0, n1 in _spans(xp.shape[0], p, cols.shape[1], y.itemsize):
        zeros = np.empty((n1 - n0) * p.th * p.tw, np.uint16)
        v = input_transform(xp[n0:n1], p, zeros)
        mm = _planes(v[1].shape[1], cols.shape[1], y.dtype, "m")
        np.matmul(v[1], u, out=mm[1])
        output_transform(mm, p, y[n0:n1], zeros)


def input_grad(gy: np.ndarray, cols: np.ndarray, p: Plan, gx: np.ndarray) -> None:
    """``gx`` (N, Hp, Wp, C), zeros on entry, += the padded input's gradient from ``gy``
    (N, OH, OW, O) C-contiguous, through the weight whose GEMM columns are ``cols``."""
    ut = np.ascontiguousarray(weight_transform(cols, p).transpose(0, 2, 1))
    for n0, n1 in _spans(gy.shape[0], p, cols.shape[1], gx.itemsize):
        dm = output_transform_adjoint(gy[n0:n1], p)
        dv = _planes(dm[1].shape[1], p.cp, gx.dtype, "v")
        np.matmul(dm[1], ut, out=dv[1])
        input_transform_adjoint(dv, p, gx[n0:n1])


def weight_grad(xp: np.ndarray, gy: np.ndarray, p: Plan, c: int) -> np.ndarray:
    """The weight gradient (O, C, kh, kw) from the padded input and ``gy`` (N, OH, OW, O)."""
    o = gy.shape[3]
    du = np.zeros((ALPHA * ALPHA, p.cp, o), gy.dtype)
    part = np.empty_like(du)
    for n0, n1 in _spans(xp.shape[0], p, o, gy.itemsize):
        v = input_transform(xp[n0:n1], p)[1].transpose(0, 2, 1)
        du += np.matmul(v, output_transform_adjoint(gy[n0:n1], p)[1], out=part)
    return weight_transform_adjoint(du, p, c)

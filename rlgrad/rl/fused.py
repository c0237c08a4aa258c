"""Gradient steps of small MLPs written out in NumPy, for the hottest RL updates.

The engine (``rlgrad.jit``) compiles any update into straight-line NumPy; for the MLPs that RL
presets use, the forward and backward pass of a whole step is also written out here, with the
very operations the compiled step runs (same calls, same operand layouts: the same bits, so a
run follows the same trajectory either way), minus what costs time around them:

* buffers allocated once per batch size, no intermediate kept beyond the backward pass;
* the backward products of a ReLU layer restricted to the units active somewhere in the batch
  (zero terms change no sum): most of a DQN's second layer is dead ReLUs;
* gradients written straight into the optimizer's flat gradient array
  (``Adam.flat_grad_buffer``), clipped there by their global norm in one pass;
* large inference batches (DQN targets) feature-major in cache-sized chunks.

The algorithms use these steps when their networks fit (``mlp_layers``) and fall back to the
compiled step otherwise; the tests check each against the compiled engine step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgrad import nn
from rlgrad.tensor import _const

Layer = tuple[Any, Any, str | None]  # (weight Parameter, bias Parameter, "relu" | "tanh" | None)
_ACTIVATIONS = {nn.ReLU: "relu", nn.Tanh: "tanh"}


def mlp_layers(net: Any, head: Any = None) -> list[Layer] | None:
    """``net`` (a Sequential of Linear layers with biases, each followed by ReLU or Tanh, the last
    one possibly without), then the Linear ``head`` if given, as (weight, bias, activation) per
    layer; None for any other structure, or when the result does not end in a Linear layer."""
    mods = list(net) if isinstance(net, nn.Sequential) else []
    if head is not None:
        mods.append(head)
    layers: list[Layer] = []
    i = 0
    while i < len(mods):
        lin = mods[i]
        if type(lin) is not nn.Linear or lin.bias is None:
            return None
        act = _ACTIVATIONS.get(type(mods[i + 1])) if i + 1 < len(mods) else None
        if i + 1 < len(mods) and act is None:
            return None
        layers.append((lin.weight, lin.bias, act))
        i += 2 if act is not None else 1
    if not layers or layers[-1][2] is not None:
        return None
    dtype = layers[0][0].data.dtype
    if dtype.kind != "f" or any(w.data.dtype != dtype or b.data.dtype != dtype
                                for w, b, _ in layers):
        return None
    return layers


def mlp_forward(layers: list[Layer], x: np.ndarray, chunk: int = 512) -> np.ndarray:
    """The network's outputs (n, out) for rows ``x``, feature-major (``W @ H``) over chunks of
    ``chunk`` rows whose activations stay in cache: for large batches of inference, e.g. all the
    TD targets of a DQN update. Every product has the same shape, ``chunk`` columns (the last
    chunk overlaps the one before, or is padded): the rows come out with the bits of
    ``mlp_numpy`` on the whole batch (OpenBLAS rounds a remainder of columns otherwise)."""
    n = len(x)
    w_last = layers[-1][0].data
    out = np.empty((n, w_last.shape[0]), w_last.dtype)
    if n < chunk:
        x = np.concatenate([x, np.zeros((chunk - n, *x.shape[1:]), x.dtype)])
    for a in range(0, n, chunk):
        a = min(a, len(x) - chunk)
        h = x[a:a + chunk].T
        for w, b, act in layers:
            h = w.data @ h
            h += b.data[:, None]
            if act == "relu":
                np.maximum(h, 0, out=h)
            elif act == "tanh":
                np.tanh(h, out=h)
        out[a:a + chunk] = h.T[:n - a]
    return out


class FusedMLP:
    """Forward and backward pass of an MLP on a fixed batch size, on preallocated buffers.

    The operations are those the engine records for ``nn.Linear`` and the activations, in the
    same layouts (``x @ W.T + b``; backward ``g @ W``, ``g.T @ x``, ``g.sum(0)``, ``g * (z > 0)``,
    ``g * (1 - h * h)``), so BLAS and NumPy return the same bits as in the compiled engine step:
    a run takes the same trajectory through either path. ``forward(x)`` returns the output
    (batch, out_features); the caller writes d loss / d output into ``grad_out`` and calls
    ``backward(x, grads)``, which writes d loss / d (weight, bias) of every layer, in order, into
    ``grads``.
    """

    def __init__(self, layers: list[Layer], batch_size: int) -> None:
        self.layers = layers
        dtype = layers[0][0].data.dtype
        B = self.batch_size = int(batch_size)
        self._h = [np.empty((B, w.shape[0]), dtype) for w, _, _ in layers]  # layer outputs
        self._d = [np.empty((B, w.shape[0]), dtype) for w, _, _ in layers]  # their gradients
        self._mask = [np.empty((B, w.shape[0]), bool) if act == "relu" else None
                      for w, _, act in layers]
        self._tmp = [np.empty((B, w.shape[0]), dtype) if act == "tanh" else None
                     for w, _, act in layers]
        self.grad_out = self._d[-1]
        #: restrict the backward products of a ReLU layer of at least ``sparse_min_units``
        #: units to its active units when at most this fraction of them is active for some
        #: row of the batch (0: never); small layers gain nothing
        self.sparse_fraction = 0.5
        self.sparse_min_units = 128
        # layer -> (gradient array, its rows the last sparse step wrote): the other rows are
        # still zero if nothing else wrote the array since (forget() when unsure)
        self._written: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def forget(self) -> None:
        """Let the next backward pass rewrite every gradient entry (the gradient arrays may
        have been written by someone else since the last one)."""
        self._written.clear()

    @property
    def output(self) -> np.ndarray:
        return self._h[-1]

    def forward(self, x: np.ndarray) -> np.ndarray:
        for (w, b, act), h in zip(self.layers, self._h):
            np.matmul(x, w.data.T, out=h)
            h += b.data
            if act == "relu":
                np.maximum(h, 0, out=h)
            elif act == "tanh":
                np.tanh(h, out=h)
            x = h
        return x

    def backward(self, x: np.ndarray, grads: list[np.ndarray]) -> None:
        layers, hs, ds = self.layers, self._h, self._d
        dz = ds[-1]
        active = None  # the units of a ReLU layer active for some row of the batch, if few
        active_mask = np.zeros(0, bool)
        for i in range(len(layers) - 1, -1, -1):
            w = layers[i][0].data
            xi = hs[i - 1] if i else x
            gw, gb = grads[2 * i], grads[2 * i + 1]
            if active is not None:
                # Units inactive for the whole batch have zero columns in dz: zero weight and
                # bias gradients, nothing added to the input's gradient (the products over the
                # other units give the same bits: zero terms change no sum). Three quarters of
                # a DQN's second layer are such units (dead ReLUs).
                dz_a = dz[:, active]
                written = self._written.get(i)
                if written is not None and written[0] is gw:  # zero what the last step wrote
                    gw[written[1] & ~active_mask] = 0
                else:
                    gw.fill(0)
                self._written[i] = (gw, active_mask)
                gw[active] = dz_a.T @ xi
            else:
                np.matmul(dz.T, xi, out=gw)
                self._written.pop(i, None)
            np.add.reduce(dz, axis=0, out=gb)  # (over all units: a narrower sum rounds otherwise)
            if i == 0:
                break
            dh = ds[i - 1]
            if active is not None:
                np.matmul(dz_a, w[active], out=dh)
            elif w.shape[0] == 1:  # one unit: the outer product (BLAS is slow at K=1; same bits)
                np.multiply(dz, w, out=dh)
            else:
                np.matmul(dz, w, out=dh)
            act, h = layers[i - 1][2], hs[i - 1]
            active = None
            if act == "relu":
                m = self._mask[i - 1]
                np.greater(h, 0, out=m)
                np.multiply(dh, m, out=dh)
                # below: layer i - 1's two products, worth restricting if few of many units
                if i > 1 and m.shape[1] >= self.sparse_min_units:
                    used = np.logical_or.reduce(m, axis=0)  # a new array: kept in _written
                    if np.count_nonzero(used) <= self.sparse_fraction * len(used):
                        active, active_mask = np.flatnonzero(used), used
            elif act == "tanh":  # the engine's rule: g * (1 - tanh * tanh)
                t = self._tmp[i - 1]
                np.multiply(h, h, out=t)
                np.subtract(1, t, out=t)
                np.multiply(dh, t, out=dh)
            dz = dh


def flat_gradients(optimizer: Any, params: list[Any], cache: dict[str, Any]
                   ) -> tuple[np.ndarray, list[np.ndarray], list[Any]]:
    """(flat gradient array, its per-parameter views, Tensors wrapping the views) to write a
    step's gradients into: the optimizer's own flat buffer when it has one (``step()`` then
    gathers nothing), else one kept in ``cache``."""
    getter = getattr(optimizer, "flat_grad_buffer", None)
    got = getter() if getter is not None else None
    if got is None:
        got = cache.get("own")
        if got is None:
            sizes = [p.data.size for p in params]
            g = np.empty(sum(sizes), params[0].data.dtype)
            ends = np.cumsum(sizes)
            got = cache["own"] = (g, [g[e - n:e].reshape(p.shape)
                                      for e, n, p in zip(ends, sizes, params)])
    flat, views = got
    if cache.get("views") is not views:
        cache["views"], cache["tensors"] = views, [_const(v) for v in views]
    return flat, views, cache["tensors"]


def clip_and_install(params: list[Any], flat: np.ndarray, views: list[np.ndarray],
                     tensors: list[Any], max_norm: float | None) -> None:
    """``set_grads`` for gradients already in a flat array (``views`` of it per parameter): the
    same global 2-norm (per-parameter dot products summed as Python floats), the same scaling
    when it exceeds ``max_norm`` (one pass over the flat array), installed as ``.grad``."""
    if max_norm is not None:
        # One dot product over the whole array decides when the norm is clearly below the
        # threshold (float32 rounding is far inside the 1% margin): nothing to scale, as the
        # per-parameter sum would have decided; near or above it, that exact sum gives the factor.
        if float(np.dot(flat, flat)) >= (0.99 * float(max_norm)) ** 2:
            sq = 0.0
            for v in views:
                f = v.reshape(-1)
                sq += float(np.dot(f, f))
            coef = float(max_norm) / (math.sqrt(sq) + 1e-6)
            if coef < 1.0:
                flat *= flat.dtype.type(coef)
    for p, t in zip(params, tensors):
        p.grad = t

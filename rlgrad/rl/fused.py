"""Gradient steps of small MLPs written out in NumPy, for the hottest RL updates.

The engine (``rlgrad.jit``) compiles any update into straight-line NumPy; for the MLPs that RL
presets use, the forward and backward pass of a whole step can also be written out by hand, on
buffers allocated once per batch size:

* every product is one BLAS call in the operand layout OpenBLAS runs fastest for the shape:
  activations are stored feature-major, (features, batch) C-contiguous, when the batch is
  narrower than the layers (a DQN batch of 64 through 256 units: ``W @ H`` beats the batch-major
  ``H @ W.T`` by ~25%), batch-major otherwise (a PPO rollout of 256 rows through 64 units: twice
  as fast); the same code serves both, through transposed views;
* nothing is allocated per step and no intermediate is kept beyond the backward pass;
* gradients are written straight into the optimizer's flat gradient array
  (``Adam.flat_grad_buffer``), clipped there by their global norm in one pass.

The arithmetic is that of the engine's operations (the tests check each step against the
compiled engine step to float32 rounding). The algorithms use these steps when their networks fit
(``mlp_layers``) and fall back to the compiled step otherwise.
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
    """The network's outputs (n, out) for rows ``x``, feature-major over chunks of rows (whose
    activations stay in cache): for large batches of inference, e.g. all the TD targets of a
    DQN update."""
    w_last = layers[-1][0].data
    out = np.empty((len(x), w_last.shape[0]), w_last.dtype)
    for a in range(0, len(x), chunk):
        h = x[a:a + chunk].T
        for w, b, act in layers:
            h = w.data @ h
            h += b.data[:, None]
            if act == "relu":
                np.maximum(h, 0, out=h)
            elif act == "tanh":
                np.tanh(h, out=h)
        out[a:a + chunk] = h.T
    return out


class FusedMLP:
    """Forward and backward pass of an MLP on a fixed batch size, on preallocated buffers.

    ``forward(x)`` returns the output as a (out_features, batch) array (a view); the caller writes
    d loss / d output into ``grad_out`` (same shape) and calls ``backward(x, grads)``, which
    writes d loss / d (weight, bias) of every layer, in order, into ``grads``.
    """

    def __init__(self, layers: list[Layer], batch_size: int) -> None:
        self.layers = layers
        dtype = layers[0][0].data.dtype
        B = self.batch_size = int(batch_size)
        # feature-major when the batch is narrower than the widest layer, else batch-major
        self.feature_major = B < max(w.shape[0] for w, _, _ in layers)

        def buf() -> list[tuple[np.ndarray, np.ndarray]]:  # (storage, (features, batch) view)
            out = []
            for i, (w, _, _) in enumerate(layers):
                # the output layer is always feature-major: its few rows (Q-values, logits, a
                # value) are then contiguous for the loss's reductions over them
                if self.feature_major or i == len(layers) - 1:
                    a = np.empty((w.shape[0], B), dtype)
                    out.append((a, a))
                else:
                    a = np.empty((B, w.shape[0]), dtype)
                    out.append((a, a.T))
            return out

        self._h, self._d = buf(), buf()  # layer outputs and their gradients
        # scratch for the activations' derivatives, shaped like the storage
        self._mask = [np.empty(s.shape, bool) if act == "relu" else None
                      for (s, _), (_, _, act) in zip(self._h, layers)]
        self._tmp = [np.empty(s.shape, dtype) if act == "tanh" else None
                     for (s, _), (_, _, act) in zip(self._h, layers)]
        self.ones = np.ones(B, dtype)
        self.grad_out = self._d[-1][1]
        #: restrict a ReLU layer's backward products to its active units when at most this
        #: fraction of them is active for some row of the batch (0: never)
        self.sparse_fraction = 0.5

    @property
    def output(self) -> np.ndarray:
        return self._h[-1][1]

    def forward(self, x: np.ndarray) -> np.ndarray:
        xt = x.T
        for (w, b, act), (store, h) in zip(self.layers, self._h):
            np.matmul(w.data, xt, out=h)
            if store is h:
                h += b.data[:, None]
            else:
                store += b.data  # along the rows of the batch-major storage: contiguous
            if act == "relu":
                np.maximum(store, 0, out=store)
            elif act == "tanh":
                np.tanh(store, out=store)
            xt = h
        return xt

    def backward(self, x: np.ndarray, grads: list[np.ndarray]) -> None:
        layers, hs, ds = self.layers, self._h, self._d
        dz = ds[-1][1]
        active = None  # units of a ReLU layer active for some row of the batch, if few
        for i in range(len(layers) - 1, -1, -1):
            w = layers[i][0].data
            xt = hs[i - 1][1] if i else x.T
            gw, gb = grads[2 * i], grads[2 * i + 1]
            if active is not None:
                # Units inactive for the whole batch have zero rows in dz: their weight and bias
                # gradients are zero and they add nothing to dh. Three quarters of a DQN's second
                # layer are such units (dead ReLUs): the two big products shrink accordingly.
                dz_a = dz[active]
                gw.fill(0)
                gw[active] = dz_a @ xt.T
                gb.fill(0)
                gb[active] = dz_a @ self.ones
            else:
                np.matmul(dz, xt.T, out=gw)
                np.matmul(dz, self.ones, out=gb)
            if i == 0:
                break
            dstore, dh = ds[i - 1]
            if active is not None:
                np.matmul(w[active].T, dz_a, out=dh)
            elif w.shape[0] == 1:  # a one-unit layer: an outer product (BLAS is slow at K=1)
                if dstore is dh:
                    np.multiply(w.T, dz, out=dh)
                else:
                    np.multiply(dz.T, w, out=dstore)
            else:
                np.matmul(w.T, dz, out=dh)
            act = layers[i - 1][2]
            hstore = hs[i - 1][0]
            active = None
            if act == "relu":
                m = self._mask[i - 1]
                np.greater(hstore, 0, out=m)
                np.multiply(dstore, m, out=dstore)
                if i > 1:  # below: the products of layer i - 1, worth restricting if few units
                    used = np.logical_or.reduce(m, axis=1 if dstore is dh else 0)
                    n_used = int(np.count_nonzero(used))
                    if n_used <= self.sparse_fraction * len(used):
                        active = np.flatnonzero(used)
            elif act == "tanh":  # d tanh = 1 - tanh^2
                t = self._tmp[i - 1]
                np.multiply(hstore, hstore, out=t)
                np.subtract(1, t, out=t)
                np.multiply(dstore, t, out=dstore)
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


def clip_and_install(params: list[Any], flat: np.ndarray, tensors: list[Any],
                     max_norm: float | None) -> None:
    """``set_grads`` for gradients already in a flat array: scale them down together when their
    global 2-norm exceeds ``max_norm`` (``clip_grad_norm_``'s rule), install them as ``.grad``."""
    if max_norm is not None:
        coef = float(max_norm) / (math.sqrt(float(np.dot(flat, flat))) + 1e-6)
        if coef < 1.0:
            flat *= flat.dtype.type(coef)
    for p, t in zip(params, tensors):
        p.grad = t

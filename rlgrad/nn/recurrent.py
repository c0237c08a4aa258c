"""Recurrent layers with PyTorch's constructors, parameter names, gate order and outputs:
``RNN``, ``LSTM``, ``GRU`` and the single-step ``RNNCell``, ``LSTMCell``, ``GRUCell``.

A ``state_dict`` of ``nn.LSTM(4, 8, num_layers=2, bidirectional=True)`` has the keys and shapes of
the same ``torch.nn.LSTM`` (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0, ..._reverse).

The time loop is a few ops per step: two small matmuls (input and hidden projections) and the
gate nonlinearities; an LSTM step's elementwise part is one fused node (``F.lstm_cell_p``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad import lax, ops
from rlgrad.nn import functional as F
from rlgrad.nn import init
from rlgrad.nn.layers import _as_input
from rlgrad.nn.module import Module, Parameter
from rlgrad.tensor import _shape, _Trace, get_default_dtype
from rlgrad.typing import DTypeLike

__all__ = ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ---- one step of each cell: ``xp`` is the input projection W_ih x + b_ih, (B, G*H) ----------
def _rnn_step(xp: Any, h: Any, w_hh: Any, b_hh: Any, relu: bool) -> Any:
    pre = xp + F.linear(h, w_hh, b_hh)
    return ops.relu(pre) if relu else ops.tanh(pre)


def _lstm_step(xp: Any, h: Any, c: Any, w_hh: Any, b_hh: Any) -> tuple[Any, Any]:
    gc = ops.concatenate([xp + F.linear(h, w_hh, b_hh), c], axis=-1)
    hc = F.lstm_cell_p(gc)  # the elementwise part as one node (fast path of the step below)
    H = _shape(h)[-1]
    return hc[..., :H], hc[..., H:]


def _lstm_step_reference(xp: Any, h: Any, c: Any, w_hh: Any, b_hh: Any) -> tuple[Any, Any]:
    """The step as plain recorded ops, gates i, f, g, o (the reference for ``_lstm_step``)."""
    gates = xp + F.linear(h, w_hh, b_hh)
    H = _shape(h)[-1]
    i, f, o = (ops.sigmoid(gates[..., a * H:(a + 1) * H]) for a in (0, 1, 3))
    g = ops.tanh(gates[..., 2 * H:3 * H])
    c2 = f * c + i * g
    return o * ops.tanh(c2), c2


def _gru_step(xp: Any, h: Any, w_hh: Any, b_hh: Any) -> Any:
    # the elementwise part as one node (fast path of the step below)
    return F.gru_cell_p(ops.concatenate([xp, F.linear(h, w_hh, b_hh), h], axis=-1))


def _gru_step_reference(xp: Any, h: Any, w_hh: Any, b_hh: Any) -> Any:
    """The step as plain recorded ops, gates r, z, n (the reference for ``_gru_step``)."""
    hp = F.linear(h, w_hh, b_hh)
    H = _shape(h)[-1]
    rz = ops.sigmoid(xp[..., :2 * H] + hp[..., :2 * H])
    r, z = rz[..., :H], rz[..., H:]
    n = ops.tanh(xp[..., 2 * H:] + r * hp[..., 2 * H:])  # r gates W_hn h + b_hn (PyTorch)
    return n + z * (h - n)  # (1 - z) * n + z * h


def _lstm_state_step(xp: Any, s: tuple[Any, ...], w: Any, b: Any) -> tuple[Any, ...]:
    return _lstm_step(xp, s[0], s[1], w, b)


def _gru_state_step(xp: Any, s: tuple[Any, ...], w: Any, b: Any) -> tuple[Any, ...]:
    return (_gru_step(xp, s[0], w, b),)


def _rnn_tanh_state_step(xp: Any, s: tuple[Any, ...], w: Any, b: Any) -> tuple[Any, ...]:
    return (_rnn_step(xp, s[0], w, b, False),)


def _rnn_relu_state_step(xp: Any, s: tuple[Any, ...], w: Any, b: Any) -> tuple[Any, ...]:
    return (_rnn_step(xp, s[0], w, b, True),)


#: one step of each mode on a state tuple ((h,) or (h, c)): the bodies of the scans under jit
_STEPS: dict[str, Callable[..., tuple[Any, ...]]] = {
    "LSTM": _lstm_state_step, "GRU": _gru_state_step, "RNN_TANH": _rnn_tanh_state_step,
    "RNN_RELU": _rnn_relu_state_step}


def _dtype_of(dtype: Any) -> np.dtype:
    return np.dtype(dtype) if dtype is not None else get_default_dtype()


class _RNNBase(Module):
    """The stacked, optionally bidirectional, recurrence shared by RNN, LSTM and GRU."""

    weight_ih_l0: Parameter  # (the parameters are set by name: weight_ih_l{k}{_reverse} ...)

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, dtype: Any = None) -> None:
        super().__init__()
        if int(hidden_size) <= 0 or int(num_layers) <= 0:
            raise ValueError(f"{type(self).__name__}: hidden_size ({hidden_size}) and num_layers "
                             f"({num_layers}) must be positive")
        if not 0.0 <= float(dropout) <= 1.0:
            raise ValueError(f"{type(self).__name__}: dropout={dropout} must be in [0, 1]")
        self.mode = mode
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias = int(num_layers), bool(bias)
        self.batch_first, self.dropout = bool(batch_first), float(dropout)
        self.bidirectional = bool(bidirectional)
        dt, G = _dtype_of(dtype), _GATES[mode] * self.hidden_size
        for layer in range(self.num_layers):
            n_in = self.input_size if layer == 0 else self.hidden_size * self._dirs
            for sfx in self._suffixes(layer):
                setattr(self, f"weight_ih{sfx}", Parameter(np.empty((G, n_in), dtype=dt)))
                setattr(self, f"weight_hh{sfx}", Parameter(np.empty((G, self.hidden_size), dtype=dt)))
                if self.bias:
                    setattr(self, f"bias_ih{sfx}", Parameter(np.empty(G, dtype=dt)))
                    setattr(self, f"bias_hh{sfx}", Parameter(np.empty(G, dtype=dt)))
        self.reset_parameters()

    @property
    def _dirs(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self, layer: int) -> list[str]:
        return [f"_l{layer}"] + ([f"_l{layer}_reverse"] if self.bidirectional else [])

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _weights(self, sfx: str) -> tuple[Any, Any, Any, Any]:
        return (getattr(self, f"weight_ih{sfx}"), getattr(self, f"weight_hh{sfx}"),
                getattr(self, f"bias_ih{sfx}") if self.bias else None,
                getattr(self, f"bias_hh{sfx}") if self.bias else None)

    def _check_input(self, x: Any) -> bool:
        shape = _shape(x)
        name = type(self).__name__
        if len(shape) not in (2, 3):
            raise ValueError(f"{name}: input must be 2-D (seq, feature) or 3-D, got shape {shape}")
        if shape[-1] != self.input_size:
            raise ValueError(f"{name}: input has {shape[-1]} features, the layer expects "
                             f"input_size={self.input_size}")
        if 0 in shape[:-1]:
            raise ValueError(f"{name}: input of shape {shape} has an empty sequence or batch")
        return len(shape) == 2

    def _initial(self, hx: Any, batch: int, dt: np.dtype, unbatched: bool, what: str) -> Any:
        want = (self.num_layers * self._dirs, batch, self.hidden_size)
        if hx is None:
            return np.zeros(want, dtype=dt)
        hx = _as_input(hx, dt)
        if unbatched:
            hx = ops.expand_dims(hx, 1)
        if tuple(_shape(hx)) != want:
            shown = want[:1] + want[2:] if unbatched else want
            raise ValueError(f"{type(self).__name__}: {what} must have shape {shown}, "
                             f"got {tuple(_shape(hx)) if not unbatched else _shape(hx)[::2]}")
        return hx

    def _run_direction(self, xs: list[Any], state: tuple[Any, ...], sfx: str,
                       reverse: bool) -> tuple[list[Any], tuple[Any, ...]]:
        """Steps over the inputs ``xs`` (T of (B, I)); returns each step's h and the last state.

        Each step projects its own input (a small matmul) rather than slicing one (T, B, G)
        projection of all steps: the gradient of a slice is a full (T, B, G) array, T of them
        per layer, which cost more than the matmuls saved (bench/recurrent.py)."""
        w_ih, w_hh, b_ih, b_hh = self._weights(sfx)
        step = _STEPS[self.mode]
        outs = []
        for t in range(len(xs) - 1, -1, -1) if reverse else range(len(xs)):
            state = step(F.linear(xs[t], w_ih, b_ih), state, w_hh, b_hh)
            outs.append(state[0])
        if reverse:
            outs.reverse()
        return outs, state

    def _scan_direction(self, x: Any, state: tuple[Any, ...], sfx: str,
                        reverse: bool) -> tuple[Any, tuple[Any, ...]]:
        """``_run_direction`` as one ``lax.scan`` over ``x`` (T, B, I): what ``rlgrad.jit``
        traces, so that the step compiles the cell once whatever T (the body is found traced
        for a new T: the same code over the same parameters)."""
        w_ih, w_hh, b_ih, b_hh = self._weights(sfx)
        step = _STEPS[self.mode]

        def body(s: tuple[Any, ...], xp_t: Any) -> tuple[tuple[Any, ...], Any]:
            new = step(xp_t, s, w_hh, b_hh)
            return new, new[0]

        # the input projection of all steps is one matmul before the loop (and its gradient one
        # after it): the scan's gradient for its xs is stacked, not T full-size slice gradients
        state, ys = lax.scan(body, state, F.linear(x, w_ih, b_ih), reverse=reverse)
        return ys, state

    def _layers_scan(self, x: Any, h0: Any, c0: Any) -> tuple[Any, list[Any], list[Any]]:
        """``_layers`` with one ``lax.scan`` per layer and direction (under ``rlgrad.jit``)."""
        hs, cs = [], []
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                x = F.dropout(x, self.dropout, True)
            seqs = []
            for d, sfx in enumerate(self._suffixes(layer)):
                k = layer * self._dirs + d
                state: tuple[Any, ...] = (h0[k],) if c0 is None else (h0[k], c0[k])
                seq, state = self._scan_direction(x, state, sfx, reverse=d == 1)
                seqs.append(seq)
                hs.append(state[0])
                if c0 is not None:
                    cs.append(state[1])
            x = seqs[0] if len(seqs) == 1 else ops.concatenate(seqs, axis=-1)
        return x, hs, cs

    def _layers(self, x: Any, h0: Any, c0: Any) -> tuple[Any, list[Any], list[Any]]:
        if _Trace.compiling:  # rlgrad.jit: a loop compiled once, not T copies of the cell
            return self._layers_scan(x, h0, c0)
        xs = [x[t] for t in range(_shape(x)[0])]  # per-step inputs; later layers keep lists
        hs, cs = [], []
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                xs = [F.dropout(v, self.dropout, True) for v in xs]
            seqs = []
            for d, sfx in enumerate(self._suffixes(layer)):
                k = layer * self._dirs + d
                state: tuple[Any, ...] = (h0[k],) if c0 is None else (h0[k], c0[k])
                seq, state = self._run_direction(xs, state, sfx, reverse=d == 1)
                seqs.append(seq)
                hs.append(state[0])
                if c0 is not None:
                    cs.append(state[1])
            xs = seqs[0] if len(seqs) == 1 else [ops.concatenate(list(v), axis=-1)
                                                   for v in zip(*seqs)]
        return ops.stack(xs, axis=0), hs, cs

    def _forward(self, input: Any, hx: Any, c0: Any, lstm: bool) -> tuple[Any, Any, Any]:  # noqa: A002
        dt = F._dtype(self.weight_ih_l0)
        unbatched = self._check_input(input)
        x = _as_input(input, dt)
        if unbatched:
            x = ops.expand_dims(x, 1)
        elif self.batch_first:
            x = ops.swapaxes(x, 0, 1)
        B = _shape(x)[1]
        h0 = self._initial(hx, B, dt, unbatched, "h0")
        c = self._initial(c0, B, dt, unbatched, "c0") if lstm else None
        out, hs, cs = self._layers(x, h0, c)
        h_n = ops.stack(hs, axis=0)
        c_n = ops.stack(cs, axis=0) if lstm else None
        if unbatched:
            return (ops.squeeze(out, 1), ops.squeeze(h_n, 1),
                    ops.squeeze(c_n, 1) if lstm else None)
        if self.batch_first:
            out = ops.swapaxes(out, 0, 1)
        return out, h_n, c_n

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        for name, default in (("bias", True), ("batch_first", False), ("dropout", 0.0),
                              ("bidirectional", False)):
            if getattr(self, name) != default:
                s += f", {name}={getattr(self, name)}"
        return s


class RNN(_RNNBase):
    """Elman RNN: ``h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)`` (or relu).
    ``forward(input, h0=None) -> (output, h_n)``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, dtype: DTypeLike = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity={nonlinearity!r}; use 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional, dtype)

    def forward(self, input: Any, hx: Any = None) -> tuple[Any, Any]:  # noqa: A002
        out, h_n, _ = self._forward(input, hx, None, lstm=False)
        return out, h_n


class GRU(_RNNBase):
    """Gated recurrent unit, gates r, z, n in PyTorch's order. ``forward(input, h0=None)``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 dtype: DTypeLike = None) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype)

    def forward(self, input: Any, hx: Any = None) -> tuple[Any, Any]:  # noqa: A002
        out, h_n, _ = self._forward(input, hx, None, lstm=False)
        return out, h_n


class LSTM(_RNNBase):
    """Long short-term memory, gates i, f, g, o in PyTorch's order.
    ``forward(input, (h0, c0)=None) -> (output, (h_n, c_n))``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 dtype: DTypeLike = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, dtype)

    def forward(self, input: Any, hx: Any = None) -> tuple[Any, tuple[Any, Any]]:  # noqa: A002
        if hx is not None and not (isinstance(hx, tuple | list) and len(hx) == 2):
            raise ValueError("LSTM: hx must be a pair (h0, c0) or None")
        h0, c0 = (None, None) if hx is None else hx
        out, h_n, c_n = self._forward(input, h0, c0, lstm=True)
        return out, (h_n, c_n)


# ---- cells: one step, parameters weight_ih, weight_hh, bias_ih, bias_hh ----------------------
class _CellBase(Module):
    def __init__(self, input_size: int, hidden_size: int, bias: bool, gates: int,
                 dtype: Any) -> None:
        super().__init__()
        dt = _dtype_of(dtype)
        self.input_size, self.hidden_size, self.bias = int(input_size), int(hidden_size), bool(bias)
        G = gates * self.hidden_size
        self.weight_ih = Parameter(np.empty((G, self.input_size), dtype=dt))
        self.weight_hh = Parameter(np.empty((G, self.hidden_size), dtype=dt))
        self.bias_ih = Parameter(np.empty(G, dtype=dt)) if bias else None
        self.bias_hh = Parameter(np.empty(G, dtype=dt)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _prepare(self, input: Any, hx: Any) -> tuple[Any, Any, bool]:  # noqa: A002
        """Input (B, I) or (I,) and a state (B, H) or (H,), zeros when None, both batched."""
        dt = F._dtype(self.weight_ih)
        x = _as_input(input, dt)
        shape = _shape(x)
        if len(shape) not in (1, 2) or shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: input must be (batch, {self.input_size}) or "
                             f"({self.input_size},), got shape {shape}")
        unbatched = len(shape) == 1
        if unbatched:
            x = ops.expand_dims(x, 0)
        want = (_shape(x)[0], self.hidden_size)
        if hx is None:
            return x, np.zeros(want, dtype=dt), unbatched
        h = _as_input(hx, dt)
        h = ops.expand_dims(h, 0) if unbatched else h
        if tuple(_shape(h)) != want:
            raise ValueError(f"{type(self).__name__}: hidden state must have shape "
                             f"{want[1:] if unbatched else want}, got {_shape(hx)}")
        return x, h, unbatched

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


def _unbatch(t: Any, unbatched: bool) -> Any:
    return ops.squeeze(t, 0) if unbatched else t


class RNNCell(_CellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", dtype: DTypeLike = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: nonlinearity={nonlinearity!r}; use 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1, dtype)

    def forward(self, input: Any, hx: Any = None) -> Any:  # noqa: A002
        x, h, unb = self._prepare(input, hx)
        xp = F.linear(x, self.weight_ih, self.bias_ih)
        return _unbatch(_rnn_step(xp, h, self.weight_hh, self.bias_hh,
                                  self.nonlinearity == "relu"), unb)


class GRUCell(_CellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 dtype: DTypeLike = None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, dtype)

    def forward(self, input: Any, hx: Any = None) -> Any:  # noqa: A002
        x, h, unb = self._prepare(input, hx)
        xp = F.linear(x, self.weight_ih, self.bias_ih)
        return _unbatch(_gru_step(xp, h, self.weight_hh, self.bias_hh), unb)


class LSTMCell(_CellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 dtype: DTypeLike = None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, dtype)

    def forward(self, input: Any, hx: Any = None) -> tuple[Any, Any]:  # noqa: A002
        if hx is not None and not (isinstance(hx, tuple | list) and len(hx) == 2):
            raise ValueError("LSTMCell: hx must be a pair (h, c) or None")
        x, h, unb = self._prepare(input, None if hx is None else hx[0])
        c = self._prepare(input, hx[1])[1] if hx is not None else np.zeros_like(h)
        xp = F.linear(x, self.weight_ih, self.bias_ih)
        h2, c2 = _lstm_step(xp, h, c, self.weight_hh, self.bias_hh)
        return _unbatch(h2, unb), _unbatch(c2, unb)

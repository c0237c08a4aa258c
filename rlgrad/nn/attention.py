"""``nn.MultiheadAttention`` with PyTorch's constructor, parameter names (in_proj_weight,
in_proj_bias, out_proj.weight, out_proj.bias), masks and outputs (attn_output, attn_weights)."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.nn import functional as F
from rlgrad.nn import init
from rlgrad.nn.layers import Dropout, LayerNorm, Linear, ModuleList, _as_input
from rlgrad.nn.module import Module, Parameter
from rlgrad.tensor import Tensor, _shape, get_default_dtype
from rlgrad.typing import DTypeLike

__all__ = ["MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder"]


def _additive_mask(mask: Any, dtype: np.dtype) -> np.ndarray:
    """A boolean mask (True: not allowed) as -inf, a float mask as given."""
    m = np.asarray(getattr(mask, "_value", mask))
    if m.dtype == np.bool_:
        return np.where(m, -np.inf, 0.0).astype(dtype)
    return m.astype(dtype)


class MultiheadAttention(Module):
    """Scaled dot-product attention over ``num_heads`` heads, as ``torch.nn.MultiheadAttention``
    with ``kdim = vdim = embed_dim`` (no ``add_bias_kv``, ``add_zero_attn``)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, dtype: DTypeLike = None) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim={embed_dim} must be divisible by "
                             f"num_heads={num_heads}")
        if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) or vdim not in (None, embed_dim):
            raise NotImplementedError("MultiheadAttention: add_bias_kv, add_zero_attn and kdim/vdim "
                                      "other than embed_dim are not supported")
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        self.embed_dim, self.num_heads = int(embed_dim), int(num_heads)
        self.head_dim, self.dropout, self.batch_first = embed_dim // num_heads, float(dropout), batch_first
        self.in_proj_weight = Parameter(np.empty((3 * embed_dim, embed_dim), dtype=dt))
        self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, dtype=dt)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dt)
        init.xavier_uniform_(self.in_proj_weight)  # torch's _reset_parameters
        if self.out_proj.bias is not None:  # (bias=True)
            init.zeros_(self.out_proj.bias)

    def _project(self, x: Any, k: int) -> Any:
        """Projection ``k`` (0: q, 1: k, 2: v) of (B, L, E) to heads (B, heads, L, head_dim)."""
        E = self.embed_dim
        w = self.in_proj_weight[k * E:(k + 1) * E]
        b = self.in_proj_bias[k * E:(k + 1) * E] if self.in_proj_bias is not None else None
        B, L = _shape(x)[:2]
        y = ops.reshape(F.linear(x, w, b), (B, L, self.num_heads, self.head_dim))
        return ops.swapaxes(y, 1, 2)

    def _mask(self, attn_mask: Any, key_padding_mask: Any, B: int, S: int, dt: np.dtype) -> Any:
        mask = None
        if attn_mask is not None:
            m = _additive_mask(attn_mask, dt)
            mask = m if m.ndim == 2 else m.reshape(B, self.num_heads, *m.shape[1:])
        if key_padding_mask is not None:
            kp = _additive_mask(key_padding_mask, dt).reshape(B, 1, 1, S)
            mask = kp if mask is None else mask + kp
        return mask

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Any = None,
                need_weights: bool = True, attn_mask: Any = None,
                average_attn_weights: bool = True, is_causal: bool = False) -> tuple[Any, Any]:
        dt = F._dtype(self.in_proj_weight)
        q, k, v = (_as_input(t, dt) for t in (query, key, value))
        unbatched = len(_shape(q)) == 2
        if unbatched:
            q, k, v = (ops.expand_dims(t, 0) for t in (q, k, v))
            key_padding_mask = None if key_padding_mask is None else np.asarray(key_padding_mask)[None]
        elif not self.batch_first:
            q, k, v = (ops.swapaxes(t, 0, 1) for t in (q, k, v))
        if _shape(q)[-1] != self.embed_dim:
            raise ValueError(f"MultiheadAttention: query has {_shape(q)[-1]} features, the layer "
                             f"expects embed_dim={self.embed_dim}")
        B, L, S = _shape(q)[0], _shape(q)[1], _shape(k)[1]
        if is_causal and attn_mask is None:
            attn_mask = np.triu(np.ones((L, S), dtype=bool), 1)
        scores = ops.matmul(self._project(q, 0) * (1.0 / math.sqrt(self.head_dim)),
                            ops.swapaxes(self._project(k, 1), -1, -2))
        mask = self._mask(attn_mask, key_padding_mask, B, S, dt)
        if mask is not None:
            scores = scores + mask
        weights = F.dropout(ops.softmax(scores, axis=-1), self.dropout, self.training)
        out = ops.reshape(ops.swapaxes(ops.matmul(weights, self._project(v, 2)), 1, 2),
                          (B, L, self.embed_dim))
        out = self.out_proj(out)
        if unbatched:
            out = ops.squeeze(out, 0)
        elif not self.batch_first:
            out = ops.swapaxes(out, 0, 1)
        if not need_weights:
            return out, None
        w = ops.mean(weights, axis=1) if average_attn_weights else weights
        return out, ops.squeeze(w, 0) if unbatched else w


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with a residual connection and LayerNorm
    (after, or before with ``norm_first``), as ``torch.nn.TransformerEncoderLayer``."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable[..., Any] = "relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 dtype: DTypeLike = None) -> None:
        super().__init__()
        if isinstance(activation, str) and activation not in ("relu", "gelu"):
            raise ValueError(f"TransformerEncoderLayer: activation={activation!r}; use 'relu', "
                             "'gelu' or a callable")
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, bias, batch_first=batch_first,
                                            dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.activation: Callable[..., Any] = (F.relu if activation == "relu" else F.gelu
                                               if isinstance(activation, str) else activation)

    def _sa(self, x: Any, mask: Any, key_padding_mask: Any, is_causal: bool) -> Any:
        out = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=key_padding_mask,
                             need_weights=False, is_causal=is_causal)[0]
        return self.dropout1(out)

    def _ff(self, x: Any) -> Any:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src: Tensor, src_mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None, is_causal: bool = False) -> Any:
        x = _as_input(src, F._dtype(self.linear1.weight))
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff(self.norm2(x))
        x = self.norm1(x + self._sa(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff(x))


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (each its own parameters, torch's
    ``layers.<i>.`` names), then ``norm`` if given, as ``torch.nn.TransformerEncoder``."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int,
                 norm: Module | None = None, enable_nested_tensor: bool = True,
                 mask_check: bool = True) -> None:
        super().__init__()
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ValueError(f"TransformerEncoder: num_layers must be a positive int, got {num_layers!r}")
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src: Tensor, mask: Tensor | None = None,
                src_key_padding_mask: Tensor | None = None, is_causal: bool | None = None) -> Tensor:
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=bool(is_causal))
        return self.norm(out) if self.norm is not None else out

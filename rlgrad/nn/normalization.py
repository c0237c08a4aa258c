"""Batch normalisation with PyTorch's constructor, parameters (weight, bias) and buffers
(running_mean, running_var, num_batches_tracked), so a ``state_dict`` matches torch's key for key."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad.nn import functional as F
from rlgrad.nn.layers import _as_input
from rlgrad.nn.module import Module, Parameter
from rlgrad.tensor import Tensor, _shape, constant, get_default_dtype

__all__ = ["BatchNorm1d", "BatchNorm2d"]


class _BatchNorm(Module):
    _dims: tuple[int, ...] = ()  # the input ranks the subclass accepts
    weight: Parameter | None
    bias: Parameter | None
    # buffers (register_buffer), Tensors that never require grad as torch's (``.clone()``,
    # ``th.allclose`` work on them); None when track_running_stats=False, and then never read
    running_mean: Tensor
    running_var: Tensor
    num_batches_tracked: Tensor

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True, dtype: Any = None) -> None:
        super().__init__()
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), momentum
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        if self.affine:
            self.weight = Parameter(np.ones(self.num_features, dtype=dt))
            self.bias = Parameter(np.zeros(self.num_features, dtype=dt))
        else:
            self.weight = self.bias = None
        if self.track_running_stats:
            self.register_buffer("running_mean", constant(np.zeros(self.num_features, dtype=dt)))
            self.register_buffer("running_var", constant(np.ones(self.num_features, dtype=dt)))
            self.register_buffer("num_batches_tracked", constant(np.array(0, dtype=np.int64)))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean._value[...] = 0
            self.running_var._value[...] = 1
            self.num_batches_tracked._value[...] = 0

    def _check(self, x: Any) -> None:
        shape = _shape(x)
        if len(shape) not in self._dims:
            raise ValueError(f"{type(self).__name__}: expected a {' or '.join(map(str, self._dims))}-D "
                             f"input, got shape {shape}")
        if shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}: input has {shape[1]} channels (axis 1), "
                             f"the layer expects num_features={self.num_features}")

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        if self.weight is not None:
            x = _as_input(x, F._dtype(self.weight))
        factor = 0.0 if self.momentum is None else float(self.momentum)
        if self.training and self.track_running_stats:
            self.num_batches_tracked._value[...] += 1
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        use_batch = self.training or self.running_mean is None
        keep = not self.training or self.track_running_stats  # running stats read or updated
        return F.batch_norm(x, self.running_mean if keep else None,
                            self.running_var if keep else None, self.weight, self.bias,
                            use_batch, factor, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L) input."""

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W) input."""

    _dims = (4,)

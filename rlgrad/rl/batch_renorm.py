"""Batch Renormalization (Ioffe, 2017): sb3-contrib's ``BatchRenorm`` / ``BatchRenorm1d``
(CrossQ's actor and critics; ``rlgrad.rl.contrib.common.torch_layers``), from rlgrad's ops.

Parameters ``scale`` and ``bias``, buffers ``ra_mean``, ``ra_var`` and ``steps`` (sb3-contrib's
state-dict keys). In training mode, for the first ``warmup_steps`` forwards (while ``steps <=
warmup_steps``) it is batch normalisation with the batch's unbiased variance; after that the
batch is normalised with ``mean_B - d sigma_B / r`` and ``var_B / r^2``, ``r = clip(std_B /
std_ra, 1/3, 3)`` and ``d = clip((mean_B - ra_mean) / std_ra, -5, 5)`` constants (no gradient
through them, as sb3-contrib's ``detach``). Every training forward moves the running averages
by ``momentum`` towards the batch's mean and unbiased variance and counts ``steps``; evaluation
mode normalises with the running averages and changes nothing. Eager only (the buffers change in
the forward, as BatchNorm's)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from rlgrad import ops
from rlgrad.nn.layers import _as_input
from rlgrad.nn.module import Module, Parameter
from rlgrad.tensor import Tensor, _shape, constant, get_default_dtype
from rlgrad.typing import ArrayLike, DTypeLike

__all__ = ["BatchRenorm", "BatchRenorm1d"]


def _sqrt_zero_grad_at_zero(v: Any) -> Any:
    """``sqrt(v)`` whose gradient is 0 where ``v`` is 0 (a feature constant over the batch: a
    dead ReLU unit). torch's is infinite there and its input gradient NaN, which the ReLU
    backward before it (a select, torch's and rlgrad's) turns back into 0: the same gradients,
    without the inf and NaN on the way (and NumPy's divide-by-zero warning at every update).
    Elsewhere the same values and gradient as ``sqrt``."""
    pos = v > 0
    return ops.where(pos, ops.sqrt(ops.where(pos, v, 1.0)), 0.0)


class BatchRenorm(Module):
    """sb3-contrib's ``BatchRenorm(num_features, eps=0.001, momentum=0.01, affine=True,
    warmup_steps=100_000)``; ``rmax`` 3 and ``dmax`` 5 as there."""

    scale: Parameter
    bias: Parameter
    ra_mean: Tensor
    ra_var: Tensor
    steps: Tensor
    #: ``BatchNorm1d``'s keys (rlgrad's CrossQ critics before Batch Renormalization), read as
    #: these: the same statistics (running mean, unbiased variance, count) and affine map
    _renamed_state_keys: ClassVar[dict[str, str]] = {
        "weight": "scale", "running_mean": "ra_mean", "running_var": "ra_var",
        "num_batches_tracked": "steps"}

    def __init__(self, num_features: int, eps: float = 0.001, momentum: float = 0.01,
                 affine: bool = True, warmup_steps: int = 100_000,
                 dtype: DTypeLike = None) -> None:
        super().__init__()
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        n = int(num_features)
        self.register_buffer("ra_mean", constant(np.zeros(n, dtype=dt)))
        self.register_buffer("ra_var", constant(np.ones(n, dtype=dt)))
        self.register_buffer("steps", constant(np.array(0, dtype=np.int64)))
        self.scale = Parameter(np.ones(n, dtype=dt))
        self.bias = Parameter(np.zeros(n, dtype=dt))
        self.affine, self.eps, self.momentum = bool(affine), float(eps), float(momentum)
        self.num_features = n
        self.rmax, self.dmax = 3.0, 5.0
        self.warmup_steps = int(warmup_steps)

    def _check_input_dim(self, x: Any) -> None:
        raise NotImplementedError

    def _batch_moments(self, x: Any) -> tuple[Any, Any]:
        """The batch's mean and unbiased variance over axis 0 (torch's ``var``: ``n - 1``)."""
        mean = ops.mean(x, axis=0)
        var = ops.sum(ops.square(x - mean), axis=0) / (_shape(x)[0] - 1)
        return mean, var

    def _train_moments(self, x: Any) -> tuple[Any, Any]:
        """The mean and variance the batch is normalised with; the running averages updated."""
        mean, var = self._batch_moments(x)
        m, v = np.asarray(mean._value), np.asarray(var._value)
        if int(self.steps._value) > self.warmup_steps:
            running_std = np.sqrt(self.ra_var._value + self.eps)
            r = np.clip(np.sqrt(v + self.eps) / running_std, 1 / self.rmax, self.rmax)
            d = np.clip((m - self.ra_mean._value) / running_std, -self.dmax, self.dmax)
            mean, var = mean - d * _sqrt_zero_grad_at_zero(var) / r, var / np.square(r)
        self.ra_mean._value[...] += self.momentum * (m - self.ra_mean._value)
        self.ra_var._value[...] += self.momentum * (v - self.ra_var._value)
        self.steps._value[...] += 1
        return mean, var

    def forward(self, x: ArrayLike) -> Tensor:
        self._check_input_dim(x)
        x = _as_input(x, self.scale._value.dtype)
        if not isinstance(x, Tensor):
            x = constant(np.asarray(x, dtype=self.scale._value.dtype))
        if self.training:
            mean, var = self._train_moments(x)
        else:
            mean, var = self.ra_mean, self.ra_var
        x = (x - mean) / ops.sqrt(var + self.eps)
        return self.scale * x + self.bias if self.affine else x

    def forward_numpy(self, x: np.ndarray) -> np.ndarray | None:
        """Evaluation mode's ``forward`` on an array (acting: ``policies.mlp_numpy``), the same
        operations in the same order on the buffers' arrays, so the same bits without the
        Tensor dispatch (~3x faster at batch 1); None in training mode, which moves the
        running averages (the module's forward does that)."""
        if self.training or x.ndim != 2 or x.dtype != self.scale._value.dtype:
            return None
        y = (x - self.ra_mean._value) / np.sqrt(self.ra_var._value + self.eps)
        return self.scale._value * y + self.bias._value if self.affine else y

    def extra_repr(self) -> str:
        return (f"num_features={self.num_features}, momentum={self.momentum}, "
                f"warmup_steps={self.warmup_steps}, affine={self.affine}")


class BatchRenorm1d(BatchRenorm):
    """Over (N, C) input (sb3-contrib's refuses a 1-D input)."""

    def _check_input_dim(self, x: Any) -> None:
        shape = _shape(x)
        if len(shape) == 1:
            raise ValueError(f"BatchRenorm1d: expected 2D or 3D input (got {len(shape)}D input)")

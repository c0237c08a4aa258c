"""More of ``torch.nn``'s modules (issue 29's survey of what RL code calls): ``Conv1d``, the
pooling layers, the remaining activations, ``Unflatten``, ``ParameterList``, ``PReLU`` and
``GroupNorm``, each over ``rlgrad.nn.functional`` (``functional_extra.py``)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.nn import functional as F
from rlgrad.nn import init
from rlgrad.nn.module import Module, Parameter
from rlgrad.tensor import Tensor, get_default_dtype
from rlgrad.typing import DTypeLike, ShapeLike

__all__ = [
    "Conv1d", "ConvTranspose2d", "MaxPool2d", "AvgPool2d", "MaxPool1d", "AvgPool1d", "AdaptiveAvgPool2d",
    "AdaptiveMaxPool2d", "Softmin", "Hardtanh", "ReLU6", "Hardsigmoid", "Hardswish", "SELU", "CELU",
    "GLU", "LogSigmoid", "Softsign", "Tanhshrink", "Threshold", "Unflatten", "ParameterList", "PReLU",
    "GroupNorm", "CosineSimilarity", "PairwiseDistance", "L1Loss", "GaussianNLLLoss", "PoissonNLLLoss",
    "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d",
]


class Conv1d(Module):
    """1-D convolution over (N, C, L) with weight (out_channels, in_channels, k), torch's init."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: ShapeLike, stride: ShapeLike = 1,
                 padding: ShapeLike = 0, bias: bool = True, dtype: DTypeLike = None) -> None:
        super().__init__()
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        one = (lambda v: int(v) if isinstance(v, int | np.integer) else int(v[0]))
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size, self.stride, self.padding = (one(kernel_size),), (one(stride),), (one(padding),)
        self.weight = Parameter(np.empty((out_channels, in_channels, self.kernel_size[0]), dtype=dt))
        self.bias = Parameter(np.empty(out_channels, dtype=dt)) if bias else None
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(in_channels * self.kernel_size[0])
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding)


class ConvTranspose2d(Module):
    """torch's: weight (in_channels, out_channels, kh, kw), its init (fan-in from dim 1)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: ShapeLike, stride: ShapeLike = 1,
                 padding: ShapeLike = 0, output_padding: ShapeLike = 0, bias: bool = True,
                 dtype: DTypeLike = None) -> None:
        super().__init__()
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        two = (lambda v: (int(v), int(v)) if isinstance(v, int | np.integer) else tuple(int(a) for a in v))
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size, self.stride = two(kernel_size), two(stride)
        self.padding, self.output_padding = two(padding), two(output_padding)
        self.weight = Parameter(np.empty((in_channels, out_channels) + self.kernel_size, dtype=dt))
        self.bias = Parameter(np.empty(out_channels, dtype=dt)) if bias else None
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(out_channels * self.kernel_size[0] * self.kernel_size[1])
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding)


def _simple(name: str, fn: Any, params: tuple[tuple[str, Any], ...] = ()) -> type:
    """A module with no parameters: ``fn(x, **its arguments)``."""
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        Module.__init__(self)
        names = [n for n, _ in params]
        vals = dict(params)
        vals.update(zip(names, args))
        vals.update({k: v for k, v in kwargs.items() if k in vals})
        unknown = set(kwargs) - set(vals) - {"inplace"}
        if unknown or len(args) > len(names):
            raise TypeError(f"{name}() takes ({', '.join(names)}), got {args} and {sorted(kwargs)}")
        self._args = vals

    def forward(self: Any, x: Any) -> Any:
        return fn(x, **self._args)

    def extra_repr(self: Any) -> str:
        return ", ".join(f"{k}={v}" for k, v in self._args.items())

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr,
                                  "__module__": __name__, "__doc__": f"torch.nn.{name}."})


MaxPool2d = _simple("MaxPool2d", F.max_pool2d, (("kernel_size", 2), ("stride", None), ("padding", 0)))
AvgPool2d = _simple("AvgPool2d", F.avg_pool2d, (("kernel_size", 2), ("stride", None), ("padding", 0),
                                                ("ceil_mode", False), ("count_include_pad", True)))
MaxPool1d = _simple("MaxPool1d", F.max_pool1d, (("kernel_size", 2), ("stride", None), ("padding", 0)))
AvgPool1d = _simple("AvgPool1d", F.avg_pool1d, (("kernel_size", 2), ("stride", None), ("padding", 0)))
AdaptiveAvgPool2d = _simple("AdaptiveAvgPool2d", F.adaptive_avg_pool2d, (("output_size", 1),))
AdaptiveMaxPool2d = _simple("AdaptiveMaxPool2d", F.adaptive_max_pool2d, (("output_size", 1),))
Softmin = _simple("Softmin", F.softmin, (("dim", -1),))
Hardtanh = _simple("Hardtanh", F.hardtanh, (("min_val", -1.0), ("max_val", 1.0)))
ReLU6 = _simple("ReLU6", F.relu6)
Hardsigmoid = _simple("Hardsigmoid", F.hardsigmoid)
Hardswish = _simple("Hardswish", F.hardswish)
SELU = _simple("SELU", F.selu)
CELU = _simple("CELU", F.celu, (("alpha", 1.0),))
GLU = _simple("GLU", F.glu, (("dim", -1),))
LogSigmoid = _simple("LogSigmoid", F.logsigmoid)
Softsign = _simple("Softsign", F.softsign)
Tanhshrink = _simple("Tanhshrink", F.tanhshrink)
Threshold = _simple("Threshold", F.threshold, (("threshold", 0.0), ("value", 0.0)))
class L1Loss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.l1_loss(input, target, self.reduction)


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.p, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.p, self.eps, self.keepdim)


class GaussianNLLLoss(Module):
    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean") -> None:
        super().__init__()
        self.full, self.eps, self.reduction = full, eps, reduction

    def forward(self, input: Tensor, target: Tensor, var: Tensor) -> Tensor:  # noqa: A002
        return F.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class PoissonNLLLoss(Module):
    def __init__(self, log_input: bool = True, full: bool = False, eps: float = 1e-8,
                 reduction: str = "mean") -> None:
        super().__init__()
        self.log_input, self.full, self.eps, self.reduction = log_input, full, eps, reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.poisson_nll_loss(input, target, self.log_input, self.full, self.eps, self.reduction)


class Upsample(Module):
    """``F.interpolate`` as a module (torch's arguments)."""

    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None, mode: str = "nearest",
                 align_corners: bool | None = None, recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return F.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)


class UpsamplingNearest2d(Upsample):
    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size: int | Sequence[int] | None = None,
                 scale_factor: float | Sequence[float] | None = None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class Unflatten(Module):
    def __init__(self, dim: int, unflattened_size: Sequence[int]) -> None:
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        return x.unflatten(self.dim, self.unflattened_size)


class ParameterList(Module):
    """A list of parameters, registered as "0", "1", ... (torch's)."""

    def __init__(self, values: Iterable[Any] | None = None) -> None:
        super().__init__()
        for v in values or ():
            self.append(v)

    def append(self, value: float) -> ParameterList:
        p = value if isinstance(value, Parameter) else Parameter(value)
        self.register_parameter(str(len(self)), p)
        return self

    def extend(self, values: Iterable[Any]) -> ParameterList:
        for v in values:
            self.append(v)
        return self

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter([p for p in self._parameters.values() if p is not None])

    def __getitem__(self, idx: int) -> Parameter:
        return list(self)[idx]


class PReLU(Module):
    """``max(0, x) + weight * min(0, x)``, one learned slope (or one per channel, dim 1)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, dtype: DTypeLike = None) -> None:
        super().__init__()
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        self.num_parameters = num_parameters
        self.weight = Parameter(np.full(num_parameters, init, dt))

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight
        if self.num_parameters > 1:
            w = ops.reshape(w, (-1,) + (1,) * (len(tuple(x.shape)) - 2))
        return ops.maximum(x, 0) + w * ops.minimum(x, 0)


class GroupNorm(Module):
    """torch's: the channels (dim 1) in ``num_groups`` groups, each normalised over its channels
    and positions, then a per-channel affine."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 dtype: DTypeLike = None) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels {num_channels} must be divisible by "
                             f"num_groups {num_groups}")
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = Parameter(np.ones(num_channels, dt)) if affine else None
        self.bias = Parameter(np.zeros(num_channels, dt)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        shape = tuple(x.shape)
        g = ops.reshape(x, (shape[0], self.num_groups, -1))
        mean = ops.mean(g, axis=-1, keepdims=True)
        var = ops.mean((g - mean) ** 2, axis=-1, keepdims=True)
        out = ops.reshape((g - mean) / ops.sqrt(var + self.eps), shape)
        if not self.affine:
            return out
        per = (-1,) + (1,) * (len(shape) - 2)
        return out * ops.reshape(self.weight, per) + ops.reshape(self.bias, per)

"""Layers with PyTorch's names, constructor arguments, parameter names and shapes, so a
``state_dict`` matches the equivalent PyTorch model key for key."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.nn import functional as F
from rlgrad.nn import init
from rlgrad.nn.module import Module, Parameter
from rlgrad.tensor import Tensor, get_default_dtype, mark_written
from rlgrad.typing import DTypeLike

__all__ = [
    "Identity", "Linear", "Conv2d", "Flatten", "Sequential", "ModuleList", "ModuleDict", "ReLU",
    "Tanh", "Sigmoid", "ELU", "Softplus", "LeakyReLU", "SiLU", "GELU", "Mish", "LayerNorm", "MLP",
    "Dropout", "Embedding",
]

_linear = F._linear_p  # the fused primitive, called without the wrapper


def _as_input(x: Any, dtype: np.dtype) -> Any:
    """Inputs that carry no gradient (observations: float64 arrays, uint8 frames) are cast to the
    layer's dtype, so one float64 batch does not silently turn the whole update into float64."""
    if isinstance(x, Tensor):
        if x._value.dtype != dtype and not x.requires_grad:
            # the recorded cast, not ``x._value.astype``: under rlgrad.jit ``x`` may be a traced
            # input, whose value read here would be baked into the compiled step as a constant
            return ops.astype(x, dtype)
        return x
    x = np.asarray(x)
    return x if x.dtype == dtype else x.astype(dtype)


class Identity(Module):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return x


class Linear(Module):
    """``y = x @ weight.T + bias`` with weight (out_features, in_features), PyTorch's default
    initialization (uniform in +-1/sqrt(in_features) for weight and bias) and one fused node."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype: DTypeLike = None) -> None:
        super().__init__()
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self.weight = Parameter(np.empty((out_features, in_features), dtype=dt))
        self.bias = Parameter(np.empty(out_features, dtype=dt)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # kaiming_uniform_(a=sqrt(5)) is exactly U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight
        if not (isinstance(x, Tensor) and x._value.dtype == w._value.dtype):
            x = _as_input(x, w._value.dtype)
        return _linear(x, w, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def _pair(v: Any) -> tuple[int, ...]:
    return (int(v), int(v)) if isinstance(v, int | np.integer) else tuple(int(a) for a in v)


class Conv2d(Module):
    """2-D convolution over (N, C, H, W) with weight (out_channels, in_channels, kh, kw)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, bias: bool = True, dtype: DTypeLike = None) -> None:
        super().__init__()
        if isinstance(padding, str):
            if padding != "valid":
                raise ValueError(f"Conv2d: padding={padding!r} is not supported; pass 'valid' or "
                                 "an int / pair of ints")
            padding = 0
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size, self.stride, self.padding = _pair(kernel_size), _pair(stride), _pair(padding)
        if min(self.stride) < 1 or min(self.kernel_size) < 1 or min(self.padding) < 0:
            raise ValueError(f"Conv2d: kernel_size {self.kernel_size} and stride {self.stride} "
                             f"must be positive and padding {self.padding} non-negative")
        self.weight = Parameter(np.empty((out_channels, in_channels) + self.kernel_size, dtype=dt))
        self.bias = Parameter(np.empty(out_channels, dtype=dt)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight
        if not (isinstance(x, Tensor) and x._value.dtype == w._value.dtype):
            x = _as_input(x, w._value.dtype)
        return F.conv2d(x, w, self.bias, self.stride, self.padding)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return F.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Sequential(Module):
    """Modules applied in order; children are named "0", "1", ... (or by an OrderedDict)."""

    _modules: OrderedDict[str, Module]  # type: ignore[assignment]  # children are never None here

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], Mapping):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, idx: int | slice) -> Any:
        if isinstance(idx, slice):
            return Sequential(OrderedDict(list(self._modules.items())[idx]))
        keys = list(self._modules)
        try:
            return self._modules[keys[idx]]
        except IndexError:
            raise IndexError(f"index {idx} is out of range for a Sequential of {len(keys)} modules") from None

    def __setitem__(self, idx: int, module: Module) -> None:
        keys = list(self._modules)
        self.add_module(keys[idx], module)

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self._modules)), module)
        return self


class ModuleList(Module):
    """A list of modules whose parameters are registered (children "0", "1", ...)."""

    _modules: OrderedDict[str, Module]  # type: ignore[assignment]  # children are never None here

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, idx: int) -> Module:
        return list(self._modules.values())[idx]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(list(self._modules)[idx], module)


class ModuleDict(Module):
    _modules: OrderedDict[str, Module]  # type: ignore[assignment]  # children are never None here

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        for k, m in (modules or {}).items():
            self.add_module(k, m)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self) -> Any:
        return self._modules.keys()

    def values(self) -> Any:
        return self._modules.values()

    def items(self) -> Any:
        return self._modules.items()


# ---- activations -----------------------------------------------------------------------------
class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class SiLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate={approximate!r}; use 'none' or 'tanh'")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Mish(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.mish(x)


class Dropout(Module):
    """Zeroes elements with probability ``p`` in training mode (scaling the rest by 1/(1-p));
    the identity in eval mode."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"Dropout: p={p} must be in [0, 1]")
        self.p, self.inplace = float(p), bool(inplace)  # inplace is accepted; a copy is made

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Embedding(Module):
    """A lookup table: ``weight`` (num_embeddings, embedding_dim) drawn from N(0, 1), the row
    ``padding_idx`` zeroed and never given a gradient (PyTorch)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, dtype: DTypeLike = None, *, sparse: bool = False) -> None:
        super().__init__()
        if sparse:
            raise NotImplementedError("Embedding(sparse=True): rlgrad has no sparse gradients; use "
                                      "sparse=False with a dense optimizer (Adam for SparseAdam)")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise ValueError(f"Embedding: padding_idx={padding_idx} must be within "
                                 f"num_embeddings={self.num_embeddings}")
            padding_idx = padding_idx % self.num_embeddings
        if max_norm is not None:
            raise NotImplementedError("Embedding: max_norm is not supported; renormalise the weight yourself")
        self.padding_idx, self.max_norm = padding_idx, max_norm
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        self.weight = Parameter(np.empty((self.num_embeddings, self.embedding_dim), dtype=dt))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight._value[self.padding_idx] = 0
            mark_written(self.weight)  # an in-place write: bump the version autograd checks

    def forward(self, x: Tensor) -> Tensor:
        return F.embedding(x, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class ELU(Module):
    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self.alpha = float(alpha)

    def forward(self, x: Tensor) -> Tensor:
        return F.elu_p(x, alpha=self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = float(beta), float(threshold)

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01) -> None:
        super().__init__()
        self.negative_slope = float(negative_slope)

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)


class LayerNorm(Module):
    weight: Parameter | None
    bias: Parameter | None

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, dtype: DTypeLike = None) -> None:
        super().__init__()
        if isinstance(normalized_shape, int | np.integer):
            normalized_shape = (int(normalized_shape),)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        if elementwise_affine:
            self.weight = Parameter(np.ones(self.normalized_shape, dtype=dt))
            self.bias = Parameter(np.zeros(self.normalized_shape, dtype=dt)) if bias else None
        else:
            self.weight = None
            self.bias = None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


_ACTIVATIONS: dict[str, Callable[[], Module]] = {
    "relu": ReLU, "tanh": Tanh, "sigmoid": Sigmoid, "elu": ELU, "softplus": Softplus,
    "leaky_relu": LeakyReLU, "silu": SiLU, "gelu": GELU, "mish": Mish, "identity": Identity,
}


def _make_activation(act: Any) -> Module | None:
    if act is None:
        return None
    if isinstance(act, str):
        try:
            return _ACTIVATIONS[act.lower()]()
        except KeyError:
            raise ValueError(f"unknown activation {act!r}; one of {sorted(_ACTIVATIONS)}, a Module "
                             "class, or a function returning a Module") from None
    if isinstance(act, Module):
        return act  # activations hold no parameters, so one instance can serve every layer
    made = act()
    if not isinstance(made, Module):
        raise TypeError(f"activation factory {act!r} returned {type(made).__name__}, not a Module")
    return made


class MLP(Sequential):
    """``MLP([4, 64, 64, 2], activation=nn.Tanh)``: Linear layers with ``activation`` between them.

    It is a ``Sequential`` (Linear, act, Linear, act, Linear), so its state_dict keys ("0.weight",
    "2.weight", ...) are those of the same ``torch.nn.Sequential``. ``output_activation`` follows
    the last layer when given.
    """

    def __init__(self, sizes: Iterable[int], activation: Any = ReLU, output_activation: Any = None,
                 bias: bool = True, dtype: DTypeLike = None) -> None:
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2:
            raise ValueError(f"MLP needs at least an input and an output size, got {sizes}")
        layers: list[Module] = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(Linear(n_in, n_out, bias=bias, dtype=dtype))
            act = activation if i < len(sizes) - 2 else output_activation
            made = _make_activation(act)
            if made is not None:
                layers.append(made)
        super().__init__(*layers)
        self.sizes = sizes

"""``rlgrad.nn.init``: PyTorch's in-place initializers (``xavier_uniform_``, ``orthogonal_`` ...).

Each takes a Tensor/Parameter (or a NumPy array) and fills its data in place, keeping its dtype.
Random draws come from ``generator`` when given (a ``numpy.random.Generator``), else from this
module's default generator, which ``manual_seed`` reseeds.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgrad.tensor import Tensor, mark_written
from rlgrad.tracer import replayed
from rlgrad.typing import GeneratorLike

__all__ = [
    "manual_seed", "default_generator", "calculate_gain", "uniform_", "normal_", "constant_",
    "zeros_", "ones_", "eye_", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_",
    "kaiming_normal_", "orthogonal_", "trunc_normal_", "dirac_", "sparse_",
]

_state = {"rng": np.random.default_rng()}


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the generator the layers' default initialization draws from."""
    _state["rng"] = np.random.default_rng(seed)
    return _state["rng"]


def default_generator() -> np.random.Generator:
    return _state["rng"]


def _rng(generator: Any) -> Any:
    return _state["rng"] if generator is None else generator


def _array(tensor: Any) -> np.ndarray:
    arr = tensor._value if isinstance(tensor, Tensor) else tensor
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"init functions fill a Tensor or an array in place, got {type(tensor).__name__}")
    return arr


@replayed  # under rlgrad.jit: made again by the compiled step, at its place
def _fill(tensor: Any, values: Any) -> Any:
    arr = _array(tensor)
    arr[...] = values  # in place, cast to the tensor's own dtype
    mark_written(tensor)
    return tensor


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for an activation (PyTorch's table)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid", "identity")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    known = linear + ("tanh", "relu", "leaky_relu", "selu")
    raise ValueError(f"unsupported nonlinearity {nonlinearity!r}; one of {known}")


def _calculate_fan_in_and_fan_out(tensor: Any) -> tuple[int, int]:
    shape = _array(tensor).shape
    if len(shape) < 2:
        raise ValueError(
            f"fan in and fan out need a tensor with at least 2 dimensions, got shape {shape}"
        )
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: GeneratorLike = None) -> Tensor:
    arr = _array(tensor)
    return _fill(tensor, _rng(generator).uniform(a, b, size=arr.shape))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: GeneratorLike = None) -> Tensor:
    arr = _array(tensor)
    return _fill(tensor, _rng(generator).normal(mean, std, size=arr.shape))


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator: GeneratorLike = None) -> Tensor:
    """Normal draws redrawn until they fall in ``[a, b]``."""
    arr = _array(tensor)
    rng = _rng(generator)
    out = rng.normal(mean, std, size=arr.shape)
    bad = (out < a) | (out > b)
    while bad.any():
        out[bad] = rng.normal(mean, std, size=int(bad.sum()))
        bad = (out < a) | (out > b)
    return _fill(tensor, out)


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _fill(tensor, val)


def zeros_(tensor: Tensor) -> Tensor:
    return _fill(tensor, 0)


def ones_(tensor: Tensor) -> Tensor:
    return _fill(tensor, 1)


def eye_(tensor: Tensor) -> Tensor:
    arr = _array(tensor)
    if arr.ndim != 2:
        raise ValueError(f"eye_ needs a 2-D tensor, got shape {arr.shape}")
    return _fill(tensor, np.eye(*arr.shape))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """A 3-, 4- or 5-D convolution weight that passes its input through (per group): one 1 at
    the kernel's centre for each of the first min(out/groups, in) channels."""
    arr = _array(tensor)
    if arr.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if arr.shape[0] % groups:
        raise ValueError("dim 0 must be divisible by groups")
    per = arr.shape[0] // groups
    out = np.zeros(arr.shape)
    centre = tuple(k // 2 for k in arr.shape[2:])
    for g in range(groups):
        for d in range(min(per, arr.shape[1])):
            out[(g * per + d, d) + centre] = 1
    return _fill(tensor, out)


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01,
            generator: GeneratorLike = None) -> Tensor:
    """A 2-D weight drawn from N(0, std) with ceil(sparsity * rows) entries of each column zeroed
    (Martens 2010), rows chosen at random per column."""
    arr = _array(tensor)
    if arr.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = arr.shape
    rng = _rng(generator)
    out = rng.normal(0.0, std, arr.shape)
    zeros = int(math.ceil(sparsity * rows))
    for c in range(cols):
        out[rng.permutation(rows)[:zeros], c] = 0
    return _fill(tensor, out)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: GeneratorLike = None) -> Tensor:
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: GeneratorLike = None) -> Tensor:
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def _kaiming_std(tensor: Any, a: float, mode: str, nonlinearity: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    if fan == 0:
        return 0.0
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator: GeneratorLike = None) -> Tensor:
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator: GeneratorLike = None) -> Tensor:
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: GeneratorLike = None) -> Tensor:
    """A (semi-)orthogonal matrix times ``gain``, as PyTorch builds it (QR of a Gaussian matrix
    with the signs of R's diagonal folded in); what SB3 and CleanRL use for policy layers."""
    arr = _array(tensor)
    if arr.ndim < 2:
        raise ValueError(f"orthogonal_ needs at least 2 dimensions, got shape {arr.shape}")
    if arr.size == 0:
        return tensor
    rows = arr.shape[0]
    cols = arr.size // rows
    flat = _rng(generator).standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, (gain * q).reshape(arr.shape))

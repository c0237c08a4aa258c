"""PyTorch-style constructors that return Tensors (``rlgrad.numpy`` keeps NumPy's, returning arrays)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.device import check_device
from rlgrad.tensor import Tensor, _as_array, _leaf, _Trace, get_default_dtype, tensor
from rlgrad.typing import ArrayLike, DeviceLike, DTypeLike, ShapeLike


def _size_args(shape: tuple) -> tuple[int, ...]:
    """``zeros(2, 3)`` and ``zeros((2, 3))`` alike, as PyTorch's constructors take a size."""
    if len(shape) == 1 and isinstance(shape[0], tuple | list):
        return tuple(shape[0])
    return tuple(shape)


def _empty_aligned(shape: Any, dtype: Any, align: int = 64) -> np.ndarray:
    """``np.empty`` starting on an ``align``-byte boundary (a cache line). NumPy's allocator
    gives 16 bytes, and its SIMD loops write a result about twice as fast into a 64-byte-aligned
    array (measured: a float32 add of 16k elements 3.2 µs against 6.5 µs): buffers that are
    written at every step (optimizer state, compiled steps' intermediates) are allocated so."""
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(n * dt.itemsize + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + n * dt.itemsize].view(dt).reshape(shape)


def _make(arr: np.ndarray, requires_grad: bool, device: Any = None) -> Tensor:
    check_device(device)
    if _Trace.compiling:  # a buffer made inside a jitted step (see tensor.born_in_trace)
        _Trace.born[id(arr)] = arr
    return _leaf(arr, requires_grad)


def _dt(dtype: Any) -> Any:
    return get_default_dtype() if dtype is None else dtype


def zeros(*shape: Any, dtype: DTypeLike = None, device: DeviceLike = None,
          requires_grad: bool = False) -> Tensor:
    return _make(np.zeros(_size_args(shape), dtype=_dt(dtype)), requires_grad, device)


def ones(*shape: Any, dtype: DTypeLike = None, device: DeviceLike = None,
         requires_grad: bool = False) -> Tensor:
    return _make(np.ones(_size_args(shape), dtype=_dt(dtype)), requires_grad, device)


def empty(*shape: Any, dtype: DTypeLike = None, device: DeviceLike = None,
          requires_grad: bool = False) -> Tensor:
    return _make(np.empty(_size_args(shape), dtype=_dt(dtype)), requires_grad, device)


def full(shape: ShapeLike, fill_value: float, dtype: DTypeLike = None, device: DeviceLike = None,
         requires_grad: bool = False) -> Tensor:
    if dtype is None and isinstance(fill_value, bool | int | np.integer):  # torch: int -> int64
        dtype = np.bool_ if isinstance(fill_value, bool) else np.int64
    return _make(np.full(shape, fill_value, dtype=_dt(dtype)), requires_grad, device)


def _like(t: Any) -> np.ndarray:
    return t._value if isinstance(t, Tensor) else np.asarray(t)


def zeros_like(t: ArrayLike, dtype: DTypeLike = None, device: DeviceLike = None,
               requires_grad: bool = False) -> Tensor:
    return _make(np.zeros_like(_like(t), dtype=dtype), requires_grad, device)


def ones_like(t: ArrayLike, dtype: DTypeLike = None, device: DeviceLike = None,
              requires_grad: bool = False) -> Tensor:
    return _make(np.ones_like(_like(t), dtype=dtype), requires_grad, device)


def empty_like(t: ArrayLike, dtype: DTypeLike = None, device: DeviceLike = None,
               requires_grad: bool = False) -> Tensor:
    return _make(np.empty_like(_like(t), dtype=dtype), requires_grad, device)


def full_like(t: ArrayLike, fill_value: float, dtype: DTypeLike = None, device: DeviceLike = None,
              requires_grad: bool = False) -> Tensor:
    return _make(np.full_like(_like(t), fill_value, dtype=dtype), requires_grad, device)


def eye(n: int, m: int | None = None, dtype: DTypeLike = None, device: DeviceLike = None,
        requires_grad: bool = False) -> Tensor:
    return _make(np.eye(n, m, dtype=_dt(dtype)), requires_grad, device)


def arange(*args: Any, dtype: DTypeLike = None, device: DeviceLike = None,
           requires_grad: bool = False) -> Tensor:
    """``torch.arange``: int64 for integer arguments, the default dtype if any is a float."""
    if dtype is None and any(isinstance(a, float | np.floating) for a in args):
        dtype = get_default_dtype()
    return _make(np.arange(*args, dtype=dtype), requires_grad, device)


def linspace(start: float, end: float, steps: int, dtype: DTypeLike = None, device: DeviceLike = None,
             requires_grad: bool = False) -> Tensor:
    """``torch.linspace(start, end, steps)``: ``steps`` points from ``start`` to ``end``."""
    return _make(np.linspace(_number(start), _number(end), steps, dtype=_dt(dtype)),
                 requires_grad, device)


def _number(x: Any) -> Any:
    return x.item() if isinstance(x, Tensor) else x


def as_tensor(data: ArrayLike, dtype: DTypeLike = None, device: DeviceLike = None) -> Tensor:
    """``torch.as_tensor``: shares the memory of a NumPy array (or Tensor) when no conversion is
    needed, else converts as ``tensor()`` does."""
    check_device(device)
    if isinstance(data, Tensor):
        return data if dtype is None or data.dtype == np.dtype(dtype) else data.to(dtype)
    if _Trace.compiling and ops.holds_tensor(data):  # a list of traced values: traced too
        return tensor(data, dtype=dtype)
    if isinstance(data, np.ndarray) and (dtype is None or data.dtype == np.dtype(dtype)):
        return _leaf(data)
    return _leaf(_as_array(data, dtype))


def from_numpy(arr: np.ndarray) -> Tensor:
    """``torch.from_numpy``: a Tensor sharing ``arr``'s memory (writes to one show in the other).
    A Tensor that requires no grad is returned as it is: ``rlgrad.jit`` (and its check) call the
    function with the caller's arrays wrapped as Tensors."""
    if isinstance(arr, Tensor) and not arr.requires_grad:
        return arr
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"from_numpy expects a NumPy array, got {type(arr).__name__}; use "
                        "rlgrad.tensor(data) for other data")
    return _leaf(arr)


def cat(tensors: Sequence[ArrayLike], dim: int = 0) -> Tensor:
    """``torch.cat``."""
    return ops.concatenate(tensors, axis=dim)


def concatenate(tensors: Sequence[ArrayLike], axis: int = 0) -> Tensor:
    return ops.concatenate(tensors, axis=axis)


def stack(tensors: Sequence[ArrayLike], dim: int = 0, *, axis: int | None = None) -> Tensor:
    return ops.stack(tensors, axis=dim if axis is None else axis)


def _detached(data: Any) -> Any:
    if isinstance(data, Tensor):
        return ops.stop_gradient(data)
    if type(data) in (list, tuple):
        return [_detached(d) for d in data]
    return data


def _traced_data(data: Any, arr: np.ndarray, requires_grad: bool, copy: bool,
                 into: Tensor | None = None) -> Tensor | None:
    """What ``tensor(data)`` / ``Tensor(data)`` / ``.data`` return while jit traces, when
    ``data`` holds Tensors: ``arr``'s values (the eager result), recorded from those Tensors, so
    the compiled step recomputes them at every call instead of freezing this call's copy. None:
    no Tensor. ``into``: the Tensor that ``Tensor(data)`` initialises, recorded as that value."""
    if not ops.holds_tensor(data):
        return None
    out = ops.array_from(_detached(data), copy, dtype=arr.dtype)
    if out.shape != arr.shape:
        out = ops.reshape(out, arr.shape)
    if requires_grad:
        out.requires_grad_(True)
    if into is not None and _Trace.tape is not None:
        _Trace.tape.append((ops.stop_gradient.primitive, (out,), {}, into))  # an alias
    return out


_Trace.wrap = _traced_data  # tensor.py's constructors call it (they cannot import the primitives)

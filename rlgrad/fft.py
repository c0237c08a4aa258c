"""``torch.fft`` on NumPy's FFTs: ``fft``, ``ifft``, ``rfft``, ``irfft``, ``hfft``, ``ihfft`` and
their 2-D and N-D forms, ``fftfreq``, ``rfftfreq``, ``fftshift``, ``ifftshift``, with torch's
arguments (``n``/``s``, ``dim``, ``norm``) and dtypes (float32 in, complex64 out).

rlgrad does not differentiate through complex values, so the transforms refuse an input that
requires grad (one line saying so) rather than return a result the gradient silently misses;
``fftshift``/``ifftshift`` are rolls and are differentiable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.batching import BatchedTensor
from rlgrad.device import check_device
from rlgrad.tensor import Tensor, _Trace, constant, get_default_dtype
from rlgrad.tracer import _GradMode
from rlgrad.typing import DeviceLike, DTypeLike

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2",
           "fftn", "ifftn", "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_COMPLEX = {np.dtype(np.float32): np.complex64, np.dtype(np.float64): np.complex128,
            np.dtype(np.float16): np.complex64}


def _values(x: Any, name: str) -> np.ndarray:
    """The input's array, refused where a result would be wrong in silence: a gradient wanted,
    a vmapped slice, a step rlgrad.jit compiles (it would freeze the values)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"fft.{name}(): argument 'input' must be Tensor, not {type(x).__name__}")
    if x.requires_grad and _GradMode.enabled:
        raise RuntimeError(f"fft.{name}: rlgrad does not differentiate through complex values; "
                           "call it on x.detach() (or under no_grad) if no gradient is needed")
    if type(x) is BatchedTensor or _Trace.compiling:
        raise RuntimeError(f"fft.{name} is not supported inside vmap or rlgrad.jit; call it outside")
    a = x._value
    if a.dtype.kind in "biu":
        a = a.astype(get_default_dtype())
    return a


def _complex_dtype(a: np.ndarray) -> Any:
    return a.dtype if a.dtype.kind == "c" else _COMPLEX.get(a.dtype, np.complex128)


def _real_dtype(a: np.ndarray) -> Any:
    return np.float32 if a.dtype in (np.complex64, np.float32, np.float16) else np.float64


def _one_dim(name: str, fn: Callable, real_out: bool) -> Callable:
    def transform(input: Tensor, n: int | None = None, dim: int = -1,  # noqa: A002
                  norm: str | None = None) -> Tensor:
        a = _values(input, name)
        out = fn(a, n=n, axis=dim, norm=norm)
        return constant(np.asarray(out, _real_dtype(a) if real_out else _complex_dtype(a)))

    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"``torch.fft.{name}(input, n=None, dim=-1, norm=None)``."
    return transform


def _n_dim(name: str, fn: Callable, real_out: bool, default_dims: tuple | None) -> Callable:
    def transform(input: Tensor, s: Any = None, dim: Any = default_dims,  # noqa: A002
                  norm: str | None = None) -> Tensor:
        a = _values(input, name)
        axes = None if dim is None else (tuple(dim) if isinstance(dim, list | tuple) else (dim,))
        if s is not None and axes is None:
            axes = tuple(range(-len(s), 0))
        out = fn(a, s=s, axes=axes, norm=norm)
        return constant(np.asarray(out, _real_dtype(a) if real_out else _complex_dtype(a)))

    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"``torch.fft.{name}(input, s=None, dim={default_dims}, norm=None)``."
    return transform


fft = _one_dim("fft", np.fft.fft, False)
ifft = _one_dim("ifft", np.fft.ifft, False)
rfft = _one_dim("rfft", np.fft.rfft, False)
irfft = _one_dim("irfft", np.fft.irfft, True)
hfft = _one_dim("hfft", np.fft.hfft, True)
ihfft = _one_dim("ihfft", np.fft.ihfft, False)
fft2 = _n_dim("fft2", np.fft.fftn, False, (-2, -1))
ifft2 = _n_dim("ifft2", np.fft.ifftn, False, (-2, -1))
rfft2 = _n_dim("rfft2", np.fft.rfftn, False, (-2, -1))
irfft2 = _n_dim("irfft2", np.fft.irfftn, True, (-2, -1))
fftn = _n_dim("fftn", np.fft.fftn, False, None)
ifftn = _n_dim("ifftn", np.fft.ifftn, False, None)
rfftn = _n_dim("rfftn", np.fft.rfftn, False, None)
irfftn = _n_dim("irfftn", np.fft.irfftn, True, None)


def _freq(name: str, fn: Callable) -> Callable:
    def freq(n: int, d: float = 1.0, *, dtype: DTypeLike = None, device: DeviceLike = None,
             requires_grad: bool = False) -> Tensor:
        check_device(device)
        out = constant(np.asarray(fn(n, d), np.dtype(get_default_dtype() if dtype is None else dtype)))
        return out.requires_grad_(True) if requires_grad else out

    freq.__name__ = freq.__qualname__ = name
    return freq


fftfreq = _freq("fftfreq", np.fft.fftfreq)
rfftfreq = _freq("rfftfreq", np.fft.rfftfreq)


def _shift(x: Tensor, dim: Any, sign: int) -> Tensor:
    dims = tuple(range(x.ndim)) if dim is None else (tuple(dim) if isinstance(dim, list | tuple) else (dim,))
    shifts = tuple(sign * (x.shape[d] // 2) if sign > 0 else -(x.shape[d] // 2) for d in dims)
    return x.roll(shifts, dims)


def fftshift(input: Tensor, dim: Any = None) -> Tensor:  # noqa: A002
    """The zero frequency moved to the centre (a roll by n // 2 along ``dim``): differentiable."""
    return _shift(input, dim, 1)


def ifftshift(input: Tensor, dim: Any = None) -> Tensor:  # noqa: A002
    """``fftshift``'s inverse (a roll by -(n // 2))."""
    return _shift(input, dim, -1)

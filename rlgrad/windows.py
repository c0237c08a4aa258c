"""torch's window functions (``hann_window``, ``hamming_window``, ``blackman_window``,
``bartlett_window``, ``kaiser_window``): constants in the default float dtype. ``periodic=True``
(torch's default) gives the first ``N`` points of the ``N + 1``-point symmetric window."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlgrad.device import check_device
from rlgrad.tensor import Tensor, _leaf, get_default_dtype
from rlgrad.typing import DeviceLike, DTypeLike

__all__ = ["hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"]


def _window(name: str, n: int, periodic: bool, dtype: DTypeLike, device: DeviceLike,
            requires_grad: bool, shape: Callable[[int], np.ndarray]) -> Tensor:
    check_device(device)
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got window_length={n}")
    dt = np.dtype(get_default_dtype() if dtype is None else dtype)
    if dt.kind != "f":
        raise RuntimeError(f"{name} expects a floating point dtype, got {dt}")
    if n <= 1:
        w = np.ones(int(n))
    else:
        w = shape(n + 1)[:-1] if periodic else shape(int(n))
    return _leaf(w.astype(dt), requires_grad)


def _cosine_sum(*coefs: float) -> Callable[[int], np.ndarray]:
    def shape(m: int) -> np.ndarray:
        k = 2 * np.pi * np.arange(m) / (m - 1)
        return sum(((-1) ** i) * c * np.cos(i * k) for i, c in enumerate(coefs))

    return shape


def hann_window(window_length: int, periodic: bool = True, *, dtype: DTypeLike = None,
                device: DeviceLike = None, requires_grad: bool = False) -> Tensor:
    return _window("hann_window", window_length, periodic, dtype, device, requires_grad,
                   _cosine_sum(0.5, 0.5))


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54,
                   beta: float = 0.46, *, dtype: DTypeLike = None, device: DeviceLike = None,
                   requires_grad: bool = False) -> Tensor:
    return _window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                   _cosine_sum(alpha, beta))


def blackman_window(window_length: int, periodic: bool = True, *, dtype: DTypeLike = None,
                    device: DeviceLike = None, requires_grad: bool = False) -> Tensor:
    return _window("blackman_window", window_length, periodic, dtype, device, requires_grad,
                   _cosine_sum(0.42, 0.5, 0.08))


def bartlett_window(window_length: int, periodic: bool = True, *, dtype: DTypeLike = None,
                    device: DeviceLike = None, requires_grad: bool = False) -> Tensor:
    return _window("bartlett_window", window_length, periodic, dtype, device, requires_grad,
                   lambda m: 1 - np.abs(2 * np.arange(m) / (m - 1) - 1))


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *,
                  dtype: DTypeLike = None, device: DeviceLike = None,
                  requires_grad: bool = False) -> Tensor:
    return _window("kaiser_window", window_length, periodic, dtype, device, requires_grad,
                   lambda m: np.i0(beta * np.sqrt(1 - (2 * np.arange(m) / (m - 1) - 1) ** 2))
                   / np.i0(beta))

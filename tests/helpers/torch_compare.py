"""Comparisons of rlgrad against torch shared by the API-surface tests: results' shapes, dtypes
and values (``same``), and a function's gradient against torch's under a random cotangent and
against finite differences of the first and second order (``check_against_torch``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import rlgrad
from rlgrad.gradcheck import check_grads


def torch_dtype(t: Any) -> np.dtype:
    """``t``'s dtype as NumPy's (torch's ``torch.float32`` -> ``float32``)."""
    return np.dtype(str(t.dtype).replace("torch.", "")) if "torch" in str(t.dtype) else np.dtype(t.dtype)


def same(got: Any, want: Any, tol: float = 1e-12) -> None:
    """``got`` (rlgrad) has ``want``'s (torch) structure, shapes, dtypes and values; float32
    results get at least 3e-6 (another evaluation order's rounding)."""
    if isinstance(want, tuple | list):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same(g, w, tol)
        return
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    assert np.dtype(got.dtype) == torch_dtype(want), (got.dtype, want.dtype)
    if np.dtype(got.dtype) == np.float32:
        tol = max(tol, 3e-6)
    np.testing.assert_allclose(np.asarray(got.detach().numpy(), np.float64),
                               np.asarray(want.detach().numpy(), np.float64), rtol=tol, atol=tol)


def grads_match_torch(fn: Callable[[Any, Any], Any], x: np.ndarray, rng: np.random.Generator,
                      rtol: float = 1e-10, atol: float = 1e-12) -> None:
    """The gradient of ``sum(fn(lib, x) * w)`` w.r.t. ``x``, w a random cotangent: rlgrad's is
    torch's."""
    import torch

    w = rng.normal(size=tuple(fn(torch, torch.tensor(x)).shape))
    xr, xt = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (fn(rlgrad, xr) * rlgrad.tensor(w)).sum().backward()
    (fn(torch, xt) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=rtol, atol=atol)


def grads_match_finite_differences(fn: Callable[[Any, Any], Any], x: np.ndarray) -> None:
    """Reverse and forward derivatives of ``tanh(fn(rlgrad, x))``, first and second order,
    against central finite differences (``rlgrad.gradcheck.check_grads``)."""
    def f(a: Any) -> Any:  # check_grads hands arrays (the differences) and traced tensors
        out = rlgrad.numpy.tanh(fn(rlgrad, a if isinstance(a, rlgrad.Tensor) else rlgrad.tensor(a)))
        return out if isinstance(a, rlgrad.Tensor) else out.numpy()

    check_grads(f, modes=("rev", "fwd"), order=2)(x)


def check_against_torch(fn: Callable[[Any, Any], Any], x: np.ndarray, rng: np.random.Generator,
                        rtol: float = 1e-9, atol: float = 1e-11) -> None:
    """Both of the above."""
    grads_match_torch(fn, x, rng, rtol, atol)
    grads_match_finite_differences(fn, x)

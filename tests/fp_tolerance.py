"""How close two floating-point results must be when they do not run the same operations in the
same order. A float32 matrix product's last bits depend on how the CPU's BLAS kernel blocks it (the
row count, the chunking, AVX2 vs AVX-512), so a fast path built on different products than its
reference can only be asked to agree within the rounding that any summation order may give. Bit
equality stays the test wherever both sides run the same operations in the same order."""

from __future__ import annotations

import numpy as np


def assert_product_close(actual: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``actual`` is ``a @ b`` up to rounding: every element within ``k * eps * (|a| @ |b|)`` of
    the float64 product, ``k`` the summed length (the worst case of any summation order), so a
    missing or extra term, which moves an element by about its size, still fails."""
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = a.shape[-1] * np.finfo(actual.dtype).eps * (np.abs(a).astype(np.float64)
                                                         @ np.abs(b).astype(np.float64))
    err = np.abs(actual.astype(np.float64) - exact)
    bad = err > bound
    assert not bad.any(), (f"{bad.sum()} of {bad.size} elements off by more than the rounding "
                           f"bound: worst {err[bad].max():.3g} where the bound is {bound[bad].min():.3g}")


def assert_close_ulps(actual: np.ndarray, expected: np.ndarray, ulps: int = 8) -> None:
    """Equal up to ``ulps`` units of ``actual``'s precision at the largest magnitude of
    ``expected``: the reach of rounding differences through a few float32 layers."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    atol = ulps * np.finfo(actual.dtype).eps * float(np.abs(expected).max(initial=0.0))
    np.testing.assert_allclose(actual, expected, rtol=0, atol=atol)

"""rlgrad.special.i0 / i0e / i1 / i1e (and torch.i0, Tensor.i0) against torch.special in float64:
values from 0 to beyond overflow, first derivatives against torch, second derivatives against
central finite differences of the first, the limit at 0, dtypes."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import special

torch = pytest.importorskip("torch")

XS = np.concatenate([np.linspace(-60, 60, 241), [0.0, 1e-8, -1e-3, 29.999, 30.0, 700.0, 720.0, -720.0]])
NAMES = ["i0", "i0e", "i1", "i1e"]


@pytest.mark.parametrize("name", NAMES)
def test_values_and_gradients_match_torch(name: str) -> None:
    xr, xt = rlgrad.tensor(XS, requires_grad=True), torch.tensor(XS, requires_grad=True)
    a, b = getattr(special, name)(xr), getattr(torch.special, name)(xt)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=3e-15, atol=0)
    fin = torch.isfinite(b).detach().numpy()
    (a * rlgrad.tensor(fin.astype(np.float64))).sum().backward()
    b[torch.isfinite(b)].sum().backward()
    np.testing.assert_allclose(xr.grad.numpy()[fin], xt.grad.numpy()[fin], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", NAMES)
def test_second_derivative_matches_finite_differences(name: str) -> None:
    f = getattr(special, name)
    x0 = np.array([-12.0, -1.5, -1e-3, 0.7, 3.0, 29.5, 31.0, 45.0])  # (e^-|x| has a kink at 0)
    x = rlgrad.tensor(x0, requires_grad=True)
    (g,) = rlgrad.autograd.grad(f(x).sum(), x, create_graph=True)
    (h,) = rlgrad.autograd.grad(g.sum(), x)

    def first(v: np.ndarray) -> np.ndarray:
        t = rlgrad.tensor(v, requires_grad=True)
        return rlgrad.autograd.grad(f(t).sum(), t)[0].numpy()

    eps = 1e-5
    fd = (first(x0 + eps) - first(x0 - eps)) / (2 * eps)
    np.testing.assert_allclose(h.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_known_values_the_limit_at_zero_and_dtypes() -> None:
    x01 = rlgrad.tensor([0.0, 1.0], dtype=rlgrad.float64)
    np.testing.assert_allclose(special.i0(x01).numpy(), [1.0, 1.2660658777520082], rtol=1e-15)
    x = rlgrad.tensor([0.0], dtype=rlgrad.float64, requires_grad=True)
    special.i1(x).sum().backward()
    assert x.grad.numpy()[0] == 0.5  # I1'(0) = 1/2, not 0/0
    f32 = rlgrad.tensor([1.0, 2.0], dtype=rlgrad.float32)
    assert all(getattr(special, n)(f32).dtype == rlgrad.float32 for n in NAMES)
    assert rlgrad.tensor([1, 2]).i0().dtype == rlgrad.float32  # torch: integers give the default float
    np.testing.assert_allclose(rlgrad.i0(f32).numpy(), torch.i0(torch.tensor([1.0, 2.0])).numpy(), rtol=1e-6)
    assert special.modified_bessel_i0 is special.i0 and special.modified_bessel_i1 is special.i1

"""The last of issue 29's survey (bench/torch_surface.py): ``Tensor.unfold``, ``torch.where``
with one argument, ``mode``, ``nanmedian``, ``torch.special``'s functions, ``F.interpolate``,
the shape-changing in-place methods (``unsqueeze_``, ``t_``, ``transpose_`` ...), ``resize_``,
``apply_``/``map_``, the window functions, ``torch.fft`` and ``torch.autocast``. Values, dtypes,
gradients and errors against torch; the differentiable ones against central differences in
float64 (first and second order, reverse and forward mode)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers.torch_compare import check_against_torch
from helpers.torch_compare import same as _same
from helpers.torch_compare import torch_dtype as _dtype

import rlgrad
import rlgrad.special

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(2929)
X = RNG.normal(size=(4, 6))
X3 = RNG.normal(size=(2, 3, 5))
IMG = RNG.normal(size=(2, 2, 4, 5))
SEQ = RNG.normal(size=(2, 3, 5))
VOL = RNG.normal(size=(1, 2, 3, 2, 4))
TIES = np.array([[1, 2, 2, 3, 3, 0], [5, 5, 1, 1, 1, 5]])
NAN = np.array([[1.0, np.nan, 3.0, 2.0, np.nan], [4.0, 5.0, 6.0, 7.0, 0.5]])


def _s(lib: Any) -> Any:
    return lib.special


def _f(lib: Any) -> Any:
    return lib.nn.functional


VALUES: dict[str, Callable] = {
    "unfold": lambda lib, t: t(X).unfold(1, 3, 2),
    "unfold dim 0 step 1": lambda lib, t: t(X3).unfold(0, 1, 1),
    "unfold whole": lambda lib, t: t(X[0]).unfold(0, 6, 4),
    "unfold 0-d": lambda lib, t: t(np.float64(2.0)).unfold(0, 1, 1),
    "where one argument": lambda lib, t: lib.where(t(X) > 0),
    "where one argument 0-d": lambda lib, t: lib.where(t(np.array(True))),
    "mode": lambda lib, t: lib.mode(t(TIES)),
    "mode dim 0 keepdim": lambda lib, t: t(TIES).mode(0, keepdim=True),
    "mode float nan": lambda lib, t: lib.mode(t(np.array([3.0, np.nan, np.nan, 1.0]))),
    "mode 0-d": lambda lib, t: lib.mode(t(np.float64(2.0))),
    "nanmedian": lambda lib, t: lib.nanmedian(t(NAN)),
    "nanmedian dim": lambda lib, t: lib.nanmedian(t(NAN), 1),
    "nanmedian dim 0 keepdim": lambda lib, t: t(NAN).nanmedian(0, keepdim=True),
    "nanmedian int": lambda lib, t: t(TIES).nanmedian(),
    "special": lambda lib, t: (
        _s(lib).entr(t(np.array([-1.0, 0.0, 0.5, 2.0]))), _s(lib).expit(t(X)), _s(lib).logit(t(X).sigmoid()),
        _s(lib).logit(t(X).sigmoid(), eps=0.3), _s(lib).ndtr(t(X * 4)), _s(lib).log_ndtr(t(X * 10)),
        _s(lib).erfc(t(X * 3)), _s(lib).erfcx(t(np.array([-26.0, -3.0, 0.0, 2.0, 25.9, 26.1, 1e3, 1e10]))),
        _s(lib).exp2(t(X)), _s(lib).expm1(t(X)), _s(lib).log1p(t(np.abs(X))), _s(lib).sinc(t(X)),
        _s(lib).round(t(X * 10)), _s(lib).softmax(t(X), 1), _s(lib).log_softmax(t(X), dim=0),
        _s(lib).logsumexp(t(X), 1), _s(lib).multigammaln(t(np.abs(X) + 2), 3),
        _s(lib).multigammaln(t(np.array([1.0, 0.5, 3.0])), 3),
        _s(lib).xlog1py(t(X), t(np.abs(X))), _s(lib).gammaln(t(np.abs(X))), _s(lib).psi(t(np.abs(X)))),
    "special int input": lambda lib, t: (
        _s(lib).ndtr(t(TIES)), _s(lib).log_ndtr(t(TIES)), _s(lib).erfc(t(TIES)), lib.erfc(t(TIES)),
        _s(lib).gammaln(t(TIES + 1)), _s(lib).digamma(t(TIES + 1)), _s(lib).erf(t(TIES)),
        _s(lib).erfinv(t(TIES * 0)), _s(lib).entr(t(TIES)), _s(lib).xlogy(t(TIES), t(TIES + 1)),
        _s(lib).polygamma(1, t(TIES + 1)), lib.digamma(t(TIES + 1))),
    "special float32": lambda lib, t: (_s(lib).log_ndtr(t(X.astype(np.float32) * 10)),
                                       _s(lib).erfcx(t(X.astype(np.float32) * 10)),
                                       _s(lib).entr(t(np.abs(X).astype(np.float32)))),
    "log_ndtr far tail": lambda lib, t: _s(lib).log_ndtr(t(np.array([-1e3, -40.0, -5.0, 0.0, 5.0, 40.0]))),
    "interpolate nearest": lambda lib, t: _f(lib).interpolate(t(IMG), scale_factor=2),
    "interpolate nearest size": lambda lib, t: _f(lib).interpolate(t(IMG), size=(7, 3)),
    "interpolate nearest-exact": lambda lib, t: _f(lib).interpolate(t(IMG), size=(7, 3),
                                                                    mode="nearest-exact"),
    "interpolate nearest 1d": lambda lib, t: _f(lib).interpolate(t(SEQ), scale_factor=1.5),
    "interpolate linear": lambda lib, t: _f(lib).interpolate(t(SEQ), scale_factor=1.7, mode="linear"),
    "interpolate bilinear": lambda lib, t: _f(lib).interpolate(t(IMG), scale_factor=(1.7, 0.6),
                                                               mode="bilinear"),
    "interpolate bilinear corners": lambda lib, t: _f(lib).interpolate(t(IMG), size=(7, 9), mode="bilinear",
                                                                       align_corners=True),
    "interpolate recompute": lambda lib, t: _f(lib).interpolate(t(IMG), scale_factor=2.5, mode="bilinear",
                                                                recompute_scale_factor=True),
    "interpolate trilinear": lambda lib, t: _f(lib).interpolate(t(VOL), size=(4, 3, 6),
                                                                mode="trilinear"),
    "interpolate float32": lambda lib, t: _f(lib).interpolate(t(IMG.astype(np.float32)), scale_factor=2,
                                                              mode="bilinear"),
    "windows": lambda lib, t: (lib.hann_window(5), lib.hann_window(6, periodic=False), lib.hann_window(1),
                               lib.hann_window(0), lib.hamming_window(7, True, 0.5, 0.4),
                               lib.blackman_window(8), lib.bartlett_window(6), lib.bartlett_window(5, False),
                               lib.kaiser_window(6, True, 5.0), lib.hann_window(4, dtype=lib.float64)),
    "fftshift": lambda lib, t: (lib.fft.fftshift(t(X)), lib.fft.ifftshift(t(X3), dim=(0, 2)),
                                lib.fft.fftfreq(5), lib.fft.rfftfreq(6, d=0.5)),
}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_values_and_dtypes_match_torch(name: str) -> None:
    fn = VALUES[name]
    _same(fn(rlgrad, rlgrad.tensor), fn(torch, torch.tensor), 1e-10)


GRADS: dict[str, tuple[Callable, np.ndarray]] = {
    "unfold": (lambda lib, x: x.unfold(1, 3, 1) * x.unfold(1, 3, 1)[..., :1], X),
    "unfold step 2": (lambda lib, x: x.unfold(0, 2, 2), X3),
    "mode values": (lambda lib, x: lib.mode(lib.round(x * 0) + x * (x > 1), dim=1)[0], X),
    "nanmedian values": (lambda lib, x: lib.nanmedian(x, dim=1)[0] + lib.nanmedian(x), X),
    "special": (lambda lib, x: _s(lib).entr(x * x + 0.1) + _s(lib).ndtr(x) + _s(lib).log_ndtr(3 * x)
                + _s(lib).erfc(x) + _s(lib).erfcx(x) + _s(lib).expit(x) + _s(lib).logit(x.sigmoid())
                + _s(lib).multigammaln(x * x + 2, 2), X),
    "erfcx tail": (lambda lib, x: _s(lib).erfcx(x * 0.1 + 27.0) * 1e2, X),
    "log_ndtr tail": (lambda lib, x: _s(lib).log_ndtr(x - 30.0), X),
    "interpolate nearest": (lambda lib, x: _f(lib).interpolate(x, size=(7, 3)), IMG),
    "interpolate linear": (lambda lib, x: _f(lib).interpolate(x, scale_factor=1.7, mode="linear"), SEQ),
    "interpolate bilinear": (lambda lib, x: _f(lib).interpolate(x, scale_factor=(1.7, 0.6), mode="bilinear"),
                             IMG),
    "interpolate bilinear corners": (lambda lib, x: _f(lib).interpolate(x, size=(3, 9), mode="bilinear",
                                                                        align_corners=True), IMG),
    "interpolate trilinear": (lambda lib, x: _f(lib).interpolate(x, size=(4, 3, 6), mode="trilinear"), VOL),
    "fftshift": (lambda lib, x: lib.fft.fftshift(x) * x, X),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_match_torch_and_finite_differences(name: str) -> None:
    fn, x = GRADS[name]
    check_against_torch(fn, x, RNG)


def test_fft_values_and_dtypes_match_torch() -> None:
    calls = [lambda F, t: F.fft(t), lambda F, t: F.ifft(t, n=7, dim=0), lambda F, t: F.rfft(t, norm="ortho"),
             lambda F, t: F.irfft(F.rfft(t), n=6), lambda F, t: F.hfft(F.rfft(t)),
             lambda F, t: F.ihfft(t, dim=0), lambda F, t: F.fft2(t), lambda F, t: F.ifft2(t, s=(3, 4)),
             lambda F, t: F.rfft2(t, norm="forward"), lambda F, t: F.irfft2(F.rfft2(t)),
             lambda F, t: F.fftn(t, dim=(1,)), lambda F, t: F.ifftn(t), lambda F, t: F.rfftn(t, s=(2, 2)),
             lambda F, t: F.irfftn(F.rfftn(t))]
    for call in calls:
        for dt in (np.float32, np.float64):
            got = call(rlgrad.fft, rlgrad.tensor(X.astype(dt)))
            want = call(torch.fft, torch.tensor(X.astype(dt))).resolve_conj()
            assert np.dtype(got.dtype) == _dtype(want)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_in_place_shape_methods_match_torch_and_are_recorded() -> None:
    for name, args in (("unsqueeze_", (0,)), ("unsqueeze_", (-1,)), ("t_", ()), ("transpose_", (0, 1)),
                       ("swapaxes_", (1, 0)), ("swapdims_", (0, 1))):
        for lib in (rlgrad, torch):
            plain = lib.tensor(X)
            out = getattr(plain, name)(*args)
            assert out is plain
        assert tuple(getattr(rlgrad.tensor(X), name)(*args).shape) == \
            tuple(getattr(torch.tensor(X), name)(*args).shape)
        grads = []
        for lib in (rlgrad, torch):
            x = lib.tensor(X, requires_grad=True)
            y = x * 2
            ret = getattr(y, name)(*args)
            assert ret is y and y.grad_fn is not None
            (y * lib.tensor(np.arange(y.numel(), dtype=np.float64).reshape(tuple(y.shape)))).sum().backward()
            grads.append(x.grad.numpy())
        np.testing.assert_array_equal(*grads)
    z = rlgrad.tensor(np.ones((1, 3, 1)))
    assert tuple(z.squeeze_().shape) == (3,) and tuple(z.shape) == (3,)


def test_a_shape_change_in_place_bumps_the_version_as_torchs() -> None:
    for lib in (rlgrad, torch):
        x = lib.tensor(X, requires_grad=True)
        y = x * 2
        w = (y * y).sum()
        y.unsqueeze_(0)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            w.backward()


def test_resize_apply_and_map_match_torch() -> None:
    for lib in (rlgrad, torch):
        a = lib.arange(6.0)
        assert a.resize_(2, 2) is a
    np.testing.assert_array_equal(rlgrad.arange(6.0).resize_(2, 2).numpy(),
                                  torch.arange(6.0).resize_(2, 2).numpy())
    grown = rlgrad.arange(3.0).resize_(5)
    np.testing.assert_array_equal(grown.numpy()[:3], [0.0, 1.0, 2.0])  # (torch leaves the rest unset)
    for lib in (rlgrad, torch):
        t = lib.tensor(X)
        assert t.apply_(lambda v: v * 2 + 1) is t
    np.testing.assert_allclose(rlgrad.tensor(X).apply_(lambda v: v * 2 + 1).numpy(), X * 2 + 1)
    got = rlgrad.tensor(X).map_(rlgrad.tensor(X[0]), lambda p, q: p * q - 1)
    want = torch.tensor(X).map_(torch.tensor(X[0]), lambda p, q: p * q - 1)
    np.testing.assert_allclose(got.numpy(), want.numpy())
    assert rlgrad.tensor([1, 2]).apply_(lambda v: v * 3).dtype == np.int64


@pytest.mark.parametrize("call, err, match", [
    (lambda lib: lib.arange(6.0).unfold(0, 7, 1), RuntimeError,
     "maximum size for tensor at dimension 0 is 6"),
    (lambda lib: lib.arange(6.0).unfold(0, 2, 0), RuntimeError, "step is 0 but must be > 0"),
    (lambda lib: lib.ones(2, 3, 4).t_(), RuntimeError, "t_\\(\\) expects a tensor with <= 2 dimensions"),
    (lambda lib: lib.ones(3, requires_grad=True).unsqueeze_(0), RuntimeError, "leaf Variable"),
    (lambda lib: lib.ones(3, requires_grad=True).resize_(2), RuntimeError, "cannot resize variables"),
    (lambda lib: (lib.ones(3, requires_grad=True) * 2).apply_(abs), RuntimeError, "Can't call apply_"),
    (lambda lib: lib.special.expit([1.0]), TypeError, "must be Tensor"),
    (lambda lib: lib.nn.functional.interpolate(lib.ones(1, 1, 2), size=3, mode="bilinear"),
     NotImplementedError, "Got 3D input, but bilinear mode needs 4D input"),
    (lambda lib: lib.nn.functional.interpolate(lib.ones(1, 1, 2), size=3, align_corners=True), ValueError,
     "align_corners option can only be set"),
    (lambda lib: lib.hann_window(-1), RuntimeError, "non-negative window_length"),
])
def test_bad_input_raises_as_torch(call: Callable, err: Any, match: str) -> None:
    for lib in (rlgrad, torch):
        with pytest.raises(err, match=match):
            call(lib)


def test_interpolate_refuses_the_modes_it_lacks() -> None:
    F = rlgrad.nn.functional
    with pytest.raises(NotImplementedError, match="mode 'bicubic' is not supported"):
        F.interpolate(rlgrad.ones(1, 1, 2, 2), size=3, mode="bicubic")
    with pytest.raises(NotImplementedError, match="antialias"):
        F.interpolate(rlgrad.ones(1, 1, 2, 2), size=3, mode="bilinear", antialias=True)
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        F.interpolate(rlgrad.ones(1, 1, 2, 2))


def test_fft_refuses_a_gradient_it_cannot_give_and_autocast_is_accepted() -> None:
    x = rlgrad.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="does not differentiate through complex"):
        rlgrad.fft.rfft(x)
    with rlgrad.no_grad():
        assert rlgrad.fft.rfft(x).shape == (4, 4)
    with pytest.raises(TypeError, match="where\\(\\) takes a condition alone"):
        rlgrad.where(x > 0, x)
    with rlgrad.autocast("cpu", dtype=rlgrad.bfloat16 if hasattr(rlgrad, "bfloat16") else None):
        y = x @ x.T
    assert y.dtype == np.float64
    assert rlgrad.autocast("cpu", enabled=False)(abs) is abs
    with pytest.raises(RuntimeError, match="cuda"):
        rlgrad.autocast("cuda")

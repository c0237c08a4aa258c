"""conv2d with a batched weight under vmap (an ensemble of CNNs, a weight under per-sample
``grad``): the stacked-kernel mode of the conv primitives (``nn.functional._stacked_*``) against
its plain reference, the loop of single convolutions, and the vmap rule against the decomposed
reference (``batching._conv2d_logical``); gradients against finite differences and torch.func."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.func as rf
import rlgrad.nn.functional as F
from rlgrad import batching, nn

RNG = np.random.default_rng(7)
E, N, C, O = 3, 2, 3, 4
# (stride, padding, image size, kernel): im2col, stride 1 (offsets input gradient), strided
# (sub-pixel input gradient), and the row-folded path (8x8/4 over >= 20 output rows)
GEOMETRIES = [(1, 1, 6, 3), (2, 0, 9, 3), (2, 1, 8, 4), (4, 0, 84, 8)]


def _conv_args(size: int, k: int, shared_x: bool, broadcast_w: bool) -> tuple[Any, Any, Any]:
    x = RNG.standard_normal((N, C, size, size) if shared_x else (E, N, C, size, size))
    w = RNG.standard_normal((O, C, k, k) if broadcast_w else (E, O, C, k, k))
    b = RNG.standard_normal((E, O))
    if broadcast_w:
        w, b = np.broadcast_to(w, (E,) + w.shape), np.broadcast_to(b[0], (E, O))
    return x, w, b


def _xk(x: np.ndarray, k: int) -> np.ndarray:
    return x if x.ndim == 4 else x[k]


@pytest.mark.parametrize("shared_x,broadcast_w", [(True, False), (False, False), (False, True)])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_stacked_kernels_equal_the_loop_of_convolutions(geometry: tuple, shared_x: bool,
                                                        broadcast_w: bool) -> None:
    st, pd, size, k = geometry
    x, w, b = _conv_args(size if st != 4 else 84, k, shared_x, broadcast_w)
    y = F._conv2d_fwd(x, w, b, st, pd)
    want = np.stack([F._conv2d_fwd(_xk(x, e), w[e], b[e], st, pd) for e in range(E)])
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    g = RNG.standard_normal(y.shape)
    gx = F._conv2d_input_grad_fwd(g, w, st, pd, x.shape)
    parts = [F._conv2d_input_grad_fwd(g[e], w[e], st, pd, _xk(x, e).shape) for e in range(E)]
    np.testing.assert_allclose(gx, sum(parts) if shared_x else np.stack(parts), rtol=1e-11, atol=1e-11)
    gw = F._conv2d_weight_grad_fwd(x, g, st, pd, w.shape)
    want_w = np.stack([F._conv2d_weight_grad_fwd(_xk(x, e), g[e], st, pd, w.shape[1:])
                       for e in range(E)])
    np.testing.assert_allclose(gw, want_w, rtol=1e-11, atol=1e-11)


def test_many_small_members_batch_the_weight_gradient() -> None:
    # per-sample gradients: one image per member, so blocks of members share one batched GEMM
    x, g = RNG.standard_normal((40, 1, 2, 5, 5)), RNG.standard_normal((40, 1, 3, 3, 3))
    gw = F._conv2d_weight_grad_fwd(x, g, 1, 0, (40, 3, 2, 3, 3))
    want = np.stack([F._conv2d_weight_grad_fwd(x[e], g[e], 1, 0, (3, 2, 3, 3)) for e in range(40)])
    np.testing.assert_allclose(gw, want, rtol=1e-12, atol=1e-12)


def _reference(x: Any, w: Any, b: Any, stride: int, padding: int) -> Any:
    return batching._conv2d_logical(x, w, b, stride, padding)


@pytest.mark.parametrize("in_dims", [(None, 0, 0), (0, 0, 0), (0, 0, None), (None, 0, None)])
def test_vmap_rule_equals_the_decomposed_reference(in_dims: tuple) -> None:
    x = RNG.standard_normal((N, C, 7, 7) if in_dims[0] is None else (E, N, C, 7, 7))
    w = RNG.standard_normal((E, O, C, 3, 3))
    b = RNG.standard_normal((O,) if in_dims[2] is None else (E, O))
    args = [rlgrad.tensor(a) for a in (x, w, b)]
    got = rf.vmap(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), in_dims)(*args)
    want = rf.vmap(lambda x, w, b: _reference(x, w, b, 2, 1), in_dims)(*args)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_nested_vmap_over_kernels_takes_the_reference() -> None:
    x, w = RNG.standard_normal((N, C, 5, 5)), RNG.standard_normal((2, E, O, C, 3, 3))
    got = rf.vmap(rf.vmap(lambda w: F.conv2d(rlgrad.tensor(x), w)))(rlgrad.tensor(w))
    want = np.stack([[F._conv2d_fwd(x, w[i, e]) for e in range(E)] for i in range(2)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shared_x", [True, False])
def test_gradients_of_stacked_kernels_first_and_second_order(shared_x: bool) -> None:
    x = RNG.standard_normal((N, C, 5, 5) if shared_x else (E, N, C, 5, 5))
    dims = (None if shared_x else 0, 0, 0)

    def f(x: Any, w: Any, b: Any) -> Any:
        return rlgrad.numpy.tanh(rlgrad.vmap(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
                                             in_axes=dims)(x, w, b))

    rlgrad.check_grads(f, modes=("rev", "fwd"), order=2)(
        x, RNG.standard_normal((E, O, C, 3, 3)), RNG.standard_normal((E, O)))


def test_conv2d_refuses_a_stacked_weight_outside_vmap() -> None:
    with pytest.raises(ValueError, match=r"weight must have shape \(out, in, kh, kw\)"):
        F.conv2d(rlgrad.tensor(np.zeros((1, 2, 5, 5))), rlgrad.tensor(np.zeros((3, 4, 2, 3, 3))))


def test_ensemble_of_cnn_q_networks_matches_torch_func() -> None:
    torch = pytest.importorskip("torch")
    tf = torch.func

    def net(lib: Any) -> Any:
        return lib.nn.Sequential(lib.nn.Conv2d(2, 4, 4, stride=2), lib.nn.ReLU(),
                                 lib.nn.Conv2d(4, 5, 3, padding=1), lib.nn.ReLU(), lib.nn.Flatten(),
                                 lib.nn.Linear(5 * 4 * 4, 3))

    torch.manual_seed(3)
    tmods = [net(torch).double() for _ in range(E)]
    rmods = [net(rlgrad).double() for _ in range(E)]
    for r, t in zip(rmods, tmods):
        r.load_state_dict({k: rlgrad.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    obs = RNG.standard_normal((N, 2, 10, 10))
    tparams, tbuf = tf.stack_module_state(tmods)
    rparams, rbuf = rf.stack_module_state(rmods)

    def q(call: Any, base: Any) -> Any:
        return lambda p, b, x: call(base, (p, b), (x,))

    want = tf.vmap(q(tf.functional_call, tmods[0]), in_dims=(0, 0, None))(tparams, tbuf,
                                                                        torch.tensor(obs))
    got = rf.vmap(q(rf.functional_call, rmods[0]), in_dims=(0, 0, None))(rparams, rbuf,
                                                                        rlgrad.tensor(obs))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)
    (want ** 2).sum().backward()
    (got ** 2).sum().backward()
    for k in tparams:
        np.testing.assert_allclose(rparams[k].grad.numpy(), tparams[k].grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=k)


def test_per_sample_gradients_of_a_small_cnn_match_torch_func() -> None:
    torch = pytest.importorskip("torch")
    tf = torch.func
    w1, w2 = RNG.standard_normal((4, 2, 3, 3)), RNG.standard_normal((3, 4, 3, 3))
    x = RNG.standard_normal((6, 2, 7, 7))

    def loss(lib: Any, conv: Any) -> Any:
        return lambda p, xb: lib.tanh(conv(lib.relu(conv(xb[None], p[0], stride=2, padding=1)),
                                           p[1])).sum()

    got = rf.vmap(rf.grad(loss(rlgrad, F.conv2d)), in_dims=(None, 0))(
        (rlgrad.tensor(w1), rlgrad.tensor(w2)), rlgrad.tensor(x))
    want = tf.vmap(tf.grad(loss(torch, torch.nn.functional.conv2d)), in_dims=(None, 0))(
        (torch.tensor(w1), torch.tensor(w2)), torch.tensor(x))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


def test_module_ensemble_output_layout_reads_as_nchw() -> None:
    # the shared-input output is a view of (N, OH, OW, E, O) memory: values and shape as NCHW
    conv = nn.Conv2d(C, O, 3)
    x = RNG.standard_normal((N, C, 5, 5))
    w = np.stack([conv.weight.detach().numpy() * (e + 1) for e in range(E)])
    y = F._conv2d_fwd(x, w, None)
    assert y.shape == (E, N, O, 3, 3)
    np.testing.assert_allclose(y[1], 2 * F._conv2d_fwd(x, w[0]), rtol=1e-12)

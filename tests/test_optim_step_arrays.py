"""``Optimizer.step_arrays(grads, scale)``: the RL trainers' step from gradient arrays, the clip
factor applied inside the update. It must give the bits of ``p.grad = g * scale; step()`` on every
path: the fused C update, the NumPy flat path, and optimizers without a flat path."""

import numpy as np
import pytest

from rlgrad import optim
from rlgrad.optim import algorithms
from rlgrad.tensor import _const, tensor

SHAPES = [(6, 3), (6,), (4, 6), (1,)]
CASES = [
    (optim.Adam, {"lr": 1e-2, "eps": 1e-5}),
    (optim.Adam, {"lr": 1e-2, "amsgrad": True, "maximize": True}),
    (optim.AdamW, {"lr": 1e-2}),
    (optim.RMSprop, {"lr": 1e-2, "alpha": 0.99, "eps": 1e-5, "tf_style": True}),
    (optim.RMSprop, {"lr": 1e-2, "maximize": True}),
    (optim.SGD, {"lr": 1e-2, "momentum": 0.9}),
]


def _run(cls, kw, dtype, arrays: bool, scales):
    rng = np.random.default_rng(0)
    params = [tensor(rng.normal(size=s).astype(dtype), requires_grad=True) for s in SHAPES]
    opt = cls(params, **kw)
    for scale in scales:
        grads = [rng.normal(size=s).astype(dtype) for s in SHAPES]
        if arrays:
            opt.step_arrays(grads, scale)
        else:
            for p, g in zip(params, grads):
                p.grad = _const(g * g.dtype.type(scale) if scale != 1.0 else g)
            opt.step()
    return [p._value.copy() for p in params]


@pytest.mark.parametrize("use_fused", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cls,kw", CASES)
def test_step_arrays_gives_the_bits_of_installed_scaled_grads(cls, kw, dtype, use_fused,
                                                              monkeypatch):
    if use_fused and algorithms._fused is None:
        pytest.skip("rlgrad.optim._fused not built")
    monkeypatch.setattr(algorithms, "_fused", algorithms._fused if use_fused else None)
    scales = [1.0, 0.37, 1.0, 0.0123, 0.9, 1.0, 0.5]  # the first step builds the flat state
    got = _run(cls, kw, dtype, True, scales)
    want = _run(cls, kw, dtype, False, scales)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(got[0], _run(cls, kw, dtype, True, [1.0] * len(scales))[0])


def test_step_arrays_refuses_a_wrong_number_of_gradients():
    p = tensor(np.ones(3, dtype=np.float32), requires_grad=True)
    opt = optim.Adam([p])
    with pytest.raises(ValueError, match="2 gradients for 1 parameters"):
        opt.step_arrays([np.ones(3, np.float32)] * 2)


def test_step_arrays_after_the_group_changes_its_parameters():
    # a parameter replaced in the group (same count, same shapes): the flat state built for the
    # old one must not take the new one's step
    rng = np.random.default_rng(3)
    ps = [tensor(rng.normal(size=s).astype(np.float32), requires_grad=True) for s in SHAPES]
    opt = optim.Adam(ps, lr=0.1)
    grads = [rng.normal(size=s).astype(np.float32) for s in SHAPES]
    opt.step_arrays(grads)
    opt.step_arrays(grads)
    new = tensor(np.zeros(SHAPES[0], np.float32), requires_grad=True)
    opt.param_groups[0]["params"][0] = new
    ref = optim.Adam([tensor(np.zeros(SHAPES[0], np.float32), requires_grad=True)], lr=0.1)
    ref.param_groups[0]["params"][0].grad = _const(grads[0])
    ref.step()
    opt.step_arrays(grads)
    np.testing.assert_array_equal(new._value, ref.param_groups[0]["params"][0]._value)

"""``rlgrad.rl.steps.step_with_grads``: the trainers' optimizer step from gradient arrays. It must
give the bits of installing ``.grad`` (clipped by ``clip_grad_norm_``'s rule) and calling each
optimizer's ``step()``, and leave ``.grad`` as PyTorch's would be after that step."""

import numpy as np
import pytest

from rlgrad import optim
from rlgrad.optim import algorithms
from rlgrad.rl.steps import set_grads, step_with_grads
from rlgrad.tensor import tensor

SHAPES = [(5, 3), (5,), (2, 5), (1,)]


def _setup(seed=0):
    rng = np.random.default_rng(seed)
    params = [tensor(rng.normal(size=s).astype(np.float32), requires_grad=True) for s in SHAPES]
    # two optimizers, as SAC's actor and temperature: the gradients are split between them
    opts = [optim.Adam(params[:3], lr=1e-2), optim.Adam(params[3:], lr=3e-2)]
    return params, opts


@pytest.mark.parametrize("use_fused", [True, False])  # the C update and the NumPy fallback
@pytest.mark.parametrize("max_norm", [None, 1e3, 0.5])
def test_step_with_grads_matches_installed_grads_then_step(max_norm, use_fused, monkeypatch):
    if use_fused and algorithms._fused is None:
        pytest.skip("rlgrad.optim._fused not built")
    monkeypatch.setattr(algorithms, "_fused", algorithms._fused if use_fused else None)
    new_params, new_opts = _setup()
    ref_params, ref_opts = _setup()
    rng = np.random.default_rng(1)
    clipped = False
    for _ in range(4):
        grads = [(3 * rng.normal(size=s)).astype(np.float32) for s in SHAPES]
        total = step_with_grads(new_opts, new_params, grads, max_norm)
        want_total = set_grads(ref_params, grads, max_norm)
        for opt in ref_opts:
            opt.step()
        assert total == want_total
        clipped |= max_norm is not None and total > max_norm
        for p, r in zip(new_params, ref_params):
            np.testing.assert_array_equal(p._value, r._value)
            np.testing.assert_array_equal(p.grad._value, r.grad._value)  # the clipped gradient
    assert clipped == (max_norm == 0.5)  # the clip acts in the case meant to exercise it
    if max_norm is None:  # no clip: .grad wraps the step's arrays, no copy
        assert new_params[0].grad._value is grads[0]


def test_step_with_grads_wrong_count_raises():
    params, opts = _setup()
    grads = [np.zeros(s, np.float32) for s in SHAPES[:3]]
    with pytest.raises(ValueError, match="gradients for"):
        step_with_grads(opts, params, grads)

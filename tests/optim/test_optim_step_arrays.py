"""``Optimizer.step_arrays(grads, scale)``: the RL trainers' step from gradient arrays, the clip
factor applied inside the update: what it refuses, and a group whose parameters changed. That it
gives the bits of ``p.grad = g * scale; step()`` on every path is in
tests/engine/test_reference_paths.py."""

import numpy as np
import pytest

from rlgrad import optim
from rlgrad.tensor import _const, tensor

SHAPES = [(6, 3), (6,), (4, 6), (1,)]
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

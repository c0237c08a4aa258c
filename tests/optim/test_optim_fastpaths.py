"""The optimizers' flat fast path (one set of arrays per parameter group) and their per-parameter
path keep interchangeable states (the bits of each against the other, and against
rlgrad/optim/reference.py, are in tests/engine/test_reference_paths.py), and when each is taken."""

import numpy as np
import pytest

from rlgrad import optim
from rlgrad.nn import MLP
from rlgrad.tensor import _const


def _pair(cls, kw, dtype=np.float32):
    a, b = MLP([3, 16, 8, 2], dtype=dtype), MLP([3, 16, 8, 2], dtype=dtype)
    b.load_state_dict(a.state_dict())
    fast, ref = cls(a.parameters(), **kw), cls(b.parameters(), **kw)
    ref._flat_applies = lambda group: False  # force the per-parameter path
    return a, b, fast, ref


def _run(a, b, fast, ref, steps, rng, dtype=np.float32):
    for _ in range(steps):
        for pa, pb in zip(a.parameters(), b.parameters()):
            g = rng.normal(size=pa.shape).astype(dtype)
            pa.grad, pb.grad = _const(g.copy()), _const(g.copy())
        fast.step()
        ref.step()


def _same(a, b, fast, ref):
    for pa, pb in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(pa._value, pb._value)
    sa, sb = fast.state_dict(), ref.state_dict()
    assert sa["state"].keys() == sb["state"].keys()
    for k in sa["state"]:
        assert sa["state"][k].keys() == sb["state"][k].keys()
        for key, v in sa["state"][k].items():
            np.testing.assert_array_equal(v, sb["state"][k][key])


@pytest.mark.parametrize("cls,kw", [
    (optim.RMSprop, dict(lr=0.01)),
    (optim.RMSprop, dict(lr=0.01, alpha=0.9, eps=1e-5, tf_style=True)),
    (optim.RMSprop, dict(lr=0.01, centered=True, momentum=0.5)),
    (optim.RMSprop, dict(lr=0.01, momentum=0.9, tf_style=True, maximize=True)),
    (optim.RMSpropTFLike, dict(lr=7e-4, alpha=0.99, eps=1e-5)),
    (optim.Adam, dict(lr=0.01)),
    (optim.Adam, dict(lr=0.01, amsgrad=True, maximize=True)),
    (optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_state_saved_by_either_path_resumes_in_the_other(cls, kw, dtype):
    rng = np.random.default_rng(0)
    a, b, fast, ref = _pair(cls, kw, dtype)
    _run(a, b, fast, ref, 60, rng, dtype)  # past Adam's every-50-steps flush of tiny moments
    assert fast._flat and not ref._flat
    _same(a, b, fast, ref)
    # a state saved by either path resumes in the other, bit for bit
    fast.load_state_dict(ref.state_dict())
    ref.load_state_dict(fast.state_dict())
    _run(a, b, fast, ref, 5, rng, dtype)
    _same(a, b, fast, ref)


def test_rmsprop_weight_decay_and_missing_gradients_take_the_per_parameter_path():
    p = MLP([2, 4, 1])
    params = list(p.parameters())
    opt = optim.RMSprop(params, lr=0.01, weight_decay=0.1)
    for q in params:
        q.grad = _const(np.ones_like(q._value))
    opt.step()
    assert not opt._flat
    opt2 = optim.RMSprop(params, lr=0.01)
    params[0].grad = None
    opt2.step()
    assert not opt2._flat and opt2.state.get(params[0]) is None  # untouched without a gradient
    for q in params:
        q.grad = _const(np.ones_like(q._value))
    opt2.step()  # parameters now at different steps: still per parameter
    assert not opt2._flat
    assert {opt2.state[q]["step"] for q in params} == {1, 2}


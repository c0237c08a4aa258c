"""What a jitted function returns has eager execution's type, dtype and shape: given Tensors
(PyTorch-style code), the outputs it returns as Tensors come back as Tensors, 0-d ones included
(never a NumPy scalar); given arrays, NumPy's types (a reduction's NumPy scalar stays one); a
transform called directly in the function (``grad``, ``value_and_grad``, ``jvp``) returns arrays,
as it does at top level eagerly. Checked on the tracing call, the replays after it, the native
backend, and a step whose replayed calls (an optimizer step) make the first call return the
trace's own outputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad.tree_util import tree_flatten

X = np.array([0.5, -1.5, 2.0])


def _kind(v: Any) -> tuple:
    arr = v._value if isinstance(v, rlgrad.Tensor) else v
    return type(v), getattr(arr, "dtype", None), np.shape(arr)


def _agree(f: Callable, make: Callable[[np.ndarray], Any], backend: str = "numpy") -> None:
    """``jit(f)`` over three calls (trace, replays) returns what ``f`` returns eagerly."""
    j = rlgrad.jit(f, backend=backend)
    for scale in (1.0, 2.0, -0.5):
        x = X * scale
        want, got = tree_flatten(f(make(x)))[0], tree_flatten(j(make(x)))[0]
        assert [_kind(g) for g in got] == [_kind(w) for w in want]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(getattr(g, "_value", g)),
                                          np.asarray(getattr(w, "_value", w)))


def _tensor(x: np.ndarray) -> Any:
    return rlgrad.tensor(x)


TENSOR_PROGRAMS: dict[str, Callable] = {
    "sum (0-d)": lambda x: x.sum(),
    "float32 mean": lambda x: x.float().mean(),
    "argmax (int64 0-d)": lambda x: x.argmax(),
    "vector": lambda x: x * 2.0,
    "pair and dict": lambda x: (x.sum(), {"max": x.max(), "v": x.exp()}),
    "python number beside": lambda x: (x.shape[0], x.sum()),
    "comparison": lambda x: (x > 0).any(),
    "grad at top": rlgrad.grad(lambda x: (x * x).sum()),
    "value_and_grad inside": lambda x: rlgrad.value_and_grad(lambda x: (x * x).sum())(x),
    "jvp inside": lambda x: rlgrad.jvp(lambda x: (x * x).sum(), (x,), (x,)),
    "vmap": rlgrad.vmap(lambda x: x.sum()),
}

ARRAY_PROGRAMS: dict[str, Callable] = {
    "rnp.sum (NumPy scalar)": lambda x: rnp.sum(x),
    "element": lambda x: x[0],
    "0-d reshape": lambda x: rnp.reshape(rnp.sum(x), ()),
    "float32": lambda x: rnp.mean(x.astype(np.float32)),
    "grad": rlgrad.grad(lambda x: rnp.sum(x * x)),
    "value_and_grad": rlgrad.value_and_grad(lambda x: rnp.sum(rnp.tanh(x))),
}


@pytest.mark.parametrize("name", list(TENSOR_PROGRAMS))
def test_tensor_in_tensor_out(name: str) -> None:
    f = TENSOR_PROGRAMS[name]
    _agree(f, (lambda x: _tensor(x[None])) if name == "vmap" else _tensor)


@pytest.mark.parametrize("name", list(ARRAY_PROGRAMS))
def test_array_in_array_out(name: str) -> None:
    _agree(ARRAY_PROGRAMS[name], lambda x: x)


def test_a_0d_tensor_output_is_a_tensor_under_the_native_backend_too() -> None:
    from rlgrad.native import build
    if build.compiler() is None:
        pytest.skip("no C compiler")
    _agree(lambda x: (x * x).sum(), _tensor, backend="auto")


def test_a_training_step_returns_its_loss_as_eager_does() -> None:
    """A step with optimizer.step() inside: the first call returns the trace's outputs, the
    replays the program's; each a 0-d Tensor as eagerly, with eager's values."""
    def make() -> tuple[Any, Any]:
        rlgrad.manual_seed(0)
        net = rlgrad.nn.Linear(3, 1).double()
        return net, rlgrad.optim.SGD(net.parameters(), lr=0.1)

    def step_of(net: Any, opt: Any) -> Callable:
        def step(x: Any) -> Any:
            opt.zero_grad()
            loss = (net(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss
        return step

    eager, jitted = step_of(*make()), rlgrad.jit(step_of(*make()))
    for scale in (1.0, 2.0, 3.0):
        x = rlgrad.tensor(np.stack([X, X * scale]))
        want, got = eager(x), jitted(x)
        assert _kind(got) == _kind(want) and isinstance(got, rlgrad.Tensor) and got.shape == ()
        np.testing.assert_array_equal(got._value, want._value)

"""``rlgrad.jit`` never returns a stale result: PyTorch-style programs (wrapping arguments with
``rlgrad.tensor``, modules and distributions on wrapped inputs, in-place updates of captured
state, whole optimizer steps) give eager execution's results call after call, bit for bit, or
jit refuses them while tracing, naming the user's line.

Each program is built twice from the same seed: one copy runs eagerly, the other under jit; both
get the same five changing inputs, and their outputs and their state (parameters, gradients,
optimizer state) must be equal after every call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import nn
from rlgrad.distributions import Categorical, Normal

RNG = np.random.default_rng(0)


def _inputs(*shapes: tuple[int, ...], n: int = 5, dtype: Any = np.float32) -> list[tuple]:
    rng = np.random.default_rng(sum(map(sum, shapes)) + n)
    return [tuple(rng.standard_normal(s).astype(dtype) for s in shapes) for _ in range(n)]


def _arrays(tree: Any) -> list[np.ndarray]:
    """The leaves of an output as arrays (eager returns Tensors, jit arrays)."""
    if tree is None:
        return []
    if isinstance(tree, dict):
        return [a for k in sorted(tree) for a in _arrays(tree[k])]
    if isinstance(tree, list | tuple):
        return [a for t in tree for a in _arrays(t)]
    if isinstance(tree, rlgrad.Tensor):
        return [np.array(tree._value)]
    return [np.array(tree)]


def _assert_same(eager: list[np.ndarray], jitted: list[np.ndarray], what: str, call: int) -> None:
    assert len(eager) == len(jitted), f"{what}: {len(eager)} arrays eagerly, {len(jitted)} under jit"
    for i, (e, j) in enumerate(zip(eager, jitted)):
        assert e.shape == j.shape and e.dtype == j.dtype, f"{what} {i}, call {call}: {e} vs {j}"
        np.testing.assert_array_equal(j, e, err_msg=f"{what} {i} differs at call {call}")


Program = Callable[[], tuple[Callable[..., Any], Callable[[], Any]]]


def check_program(make: Program, inputs: list[tuple], compile_fn: Callable = rlgrad.jit) -> None:
    """``make()`` -> (step, state): two copies, one eager, one compiled, agree on every call."""
    eager_fn, eager_state = make()
    jit_src, jit_state = make()
    jitted = compile_fn(jit_src)
    _assert_same(_arrays(eager_state()), _arrays(jit_state()), "initial state", 0)
    for call, args in enumerate(inputs):
        out_e = _arrays(eager_fn(*args))
        out_j = _arrays(jitted(*args))
        _assert_same(out_e, out_j, "output", call)
        _assert_same(_arrays(eager_state()), _arrays(jit_state()), "state", call)


def pure(fn: Callable[..., Any]) -> Program:
    return lambda: (fn, lambda: None)


def _seeded_linear(n_in: int, n_out: int, seed: int = 0) -> nn.Linear:
    rlgrad.manual_seed(seed)
    return nn.Linear(n_in, n_out)


def _net_program(body: Callable[[nn.Module, Any], Any], n_in: int = 3) -> Program:
    def make() -> tuple[Callable, Callable]:
        net = _seeded_linear(n_in, 4)
        return (lambda x: body(net, x)), lambda: [p._value for p in net.parameters()]

    return make


def _grad_of_wrapped(x: np.ndarray) -> Any:
    t = rlgrad.tensor(x, requires_grad=True)
    (g,) = rlgrad.autograd.grad((t ** 3).sum(), [t])
    return g


# ---- 1. making a tensor from a traced value ----------------------------------------------------
WRAPPING: dict[str, Program] = {
    "tensor": pure(lambda x: rlgrad.tensor(x) * 2),
    "Tensor": pure(lambda x: rlgrad.Tensor(x) * 2),
    "tensor_float64": pure(lambda x: rlgrad.tensor(x, dtype=rlgrad.float64) * 2),
    "tensor_int_cast": pure(lambda x: rlgrad.tensor(x * 3, dtype=rlgrad.int64) + 1),
    "as_tensor": pure(lambda x: rlgrad.as_tensor(x) * 2),
    "as_tensor_dtype": pure(lambda x: rlgrad.as_tensor(x, dtype=rlgrad.float64) - 1),
    "from_numpy": pure(lambda x: rlgrad.from_numpy(x) * 2),
    "tensor_of_list": pure(lambda x: rlgrad.tensor([rlgrad.tensor(x)[0], rlgrad.tensor(x)[1]]) * 2),
    "float_cast": pure(lambda x: rlgrad.tensor(x).double().float() + 1),
    "to_dtype": pure(lambda x: rlgrad.tensor(x).to(rlgrad.float64) * 3),
    "type_cast": pure(lambda x: rlgrad.tensor(x).type(rlgrad.float64) * 3),
    "rnp_asarray": pure(lambda x: rlgrad.numpy.asarray(rlgrad.tensor(x)) ** 2),
    "tensor_requires_grad": pure(_grad_of_wrapped),
    "tensor_of_tensor_sum": pure(lambda x: rlgrad.tensor(rlgrad.tensor(x).sum()) * 2),
    "linear_on_wrapped": _net_program(lambda net, x: net(rlgrad.tensor(x))),
    "linear_on_Tensor": _net_program(lambda net, x: net(rlgrad.Tensor(x)).relu()),
    "categorical_log_prob": pure(
        lambda x: Categorical(logits=rlgrad.tensor(x)).log_prob(rlgrad.tensor(1))),
    "categorical_entropy": pure(lambda x: Categorical(logits=rlgrad.tensor(x)).entropy()),
    "normal_log_prob": pure(
        lambda x: Normal(rlgrad.tensor(x), 1.0).log_prob(rlgrad.tensor(x) * 0.5).sum()),
    "normal_scale_wrapped": pure(
        lambda x: Normal(0.0, rlgrad.tensor(x).exp()).log_prob(rlgrad.tensor(x))),
}


@pytest.mark.parametrize("name", sorted(WRAPPING))
def test_wrapping_a_traced_value_stays_traced(name: str) -> None:
    check_program(WRAPPING[name], _inputs((3,)))


def test_masked_logits_on_wrapped_inputs() -> None:
    def masked(logits: np.ndarray, mask: np.ndarray) -> Any:
        lg = rlgrad.tensor(logits).masked_fill(~rlgrad.tensor(mask), -1e8)
        return Categorical(logits=lg).probs

    rng = np.random.default_rng(1)
    inputs = [(rng.standard_normal(4).astype(np.float32), rng.random(4) > 0.4) for _ in range(5)]
    for _, m in inputs:
        m[0] = True  # one legal action at least
    check_program(pure(masked), inputs)

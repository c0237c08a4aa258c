"""A value saved for the backward pass and then written in place is refused, as PyTorch's version
counter refuses it, instead of a gradient computed from the new values."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import nn, optim

MODIFIED = "modified by an inplace operation"


def test_the_issue_example_raises_instead_of_zeros() -> None:
    x = rlgrad.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x.exp()
    z = (y * 3).sum()
    with rlgrad.no_grad():
        y *= 0
    with pytest.raises(RuntimeError, match=MODIFIED):
        z.backward()


@pytest.mark.parametrize("write", ["iadd", "setitem", "init", "load_state_dict"])
def test_every_in_place_api_is_seen(write: str) -> None:
    x = rlgrad.tensor(np.array([0.5, -1.0]), requires_grad=True)
    c = nn.Parameter(np.array([2.0, 3.0]), requires_grad=False)
    z = (rnp.tanh(x) * c).sum()  # the gradient w.r.t. x reads c
    if write == "iadd":
        c += 1.0
    elif write == "setitem":
        c[0] = 7.0
    elif write == "init":
        nn.init.ones_(c)
    else:
        lin = nn.Linear(2, 1)
        lin.weight.requires_grad_(False)
        z = (lin(x) * 1.5).sum()  # linear's gradient w.r.t. x reads the weight
        lin.load_state_dict({"weight": np.ones((1, 2)), "bias": np.zeros(1)})
    with pytest.raises(RuntimeError, match=MODIFIED):
        z.backward()


def test_an_optimizer_step_between_forward_and_backward_is_refused() -> None:
    # the actor-critic mistake: a loss computed, the shared weights stepped, then backward (the
    # input requires grad, as a hidden layer's output does: its gradient reads the weight; with a
    # constant input torch saves no weight and the backward runs, as rlgrad's does)
    lin = nn.Linear(3, 1)
    opt = optim.SGD(lin.parameters(), lr=0.1)
    x = rlgrad.tensor(np.ones((2, 3), dtype=np.float32), requires_grad=True)
    loss_a = (lin(x) ** 2).sum()
    loss_b = lin(x).sum()
    loss_b.backward()
    opt.step()
    with pytest.raises(RuntimeError, match=MODIFIED):
        loss_a.backward()
    opt.zero_grad()
    (lin(x) ** 2).sum().backward()  # a graph built after the step is fine


def test_writes_that_no_rule_reads_are_allowed_as_in_pytorch() -> None:
    x = rlgrad.tensor(np.array([1.0, 2.0]), requires_grad=True)
    c = rlgrad.tensor(np.array([5.0, 5.0]))
    z = (x + c).sum()  # add passes its gradient through: c's value is never read
    c += 1.0
    z.backward()
    np.testing.assert_array_equal(x.grad._value, [1.0, 1.0])


def test_create_graph_backward_checks_too_and_unwritten_graphs_pass() -> None:
    x = rlgrad.tensor(np.array([0.3, 0.7]), requires_grad=True)
    c = rlgrad.tensor(np.array([2.0, 3.0]))
    z = (x * x * c).sum()
    (g,) = rlgrad.autograd.grad(z, [x], create_graph=True)
    np.testing.assert_allclose(g._value, 2 * x._value * c._value)
    z2 = (x * c).sum()
    c[1] = 0.0
    with pytest.raises(RuntimeError, match=MODIFIED):
        rlgrad.autograd.grad(z2, [x], create_graph=True)

"""Every primitive of ``rlgrad/ops.py``, and the compositions of ``rlgrad.numpy`` built on them,
grad-checked at first and second order in float64 over shapes drawn by hypothesis.

The table ``ROWS`` (tests/helpers/op_rows.py) has one row per operation: a name and a hypothesis
strategy drawing a ``Case(fn, args)``. For a primitive the row's name is the primitive's
``name`` and the test also checks that the case really records it. Adding a primitive to ops.py?
Add one row to that table.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers.op_rows import MAX_EXAMPLES, ROWS, SETTINGS, Row, recorded
from hypothesis import given, settings
from hypothesis import strategies as st

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import ops, tracer
from rlgrad.tensor import Tensor

# Primitives whose output never carries a gradient (comparisons, argmax, integer arithmetic):
# ``primitive(..., nondiff=True)``.  They are exempt from the table and tested below instead.
NONDIFF = {
    "greater",
    "greater_equal",
    "less",
    "less_equal",
    "equal",
    "not_equal",
    "logical_and",
    "logical_or",
    "logical_not",
    "isfinite",
    "isnan",
    "isinf",
    "argmax",
    "argmin",
    "argsort",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "invert",
    "floor_divide",
    "astype",  # the cast to an integer or boolean dtype (the float cast is differentiable)
    "stop_gradient",
}


def _primitives() -> list[Any]:
    """Every primitive reachable as a module-level callable of rlgrad.ops."""
    found = {}
    for attr in dir(ops):
        fn = getattr(ops, attr)
        p = getattr(fn, "primitive", None)
        if callable(fn) and p is not None:
            found[id(p)] = p
    return list(found.values())


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
@SETTINGS
@given(data=st.data())
def test_grads_first_and_second_order(row: Row, data: st.DataObject) -> None:
    case = data.draw(row.cases, label="case")
    for a in case.args:
        assert a.dtype == np.float64
    # Plain NumPy in, plain NumPy out: the forward on arrays is untraced.
    plain = case.fn(*case.args)
    assert not isinstance(plain, Tensor)
    if row.primitive:  # the row exercises the primitive it is named after
        out = case.fn(*(rlgrad.tensor(a, requires_grad=True) for a in case.args))
        assert row.name in recorded(out), f"row {row.name!r} does not record primitive {row.name!r}"
        np.testing.assert_allclose(out._value, plain, rtol=1e-12, atol=1e-12)
    rlgrad.check_grads(case.fn, order=row.order)(*case.args)


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
@settings(SETTINGS, max_examples=max(MAX_EXAMPLES // 5, 3))
@given(data=st.data())
def test_grads_third_order(row: Row, data: st.DataObject) -> None:
    """Every rule is written with differentiable operations, so any order works: spot-check 3,
    in reverse mode and in forward mode (make_jvp), and their mixtures (HIPS autograd's modes)."""
    case = data.draw(row.cases, label="case")
    rlgrad.check_grads(case.fn, modes=("fwd", "rev"), order=3)(*case.args)


def test_power_at_zero() -> None:
    """x ** 0 and the derivatives of x ** n beyond the n-th are 0 at x = 0, not nan (torch and
    autograd mask the exponent-0 case the same way)."""
    g = rlgrad.grad
    assert g(lambda x: x**0)(0.0) == 0.0
    assert g(lambda x: x**1.0)(0.0) == 1.0
    assert g(g(lambda x: x**1))(0.0) == 0.0
    assert g(g(g(lambda x: x**2)))(0.0) == 0.0
    assert g(g(g(lambda x: x**3)))(0.0) == 6.0
    exps = np.array([0.0, 1.0, 2.0])
    np.testing.assert_array_equal(rlgrad.grad(lambda x: rnp.sum(x**exps))(np.zeros(3)), [0, 1, 0])
    h = rlgrad.hessian(lambda x: rnp.sum(x**exps))(np.zeros(3))
    np.testing.assert_array_equal(h, np.diag([0.0, 0.0, 2.0]))


def test_every_primitive_has_a_row() -> None:
    """Coverage cannot rot: a new differentiable primitive in ops.py needs a row in ROWS."""
    prims = _primitives()
    covered = {r.name for r in ROWS if r.primitive}
    differentiable = {p.name for p in prims if not p.nondiff}
    missing = sorted(differentiable - covered)
    assert not missing, f"differentiable primitives in rlgrad/ops.py with no row in ROWS: {missing}"
    unknown = sorted(covered - differentiable)
    assert not unknown, f"rows naming no differentiable primitive of rlgrad/ops.py: {unknown}"


def test_every_differentiable_primitive_has_rules() -> None:
    for p in _primitives():
        if p.nondiff:
            continue
        assert p.vjps is not None or p.vjp_argnum is not None, f"primitive {p.name} has no VJP rule"


NONDIFF_CALLS = {
    "greater": lambda x: ops.greater(x, 0.0),
    "greater_equal": lambda x: ops.greater_equal(x, 0.0),
    "less": lambda x: ops.less(x, 0.0),
    "less_equal": lambda x: ops.less_equal(x, 0.0),
    "equal": lambda x: ops.equal(x, 0.5),
    "not_equal": lambda x: ops.not_equal(x, 0.5),
    "logical_and": lambda x: ops.logical_and(x, x),
    "logical_or": lambda x: ops.logical_or(x, x),
    "logical_not": lambda x: ops.logical_not(x),
    "isfinite": lambda x: ops.isfinite(x),
    "isnan": lambda x: ops.isnan(x),
    "isinf": lambda x: ops.isinf(x),
    "argmax": lambda x: ops.argmax(x),
    "argmin": lambda x: ops.argmin(x, axis=0),
    "argsort": lambda x: ops.argsort(x),
    "floor_divide": lambda x: ops.floor_divide(x, 2.0),
    "bitwise_and": lambda x: ops.bitwise_and(ops.greater(x, 0), True),
    "bitwise_or": lambda x: ops.bitwise_or(ops.greater(x, 0), False),
    "bitwise_xor": lambda x: ops.bitwise_xor(ops.greater(x, 0), True),
    "invert": lambda x: ops.invert(ops.greater(x, 0)),
    "astype": lambda x: ops.astype(x, np.int64),
    "stop_gradient": lambda x: ops.stop_gradient(x),
}


def test_nondiff_table_is_complete() -> None:
    """Every non-differentiable primitive is listed, and tested to give constants below."""
    nondiff = {p.name for p in _primitives() if p.nondiff}
    assert nondiff == NONDIFF, (
        f"unlisted: {sorted(nondiff - NONDIFF)}, listed but gone: {sorted(NONDIFF - nondiff)}"
    )
    assert set(NONDIFF_CALLS) == NONDIFF


@pytest.mark.parametrize("name", sorted(NONDIFF_CALLS))
def test_nondiff_primitives_give_constants(name: str) -> None:
    """Comparisons, argmax and friends: results never require grad, even from inputs that do."""
    x = rlgrad.tensor(np.array([-1.5, 0.5, 2.5]), requires_grad=True)
    out = NONDIFF_CALLS[name](x)
    assert isinstance(out, Tensor)
    assert not out.requires_grad
    assert out.grad_fn is None
    expected = NONDIFF_CALLS[name](x._value)
    np.testing.assert_array_equal(out._value, expected)


# ---------------------------------------------------------------------------------------------
# The checkers themselves catch wrong gradients (at the order they claim)
# ---------------------------------------------------------------------------------------------
def _bad_primitives() -> tuple[Any, Any]:
    wrong = rlgrad.primitive(np.sin, "wrong_sin", arity=1)
    rlgrad.defvjp(wrong, lambda g, ans, x: g * ops.cos(x) * 1.01)  # 1% off at first order

    def frozen_rule(g: Any, ans: Any, x: Any) -> Any:  # right values, but not differentiable:
        raw = x._value if isinstance(x, Tensor) else x  # cos(x) is a constant to the next order
        return g * np.cos(raw)

    frozen = rlgrad.primitive(np.sin, "frozen_sin", arity=1)
    rlgrad.defvjp(frozen, frozen_rule)
    for p in (wrong, frozen):  # the same (bad) rules in forward mode
        tracer.defjvp_elementwise(p)
    return wrong, frozen


def test_check_grads_catches_wrong_gradients() -> None:
    wrong, frozen = _bad_primitives()
    x = np.array([0.3, -1.2, 2.0])
    with pytest.raises(AssertionError, match="VJP check failed"):
        rlgrad.check_grads(wrong, order=1)(x)
    rlgrad.check_grads(frozen, order=1)(x)  # first order is right
    with pytest.raises(AssertionError, match="VJP check failed"):
        rlgrad.check_grads(frozen, order=2)(x)
    rlgrad.check_grads(ops.sin, order=3)(x)


def test_check_grads_forward_mode_and_modes_argument() -> None:
    wrong, frozen = _bad_primitives()
    x = np.array([0.3, -1.2, 2.0])
    with pytest.raises(AssertionError, match="JVP check failed"):
        rlgrad.check_grads(wrong, modes=["fwd"], order=1)(x)
    with pytest.raises(AssertionError, match="check failed"):
        rlgrad.check_grads(frozen, modes=["fwd"], order=2)(x)
    rlgrad.check_grads(lambda x: rnp.tanh(x) * rnp.sum(x ** 2), modes=["fwd", "rev"], order=2)(x)
    with pytest.raises(ValueError, match="fwd"):
        rlgrad.check_grads(ops.sin, modes=["bwd"])(x)


def test_torch_style_gradcheck() -> None:
    wrong, _ = _bad_primitives()
    x = rlgrad.tensor(np.array([0.3, -1.2, 2.0]), requires_grad=True)
    w = rlgrad.tensor(np.array([[0.5, 1.0, -2.0]]), requires_grad=True)
    assert rlgrad.gradcheck(lambda x, w: rnp.tanh(w * x) @ x, (x, w))
    assert rlgrad.gradcheck(lambda x: (x.exp(), x**2), x)  # several outputs
    with pytest.raises(AssertionError, match="Jacobian mismatch"):
        rlgrad.gradcheck(wrong, x)
    assert rlgrad.gradcheck(wrong, x, raise_exception=False) is False


def test_torch_style_gradcheck_cannot_pass_without_a_gradient() -> None:
    x = rlgrad.tensor(np.array([0.3, -1.2, 2.0]), requires_grad=True)
    # an output cut off from the graph whose value does depend on x: a lost dependence
    with pytest.raises(AssertionError, match="does not require grad"):
        rlgrad.gradcheck(lambda x: rlgrad.tensor(np.exp(x._value)), x)
    assert rlgrad.gradcheck(lambda x: rlgrad.tensor(np.exp(x._value)), x,
                            raise_exception=False) is False
    assert rlgrad.gradcheck(lambda x: (x * 0.0).detach() + 1.0, x)  # truly constant: zero Jacobian
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        rlgrad.gradcheck(lambda x: x.exp(), rlgrad.tensor(np.array([1.0])))

"""Bad input gets a clear error: every case of issue #2's list, asserted by type and message."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import autograd


def leaf(values: Any, dtype: Any = np.float64) -> rlgrad.Tensor:
    return rlgrad.tensor(np.asarray(values, dtype=dtype), requires_grad=True)


# ---------------------------------------------------------------------------------------------
# The gradient of an integer or boolean tensor: an error that names it
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.bool_])
def test_integer_or_bool_tensor_cannot_require_grad(dtype: Any) -> None:
    name = np.dtype(dtype).name
    with pytest.raises(TypeError, match=rf"floating-point.*{name} with shape \(2, 3\)"):
        rlgrad.tensor(np.zeros((2, 3), dtype=dtype), requires_grad=True)
    t = rlgrad.tensor(np.zeros((2, 3), dtype=dtype))
    with pytest.raises(TypeError, match=rf"{name} with shape \(2, 3\)"):
        t.requires_grad_(True)


def test_autograd_grad_wrt_integer_tensor_names_it() -> None:
    x = leaf([1.0, 2.0])
    actions = rlgrad.tensor(np.array([0, 1]))
    y = (x * 2).sum()
    with pytest.raises(TypeError, match=r"input 1 is an integer/boolean tensor \(int64, shape \(2,\)\)"):
        autograd.grad(y, [x, actions])
    mask = rlgrad.tensor(np.array([True, False]))
    with pytest.raises(TypeError, match=r"input 0 .*\(bool, shape \(2,\)\)"):
        autograd.grad(y, [mask])


def test_functional_grad_wrt_integer_names_it() -> None:
    with pytest.raises(TypeError, match=r"floating-point.*int64 \(value 3\)"):
        rlgrad.grad(lambda x: x * 2.0)(3)
    with pytest.raises(TypeError, match=r"floating-point.*bool"):
        rlgrad.grad(lambda x: rnp.sum(x * 2.0))(np.array([True, False]))
    with pytest.raises(TypeError, match=r"int64"):
        rlgrad.grad(lambda p: rnp.sum(p["w"] * 2.0))({"w": np.arange(3)})


def test_index_tensor_requiring_grad_is_refused() -> None:
    x = leaf([1.0, 2.0])
    with pytest.raises(TypeError, match="index"):
        x[leaf([0.0])]


# ---------------------------------------------------------------------------------------------
# backward() on a non-scalar without gradient: says so and shows the shape
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3,), (2, 2), (1, 2)])
def test_backward_on_non_scalar_without_gradient(shape: tuple[int, ...]) -> None:
    x = leaf(np.ones(shape))
    y = x * 2
    with pytest.raises(RuntimeError, match=rf"only for scalar outputs.*shape {re_shape(shape)}"):
        y.backward()
    with pytest.raises(RuntimeError, match=rf"only for scalar outputs.*shape {re_shape(shape)}"):
        autograd.grad(y, x)


def re_shape(shape: tuple[int, ...]) -> str:
    import re

    return re.escape(str(shape))


# ---------------------------------------------------------------------------------------------
# An output that depends on no tensor requiring grad: torch's message plus a hint
# ---------------------------------------------------------------------------------------------
HINT_WORDS = ["detach", "sample", "no_grad", "argmax", "integer"]


def _no_grad_outputs() -> dict[str, Any]:
    x = leaf([1.0, 2.0, 3.0])
    with rlgrad.no_grad():
        under_no_grad = (x * 2).sum()
    return {
        "detach": (x.detach() * 2).sum(),
        "stop_gradient": rlgrad.stop_gradient(x * 2).sum(),
        "no_grad": under_no_grad,
        "argmax": rnp.argmax(x) * 1.0,
        "integer cast": x.long().sum(),
        "comparison": (x > 1).sum(),
        "constant": rlgrad.tensor([1.0, 2.0]).sum(),
    }


@pytest.mark.parametrize("case", sorted(_no_grad_outputs()))
def test_output_that_does_not_require_grad(case: str) -> None:
    out = _no_grad_outputs()[case]
    assert not out.requires_grad
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad") as info:
        out.backward()
    for word in HINT_WORDS:
        assert word in str(info.value), f"the hint does not mention {word!r}: {info.value}"
    x = leaf([1.0])
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        autograd.grad(out, x)


def test_second_output_that_does_not_require_grad_is_named() -> None:
    x = leaf([1.0, 2.0])
    a = (x * 2).sum()
    b = (x.detach() * 2).sum()
    with pytest.raises(RuntimeError, match="element 1 of tensors does not require grad"):
        autograd.grad([a, b], x)


def test_grad_input_that_does_not_require_grad() -> None:
    x = leaf([1.0])
    c = rlgrad.tensor(np.array([2.0]))
    with pytest.raises(RuntimeError, match=r"input 1 \(shape \(1,\)\) does not require grad"):
        autograd.grad((x * c).sum(), [x, c])


# ---------------------------------------------------------------------------------------------
# allow_unused=False with an unused input: names which input
# ---------------------------------------------------------------------------------------------
def test_unused_input_is_named() -> None:
    x, unused, w = leaf([1.0]), leaf([[2.0, 3.0]]), leaf([4.0])
    y = (x * w).sum()
    with pytest.raises(RuntimeError, match=r"input 1 \(shape \(1, 2\)\) was not used.*allow_unused=True"):
        autograd.grad(y, [x, unused, w])


def test_input_cut_off_by_detach_counts_as_unused() -> None:
    x = leaf([1.0, 2.0])
    w = leaf([3.0, 4.0])
    y = (x.detach() * w).sum()
    with pytest.raises(RuntimeError, match=r"input 0 .*not used"):
        autograd.grad(y, [x, w])
    gx, gw = autograd.grad((x.detach() * w).sum(), [x, w], allow_unused=True)
    assert gx is None


# ---------------------------------------------------------------------------------------------
# A second backward through a freed graph without retain_graph: a clear error
# ---------------------------------------------------------------------------------------------
FREED = r"backward through the graph a second time.*retain_graph=True"


def test_second_backward_raises() -> None:
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=FREED):
        y.backward()


def test_second_autograd_grad_raises() -> None:
    x = leaf([1.0, 2.0])
    y = (x.exp() * x).sum()
    autograd.grad(y, x)
    with pytest.raises(RuntimeError, match=FREED):
        autograd.grad(y, x)
    with pytest.raises(RuntimeError, match=FREED):
        y.backward()


def test_new_output_through_a_freed_part_of_the_graph_raises() -> None:
    """A new loss that reuses a freed intermediate must not silently lose that path."""
    x = leaf([1.0, 2.0])
    h = x.exp()
    h.sum().backward()
    z = (h * x).sum()  # the path through h was freed by the first backward
    with pytest.raises(RuntimeError, match=FREED):
        autograd.grad(z, x)
    z = (h * x).sum()
    with pytest.raises(RuntimeError, match=FREED):
        z.backward()


def test_retain_graph_then_free() -> None:
    x = leaf([1.0, 2.0])
    y = (x ** 2).sum()
    y.backward(retain_graph=True)
    y.backward()  # allowed: the graph was retained by the first call
    with pytest.raises(RuntimeError, match=FREED):
        y.backward()
    np.testing.assert_allclose(x.grad._value, 4 * x._value)


def test_error_names_the_operation() -> None:
    x = leaf([1.0, 2.0])
    y = rnp.tanh(x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=r"through (sum|tanh)"):
        y.backward()


# ---------------------------------------------------------------------------------------------
# grad_outputs / gradient of the wrong shape: an error showing both shapes
# ---------------------------------------------------------------------------------------------
def test_backward_gradient_of_wrong_shape() -> None:
    x = leaf(np.ones((2, 3)))
    y = x * 2
    with pytest.raises(RuntimeError, match=r"\(3, 2\).*\(2, 3\)"):
        y.backward(np.ones((3, 2)))
    with pytest.raises(RuntimeError, match=r"\(6,\).*\(2, 3\)"):
        y.backward(rlgrad.tensor(np.ones(6)))
    with pytest.raises(RuntimeError, match=r"\(2, 3, 1\).*\(2, 3\)"):
        y.backward(np.ones((2, 3, 1)))  # broadcastable is not enough


def test_grad_outputs_of_wrong_shape() -> None:
    x = leaf([1.0, 2.0, 3.0])
    y = x ** 2
    with pytest.raises(RuntimeError, match=r"\(2,\).*\(3,\)"):
        autograd.grad(y, x, grad_outputs=np.ones(2))
    with pytest.raises(RuntimeError, match=r"\(\).*\(3,\)"):
        autograd.grad(y, x, grad_outputs=np.float64(1.0))
    s = (x ** 2).sum()
    with pytest.raises(RuntimeError, match=r"\(3,\).*\(\)"):
        autograd.grad(s, x, grad_outputs=np.ones(3))


def test_grad_outputs_of_wrong_count() -> None:
    x = leaf([1.0, 2.0])
    a, b = (x * 2).sum(), (x * 3).sum()
    with pytest.raises(ValueError, match="1 gradients for 2 outputs"):
        autograd.grad([a, b], x, grad_outputs=[np.array(1.0)])


def test_functional_cotangent_of_wrong_shape() -> None:
    _, vjp_fn = rlgrad.vjp(lambda x: x * 2, np.ones(3))
    with pytest.raises(ValueError, match=r"\(2, 2\).*\(3,\)"):
        vjp_fn(np.ones((2, 2)))
    vjp_fn2, _ = rlgrad.make_vjp(lambda x: rnp.sum(x))(np.ones(3))
    with pytest.raises(ValueError, match=r"\(3,\).*\(\)"):
        vjp_fn2(np.ones(3))


# ---------------------------------------------------------------------------------------------
# Other ways a gradient could silently be dropped
# ---------------------------------------------------------------------------------------------
def test_conversions_that_would_drop_a_gradient() -> None:
    x = leaf([1.0, 2.0])
    with pytest.raises(TypeError, match="silently drop"):
        np.asarray(x)
    with pytest.raises(RuntimeError, match=r"numpy\(\).*detach"):
        x.numpy()
    with pytest.raises(TypeError, match=r"numpy\.median has no differentiable"):
        np.median(x)
    with pytest.raises(RuntimeError, match="in-place"):
        x[0] = 1.0
    with pytest.raises(RuntimeError, match="leaf"):
        (x * 2).requires_grad_(False)

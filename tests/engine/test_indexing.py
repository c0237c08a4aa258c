"""Indexing family: values and gradients against hand-computed scatter-adds (duplicates included),
PyTorch / TensorFlow / NumPy semantics, non-differentiable indices and bounds errors."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import Tensor, autograd, tensor
from rlgrad.indexing import (
    gather,
    gather_nd,
    one_hot,
    put_along_axis,
    scatter_add,
    take_along_axis,
    torch_index_steps,
)

RNG = np.random.default_rng(1234)


def leaf(a: np.ndarray) -> Tensor:
    return tensor(np.array(a, dtype=np.float64), requires_grad=True)


def scatter_ref(shape: tuple[int, ...], index_fn, g: np.ndarray) -> np.ndarray:
    """The adjoint of any selection, computed independently: select the *positions* with the same
    index, then sum the upstream gradient per position with bincount."""
    pos = np.arange(int(np.prod(shape))).reshape(shape)
    sel = np.asarray(index_fn(pos))
    flat = np.bincount(sel.ravel(), weights=np.broadcast_to(g, sel.shape).ravel(),
                       minlength=pos.size)
    return flat.reshape(shape)


def backward_grad(x: Tensor, out: Tensor, g: np.ndarray) -> np.ndarray:
    x.grad = None
    out.backward(g)
    return x.grad._value


# ---- x[idx]: every kind of index ----------------------------------------------------------------
A = np.arange(3 * 4 * 5, dtype=np.float64).reshape(3, 4, 5) / 7.0
IDX = {
    "int": 1,
    "negative int": -1,
    "slice": slice(1, None),
    "step slice": (slice(None), slice(None, None, 2)),
    "ellipsis": (Ellipsis, 2),
    "none": (None, 1, Ellipsis, None),
    "int + slice": (2, slice(1, 3)),
    "bool mask": A > 3.0,
    "bool row mask": np.array([True, False, True]),
    "bool list": [True, False, True],
    "int array": np.array([0, 2, 2, 0, 0]),
    "int list": [2, 2, 1],
    "negative array": np.array([-1, -3, -1]),
    "empty list": [],
    "0-d array": np.array(1),
    "two arrays": (np.array([0, 2, 2, 1]), np.array([3, 3, 3, 0])),
    "three arrays": (np.array([0, 0, 2]), np.array([1, 1, 3]), np.array([4, 4, 0])),
    "broadcast arrays": (np.array([[0], [2]]), np.array([1, 1, 3])),
    "int + array": (1, np.array([0, 0, 3])),
    "array + slice": (np.array([2, 0, 2]), slice(1, 3)),
    "slice + array": (slice(None), np.array([1, 1, 0])),
    "arrays split by slice": (np.array([0, 2, 2]), slice(None), np.array([4, 4, 1])),
    "ellipsis + array": (Ellipsis, np.array([4, 4, 0])),
    "none + arrays": (None, np.array([1, 1]), np.array([2, 2])),
    "mask + array": (np.array([True, False, True]), np.array([3, 3])),
    "arrays + ellipsis": (np.array([1, 1]), np.array([2, 2]), Ellipsis),
}


@pytest.mark.parametrize("name", list(IDX))
def test_getitem_value_and_scatter_add_gradient(name: str) -> None:
    idx = IDX[name]
    x = leaf(A)
    out = x[idx]
    np.testing.assert_array_equal(out._value, A[idx])
    g = RNG.standard_normal(out.shape)
    want = scatter_ref(A.shape, lambda p: p[idx], g)
    np.testing.assert_allclose(backward_grad(x, out, g), want, rtol=1e-12, atol=1e-12)


@st.composite
def shapes_and_indices(draw):  # noqa: ANN201 - a hypothesis strategy
    """A shape and an index mixing ints, slices, integer arrays (sharing one broadcast shape,
    repeats and negatives included), None and Ellipsis, or a boolean mask."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    if draw(st.integers(0, 9)) == 0:
        return shape, np.array(draw(st.lists(st.booleans(), min_size=int(np.prod(shape)),
                                             max_size=int(np.prod(shape))))).reshape(shape)
    arr_len = draw(st.integers(0, 5))
    parts: list = []
    for n in shape:
        kind = draw(st.sampled_from(["int", "slice", "array", "array", "skip"]))
        if kind == "int":
            parts.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            lo, hi = draw(st.integers(-n, n)), draw(st.integers(-n, n))
            parts.append(slice(lo, hi, draw(st.sampled_from([None, 1, 2, -1]))))
        elif kind == "array":
            parts.append(np.array(draw(st.lists(st.integers(-n, n - 1), min_size=arr_len,
                                                max_size=arr_len)), dtype=np.int64))
        else:
            parts.append(slice(None))
    if draw(st.booleans()):
        parts.insert(draw(st.integers(0, len(parts))), None)
    if draw(st.booleans()):  # an Ellipsis standing for the trailing axes
        parts = parts[:draw(st.integers(0, len(parts)))] + [Ellipsis]
    return shape, tuple(parts)


def torch_select(p: np.ndarray, idx) -> np.ndarray:
    """``p[idx]`` as torch indexes (torch itself): where integers and arrays stand apart in the
    index torch selects with the integers first (NumPy moves the broadcast dimensions first)."""
    torch = pytest.importorskip("torch")
    key = tuple(torch.from_numpy(i) if isinstance(i, np.ndarray) else i for i in idx)
    return torch.from_numpy(np.ascontiguousarray(p))[key].numpy()


@settings(max_examples=150, deadline=None)
@given(shapes_and_indices(), st.sampled_from([np.float64, np.float32]))
def test_getitem_property_matches_torch_and_scatter_add(case, dtype) -> None:
    """NumPy's result where torch's rule agrees with it, torch's own where it does not."""
    shape, idx = case
    select = lambda p: p[idx]  # noqa: E731
    if isinstance(idx, tuple) and torch_index_steps(idx) is not None:
        assume(all(not isinstance(i, slice) or (i.step or 1) > 0 for i in idx))  # torch: no -1
        select = lambda p: torch_select(p, idx)  # noqa: E731
    a = np.arange(1.0, np.prod(shape) + 1).reshape(shape).astype(dtype)
    x = tensor(a, requires_grad=True)
    out = x[idx]
    np.testing.assert_array_equal(out._value, select(a))
    assert out.dtype == dtype
    g = np.linspace(-1.0, 2.0, out._value.size).reshape(out.shape).astype(dtype)
    want = scatter_ref(shape, select, g)
    # repeated indices add several values: in float32 their sum can cancel to rounding noise, so
    # the order of accumulation shows at the scale of float32's epsilon, not relative to ~0
    atol = 1e-6 if dtype == np.float32 else 0.0
    np.testing.assert_allclose(backward_grad(x, out, g), want, rtol=1e-6, atol=atol)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_take_along_axis_property_matches_numpy(data) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    ax = axis % len(shape)
    ishape = tuple(data.draw(st.integers(0, 5)) if k == ax else
                   data.draw(st.sampled_from([1, n])) for k, n in enumerate(shape))
    idx = np.array(data.draw(st.lists(st.integers(-shape[ax], shape[ax] - 1),
                                      min_size=int(np.prod(ishape)),
                                      max_size=int(np.prod(ishape))))).reshape(ishape)
    idx = idx.astype(np.int64)
    a = np.arange(1.0, np.prod(shape) + 1).reshape(shape)
    x = leaf(a)
    out = rnp.take_along_axis(x, idx, axis)
    np.testing.assert_array_equal(out._value, np.take_along_axis(a, idx, axis))
    g = np.linspace(-1.0, 2.0, out._value.size).reshape(out.shape)
    want = scatter_ref(shape, lambda p: np.take_along_axis(p, idx, axis), g)
    np.testing.assert_allclose(backward_grad(x, out, g), want, rtol=1e-12)


def test_getitem_duplicates_accumulate_hand_computed() -> None:
    x = leaf(np.zeros((2, 3)))
    out = x[[0, 0, 1, 0], [2, 2, 1, 2]]  # x[0, 2] three times, x[1, 1] once
    out.backward(np.array([1.0, 10.0, 100.0, 1000.0]))
    np.testing.assert_array_equal(x.grad._value, [[0, 0, 1011.0], [0, 100.0, 0]])


def test_getitem_duplicate_rows_with_trailing_axis() -> None:
    x = leaf(np.zeros((3, 2)))
    out = x[np.array([2, 0, 2])]
    out.backward(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    np.testing.assert_array_equal(x.grad._value, [[3.0, 4.0], [0, 0], [6.0, 8.0]])


def test_getitem_index_tensor_and_float32_kept() -> None:
    x = tensor(np.ones((4, 3), dtype=np.float32), requires_grad=True)
    rows, acts = tensor(np.arange(4)), tensor(np.array([2, 2, 0, 1]))
    out = x[rows, acts]
    assert out.dtype == np.float32
    out.sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_array_equal(x.grad._value, np.eye(3, dtype=np.float32)[[2, 2, 0, 1]])


def test_getitem_out_of_range_names_index_and_shape() -> None:
    x = leaf(np.zeros((4, 18)))
    with pytest.raises(IndexError, match=r"index 18 .*size 18.*\(4, 18\)"):
        x[np.arange(4), np.array([0, 18, 1, 2])]
    with pytest.raises(IndexError, match=r"index -19 .*\(4, 18\)"):
        x[np.arange(4), np.array([0, -19, 1, 2])]
    with pytest.raises(IndexError, match=r"index 7 .*\(4, 18\)"):
        x[np.array([0, 7])]
    with pytest.raises(IndexError, match=r"\(4, 18\)"):
        x[4]


def test_getitem_second_order_check_grads() -> None:
    idx = (np.array([0, 2, 2, 1]), np.array([3, 3, 3, 0]))
    w = RNG.standard_normal(4)

    def f(a: np.ndarray) -> np.ndarray:
        return rnp.sum(rnp.sin(a[idx]) * w) + rnp.sum(a[1:, ::2] ** 3)

    rlgrad.check_grads(f, order=2)(RNG.standard_normal((3, 4)))


def test_getitem_create_graph_roundtrip() -> None:
    # d/dx of sum(g(x)) where g = grad of sum(x[idx]**3): exercises untake's own gradient.
    x = leaf(RNG.standard_normal((3, 4)))
    idx = (np.array([0, 0, 2]), np.array([1, 1, 3]))
    (gx,) = autograd.grad((x[idx] ** 3).sum(), x, create_graph=True)
    (hx,) = autograd.grad((gx * gx).sum(), x)
    # gx = scatter(3 x[idx]^2): x[0,1] counted twice -> gx[0,1] = 6 x01^2, gx[2,3] = 3 x23^2
    want = np.zeros((3, 4))
    want[0, 1] = 2 * (6 * x._value[0, 1] ** 2) * 12 * x._value[0, 1]
    want[2, 3] = 2 * (3 * x._value[2, 3] ** 2) * 6 * x._value[2, 3]
    np.testing.assert_allclose(hx._value, want, rtol=1e-12)


# ---- rlgrad.numpy.take --------------------------------------------------------------------------
def test_take_flat_and_axis() -> None:
    x = leaf(A[0])  # (4, 5)
    out = rnp.take(x, np.array([19, 0, 0, -1]))
    np.testing.assert_array_equal(out._value, np.take(A[0], [19, 0, 0, -1]))
    g = np.array([1.0, 2.0, 3.0, 4.0])
    want = np.zeros(20)
    np.add.at(want, [19, 0, 0, 19], g)
    np.testing.assert_array_equal(backward_grad(x, out, g), want.reshape(4, 5))
    out = rnp.take(x, np.array([[4, 4], [0, 2]]), axis=1)
    np.testing.assert_array_equal(out._value, np.take(A[0], [[4, 4], [0, 2]], axis=1))
    g = RNG.standard_normal(out.shape)
    want = scatter_ref((4, 5), lambda p: np.take(p, [[4, 4], [0, 2]], axis=1), g)
    np.testing.assert_allclose(backward_grad(x, out, g), want, rtol=1e-12)
    with pytest.raises(IndexError, match=r"index 20 .*\(4, 5\)"):
        rnp.take(x, np.array([20]))
    with pytest.raises(IndexError, match=r"index 5 .*\(4, 5\)"):
        rnp.take(x, np.array([5]), axis=1)


# ---- take_along_axis ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shape", "ishape", "axis"),
    [
        ((6, 4), (6, 1), 1),      # one action per row
        ((6, 4), (6, 5), 1),      # several per row, repeats
        ((6, 4), (3, 4), 0),
        ((2, 3, 4), (2, 3, 2), -1),
        ((2, 3, 4), (2, 5, 4), 1),
        ((6, 4), (1, 3), 1),      # indices broadcast over rows
        ((1, 4), (5, 2), 1),      # input broadcast over rows
        ((2, 1, 4), (2, 3, 1), 2),
    ],
)
def test_take_along_axis_matches_numpy_and_scatter_add(shape, ishape, axis) -> None:
    a = RNG.standard_normal(shape)
    idx = RNG.integers(-shape[axis], shape[axis], ishape)
    x = leaf(a)
    for fn in (rnp.take_along_axis, take_along_axis):
        out = fn(x, idx, axis)
        np.testing.assert_array_equal(out._value, np.take_along_axis(a, idx, axis))
        g = RNG.standard_normal(out.shape)
        want = scatter_ref(shape, lambda p: np.take_along_axis(p, idx, axis), g)
        np.testing.assert_allclose(backward_grad(x, out, g), want, rtol=1e-12, atol=1e-12)


def test_take_along_axis_axis_none_and_plain_arrays() -> None:
    a = RNG.standard_normal((3, 4))
    idx = np.array([11, 0, 0])
    x = leaf(a)
    out = rnp.take_along_axis(x, idx, None)
    np.testing.assert_array_equal(out._value, np.take_along_axis(a, idx, None))
    want = np.zeros(12)
    np.add.at(want, idx, 1.0)
    np.testing.assert_array_equal(backward_grad(x, out, np.ones(3)), want.reshape(3, 4))
    plain = rnp.take_along_axis(a, idx[:, None] % 4, 1)  # NumPy in, NumPy out
    assert isinstance(plain, np.ndarray)


def test_take_along_axis_out_of_range() -> None:
    x = leaf(np.zeros((5, 3)))
    with pytest.raises(IndexError, match=r"take_along_axis: index 3 .*size 3.*\(5, 3\)"):
        take_along_axis(x, np.array([[0], [3], [1], [2], [0]]), 1)
    with pytest.raises(IndexError, match=r"index -4 .*\(5, 3\)"):
        rnp.take_along_axis(x, np.array([[0], [-4], [1], [2], [0]]), 1)
    with pytest.raises(TypeError, match="never differentiable"):
        take_along_axis(x, np.array([[0.0]] * 5), 1)


def test_take_along_axis_second_order() -> None:
    idx = np.array([[0, 0, 2], [1, 3, 1]])

    def f(a: np.ndarray) -> np.ndarray:
        t = rnp.take_along_axis(a, idx, 1)
        return rnp.sum(rnp.exp(t) * t)

    rlgrad.check_grads(f, order=2)(RNG.standard_normal((2, 4)))


# ---- gather (PyTorch) ---------------------------------------------------------------------------
def test_gather_torch_docs_example() -> None:
    # torch.gather(torch.tensor([[1, 2], [3, 4]]), 1, torch.tensor([[0, 0], [1, 0]]))
    t = np.array([[1.0, 2.0], [3.0, 4.0]])
    x = leaf(t)
    out = gather(x, 1, np.array([[0, 0], [1, 0]]))
    np.testing.assert_array_equal(out._value, [[1.0, 1.0], [4.0, 3.0]])
    out.backward(np.array([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_array_equal(x.grad._value, [[3.0, 0.0], [4.0, 3.0]])  # 1+2 accumulate


@pytest.mark.parametrize(
    ("shape", "dim", "ishape"),
    [((5, 4), 1, (5, 1)), ((5, 4), 1, (3, 6)), ((5, 4), 0, (7, 2)), ((2, 3, 4), -1, (2, 2, 3)),
     ((2, 3, 4), 1, (1, 5, 4))],
)
def test_gather_shapes_and_gradient(shape, dim, ishape) -> None:
    a = RNG.standard_normal(shape)
    idx = RNG.integers(0, shape[dim], ishape)
    x = leaf(a)
    out = gather(x, dim, idx)
    assert out.shape == ishape  # torch: the result has the index's shape

    def ref(p: np.ndarray) -> np.ndarray:  # out[i][j][k] = p[i][j][idx[i][j][k]] along dim
        grids = list(np.indices(ishape))
        grids[dim % len(shape)] = idx
        return p[tuple(grids)]

    np.testing.assert_array_equal(out._value, ref(a))
    g = RNG.standard_normal(ishape)
    np.testing.assert_allclose(backward_grad(x, out, g), scatter_ref(shape, ref, g), rtol=1e-12)


def test_gather_errors() -> None:
    x = leaf(np.zeros((4, 3)))
    with pytest.raises(IndexError, match=r"gather: index 3 .*dimension 1 with size 3.*\(4, 3\)"):
        gather(x, 1, np.array([[0], [3], [1], [1]]))
    with pytest.raises(IndexError, match=r"gather: index -1 "):
        gather(x, 1, np.array([[0], [-1], [1], [1]]))  # torch refuses negative indices
    with pytest.raises(ValueError, match="dimensions"):
        gather(x, 1, np.array([0, 1, 2, 0]))
    with pytest.raises(ValueError, match="larger than input"):
        gather(x, 1, np.zeros((5, 1), dtype=np.int64))
    with pytest.raises(TypeError, match="integers"):
        gather(x, 1, np.zeros((4, 1)))


def test_gather_second_order() -> None:
    idx = np.array([[1, 1], [0, 2], [2, 2]])
    rlgrad.check_grads(lambda a: rnp.sum(gather(a, 1, idx) ** 3), order=2)(
        RNG.standard_normal((3, 3)))


GATHER_SHAPES = [((6, 5), 1, (4, 7)), ((6, 5), 0, (9, 3)), ((2, 3, 4), 2, (2, 2, 6)),
                 ((2, 3, 4), 0, (5, 3, 1)), ((2, 3, 4), -2, (1, 4, 4))]


@pytest.mark.parametrize(("shape", "dim", "ishape"), GATHER_SHAPES)
def test_gather_matches_torch(shape, dim, ishape) -> None:
    torch = pytest.importorskip("torch")
    a = RNG.standard_normal(shape)
    idx = RNG.integers(0, shape[dim], ishape)
    g = RNG.standard_normal(ishape)
    x = leaf(a)
    out = gather(x, dim, idx)
    out.backward(g)
    tx = torch.tensor(a, requires_grad=True)
    tout = torch.gather(tx, dim, torch.tensor(idx))
    tout.backward(torch.tensor(g))
    np.testing.assert_array_equal(out._value, tout.detach().numpy())
    np.testing.assert_allclose(x.grad._value, tx.grad.numpy(), rtol=1e-12, atol=1e-15)


# ---- gather_nd (TensorFlow) ---------------------------------------------------------------------
# tf.gather_nd's documented examples, letters numbered: a0 b0 c0 d0 a1 b1 c1 d1 -> 0..7
P3 = np.arange(8.0).reshape(2, 2, 2)
M2 = np.array([[0.0, 1.0], [2.0, 3.0]])  # a b / c d
TF_EXAMPLES = [
    (M2, [[0, 0], [1, 1]], 0, [0.0, 3.0]),
    (M2, [[1], [0]], 0, [[2.0, 3.0], [0.0, 1.0]]),
    (P3, [[1]], 0, [[[4.0, 5.0], [6.0, 7.0]]]),
    (P3, [[0, 1], [1, 0]], 0, [[2.0, 3.0], [4.0, 5.0]]),
    (P3, [[0, 0, 1], [1, 0, 1]], 0, [1.0, 5.0]),
    (M2, [[[0, 0]], [[0, 1]]], 0, [[0.0], [1.0]]),
    (M2, [[[1]], [[0]]], 0, [[[2.0, 3.0]], [[0.0, 1.0]]]),
    (P3, [[[0, 1], [1, 0]], [[0, 0], [1, 1]]], 0,
     [[[2.0, 3.0], [4.0, 5.0]], [[0.0, 1.0], [6.0, 7.0]]]),
    (P3, [[[0, 0, 1], [1, 0, 1]], [[0, 1, 1], [1, 1, 0]]], 0, [[1.0, 5.0], [3.0, 6.0]]),
    (P3, [[1], [0]], 1, [[2.0, 3.0], [4.0, 5.0]]),
    (P3, [[[1]], [[0]]], 1, [[[2.0, 3.0]], [[4.0, 5.0]]]),
    (P3, [[[1, 0]], [[0, 1]]], 1, [[2.0], [5.0]]),
]


@pytest.mark.parametrize("case", range(len(TF_EXAMPLES)))
def test_gather_nd_tensorflow_doc_examples(case: int) -> None:
    params, indices, b, want = TF_EXAMPLES[case]
    out = gather_nd(leaf(params), np.array(indices), batch_dims=b)
    np.testing.assert_array_equal(out._value, np.array(want))


def test_gather_nd_shape_rule_batch_dims() -> None:
    # TF docs: params (5, 7, 3), indices (5, 1), batch_dims=1 -> (5, 3)
    params = leaf(RNG.standard_normal((5, 7, 3)))
    idx = np.array([[1], [0], [4], [2], [1]])
    out = gather_nd(params, idx, batch_dims=1)
    assert out.shape == (5, 3)
    same = gather_nd(params, np.stack([np.arange(5), idx[:, 0]], axis=1))
    np.testing.assert_array_equal(out._value, same._value)
    # batch shape + outer shape + inner shape
    idx2 = RNG.integers(0, 7, (5, 4, 2, 1))
    assert gather_nd(params, idx2, batch_dims=1).shape == (5, 4, 2, 3)


@pytest.mark.parametrize("batch_dims", [0, 1, 2])
def test_gather_nd_gradient_scatter_add_with_duplicates(batch_dims: int) -> None:
    shape = (3, 4, 5)
    a = RNG.standard_normal(shape)
    depth = 3 - batch_dims
    cols = [RNG.integers(0, shape[batch_dims + c], shape[:batch_dims] + (6,)) for c in range(depth)]
    cols[0][..., 1] = cols[0][..., 0]  # a guaranteed duplicate row of indices
    for c in range(1, depth):
        cols[c][..., 1] = cols[c][..., 0]
    idx = np.stack(cols, axis=-1)
    x = leaf(a)
    out = gather_nd(x, idx, batch_dims=batch_dims)

    def ref(p: np.ndarray) -> np.ndarray:  # loop definition of tf.gather_nd
        res = np.empty(idx.shape[:-1], dtype=p.dtype)
        for pos in np.ndindex(*idx.shape[:-1]):
            res[pos] = p[pos[:batch_dims] + tuple(idx[pos])]
        return res

    np.testing.assert_array_equal(out._value, ref(a))
    g = RNG.standard_normal(out.shape)
    np.testing.assert_allclose(backward_grad(x, out, g), scatter_ref(shape, ref, g), rtol=1e-12)


def test_gather_nd_duplicates_hand_computed() -> None:
    x = leaf(np.zeros((2, 3)))
    out = gather_nd(x, np.array([[1, 2], [0, 0], [1, 2]]))
    out.backward(np.array([1.0, 2.0, 4.0]))
    np.testing.assert_array_equal(x.grad._value, [[2.0, 0, 0], [0, 0, 5.0]])


def test_gather_nd_errors() -> None:
    x = leaf(np.zeros((4, 3)))
    with pytest.raises(IndexError, match=r"indices\[1\] = \[2, 3\].*\(4, 3\).*index 3"):
        gather_nd(x, np.array([[0, 0], [2, 3]]))
    with pytest.raises(IndexError, match=r"index -1"):
        gather_nd(x, np.array([[0, -1]]))
    with pytest.raises(ValueError, match="must match"):
        gather_nd(x, np.zeros((3, 1), dtype=np.int64), batch_dims=1)
    with pytest.raises(ValueError, match="depth"):
        gather_nd(x, np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(TypeError, match="never differentiable"):
        gather_nd(x, np.zeros((2, 2)))


def test_gather_nd_second_order() -> None:
    idx = np.array([[0, 1], [2, 2], [0, 1]])
    rlgrad.check_grads(lambda a: rnp.sum(rnp.tanh(gather_nd(a, idx)) ** 2), order=2)(
        RNG.standard_normal((3, 3)))


# ---- one_hot, scatter_add, put_along_axis -------------------------------------------------------
def test_one_hot() -> None:
    out = one_hot(np.array([[0, 2], [1, 1]]), 3)
    np.testing.assert_array_equal(out, [[[1, 0, 0], [0, 0, 1]], [[0, 1, 0], [0, 1, 0]]])
    assert out.dtype == np.int64
    np.testing.assert_array_equal(one_hot(np.array([3, 1])), [[0, 0, 0, 1], [0, 1, 0, 0]])
    t = one_hot(tensor(np.array([1])), 2, dtype=np.float32)
    assert isinstance(t, Tensor) and t.dtype == np.float32 and not t.requires_grad
    with pytest.raises(IndexError, match=r"class index 3 .*num_classes=3.*\(2,\)"):
        one_hot(np.array([0, 3]), 3)
    with pytest.raises(IndexError, match=r"class index -1"):
        one_hot(np.array([0, -1]), 3)
    with pytest.raises(TypeError, match="never differentiable"):
        one_hot(np.array([0.0]), 3)


def test_one_hot_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    idx = RNG.integers(0, 5, (3, 4))
    want = torch.nn.functional.one_hot(torch.tensor(idx), 6).numpy()
    np.testing.assert_array_equal(one_hot(idx, 6), want)


def test_scatter_add_values_and_gradients() -> None:
    x = leaf(np.ones((2, 4)))
    src = leaf(np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    idx = np.array([[0, 0], [3, 1]])  # uses src[:, :2] only (index smaller than src)
    out = scatter_add(x, 1, idx, src)
    np.testing.assert_array_equal(out._value, [[4.0, 1, 1, 1], [1, 6.0, 1, 5.0]])
    g = np.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    out.backward(g)
    np.testing.assert_array_equal(x.grad._value, g)
    np.testing.assert_array_equal(src.grad._value, [[1.0, 1.0, 0.0], [8.0, 6.0, 0.0]])


def test_scatter_add_dim0_second_order_and_dtype() -> None:
    idx = np.array([[2, 0], [2, 2]])

    def f(base: np.ndarray, s: np.ndarray) -> np.ndarray:
        return rnp.sum(scatter_add(base, 0, idx, s) ** 3)

    rlgrad.check_grads(f, order=2)(RNG.standard_normal((3, 2)), RNG.standard_normal((2, 2)))
    x32 = tensor(np.zeros((3, 2), dtype=np.float32), requires_grad=True)
    assert scatter_add(x32, 0, idx, np.ones((2, 2))).dtype == np.float32


def test_scatter_add_errors_and_torch() -> None:
    x = leaf(np.zeros((2, 4)))
    with pytest.raises(IndexError, match=r"scatter_add: index 4 .*\(2, 4\)"):
        scatter_add(x, 1, np.array([[4]]), np.ones((1, 1)))
    with pytest.raises(ValueError, match="no larger"):
        scatter_add(x, 1, np.zeros((2, 3), dtype=np.int64), np.ones((2, 2)))
    torch = pytest.importorskip("torch")
    # (torch's own backward fails when src is larger than index, so gradients are compared on
    # same-shaped src and index; the larger-src forward is compared below)
    for shape, dim, ishape, sshape in [((4, 5), 0, (3, 5), (3, 5)), ((4, 5), 1, (2, 7), (2, 7)),
                                       ((2, 3, 4), -1, (2, 2, 6), (2, 2, 6))]:
        a, s = RNG.standard_normal(shape), RNG.standard_normal(sshape)
        idx = RNG.integers(0, shape[dim], ishape)
        g = RNG.standard_normal(shape)
        x, src = leaf(a), leaf(s)
        out = scatter_add(x, dim, idx, src)
        out.backward(g)
        tx, ts = torch.tensor(a, requires_grad=True), torch.tensor(s, requires_grad=True)
        tout = tx.scatter_add(dim, torch.tensor(idx), ts)
        tout.backward(torch.tensor(g))
        np.testing.assert_allclose(out._value, tout.detach().numpy(), rtol=1e-12)
        np.testing.assert_allclose(x.grad._value, tx.grad.numpy(), rtol=1e-12)
        np.testing.assert_allclose(src.grad._value, ts.grad.numpy(), rtol=1e-12)
    a, s = RNG.standard_normal((4, 5)), RNG.standard_normal((3, 6))
    idx = RNG.integers(0, 4, (3, 5))
    want = torch.tensor(a).scatter_add(0, torch.tensor(idx), torch.tensor(s)).numpy()
    np.testing.assert_allclose(scatter_add(leaf(a), 0, idx, leaf(s))._value, want, rtol=1e-12)


def test_put_along_axis() -> None:
    a = np.arange(12.0).reshape(3, 4)
    idx = np.array([[1], [3], [-4]])
    x, v = leaf(a), leaf(np.array([[10.0], [20.0], [30.0]]))
    out = put_along_axis(x, idx, v, 1)
    want = a.copy()
    np.put_along_axis(want, idx, np.array([[10.0], [20.0], [30.0]]), 1)
    np.testing.assert_array_equal(out._value, want)
    g = RNG.standard_normal((3, 4))
    out.backward(g)
    mask = np.ones((3, 4))
    mask[[0, 1, 2], [1, 3, 0]] = 0
    np.testing.assert_allclose(x.grad._value, g * mask, rtol=1e-12)
    np.testing.assert_allclose(v.grad._value, g[[0, 1, 2], [1, 3, 0]][:, None], rtol=1e-12)
    # a scalar value broadcast to every written position; arr's float32 is kept
    x32 = tensor(np.zeros((2, 3), dtype=np.float32), requires_grad=True)
    out32 = put_along_axis(x32, np.array([[2], [0]]), 1.5, 1)
    assert out32.dtype == np.float32
    np.testing.assert_array_equal(out32._value, [[0, 0, 1.5], [1.5, 0, 0]])
    with pytest.raises(ValueError, match="repeated"):
        put_along_axis(x, np.array([[1, 1]] * 3), 0.0, 1)
    with pytest.raises(IndexError, match=r"put_along_axis: index 4 .*\(3, 4\)"):
        put_along_axis(x, np.array([[4]] * 3), 0.0, 1)


def test_put_along_axis_second_order() -> None:
    idx = np.array([[0, 2], [1, 0]])
    rlgrad.check_grads(lambda a, v: rnp.sum(put_along_axis(a, idx, v, 1) ** 3), order=2)(
        RNG.standard_normal((2, 3)), RNG.standard_normal((2, 2)))


# ---- indices are never differentiable -----------------------------------------------------------
def test_grad_wrt_integer_index_is_an_error_saying_why() -> None:
    q = leaf(RNG.standard_normal((4, 3)))
    actions = tensor(np.array([0, 2, 2, 1]))
    loss = gather(q, 1, actions._value[:, None]).sum()
    with pytest.raises(TypeError, match="never differentiable"):
        autograd.grad(loss, [actions])
    with pytest.raises(TypeError, match="never differentiable"):
        actions.requires_grad_()

    def f(values: np.ndarray, acts: np.ndarray) -> np.ndarray:
        return rnp.sum(take_along_axis(values, acts[:, None], 1))

    with pytest.raises(TypeError, match="never differentiable"):
        rlgrad.grad(f, argnum=1)(q._value, actions._value)
    # ... while the gradient w.r.t. the gathered values is the scatter-add
    np.testing.assert_array_equal(rlgrad.grad(f)(q._value, actions._value),
                                  np.eye(3)[actions._value])


def test_scatter_add_builds_no_dense_one_hot() -> None:
    # x[rows, cols] on a (2000, 500) input: a one-hot formulation would need 2000 x 1e6 entries;
    # the scatter-add needs the (2000, 500) gradient plus index arrays.
    x = tensor(np.zeros((2000, 500), dtype=np.float32), requires_grad=True)
    rows = np.arange(2000)
    cols = RNG.integers(0, 500, 2000)
    for select in (lambda t: t[rows, cols], lambda t: gather(t, 1, cols[:, None])):
        x.grad = None
        tracemalloc.start()
        select(x).sum().backward()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 1.5 * x._value.nbytes, peak  # the gradient itself plus index-sized arrays
        assert x.grad._value.sum() == 2000

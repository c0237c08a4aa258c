"""The eager fast paths compute NumPy's own operation: same bits, same errors.

take_along_axis and its scatter index with the fancy index NumPy's take/put_along_axis build;
max/min call the ufunc reduce np.max/np.min call. Bit equality holds because both sides run the
same operations (a gather or a copy; a maximum is exact).
"""

from __future__ import annotations

import numpy as np
import pytest

from rlgrad.indexing_kernels import _put_along_axis_add, _take_along_axis
from rlgrad.ops import _amax, _amin


@pytest.mark.parametrize("shape,axis", [((5, 3), 1), ((5, 3), -1), ((5, 3), 0), ((2, 3, 4), 1),
                                        ((4,), 0)])
def test_take_along_axis_is_numpys(shape: tuple[int, ...], axis: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    ishape = list(shape)
    ishape[axis] = 2
    idx = rng.integers(-shape[axis], shape[axis], size=ishape)
    np.testing.assert_array_equal(_take_along_axis(x, idx, axis), np.take_along_axis(x, idx, axis))
    one = list(shape)
    one[axis] = 1
    lane = rng.integers(0, shape[axis], size=one)
    out = np.zeros(shape, np.float32)
    g = rng.standard_normal(one).astype(np.float32)
    np.put_along_axis(out, lane, g, axis)
    np.testing.assert_array_equal(_put_along_axis_add(g, lane, axis, shape), out)


@pytest.mark.parametrize("bad", [np.array([[5]] * 5), np.array([[0]] * 4), np.array([0, 1]),
                                 np.array([[0.0]] * 5)])
def test_take_along_axis_errors_are_numpys(bad: np.ndarray) -> None:
    x = np.zeros((5, 3))
    with pytest.raises((IndexError, ValueError)) as numpys:
        np.take_along_axis(x, bad, 1)
    with pytest.raises(type(numpys.value), match=str(numpys.value).strip()[:40]):
        _take_along_axis(x, bad, 1)


@pytest.mark.parametrize("x", [np.array(3.0), np.array([[1.0, np.nan], [2.0, 1.0]]),
                               np.arange(12).reshape(3, 4), np.array([[True, False]]),
                               np.array([[-0.0, 0.0], [0.0, -0.0]], np.float32),
                               np.random.default_rng(1).standard_normal((3, 4, 5))])
def test_max_min_are_numpys(x: np.ndarray) -> None:
    for axis in ([None, 0, -1, (0,)] if x.ndim else [None]):
        for keepdims in (False, True):
            for ours, theirs in ((_amax, np.max), (_amin, np.min)):
                got, want = ours(x, axis, keepdims), theirs(x, axis=axis, keepdims=keepdims)
                assert got.dtype == want.dtype and np.shape(got) == np.shape(want)
                np.testing.assert_array_equal(got, want)
                np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_max_of_nothing_is_numpys_error() -> None:
    with pytest.raises(ValueError, match="zero-size array"):
        _amax(np.zeros((0, 3)), 0, False)


@pytest.mark.parametrize("x", [np.array([[1.0, 1.0, 0.0], [np.nan, 2.0, np.nan], [3.0, 3.0, 3.0]],
                                        np.float32),
                               np.random.default_rng(2).standard_normal((4, 5)),
                               np.arange(6.0).reshape(2, 3)])
def test_max_rule_on_arrays_counts_as_the_recorded_one(x: np.ndarray) -> None:
    """Plain arrays count ties in the gradient's dtype and look for NaN only when a group has no
    hit; the recorded rule (Tensors) counts in int64 and always masks NaN: the same numbers."""
    from rlgrad.ops import _extremum_vjp
    from rlgrad.tensor import constant

    for axis in (None, 0, 1):
        for keepdims in (False, True):
            ans = np.max(x, axis=axis, keepdims=keepdims)
            g = np.random.default_rng(3).standard_normal(np.shape(ans)).astype(x.dtype)
            plain = _extremum_vjp(g, ans, x, axis, keepdims)
            recorded = _extremum_vjp(constant(g), constant(ans), constant(x), axis, keepdims)._value
            assert plain.dtype == recorded.dtype
            np.testing.assert_array_equal(plain, recorded)


@pytest.mark.parametrize("x", [np.array([[np.inf, 1.0], [-np.inf, -np.inf], [2.0, 2.0]]),
                               np.array([[1.0, np.nan, 3.0]], np.float32), np.array([[5.0]]),
                               np.array([[0.5, 0.25]], np.float32)])
@pytest.mark.filterwarnings("error")  # inf and -inf extrema: no "invalid value" warning either
def test_max_rule_nan_check_on_arrays(x: np.ndarray) -> None:
    """The plain rule marks NaNs only when ans holds one; inf and -inf extrema and
    single-element groups give the recorded rule's numbers too."""
    from rlgrad.ops import _extremum_vjp
    from rlgrad.tensor import constant

    for axis, keepdims in ((1, True), (-1, False), (None, False), (0, True)):
        ans = np.max(x, axis=axis, keepdims=keepdims)
        g = np.full(np.shape(ans), 3.0, x.dtype)
        plain = _extremum_vjp(g, ans, x, axis, keepdims)
        recorded = _extremum_vjp(constant(g), constant(ans), constant(x), axis, keepdims)._value
        np.testing.assert_array_equal(plain, recorded)


@pytest.mark.parametrize("shape,axis,keepdims", [((3, 4), 1, True), ((3, 4), -1, False),
                                                 ((2, 3, 4), 0, False), ((2, 3, 4), (0, 2), True),
                                                 ((3, 4), None, False), ((1, 1), None, True)])
def test_sum_and_mean_rules_on_arrays_broadcast_as_recorded(shape: tuple, axis: object,
                                                            keepdims: bool) -> None:
    """The plain sum/mean rules expand over one int axis with a repeat: a new writable array
    holding the recorded rule's numbers."""
    from rlgrad.ops import _mean_vjp, _sum_vjp
    from rlgrad.tensor import constant

    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    for rule, red in ((_sum_vjp, np.sum), (_mean_vjp, np.mean)):
        ans = red(x, axis=axis, keepdims=keepdims)
        g = np.asarray(np.random.default_rng(5).standard_normal(np.shape(ans)), np.float32)
        plain = rule(g, ans, x, axis, keepdims)
        recorded = rule(constant(g), constant(ans), constant(x), axis, keepdims)._value
        assert plain.shape == x.shape and plain.dtype == recorded.dtype
        np.testing.assert_array_equal(plain, recorded)
        if np.shape(g) != x.shape:  # expanded: a new array, which a .grad may take as it is
            assert plain.flags.writeable and not np.shares_memory(plain, g)

"""``rlgrad.numpy.asarray`` of a tensor reads no values (as ``jnp.asarray`` of a tracer): under
``vmap`` it is the batched tensor itself, or its cast to the dtype asked, and gradients pass."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp

X = np.random.default_rng(0).normal(size=(4, 3))


def test_asarray_under_vmap_is_the_slice_itself() -> None:
    got = rlgrad.vmap(lambda x: rnp.asarray(x) * 2 + rnp.sum(rnp.asarray(x)))(rlgrad.tensor(X))
    want = np.stack([x * 2 + x.sum() for x in X])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-15)


def test_asarray_with_a_dtype_under_vmap_casts() -> None:
    got = rlgrad.vmap(lambda x: rnp.asarray(x, dtype=np.float32) + 1)(rlgrad.tensor(X))
    assert got.dtype == rlgrad.float32
    np.testing.assert_array_equal(got.numpy(), X.astype(np.float32) + np.float32(1))
    got = rlgrad.vmap(lambda x: rnp.asarray(x, "float64"))(rlgrad.tensor(X.astype(np.float32)))
    assert got.dtype == rlgrad.float64


def test_per_example_gradients_through_asarray() -> None:
    g = rlgrad.vmap(rlgrad.grad(lambda x: rnp.sum(rnp.sin(rnp.asarray(x)) ** 2)))(X)
    np.testing.assert_allclose(np.asarray(g), 2 * np.sin(X) * np.cos(X), rtol=1e-13)


def test_outside_vmap_nothing_changes() -> None:
    t = rlgrad.tensor(X)
    assert rnp.asarray(t) is t
    assert rnp.asarray([1, 2]).dtype == np.int64 and isinstance(rnp.asarray(X), np.ndarray)
    np.testing.assert_array_equal(rnp.asarray(t, order="C").numpy(), X)  # other arguments: NumPy's path


def test_reading_values_under_vmap_still_says_what_to_write() -> None:
    with pytest.raises(Exception, match="vmap") as e:
        rlgrad.vmap(lambda x: rlgrad.tensor(float(np.asarray(x).sum())))(rlgrad.tensor(X))
    assert "\n" not in str(e.value)

"""``logits_draw`` (categorical sampling from rows of logits, the policies' acting): its C loops
(rlgrad._kernels' row_shift and cdf_pick) give the bits of its NumPy lines (the reference,
C_DRAW off), the draws follow ``Categorical``'s inverse-CDF rule and probabilities, and the
kernels refuse what they do not do."""

import numpy as np
import pytest

from rlgrad import ops
from rlgrad.distributions import Categorical
from rlgrad.distributions import categorical as C

K = ops._kernels
needs_kernels = pytest.mark.skipif(K is None, reason="rlgrad._kernels not built (or turned off)")


def _both(monkeypatch, logits, u):
    fast = C.logits_draw(logits, u)
    monkeypatch.setattr(C, "C_DRAW", False)
    ref = C.logits_draw(logits, u)
    monkeypatch.setattr(C, "C_DRAW", True)
    return fast, ref


@needs_kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 4), (7, 4), (5, 2), (3, 1), (6, 9), (4, 40)])
def test_the_kernels_give_the_numpy_lines_bits(monkeypatch, dtype, shape):
    rng = np.random.default_rng(sum(shape))
    logits = (rng.standard_normal(shape) * 4).astype(dtype)
    if shape[1] > 1:
        logits[0, -1] = -np.inf  # a masked category: never drawn, its mass exactly 0
    if shape[0] > 2:
        logits[1, 0] = np.nan  # a NaN row stays NaN in both (no silent finite answer)
    u = rng.random(shape[0])
    (a, lp), (a_ref, lp_ref) = _both(monkeypatch, logits, u)
    assert a.dtype == a_ref.dtype == np.int64 and lp.dtype == lp_ref.dtype == dtype
    np.testing.assert_array_equal(a, a_ref)
    assert lp.tobytes() == lp_ref.tobytes()
    assert shape[1] == 1 or a[0] != shape[1] - 1


@needs_kernels
def test_a_strided_block_of_columns_is_drawn_as_its_copy(monkeypatch):
    # MultiDiscrete acting draws each part from a slice of the head's columns
    rng = np.random.default_rng(1)
    out = rng.standard_normal((5, 7)).astype(np.float32)
    u = rng.random(5)
    (a, lp), (a_ref, lp_ref) = _both(monkeypatch, out[:, 2:5], u)
    np.testing.assert_array_equal(a, a_ref)
    assert lp.tobytes() == lp_ref.tobytes()
    np.testing.assert_array_equal(a, C.logits_draw(np.ascontiguousarray(out[:, 2:5]), u)[0])


def test_draws_follow_the_categoricals_rule_and_probabilities():
    logits = np.array([[0.3, -1.2, 2.0, 0.0], [5.0, 5.0, -3.0, 1.0]])
    u = np.linspace(0.0, 0.999, 11)
    for row in logits:
        rows = np.repeat(row[None], len(u), axis=0)
        a, lp = C.logits_draw(rows, u)
        p = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        # inverse CDF: the first category whose cumulative probability exceeds u
        np.testing.assert_array_equal(a, np.searchsorted(np.cumsum(p), u, side="right"))
        np.testing.assert_allclose(lp, np.log(p[a]), rtol=1e-12)
        np.testing.assert_allclose(lp, Categorical(logits=row).log_prob(a)._value, rtol=1e-12)


@needs_kernels
def test_the_kernels_refuse_what_they_do_not_do():
    f32, f64 = np.ones((3, 4), np.float32), np.ones((3, 4), np.float64)
    assert not K.row_shift(f32, np.empty((3, 4), np.float64))  # dtypes differ
    assert not K.row_shift(f32, np.empty((3, 5), np.float32))  # shapes differ
    assert not K.row_shift(np.ones((3, 8), np.float32)[:, ::2], np.empty((3, 4), np.float32))
    assert not K.row_shift(np.ones(4, np.float32), np.empty(4, np.float32))  # not (rows, K)
    assert not K.row_shift(np.ones((3, 4), np.int64), np.empty((3, 4), np.int64))
    assert not K.row_shift(f32, f32)  # the output overlaps the input
    u, idx, out = np.full(3, 0.5), np.empty(3, np.int64), np.empty(3, np.float32)
    z = np.zeros((3, 4), np.float32)
    assert not K.cdf_pick(f64, u, z, idx, out)  # dtypes differ
    assert not K.cdf_pick(f32, u.astype(np.float32), z, idx, out)  # uniforms not float64
    assert not K.cdf_pick(f32, u, z, idx.astype(np.int32), out)  # indices not int64
    assert not K.cdf_pick(f32, u[:2], z, idx, out)  # one uniform per row
    assert not K.cdf_pick(f32, u, z, idx, z[0, :3])  # the output overlaps z
    assert (f32 == 1).all() and (z == 0).all()  # nothing written
    with pytest.raises(TypeError, match="takes 5 arguments"):
        K.cdf_pick(f32, u)
    assert K.cdf_pick(f32, u, z, idx, out) and (idx == 2).all() and (f32[:, -1] == 4).all()

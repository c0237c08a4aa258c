"""The fused optimizer updates (rlgrad/optim/_fused.c, one pass in C): what they refuse, and
their idle-block shortcut against the full loop's bits. The updates themselves are held to the
NumPy flat path's bits (edge cases included) and to rlgrad/optim/reference.py with every option
in tests/engine/test_reference_paths.py."""

import os
import shutil

import numpy as np
import pytest

from rlgrad import optim
from rlgrad.optim import algorithms
from rlgrad.tensor import _const, tensor

fused = algorithms._fused


def test_the_module_is_built_where_there_is_a_c_compiler():
    if os.environ.get("RLGRAD_FUSED") == "0":
        pytest.skip("RLGRAD_FUSED=0 turns the fused updates off")
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler: the NumPy path is the only one")
    assert fused is not None, "rlgrad.optim._fused was not built: reinstall with `pip install -e .`"


needs_fused = pytest.mark.skipif(fused is None, reason="rlgrad.optim._fused not built")

@needs_fused
def test_unsuitable_arrays_leave_everything_unchanged_and_return_false():
    p = [np.ones(3, np.float32), np.ones(2, np.float32)]
    m, v = np.zeros(5, np.float32), np.zeros(5, np.float32)
    args = (None, 0.1, 0.999, 0.001, 1e-8, 0.01, 1.0, 0.0, False)
    before = [a.copy() for a in p]
    bad = [
        [np.ones(3, np.float32), np.ones(4, np.float32)[::2]],  # not contiguous
        [np.ones(3, np.float64), np.ones(2, np.float32)],  # another dtype
        [np.ones(3, np.float32), np.ones(3, np.float32)],  # another size
        [np.ones(3, np.float32), p[1]],  # the gradient is the parameter
    ]
    for grads in bad:
        assert fused.adam(p, grads, m, v, *args) is False
        assert fused.rmsprop(p, grads, v, 0.99, 0.01, 1e-8, 0.01, True, False) is False
    assert fused.adam(p, [np.ones(3, np.float32)], m, v, *args) is False  # one gradient short
    assert fused.adam(p, [g.copy() for g in p], np.zeros(4, np.float32), v, *args) is False
    ro = np.ones(3, np.float32)
    ro.flags.writeable = False
    assert fused.adam([ro, p[1]], [g.copy() for g in p], m, v, *args) is False
    for a, b in zip(p, before):
        np.testing.assert_array_equal(a, b)
    assert not m.any() and not v.any()
    with pytest.raises(TypeError):
        fused.adam(p, 3, m, v, *args)
    # and the ones that fit are updated
    assert fused.adam(p, [g.copy() for g in p], m, v, *args) is True
    assert np.all(p[0] < 1) and np.all(m == np.float32(0.1))


@needs_fused
def test_a_non_contiguous_gradient_takes_the_numpy_path(monkeypatch):
    def run(use_fused):
        monkeypatch.setattr(algorithms, "_fused", fused if use_fused else None)
        w = tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, requires_grad=True)
        opt = optim.Adam([w], lr=0.1)
        for _ in range(3):
            w.grad = _const((np.arange(12, dtype=np.float32).reshape(4, 3) - 5).T)  # a view
            opt.step()
        return w._value.copy()

    np.testing.assert_array_equal(run(True), run(False))


def test_rlgrad_fused_0_turns_it_off():
    import subprocess
    import sys

    code = "import rlgrad.optim.algorithms as a; print(a._fused is None)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "RLGRAD_FUSED": "0"},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "True"


@needs_fused
def test_idle_blocks_of_dead_units_give_the_full_loops_bits():
    """Blocks of 64 with exact-zero gradients and first moments (a dead ReLU unit's weights,
    either sign of zero) skip the parameter's update, which would be p - (+0): p, m and v stay
    bitwise what the full update gives, also next to a NaN or an inf second moment."""
    f32 = np.float32
    rng = np.random.default_rng(5)
    sizes = [192, 70]
    p = [rng.normal(size=n).astype(f32) for n in sizes]
    g = [rng.normal(size=n).astype(f32) for n in sizes]
    m = rng.normal(size=sum(sizes)).astype(f32) * f32(1e-3)
    v = rng.random(sum(sizes)).astype(f32) * f32(1e-4)
    signs = np.where(rng.random(64) < 0.5, f32(-0.0), f32(0.0))
    g[0][:128] = np.tile(signs, 2)  # two blocks of zeros of either sign
    m[:128] = np.tile(signs[::-1], 2)
    v[70] = np.nan  # the second block: NaN in v makes it busy (p becomes NaN there)
    g[1][:] = 0.0  # the second parameter: idle throughout, an inf second moment in it
    m[192:] = 0.0
    v[200] = np.inf
    c1, b2, c2, eps, step, scale = 0.1, 0.999, 0.001, 1e-8, 2.3e-3, 0.5
    gi = [x * f32(scale) for x in g]
    flat_g = np.concatenate(gi)
    vv = v * f32(b2) + (flat_g * flat_g) * f32(c2)
    mm = m + (flat_g - m) * f32(c1)
    with np.errstate(invalid="ignore"):
        upd = mm / (np.sqrt(vv) + f32(eps)) * f32(step)
    want_p = np.concatenate(p) - upd
    assert fused.adam(p, g, m, v, None, c1, b2, c2, eps, step, 1.0, 0.0, False, scale)
    assert np.concatenate(p).tobytes() == want_p.tobytes()
    assert m.tobytes() == mm.tobytes() and np.array_equal(v, vv, equal_nan=True)
    assert np.isnan(p[0][70]) and (mm[:64] == 0).all() and not np.signbit(mm[:64]).any()

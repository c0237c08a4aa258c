"""``rlgrad.lax`` loops keep every carry's dtype and bits under ``rlgrad.jit``.

A loop node stores all its outputs in one array (the engine's nodes have one output); integer
and bool outputs beside floating ones travel as their raw bytes, so a uint64 key near 2**64, an
int64 counter above 2**53, a bool flag, float32 and float64 state in one carry come out of a
compiled scan / fori_loop / while_loop / cond / switch bit for bit as eagerly (and with their
dtypes), under ``grad`` (gradients vs eager and central finite differences, to second order),
``jvp`` and ``vmap`` of the jitted function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import lax
from rlgrad import numpy as rnp
from rlgrad.lax import _Node
from rlgrad.tree_util import tree_flatten

KEY = np.uint64(2**64 - 7)  # near 2**64: float64 would round it to 2**64 (0 as uint64)
BIG = np.int64(2**60 + 3)  # above 2**53: float64 drops its low bits
MIX = np.uint64(0x9E3779B97F4A7C15)


def _leaves(tree: Any) -> list[np.ndarray]:
    return [np.asarray(getattr(x, "_value", x)) for x in tree_flatten(tree)[0]]


def _same_bits(got: Any, want: Any) -> None:
    """Equal leaf by leaf: dtype, shape and every bit (floats compared as their bytes)."""
    g, w = _leaves(got), _leaves(want)
    assert len(g) == len(w)
    for a, b in zip(g, w):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        assert a.tobytes() == b.tobytes(), (a, b)


def _make_body(feed32: bool) -> Callable:
    """The step; ``feed32``: the float32 state reads ``x`` too (its rounding then limits how
    closely finite differences can check the gradient)."""
    def body(c: tuple, x: Any) -> tuple[tuple, tuple]:
        key, n, flag, a32, a64 = c
        with np.errstate(over="ignore"):
            key = key * MIX + np.uint64(1)  # wraps modulo 2**64, as a hash's step does
        n = n + np.int64(2**54 + 1)
        flag = rnp.logical_not(flag)
        a32 = a32 * np.float32(1.25) + (x.astype(np.float32) if feed32 else np.float32(0.5))
        a64 = rnp.sin(a64) * x + rnp.sum(a32).astype(np.float64)
        return (key, n, flag, a32, a64), (key, n, flag, a64 * 2.0)
    return body


_body = _make_body(True)
_body64 = _make_body(False)


def _init(x: Any) -> tuple:
    return (KEY, BIG, np.bool_(True), np.array([0.5, -1.5], np.float32), x)


def _scan_prog(x: Any, body: Callable = _body) -> Any:
    return lax.scan(body, _init(x), rnp.stack([x, x * 0.5, -x]))


def _scan_loss(x: Any, body: Callable = _body) -> Any:
    (_key, _n, _flag, a32, a64), (_k, _ns, _f, ys) = _scan_prog(x, body)
    return rnp.sum(a64 * a64) + rnp.sum(ys) + rnp.sum(a32).astype(np.float64)


def _loss64(x: Any) -> Any:
    return _scan_loss(x, _body64)


def _fd(f: Callable, x: np.ndarray, eps: float) -> np.ndarray:
    return np.array([(float(np.asarray(f(x + eps * e))) - float(np.asarray(f(x - eps * e))))
                     / (2 * eps) for e in np.eye(x.size)])


X = np.array([0.3, -0.7])


def test_node_layout_keeps_integers_as_bits() -> None:
    node = _Node([((), np.dtype(np.float32)), ((3,), np.dtype(np.uint64)), ((2,), np.dtype(np.float64)),
                  ((5,), np.dtype(np.bool_)), ((2,), np.dtype(np.int64)), ((), np.dtype(np.int32))])
    assert node.dtype == np.float64
    # float32, bool and int32 are exact float64 values; 64-bit integers travel as bits
    assert node.layout == [(0, 1, False), (1, 3, True), (4, 2, False), (6, 5, False),
                           (11, 2, True), (13, 1, False)]
    parts = [np.float32(1.5), np.array([KEY, 1, 2**63], np.uint64), np.array([0.25, 2.0]),
             np.array([True, False, True, True, False]), np.array([BIG, -BIG]), np.int32(-2**31)]
    packed = node.pack(parts)
    assert packed.shape == (node.size,) and packed.dtype == np.float64
    _same_bits(node.unpack(packed), [np.asarray(p) for p in parts])
    # a float32 carrier: an int64 output starts on an 8-byte boundary; int32 goes as bits too
    node32 = _Node([((), np.dtype(np.float32)), ((1,), np.dtype(np.int64)), ((3,), np.dtype(np.int32))])
    assert node32.layout == [(0, 1, False), (2, 2, True), (4, 3, True)]
    parts32 = [np.float32(-0.0), np.array([-BIG]), np.array([2**31 - 1, -5, 2**24 + 1], np.int32)]
    _same_bits(node32.unpack(node32.pack(parts32)), parts32)
    # no floating output: the first output's dtype carries
    ints = _Node([((2,), np.dtype(np.int64)), ((), np.dtype(np.bool_)), ((), np.dtype(np.uint64))])
    assert ints.dtype == np.int64 and ints.layout == [(0, 2, False), (2, 1, False), (3, 1, True)]


def test_scan_mixed_carry_jit_equals_eager_bit_for_bit() -> None:
    eager = _scan_prog(X)
    f = rlgrad.jit(_scan_prog, check=True)
    for x in (X, X * 3.0, X):
        _same_bits(f(x), _scan_prog(x))
    (key, n, flag, _a32, _a64), (keys, ns, flags, _ys) = eager
    want_key = KEY
    with np.errstate(over="ignore"):
        for _ in range(3):
            want_key = want_key * MIX + np.uint64(1)
    assert np.asarray(key).dtype == np.uint64 and int(np.asarray(key)) == int(want_key)
    assert int(np.asarray(n)) == int(BIG) + 3 * (2**54 + 1)
    assert np.asarray(flags).tolist() == [False, True, False] and not bool(np.asarray(flag))
    assert np.asarray(keys).dtype == np.uint64 and np.asarray(ns).dtype == np.int64


def test_scan_mixed_carry_reverse_and_unrolled() -> None:
    def prog(x: Any) -> Any:
        return (lax.scan(_body, _init(x), rnp.stack([x, -x, x * 2, x]), reverse=True),
                lax.scan(_body, _init(x), rnp.stack([x, -x, x * 2, x, x * 0.5]), unroll=2))

    _same_bits(rlgrad.jit(prog, check=True)(X), prog(X))


def test_fori_and_while_loops_keep_integer_bits() -> None:
    def fori(x: Any) -> Any:
        def body(i: Any, c: tuple) -> tuple:
            key, n, a = c
            with np.errstate(over="ignore"):
                key = key * MIX + rnp.asarray(i, dtype=np.uint64)
            return key, n - np.int64(2**55), a * 1.5 + rnp.asarray(i, dtype=np.float64)
        return lax.fori_loop(0, 4, body, (KEY, BIG, x))

    def whiled(x: Any) -> Any:
        def cond(c: tuple) -> Any:
            return c[1] < BIG + np.int64(5)

        def body(c: tuple) -> tuple:
            key, n, flag, a = c
            return key - np.uint64(3), n + np.int64(1), rnp.logical_not(flag), a * 0.5
        return lax.while_loop(cond, body, (KEY, BIG, np.bool_(False), x.astype(np.float32)))

    for prog in (fori, whiled):
        f = rlgrad.jit(prog, check=True)
        for x in (X, X + 1.0):
            _same_bits(f(x), prog(x))
    key, n, flag, a = whiled(X)
    assert int(np.asarray(key)) == int(KEY) - 15 and int(np.asarray(n)) == int(BIG) + 5
    assert bool(np.asarray(flag)) and np.asarray(a).dtype == np.float32


@pytest.mark.parametrize("which", [0, 1, 2])
def test_cond_and_switch_keep_integer_bits(which: int) -> None:
    def branch(k: int) -> Callable:
        def fn(key: Any, n: Any, a: Any) -> tuple:
            return key - np.uint64(k), n * np.int64(k + 1), a * float(k + 1), rnp.asarray(k > 0)
        return fn

    def prog(i: Any, x: Any) -> Any:
        s = lax.switch(i, [branch(0), branch(1), branch(2)], KEY, BIG, x)
        c = lax.cond(i > 0, branch(1), branch(2), KEY, BIG, x.astype(np.float32))
        return s, c

    f = rlgrad.jit(prog, check=True)
    i = np.int32(which)
    _same_bits(f(i, X), prog(i, X))
    assert int(np.asarray(f(i, X)[0][0])) == int(KEY) - which


def test_grad_through_a_mixed_carry_matches_eager_and_finite_differences() -> None:
    for loss in (_scan_loss, _loss64):
        g_jit = rlgrad.jit(rlgrad.grad(loss), check=True)
        for x in (X, X * -2.0):
            _same_bits(g_jit(x), rlgrad.grad(loss)(x))
    np.testing.assert_allclose(np.asarray(rlgrad.grad(_loss64)(X)), _fd(_loss64, X, 1e-6),
                               rtol=1e-7, atol=1e-7)
    # x through float32 state: its rounding (~1e-7 relative) bounds the differences' accuracy
    np.testing.assert_allclose(np.asarray(rlgrad.grad(_scan_loss)(X)), _fd(_scan_loss, X, 1e-2),
                               rtol=1e-3)


def test_second_order_and_jvp_through_a_mixed_carry() -> None:
    def first(x: Any) -> Any:
        return rnp.sum(rlgrad.grad(_loss64)(x) ** 2)

    h_eager = rlgrad.grad(first)(X)
    _same_bits(rlgrad.jit(rlgrad.grad(first), check=True)(X), h_eager)
    np.testing.assert_allclose(np.asarray(h_eager), _fd(first, X, 1e-5), rtol=1e-6, atol=1e-6)
    v = np.array([1.0, -2.0])

    def fwd(x: Any) -> Any:
        return rlgrad.jvp(_scan_loss, (x,), (v,))

    want = fwd(X)
    _same_bits(rlgrad.jit(fwd, check=True)(X), want)
    # forward and reverse mode round the float32 state's tangents differently
    np.testing.assert_allclose(float(np.asarray(want[1])), float(rlgrad.grad(_scan_loss)(X) @ v),
                               rtol=1e-6)


def test_vmap_of_the_jitted_loop_equals_each_example() -> None:
    xs = np.array([[0.3, -0.7], [1.0, 2.0], [-0.5, 0.25]])
    batched = rlgrad.vmap(rlgrad.jit(_scan_prog))(xs)
    each = [_scan_prog(x) for x in xs]
    for k, leaf in enumerate(_leaves(batched)):
        want = np.stack([_leaves(e)[k] for e in each])
        assert leaf.dtype == want.dtype and leaf.tobytes() == want.tobytes()
    g = rlgrad.vmap(rlgrad.jit(rlgrad.grad(_scan_loss)))(xs)
    np.testing.assert_allclose(g, np.stack([rlgrad.grad(_scan_loss)(x) for x in xs]), rtol=1e-12)


def test_key_stream_keeps_64_bits_through_a_compiled_loop() -> None:
    """The compiled training loop's keys (rl/functional/keys.py) use all 64 bits and come out
    of a jitted scan beside float64 state as eagerly."""
    from rlgrad.rl.functional.keys import seed_keys, split, uniform

    def prog(keys: Any, x: Any) -> Any:
        def body(c: tuple, _: Any) -> tuple[tuple, Any]:
            k, acc = c
            k, sub = split(k)
            return (k, acc + uniform(sub, (2,))), sub
        return lax.scan(body, (keys, x), None, length=4)

    keys = seed_keys(np.arange(8), 1)
    x = np.zeros((8, 2))
    eager = prog(keys, x)
    _same_bits(rlgrad.jit(prog, check=True)(keys, x), eager)
    subs = np.asarray(eager[1])
    assert subs.dtype == np.uint64 and int(subs.max()) >= 2**60


def test_jit_of_vmap_of_the_mixed_loop_equals_vmap_eagerly() -> None:
    """Inside vmap a loop runs as eagerly (each op batched), also while jit traces: the same
    bits as vmap without jit."""
    xs = np.array([[0.3, -0.7], [1.0, 2.0], [-0.5, 0.25]])
    _same_bits(rlgrad.jit(rlgrad.vmap(_scan_prog), check=True)(xs), rlgrad.vmap(_scan_prog)(xs))

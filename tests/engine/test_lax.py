"""``rlgrad.lax``: JAX's control flow, eagerly and under ``rlgrad.jit``.

Each primitive is checked eager vs jit (with ``check=True``: every replay also runs eagerly and
must agree) vs a Python-loop reference; gradients of scan programs against the unrolled program
and central finite differences in float64, to second order; ``jvp`` through scan and while_loop;
cond/switch branches with different gradients; the one-line errors; and the size of the
compiled step, which must not grow with the trip count."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import lax
from rlgrad import numpy as rnp
from rlgrad.tree_util import tree_flatten

RNG = np.random.default_rng(0)
W = RNG.standard_normal((3, 3)) * 0.5
U = RNG.standard_normal((3, 3)) * 0.5


def _step(W: Any) -> Callable:
    def step(h: Any, x: Any) -> tuple[Any, Any]:
        h = rnp.tanh(h @ W + x)
        return h, rnp.sum(h * h, axis=-1)
    return step


def _loss_scan(w: Any, h0: Any, xs: Any) -> Any:
    h, ys = lax.scan(_step(w), h0, xs)
    return rnp.sum(h) + rnp.sum(ys * ys)


def _loss_unrolled(w: Any, h0: Any, xs: Any) -> Any:
    h, ys = h0, []
    for t in range(xs.shape[0]):
        h, y = _step(w)(h, xs[t])
        ys.append(y)
    return rnp.sum(h) + rnp.sum(rnp.stack(ys) ** 2)


def _args(T: int = 5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(T)
    return W.copy(), rng.standard_normal((2, 3)), rng.standard_normal((T, 2, 3))


def _fd_grad(f: Callable, args: tuple, argnum: int, eps: float = 1e-6) -> np.ndarray:
    x = np.array(args[argnum], dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        for sign in (1, -1):
            xp = x.copy()
            xp[i] += sign * eps
            a = list(args)
            a[argnum] = xp
            g[i] += sign * float(np.asarray(f(*a))) / (2 * eps)
    return g


def _close(a: Any, b: Any, tol: float = 1e-9) -> None:
    np.testing.assert_allclose(np.asarray(getattr(a, "_value", a)),
                               np.asarray(getattr(b, "_value", b)), rtol=tol, atol=tol)


# ---- scan --------------------------------------------------------------------------------------
def test_scan_eager_and_jit_match_a_python_loop() -> None:
    w, h0, xs = _args()
    ref = _loss_unrolled(w, h0, xs)
    _close(_loss_scan(w, h0, xs), ref)
    f = rlgrad.jit(_loss_scan, check=True)
    for T in (5, 5, 7):
        w, h0, xs = _args(T)
        _close(f(w, h0, xs), _loss_unrolled(w, h0, xs))


def test_scan_pytrees_reverse_and_length() -> None:
    def step(c: dict, x: tuple) -> tuple[dict, Any]:
        a, b = x
        new = {"s": c["s"] + a, "p": c["p"] * b}
        return new, (new["s"], [a * b])

    def run(s: Any, p: Any, a: Any, b: Any) -> Any:
        return lax.scan(step, {"s": s, "p": p}, (a, b), reverse=True)

    rng = np.random.default_rng(1)
    s, p, a, b = rng.standard_normal(2), rng.standard_normal(2), rng.standard_normal((4, 2)), \
        rng.standard_normal((4, 2))
    ss, pp, out_s, out_ab = s.copy(), p.copy(), [None] * 4, [None] * 4
    for t in range(3, -1, -1):
        ss, pp = ss + a[t], pp * b[t]
        out_s[t], out_ab[t] = ss, a[t] * b[t]
    for f in (run, rlgrad.jit(run, check=True)):
        c, (ys, [yab]) = f(s, p, a, b)
        _close(c["s"], ss)
        _close(c["p"], pp)
        _close(ys, np.stack(out_s))
        _close(yab, np.stack(out_ab))
    count, ys = lax.scan(lambda c, _: (c + 1, c * 2), np.int64(0), None, length=4)
    assert int(count) == 4 and np.asarray(ys).tolist() == [0, 2, 4, 6]
    jc, jys = rlgrad.jit(lambda c: lax.scan(lambda c, _: (c + 1, c * 2), c, None, length=4))(np.int64(0))
    assert int(jc) == 4 and np.asarray(jys).tolist() == [0, 2, 4, 6]


@pytest.mark.parametrize("argnum", [0, 1, 2])
def test_scan_gradients_match_unrolled_and_finite_differences(argnum: int) -> None:
    args = _args()
    g_scan = rlgrad.grad(_loss_scan, argnum)(*args)
    g_unrolled = rlgrad.grad(_loss_unrolled, argnum)(*args)
    _close(g_scan, g_unrolled)
    _close(g_scan, _fd_grad(_loss_unrolled, args, argnum), tol=1e-6)
    g_jit = rlgrad.jit(rlgrad.grad(_loss_scan, argnum), check=True)
    for T in (5, 6):
        a = _args(T)
        _close(g_jit(*a), rlgrad.grad(_loss_unrolled, argnum)(*a))


def test_scan_second_order_under_jit_matches_unrolled_and_finite_differences() -> None:
    """grad of grad through scan: the VJP of the reverse scan is a scan again."""
    def inner(w: Any, h0: Any, xs: Any, loss: Callable) -> Any:
        g = rlgrad.grad(loss, 0)(w, h0, xs)
        return rnp.sum(g * g) + rnp.sum(g * h0[0])

    args = _args(4)
    ref = rlgrad.grad(lambda *a: inner(*a, _loss_unrolled), 0)(*args)
    fd = _fd_grad(lambda *a: inner(*a, _loss_unrolled), args, 0, eps=1e-5)
    _close(ref, fd, tol=1e-5)
    _close(rlgrad.grad(lambda *a: inner(*a, _loss_scan), 0)(*args), ref)
    jitted = rlgrad.jit(rlgrad.grad(lambda *a: inner(*a, _loss_scan), (0, 1)), check=True)
    got = jitted(*args)
    want = rlgrad.grad(lambda *a: inner(*a, _loss_unrolled), (0, 1))(*args)
    for a, b in zip(got, want):
        _close(a, b)
    h = rlgrad.jit(rlgrad.hessian(lambda xs: _loss_scan(W, args[1], xs)))(args[2])
    _close(h, rlgrad.hessian(lambda xs: _loss_unrolled(W, args[1], xs))(args[2]))


def test_scan_captured_parameter_gets_its_gradient_under_jit() -> None:
    """A Linear's weight read by the body (not passed in) is an input of the loop's node."""
    rlgrad.manual_seed(0)
    cell = rlgrad.nn.Linear(3, 3).double()
    xs = RNG.standard_normal((6, 2, 3))

    def step(h: Any, x: Any) -> tuple[Any, None]:
        return rlgrad.tanh(cell(h) + x), None

    def loss(xs: Any) -> Any:
        h, _ = lax.scan(step, rlgrad.zeros(2, 3, dtype=rlgrad.float64), xs)
        return (h ** 2).sum()

    def train(xs: Any) -> Any:
        cell.zero_grad()
        out = loss(xs)
        out.backward()
        return out

    eager = train(rlgrad.tensor(xs))
    g_eager = cell.weight.grad.numpy().copy()
    f = rlgrad.jit(train, check=True)
    _close(f(xs), eager)
    _close(cell.weight.grad, g_eager)
    _close(f(xs * 2), train(rlgrad.tensor(xs * 2)))


def test_jvp_through_scan_eager_and_jit() -> None:
    w, h0, xs = _args()
    v = np.ones_like(w)

    def f(w: Any) -> Any:
        return rlgrad.jvp(lambda w: _loss_scan(w, h0, xs), (w,), (v,))

    want = rlgrad.jvp(lambda w: _loss_unrolled(w, h0, xs), (w,), (v,))
    for got in (f(w), rlgrad.jit(f, check=True)(w)):
        _close(got[0], want[0])
        _close(got[1], want[1])
    _close(want[1], np.sum(_fd_grad(_loss_unrolled, (w, h0, xs), 0) * v), tol=1e-6)


# ---- program size -------------------------------------------------------------------------------
def test_compiled_program_size_does_not_grow_with_trip_count() -> None:
    f = rlgrad.jit(rlgrad.value_and_grad(_loss_scan, (0, 1)))
    sizes = [len(f.lower(*_args(T)).splitlines()) for T in (8, 32, 128)]
    assert sizes[0] == sizes[1] == sizes[2]
    unrolled = rlgrad.jit(rlgrad.value_and_grad(_loss_unrolled, (0, 1)))
    assert len(unrolled.lower(*_args(32)).splitlines()) > 4 * sizes[0]


def test_a_new_trip_count_does_not_retrace_the_body() -> None:
    calls = []
    step = _step(W)

    def body(h: Any, x: Any) -> tuple[Any, Any]:
        calls.append(1)
        return step(h, x)

    f = rlgrad.jit(lambda h0, xs: lax.scan(body, h0, xs)[0])
    for T in (3, 9, 27):
        _, h0, xs = _args(T)
        _close(f(h0, xs), lax.scan(step, h0, xs)[0])
    assert len(calls) == 1


def test_jvp_bodies_are_not_traced_again_for_a_new_trip_count() -> None:
    """Forward mode's scan (of the step's jvp) is keyed as reverse mode's: by the forward body."""
    made: list[str] = []
    orig = lax._Body.__init__

    def counting(self: Any, fn: Any, values: Any, where: str) -> None:
        made.append(where)
        orig(self, fn, values, where)

    step = _step(W)

    def f(h0: Any, xs: Any) -> Any:
        return rlgrad.jvp(lambda h, x: rnp.sum(lax.scan(step, h, x)[1]), (h0, xs),
                          (rnp.ones_like(h0), rnp.ones_like(xs)))

    g = rlgrad.jit(f)
    lax._Body.__init__ = counting
    try:
        for T in (3, 9, 27):
            _, h0, xs = _args(T)
            made.clear()
            got, want = g(h0, xs), f(h0, xs)
            _close(got[1], want[1])
            assert made == [] or T == 3, made
    finally:
        lax._Body.__init__ = orig


# ---- unroll -------------------------------------------------------------------------------------
@pytest.mark.parametrize("reverse", [False, True])
def test_unroll_gives_the_same_values_and_gradients(reverse: bool) -> None:
    """JAX's ``unroll``: k steps per call of the compiled body, the n % k left over a loop of
    their own; bit for bit the values and gradients of unroll=1, and of the eager loop."""
    _, h0, xs = _args(7)
    weights = np.arange(7.0)[:, None]
    body_calls: list[int] = []

    def loss(h: Any, x: Any, unroll: Any) -> Any:
        def body(c: Any, xt: Any) -> tuple[Any, Any]:  # a new function: traced for each case
            body_calls.append(1)
            c = rnp.tanh(c @ W + xt["x"])
            return c, (rnp.sum(c * c, axis=-1), None)

        h, (ys, _) = lax.scan(body, h, {"x": x}, unroll=unroll, reverse=reverse)
        return rnp.sum(h) + rnp.sum(ys * ys * weights)

    want = rlgrad.value_and_grad(lambda h, x: loss(h, x, 1), (0, 1))(h0, xs)
    base = rlgrad.jit(rlgrad.value_and_grad(lambda h, x: loss(h, x, 1), (0, 1)))(h0, xs)
    for unroll, traced in ((1, 1), (2, 2 + 1), (3, 3 + 1), (7, 7), (10, 1), (True, 7),
                           (False, 1)):
        f = rlgrad.jit(rlgrad.value_and_grad(lambda h, x, u=unroll: loss(h, x, u), (0, 1)))
        body_calls.clear()
        lax._BODIES.clear()  # (else a body traced for an earlier case is found in the cache)
        got = f(h0, xs)
        assert len(body_calls) == traced, (unroll, len(body_calls))
        for g, b, w in zip(tree_flatten(got)[0], tree_flatten(base)[0], tree_flatten(want)[0]):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(b))
            _close(g, w, tol=1e-12)
        _close(f(h0, xs * 2)[0], loss(h0, xs * 2, 1))


def test_unroll_must_be_a_bool_or_a_positive_int() -> None:
    _, h0, xs = _args(4)
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="`unroll` must be a `bool` or a positive `int`."):
            lax.scan(_step(W), h0, xs, unroll=bad)
    f = rlgrad.jit(lambda x: lax.fori_loop(0, 5, lambda i, v: v * 0.5 + i, x, unroll=2))
    _close(f(np.ones(3)), lax.fori_loop(0, 5, lambda i, v: v * 0.5 + i, np.ones(3)))


# ---- fori_loop, while_loop ----------------------------------------------------------------------
def test_fori_loop_static_and_traced_bounds() -> None:
    def body(i: Any, x: Any) -> Any:
        return x * 0.9 + i

    def ref(lo: int, hi: int, x: Any) -> Any:
        for i in range(lo, hi):
            x = x * 0.9 + i
        return x

    x = RNG.standard_normal(3)
    _close(lax.fori_loop(2, 7, body, x), ref(2, 7, x))
    f = rlgrad.jit(lambda x: lax.fori_loop(2, 7, body, x), check=True)
    _close(f(x), ref(2, 7, x))
    dyn = rlgrad.jit(lambda n, x: lax.fori_loop(0, n, body, x), check=True)
    _close(dyn(np.int64(4), x), ref(0, 4, x))
    _close(dyn(np.int64(9), x), ref(0, 9, x))
    g = rlgrad.jit(rlgrad.grad(lambda x: lax.fori_loop(0, 5, body, x).sum()), check=True)
    _close(g(x), np.full(3, 0.9 ** 5))


def test_while_loop_eager_jit_and_forward_mode() -> None:
    def cond(s: Any) -> Any:
        return s[0] < 10.0

    def body(s: Any) -> Any:
        x, k = s
        return x * 1.5 + 1.0, k + 1

    x = np.array(1.0)
    want = (x, 0)
    while want[0] < 10.0:
        want = (want[0] * 1.5 + 1.0, want[1] + 1)
    for f in (lax.while_loop, rlgrad.jit(lax.while_loop, static_argnums=(0, 1), check=True)):
        got = f(cond, body, (x, np.int64(0)))
        _close(got[0], want[0])
        assert int(np.asarray(getattr(got[1], "_value", got[1]))) == want[1]

    def g(x: Any) -> Any:
        return lax.while_loop(lambda c: c < 10.0, lambda c: c * c + 0.5, x)

    # x -> x^2 + 0.5 applied 3 times from 1.2: derivative by the chain rule
    xs = [1.2]
    while xs[-1] < 10.0:
        xs.append(xs[-1] ** 2 + 0.5)
    deriv = np.prod([2 * v for v in xs[:-1]])
    for run in (lambda x: rlgrad.jvp(g, (x,), (np.array(1.0),)),
                rlgrad.jit(lambda x: rlgrad.jvp(g, (x,), (np.array(1.0),)), check=True)):
        out, t = run(np.array(1.2))
        _close(out, xs[-1])
        _close(t, deriv)


def test_while_loop_refuses_reverse_mode_in_one_line() -> None:
    def f(x: Any) -> Any:
        return lax.while_loop(lambda c: c < 10.0, lambda c: c * 2.0, x)

    for run in (rlgrad.grad(f), rlgrad.jit(rlgrad.grad(f))):
        with pytest.raises(ValueError, match="Reverse-mode differentiation does not work for "
                                             "lax.while_loop") as e:
            run(np.array(1.0))
        assert "\n" not in str(e.value)
    traced_bound = rlgrad.jit(rlgrad.grad(lambda x, n: lax.fori_loop(0, n, lambda i, c: c * 2.0, x)))
    with pytest.raises(ValueError, match="lax.while_loop or lax.fori_loop with dynamic"):
        traced_bound(np.array(1.0), np.int64(3))


# ---- cond, switch -------------------------------------------------------------------------------
def _branches() -> list[Callable]:
    return [lambda x, y: rnp.sin(x) * y, lambda x, y: x * x * y, lambda x, y: rnp.exp(x) + y]


@pytest.mark.parametrize("k", [-1, 0, 1, 2, 5])
def test_switch_picks_the_branch_and_its_gradient(k: int) -> None:
    x, y = RNG.standard_normal(3), RNG.standard_normal(3)
    br = _branches()
    kk = min(max(k, 0), 2)

    def loss(i: Any, x: Any, y: Any) -> Any:
        return rnp.sum(lax.switch(i, br, x, y))

    want = rlgrad.grad(lambda x, y: rnp.sum(br[kk](x, y)), (0, 1))(x, y)
    got_eager = rlgrad.grad(loss, (1, 2))(np.int64(k), x, y)
    f = rlgrad.jit(rlgrad.grad(loss, (1, 2)), check=True)
    got_jit = f(np.int64(k), x, y)
    for a, b, c in zip(want, got_eager, got_jit):
        _close(a, b)
        _close(a, c)
    t = rlgrad.jit(lambda i, x: rlgrad.jvp(lambda x: lax.switch(i, br, x, y), (x,), (np.ones(3),)))
    _close(t(np.int64(k), x)[1], rlgrad.jvp(lambda x: br[kk](x, y), (x,), (np.ones(3),))[1])


def test_cond_with_different_gradients_per_branch_and_a_captured_parameter() -> None:
    w = rlgrad.tensor(2.0, dtype=rlgrad.float64, requires_grad=True)

    def f(p: Any, x: Any) -> Any:
        return lax.cond(p, lambda x: x * w, lambda x: x ** 3, x).sum()

    x = np.array([0.5, -1.5])
    for p, dx in ((True, np.full(2, 2.0)), (False, 3 * x ** 2)):
        jf = rlgrad.jit(rlgrad.grad(f, 1), check=True)
        _close(jf(np.array(p), x), dx)
        _close(rlgrad.grad(f, 1)(np.array(p), x), dx)

    def train(p: Any, x: Any) -> Any:
        w.grad = None
        out = f(p, x)
        out.backward()
        return out

    jt = rlgrad.jit(train)
    jt(np.array(True), x)
    _close(w.grad, x.sum())
    jt(np.array(False), x)
    assert w.grad is None or float(np.asarray(w.grad._value)) == 0.0


# ---- errors ---------------------------------------------------------------------------------------
def test_carry_type_changed_by_the_body_is_one_line() -> None:
    def bad_dtype(c: Any, x: Any) -> tuple[Any, None]:
        return c.astype(np.float32), None

    def bad_shape(c: Any, x: Any) -> tuple[Any, None]:
        return rnp.concatenate([c, c]), None

    for body, what in ((bad_dtype, "float64\\[3\\] in and float32\\[3\\] out"),
                       (bad_shape, "float64\\[3\\] in and float64\\[6\\] out")):
        for run in (lambda c, body=body: lax.scan(body, c, None, length=3),
                    rlgrad.jit(lambda c, body=body: lax.scan(body, c, None, length=3))):
            with pytest.raises(TypeError, match="carry input and output must have equal types.*"
                                                + what) as e:
                run(rlgrad.tensor(np.zeros(3)))
            assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="different leading axis sizes: 3, 4"):
        lax.scan(lambda c, x: (c, x), 0.0, (np.zeros(3), np.zeros(4)))
    with pytest.raises(TypeError, match="branch outputs must have the same types"):
        rlgrad.jit(lambda p, x: lax.cond(p, lambda x: x, lambda x: x[:2], x))(np.array(True),
                                                                             np.zeros(3))
    with pytest.raises(TypeError, match="cond_fun must return a boolean scalar"):
        lax.while_loop(lambda c: c, lambda c: c - 1, np.array(3.0))


def test_body_that_updates_state_in_place_is_refused_under_jit() -> None:
    p = rlgrad.tensor(np.zeros(3), requires_grad=True)

    def body(c: Any, x: Any) -> tuple[Any, None]:
        with rlgrad.no_grad():
            p.add_(x)
        return c + x, None

    with pytest.raises(TypeError, match="a loop body must be a pure function"):
        rlgrad.jit(lambda xs: lax.scan(body, np.zeros(3), xs)[0])(np.ones((2, 3)))


def test_stop_gradient_is_lax_s() -> None:
    assert lax.stop_gradient is rlgrad.stop_gradient
    g = rlgrad.grad(lambda x: (x * lax.stop_gradient(x)).sum())(np.array([2.0]))
    _close(g, [2.0])


# ---- nn's recurrent layers: one scan per layer and direction under jit -----------------------
@pytest.mark.parametrize("name, kw", [("GRU", {}), ("LSTM", {"num_layers": 2, "bidirectional": True}),
                                      ("RNN", {"nonlinearity": "relu"})])
def test_recurrent_layers_under_jit_scan_and_match_eager(name: str, kw: dict) -> None:
    rlgrad.manual_seed(0)
    m = getattr(rlgrad.nn, name)(4, 5, **kw).double()

    def step(x: Any) -> Any:
        m.zero_grad()
        out = m(x)[0]
        loss = (out * out).sum()
        loss.backward()
        return loss

    f = rlgrad.jit(step, check=True)
    rng = np.random.default_rng(3)
    for T in (3, 3, 8):
        x = rng.standard_normal((T, 2, 4))
        got = f(x)
        g_jit = [p.grad.numpy().copy() for p in m.parameters()]
        _close(got, step(rlgrad.tensor(x)))
        for a, p in zip(g_jit, m.parameters()):
            _close(a, p.grad)
    sizes = {len(rlgrad.jit(step).lower(rng.standard_normal((T, 2, 4))).splitlines())
             for T in (8, 32, 128)}
    assert len(sizes) == 1


# ---- GAE as a scan ------------------------------------------------------------------------------
def test_gae_scan_equals_the_default_gae_eager_jit_and_differentiates() -> None:
    from rlgrad.rl.buffers import compute_gae, compute_gae_scan

    rng = np.random.default_rng(7)
    T, N = 16, 3
    r, v, nv = (rng.standard_normal((T, N)).astype(np.float32) for _ in range(3))
    term = rng.random((T, N)) < 0.1
    done = term | (rng.random((T, N)) < 0.1)
    want = compute_gae(r, v, nv, term, done, 0.99, 0.95)
    f = rlgrad.jit(lambda *a: compute_gae_scan(*a, 0.99, 0.95), check=True)
    for got in (compute_gae_scan(r, v, nv, term, done, 0.99, 0.95), f(r, v, nv, term, done)):
        for a, b in zip(got, want):
            assert np.asarray(getattr(a, "_value", a)).dtype == np.float32
            np.testing.assert_allclose(np.asarray(getattr(a, "_value", a)), b, rtol=1e-5, atol=1e-5)
    # d sum(A) / d r_t = sum over later-or-equal steps of the lambda-discounted chain: by hand
    r64, v64, nv64 = r.astype(np.float64), v.astype(np.float64), nv.astype(np.float64)
    g = rlgrad.grad(lambda r: rnp.sum(compute_gae_scan(r, v64, nv64, term, done, 0.99, 0.95)[0]))(r64)
    c = 0.99 * 0.95 * (1.0 - done)
    want_g = np.zeros((T, N))
    acc = np.zeros(N)
    for t in range(T):  # A_s depends on delta_t (t >= s) with weight prod_{s<=k<t} c_k
        acc = acc * c[t - 1] + 1.0 if t else np.ones(N)
        want_g[t] = acc
    _close(g, want_g)


def _n_step_returns_by_hand(r: np.ndarray, nv: np.ndarray, term: np.ndarray, done: np.ndarray,
                            gamma: float) -> np.ndarray:
    """A2C's bootstrapped returns, written out: each step's rewards to the end of its episode
    within the rollout, then V of where it stopped (0 past a termination)."""
    T, N = r.shape
    out = np.zeros((T, N))
    for t in range(T):
        for n in range(N):
            g, disc = 0.0, 1.0
            for k in range(t, T):
                g += disc * r[k, n]
                disc *= gamma
                if done[k, n] or k == T - 1:
                    g += disc * nv[k, n] * (not term[k, n])
                    break
            out[t, n] = g
    return out


def test_n_step_returns_are_gae_with_lambda_one_as_a_scan() -> None:
    """The rollout's n-step returns (A2C's targets) are GAE with lambda = 1: compute_gae_scan,
    eagerly and under jit, against the Python loop that sums them by hand."""
    from rlgrad.rl.buffers import compute_gae_scan

    rng = np.random.default_rng(11)
    T, N, gamma = 12, 3, 0.9
    r, v, nv = (rng.standard_normal((T, N)) for _ in range(3))
    term = rng.random((T, N)) < 0.15
    done = term | (rng.random((T, N)) < 0.15)
    nv[:-1] = np.where(done[:-1], nv[:-1], v[1:])  # within an episode, V(s_{t+1}) is the next V
    want = _n_step_returns_by_hand(r, nv, term, done, gamma)
    f = rlgrad.jit(lambda *a: compute_gae_scan(*a, gamma, 1.0)[1], check=True)
    _close(compute_gae_scan(r, v, nv, term, done, gamma, 1.0)[1], want, tol=1e-12)
    for scale in (1.0, -2.0):
        _close(f(r * scale, v, nv, term, done), _n_step_returns_by_hand(r * scale, nv, term, done, gamma),
               tol=1e-12)


# ---- nesting, integer carries, float32 --------------------------------------------------------
def test_nested_scan_and_its_gradient_under_jit() -> None:
    def inner(c: Any, x: Any) -> tuple[Any, None]:
        return rnp.tanh(c @ W + x), None

    def outer(c: Any, xs: Any) -> tuple[Any, Any]:
        c2, _ = lax.scan(inner, c, xs)
        return c2 * 0.5 + c, rnp.sum(c2)

    def loss(c0: Any, xss: Any) -> Any:
        c, ys = lax.scan(outer, c0, xss)
        return rnp.sum(c ** 2) + rnp.sum(ys)

    def unrolled(c0: Any, xss: Any) -> Any:
        c, ys = c0, []
        for t in range(xss.shape[0]):
            c2 = c
            for s in range(xss.shape[1]):
                c2 = rnp.tanh(c2 @ W + xss[t, s])
            c, y = c2 * 0.5 + c, rnp.sum(c2)
            ys.append(y)
        return rnp.sum(c ** 2) + rnp.sum(rnp.stack(ys))

    rng = np.random.default_rng(4)
    c0, xss = rng.standard_normal((2, 3)), rng.standard_normal((4, 5, 2, 3))
    _close(rlgrad.jit(loss, check=True)(c0, xss), unrolled(c0, xss))
    got = rlgrad.jit(rlgrad.grad(loss, (0, 1)), check=True)(c0, xss)
    for a, b in zip(got, rlgrad.grad(unrolled, (0, 1))(c0, xss)):
        _close(a, b)


def test_integer_carry_beside_a_float_one_and_float32_kept() -> None:
    def step(c: tuple, x: Any) -> tuple[tuple, Any]:
        k, h = c
        return (k + 1, h * x), k

    def loss(h: Any, xs: Any) -> Any:
        (k, h), ks = lax.scan(step, (np.int64(0), h), xs)
        return rnp.sum(h) + rnp.sum(ks) + k

    rng = np.random.default_rng(5)
    h, xs = rng.standard_normal(3), rng.standard_normal((4, 3))
    for g in (rlgrad.grad(loss), rlgrad.jit(rlgrad.grad(loss), check=True)):
        _close(g(h, xs), np.prod(xs, 0))
    _close(rlgrad.jit(loss)(h, xs), np.sum(h * np.prod(xs, 0)) + 6 + 4)
    h32, xs32 = h.astype(np.float32), xs.astype(np.float32)
    out = rlgrad.jit(lambda h, xs: lax.scan(step, (np.int64(0), h), xs))(h32, xs32)
    assert out[0][1].dtype == np.float32 and out[0][0].dtype == np.int64
    assert out[1].dtype == np.int64


def test_a_body_reading_this_trace_s_values_through_an_object_is_traced_again() -> None:
    """The same body function over the same object, which holds a value of the enclosing trace
    (here its argument): a cached body would read the first trace's value; it is not cached."""
    class Holder:
        scale: Any = None

    holder = Holder()

    def body(c: Any, x: Any) -> tuple[Any, None]:
        return c * holder.scale + x, None

    def f(scale: Any, xs: Any) -> Any:
        holder.scale = scale
        return lax.scan(body, np.zeros(3), xs)[0]

    jf = rlgrad.jit(f, check=True)
    for T, s in ((2, 0.5), (3, 2.0), (3, 3.0)):
        xs = np.ones((T, 3))
        want = np.zeros(3)
        for _ in range(T):
            want = want * s + 1.0
        _close(jf(np.full(3, s), xs), want)


def test_body_indexing_with_a_traced_argument_reads_it_at_every_call() -> None:
    table = rlgrad.tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)

    def f(idx: Any, xs: Any) -> Any:
        def body(c: Any, x: Any) -> tuple[Any, None]:
            return c + table[idx] * x, None
        return lax.scan(body, np.zeros(3), xs)[0]

    jf = rlgrad.jit(f, check=True)
    for i in (1, 2, 3, 3, 0):
        _close(jf(np.array(i), np.ones((2, 1))), 2 * np.arange(12.0).reshape(4, 3)[i])


def test_map_eager_jit_and_gradient() -> None:
    xs = RNG.standard_normal((5, 3))

    def f(xs: Any) -> Any:
        return lax.map(lambda x: rnp.sum(rnp.sin(x) * x), xs)

    want = np.sum(np.sin(xs) * xs, axis=1)
    _close(f(xs), want)
    _close(rlgrad.jit(f, check=True)(xs), want)
    g = rlgrad.jit(rlgrad.grad(lambda xs: rnp.sum(f(xs))), check=True)
    _close(g(xs), np.cos(xs) * xs + np.sin(xs))


def test_a_new_trip_count_does_not_retrace_the_backward_body(monkeypatch: Any) -> None:
    traced = []
    init = lax._Body.__init__

    def counting(self: Any, *a: Any, **k: Any) -> None:
        traced.append(a[2] if len(a) > 2 else k.get("where"))
        init(self, *a, **k)

    monkeypatch.setattr(lax._Body, "__init__", counting)
    w = rlgrad.tensor(W, requires_grad=True)

    def body(h: Any, x: Any) -> tuple[Any, Any]:
        h = rnp.tanh(h @ w + x)
        return h, h

    g = rlgrad.jit(rlgrad.grad(lambda h0, xs: rnp.sum(lax.scan(body, h0, xs)[1] ** 2), (0, 1)))
    for T in (3, 9, 27):
        _, h0, xs = _args(T)
        got = g(h0, xs)
        want = rlgrad.grad(lambda h0, xs: rnp.sum(lax.scan(body, h0, xs)[1] ** 2), (0, 1))(h0, xs)
        for a, b in zip(got, want):
            _close(a, b)
    assert len(traced) == 2, traced  # the body and its VJP's body, each once


def test_jit_of_vmap_of_loops_equals_vmap_eagerly() -> None:
    """The loop nodes have no batching rule: inside vmap, under jit too, scan and fori_loop run
    as eagerly (each op batched); values and gradients equal vmap's without jit."""
    def f(r: Any) -> Any:
        c, ys = lax.scan(lambda c, y: (rnp.tanh(c * 0.5 + y), c * 2.0), rnp.zeros(()), r)
        k = lax.fori_loop(0, 3, lambda i, v: v * r[0] + i, r[1])
        return c + rnp.sum(ys * ys) + k

    def loss(x: Any) -> Any:
        return rnp.sum(rlgrad.vmap(f)(x) ** 2)

    x = np.random.default_rng(3).standard_normal((4, 5))
    _close(rlgrad.jit(rlgrad.vmap(f), check=True)(x), rlgrad.vmap(f)(x), tol=1e-12)
    _close(rlgrad.jit(rlgrad.grad(loss), check=True)(x), rlgrad.grad(loss)(x), tol=1e-12)
    _close(rlgrad.grad(loss)(x), _fd_grad(loss, (x,), 0), tol=1e-6)

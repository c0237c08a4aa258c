"""rlgrad.jit: a traced-and-replayed step gives exactly what eager execution gives."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp


def _problem(batch: int, seed: int = 0, dtype: type = np.float64) -> tuple:
    rng = np.random.default_rng(seed)
    params = [
        rng.standard_normal((4, 8)).astype(dtype), np.zeros(8, dtype),
        rng.standard_normal((8, 3)).astype(dtype), np.zeros(3, dtype),
    ]
    x = rng.standard_normal((batch, 4)).astype(dtype)
    a = rng.integers(0, 3, size=batch)
    adv = rng.standard_normal(batch).astype(dtype)
    return params, x, a, adv


def policy_loss(params: list, x: np.ndarray, a: np.ndarray, adv: np.ndarray) -> object:
    w1, b1, w2, b2 = params
    logp = rnp.log_softmax(rnp.tanh(x @ w1 + b1) @ w2 + b2, axis=1)
    return -rnp.mean(logp[np.arange(x.shape[0]), a] * adv)


def test_jit_value_and_grad_equals_eager() -> None:
    args = _problem(16)
    eager_v, eager_g = rlgrad.value_and_grad(policy_loss)(*args)
    jitted = rlgrad.jit(rlgrad.value_and_grad(policy_loss))
    for _ in range(2):  # the first call traces, the second replays
        v, g = jitted(*args)
        assert isinstance(g, list) and len(g) == 4
        np.testing.assert_allclose(v, eager_v, rtol=1e-12)
        for got, want in zip(g, eager_g):
            assert isinstance(got, np.ndarray)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_new_actions_and_data_are_used_on_replay() -> None:
    params, x, a, adv = _problem(16)
    jitted = rlgrad.jit(rlgrad.value_and_grad(policy_loss))
    jitted(params, x, a, adv)
    params2, x2, _, adv2 = _problem(16, seed=1)
    a2 = (a + 1) % 3
    v, g = jitted(params2, x2, a2, adv2)
    ev, eg = rlgrad.value_and_grad(policy_loss)(params2, x2, a2, adv2)
    np.testing.assert_allclose(v, ev, rtol=1e-12)
    for got, want in zip(g, eg):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_retraces_when_a_shape_or_dtype_changes() -> None:
    jitted = rlgrad.jit(rlgrad.value_and_grad(policy_loss))
    jitted(*_problem(16))
    jitted(*_problem(5))
    jitted(*_problem(5, dtype=np.float32))
    assert len(jitted._cache) == 3
    v, g = jitted(*_problem(5, dtype=np.float32))
    assert g[0].dtype == np.float32 and np.asarray(v).dtype == np.float32
    assert len(jitted._cache) == 3


def test_captured_tensor_is_read_at_every_replay() -> None:
    w = rlgrad.tensor(np.array([1.0, 2.0]))

    def f(x: np.ndarray) -> object:
        return rnp.sum(x * w)

    jitted = rlgrad.jit(rlgrad.grad(f))
    np.testing.assert_allclose(jitted(np.ones(2)), [1.0, 2.0])
    w._value *= 3  # an optimizer's in-place update
    np.testing.assert_allclose(jitted(np.ones(2)), [3.0, 6.0])


def test_autograd_grad_inside_jit_and_dict_outputs() -> None:
    def step(w: np.ndarray, x: np.ndarray) -> dict:
        wt = rlgrad.tensor(w).requires_grad_() if not isinstance(w, rlgrad.Tensor) else w
        wt.requires_grad_()
        loss = ((x @ wt) ** 2).sum()
        (gw,) = rlgrad.autograd.grad(loss, wt)
        return {"loss": loss, "grad": gw}

    rng = np.random.default_rng(0)
    w, x = rng.standard_normal(3), rng.standard_normal((5, 3))
    jitted = rlgrad.jit(step)
    for _ in range(2):
        out = jitted(w, x)
        np.testing.assert_allclose(out["grad"], 2 * x.T @ (x @ w), rtol=1e-12)
        np.testing.assert_allclose(out["loss"], np.sum((x @ w) ** 2), rtol=1e-12)


def test_second_order_inside_jit() -> None:
    f = lambda x: rnp.sum(rnp.sin(x) * x**2)  # noqa: E731
    hvp = rlgrad.jit(rlgrad.hvp(f))
    x, v = np.array([0.3, -1.2, 2.0]), np.array([1.0, 0.5, -2.0])
    h_diag = -np.sin(x) * x**2 + 4 * x * np.cos(x) + 2 * np.sin(x)  # d2/dx2 of sin(x) x^2
    for _ in range(2):
        np.testing.assert_allclose(hvp(x, v), h_diag * v, rtol=1e-10)


def test_static_argnums_are_part_of_the_key() -> None:
    f = rlgrad.jit(lambda x, axis: rnp.sum(x, axis=axis), static_argnums=(1,))
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(f(x, 0), [3.0, 5.0, 7.0])
    np.testing.assert_allclose(f(x, 1), [3.0, 12.0])


def test_value_dependent_python_is_refused_with_a_clear_error() -> None:
    def f(x: np.ndarray) -> object:
        if rnp.sum(x) > 0:  # control flow on a traced value
            return x * 2
        return x

    line = f.__code__.co_firstlineno + 1  # the user's `if`, named in the message
    with pytest.raises(RuntimeError, match=rf"rlgrad.jit: bool\(\) of a traced tensor at "
                                           rf".*test_jit.py:{line} reads its value"):
        rlgrad.jit(f)(np.ones(3))
    with pytest.raises(RuntimeError, match=r"item\(\)"):
        rlgrad.jit(lambda x: x * rnp.sum(x).item())(np.ones(3))


def test_array_derived_from_an_argument_outside_rlgrad_is_refused() -> None:
    def f(x: np.ndarray, idx: np.ndarray) -> object:
        rows = idx._value[::2]  # a NumPy view of the argument, invisible to the trace
        return rnp.sum(x[rows])

    with pytest.raises(RuntimeError, match="derived from a traced value"):
        rlgrad.jit(f)(np.arange(4.0), np.array([0, 1, 2, 3]))


def test_lower_shows_straight_line_code_without_dead_ops() -> None:
    def f(x: np.ndarray) -> object:
        _unused = rnp.exp(x) * 5
        return rnp.sum(rnp.tanh(x))

    src = rlgrad.jit(rlgrad.grad(f)).lower(np.ones(3))
    assert src.startswith("def step(a0):")
    assert "# tanh" in src  # each line names its op
    assert "# exp" not in src  # exp(x) * 5 was dead code: dropped


def test_sampling_inside_jit_is_refused_because_the_draw_would_be_frozen() -> None:
    from rlgrad.distributions import Normal

    def f(mu: np.ndarray) -> object:
        return rnp.sum(Normal(mu, 1.0).sample())

    with pytest.raises(RuntimeError, match=r"sample\(\)\)? inside the traced function would be frozen"):
        rlgrad.jit(f)(np.zeros(3))


@pytest.mark.parametrize("pick", ["getitem", "take_along_axis", "gather_nd"])
def test_indices_computed_inside_the_step_are_replayed_not_frozen(pick: str) -> None:
    # Double DQN's pattern: the action comes from an argmax inside the step, then selects a value
    def loss(q: np.ndarray, q2: np.ndarray) -> object:
        a = rnp.argmax(q2, axis=1)
        if pick == "getitem":
            chosen = q[np.arange(q.shape[0]), a]
        elif pick == "take_along_axis":
            chosen = rnp.take_along_axis(q, rnp.expand_dims(a, 1), 1)
        else:
            chosen = rlgrad.gather_nd(q, rnp.stack([np.arange(q.shape[0]), a], axis=1))
        return rnp.sum(chosen**2)

    eager = rlgrad.value_and_grad(loss)
    jitted = rlgrad.jit(eager)
    q = np.arange(6.0).reshape(3, 2)
    first = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    for q2 in (first, 1 - first):  # the second call selects the other action in every row
        v, g = jitted(q, q2)
        ev, eg = eager(q, q2)
        np.testing.assert_allclose(v, ev)
        np.testing.assert_allclose(g, eg)


def test_numpy_slice_of_a_traced_value_is_refused() -> None:
    def f(x: np.ndarray) -> object:
        a = rnp.argmax(x, axis=1)
        return rnp.sum(x[np.arange(2), a._value[::1]])  # a NumPy view the trace cannot follow

    with pytest.raises(RuntimeError, match="derived from a traced value"):
        rlgrad.jit(f)(np.arange(4.0).reshape(2, 2))


def test_returning_a_traced_values_array_returns_it_fresh_at_every_call() -> None:
    """``._value`` of a traced value as an output is that value, not a frozen constant; a NumPy
    slice of it is refused like any other use."""
    jitted = rlgrad.jit(lambda x: rnp.exp(x)._value)
    np.testing.assert_allclose(jitted(np.zeros(2)), [1.0, 1.0])
    np.testing.assert_allclose(jitted(np.ones(2)), [np.e, np.e])
    with pytest.raises(RuntimeError, match="derived from a traced value"):
        rlgrad.jit(lambda x: rnp.exp(x)._value[:1])(np.zeros(2))


def test_dict_batches_take_the_fast_call_and_keep_the_leaf_order() -> None:
    # a step's batch is a dict of arrays: keyed without the tree walk, its leaves in sorted-name
    # order as tree_flatten has them; other dicts (non-str names, nested) take the tree walk
    calls = []

    def f(batch: dict, scale: np.ndarray) -> np.ndarray:
        calls.append(1)
        return batch["x"] * scale - batch["a"] + 2 * batch["b"]

    jf = rlgrad.jit(f)
    rng = np.random.default_rng(0)
    b = {"x": rng.standard_normal(3), "a": rng.standard_normal(3), "b": rng.standard_normal(3)}
    s = np.array(1.5)
    out = jf(b, s)
    np.testing.assert_allclose(out, f(b, s))
    b2 = {k: v + 1 for k, v in reversed(b.items())}  # other insertion order, same names
    np.testing.assert_allclose(jf(b2, s), f(b2, s))
    # traced once, plus the two eager calls (and the replay's, checked by RLGRAD_JIT_CHECK=1)
    assert len(jf._cache) == 1 and len(calls) == 3 + jf.check
    nested = {"x": b["x"], "a": b["a"], "b": [b["b"]]}
    g = rlgrad.jit(lambda t: t["x"] - t["a"] + t["b"][0])
    np.testing.assert_allclose(g(nested), b["x"] - b["a"] + b["b"])
    # non-str names: insertion order, in the cache key as in tree_flatten (the key walk once
    # sorted them while the trace did not: a silently swapped input)
    h = rlgrad.jit(lambda t: t[0] * 2 + t[1])
    np.testing.assert_allclose(h({1: b["a"], 0: b["x"]}), 2 * b["x"] + b["a"])


def test_one_element_broadcasts_are_left_to_the_ufuncs_that_read_them() -> None:
    """A reduction's gradient spread over its input (reshape to one element, broadcast_to) that
    only a two-operand ufunc reads is not materialised: the ufunc broadcasts it, to the same
    bits. Kept where something else reads it (here: returned)."""
    w = np.linspace(0.5, 2, 8).astype(np.float32)

    def step(x, c):
        return rlgrad.grad(lambda v: c[1] * (w * rnp.square(v)).sum())(x)

    x = np.linspace(-1, 1, 8).astype(np.float32)
    c = np.array([0.5, 0.25], np.float32)
    j = rlgrad.jit(step)
    src = j.lower(x, c)
    assert "broadcast_to" not in src and "reshape" not in src, src
    got = j(x, c)
    np.testing.assert_array_equal(got.view(np.uint32), np.asarray(step(x, c)).view(np.uint32))
    np.testing.assert_array_equal(got, 2 * c[1] * w * x)

    def returned(x, c):
        return rnp.broadcast_to(c[1] * x.sum(), (8,)) * x, rnp.broadcast_to(c[:1], (8,))

    j2 = rlgrad.jit(returned)
    assert j2.lower(x, c).count("broadcast_to") == 1  # the one the caller receives stays
    a, b = j2(x, c)
    np.testing.assert_array_equal(a, c[1] * x.sum() * x)
    np.testing.assert_array_equal(b, np.full(8, c[0]))


def test_a_pure_program_runs_once_on_its_first_call() -> None:
    """The trace computed the first call's outputs: that call returns them, it does not run the
    compiled program a second time (later calls run it once each)."""
    from rlgrad.tracer import defvjp, primitive

    runs: list[int] = []

    def double(x: np.ndarray) -> np.ndarray:
        runs.append(1)
        return x * 2.0

    counted = primitive(double, "counted_double", arity=1)
    defvjp(counted, lambda g, ans, x: g * 2.0)
    f = rlgrad.jit(lambda x: counted(rlgrad.as_tensor(x)) + 1.0, check=False)  # (not run twice)
    np.testing.assert_array_equal(np.asarray(f(np.ones(3))), 3.0)
    assert len(runs) == 1
    np.testing.assert_array_equal(np.asarray(f(np.full(3, 2.0))), 5.0)
    assert len(runs) == 2
    g = rlgrad.jit(rlgrad.grad(lambda x: rnp.sum(counted(x) ** 2)), check=False)
    np.testing.assert_array_equal(g(np.ones(3)), 8.0)
    assert len(runs) == 3

"""Forward mode (issue 15 part 3): every primitive's JVP rule against finite differences and
against its VJP, and the JAX-style transforms on top (jvp, linearize, jacfwd, jacrev, hessian,
hvp), their pytrees, argnums, nesting with reverse mode and errors.

The per-primitive test walks the library's primitives (tests/helpers/primitives.py): each
differentiable one needs a case, either a primitive row of tests/helpers/op_rows.py's table or
one in ``EXTRA`` below, so a new primitive without a case (or without a JVP rule) fails here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers.op_rows import MAX_EXAMPLES, ROWS, SETTINGS, Case, recorded
from helpers.primitives import library_primitives
from hypothesis import given, settings
from hypothesis import strategies as st

import rlgrad
import rlgrad.numpy as rnp
from rlgrad import autograd
from rlgrad.tensor import Tensor
from rlgrad.transforms import tree_flatten

EPS = 1e-6


def _differentiable() -> set[str]:
    return {p.name for p in library_primitives() if not p.nondiff}


# ---- cases for the primitives outside ops.py (tests/helpers/op_rows.py covers ops.py) -----------
def _extra_cases(rng: np.random.Generator) -> dict[str, list[Case]]:
    from rlgrad import batching, estimators, ops, special
    from rlgrad.autograd_function import _delayed_error
    from rlgrad.distributions import categorical
    from rlgrad.inplace import index_put
    from rlgrad.nn import cells
    from rlgrad.nn import functional as F
    from rlgrad.rl.ppo import clipped_surrogate_loss

    def r(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
        return rng.uniform(lo, hi, shape)

    def away(*shape: int, lo: float = 0.2, hi: float = 2.0) -> np.ndarray:  # |x| >= lo: no kink
        return rng.choice([-1.0, 1.0], shape) * rng.uniform(lo, hi, shape)

    old, adv = r(6, lo=-1, hi=0), r(6)
    ratio = np.exp(r(6, lo=-1, hi=0.2) - old)
    lp_ok = old + np.log(np.where(np.abs(ratio - 1) < 0.25, ratio * 1.6, ratio))  # off the clip edges
    acts = np.array([2, 0, 1, 2])
    return {
        "linear": [Case(F.linear, (r(3, 4), r(5, 4), r(5))), Case(F.linear, (r(4), r(2, 4), r(2)))],
        # a ring's write (a repeat: the later row wins; -1 and 4: outside, skipped) and its adjoint
        "write_rows": [Case(lambda x, v: ops.write_rows(x, np.array([[1, 3, 1], [-1, 0, 4]]), v),
                          (r(2, 4, 3), r(2, 3, 3)))],
        "written_rows": [Case(lambda g: ops.written_rows(g, np.array([[1, 3, 1], [-1, 0, 4]])),
                              (r(2, 4, 3),))],
        "index_put": [Case(lambda x, v: index_put(x, v, np.array([0, 2, 5]), (3,)), (r(2, 3), r(3))),
                      Case(lambda x, v: index_put(x, v, np.array([1, 4]), (2,)), (r(6), r(1)))],
        "linear_grad_input": [Case(F._linear_grad_input_p, (r(3, 5), r(5, 4)))],
        "linear_grad_weight": [Case(F._linear_grad_weight_p, (r(3, 5), r(3, 4))),
                               Case(F._linear_grad_weight_p, (r(5), r(4)))],
        "linear_grad_input_dense": [Case(F._dense_grad_input_p, (r(3, 5), r(5, 4)))],
        "linear_grad_weight_dense": [Case(F._dense_grad_weight_p, (r(3, 5), r(3, 4)))],
        "conv2d": [Case(lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1),
                        (r(2, 3, 5, 5), r(4, 3, 3, 3), r(4))),
                   Case(lambda x, w: F.conv2d(x, w, stride=2), (r(1, 2, 5, 5), r(3, 2, 2, 2)))],
        "conv2d_input_grad": [Case(lambda g, w: F.conv2d_input_grad(g, w, 1, 1, (2, 3, 5, 5)),
                                   (r(2, 4, 5, 5), r(4, 3, 3, 3)))],
        "conv2d_weight_grad": [Case(lambda x, g: F.conv2d_weight_grad(x, g, 2, 0, (3, 2, 2, 2)),
                                    (r(1, 2, 5, 5), r(1, 3, 2, 2)))],
        "elu": [Case(F.elu, (away(3, 4),))],
        "lstm_cell": [Case(cells.lstm_cell, (r(2, 8), r(2, 4), r(8, 2), r(8))),
                      Case(cells.lstm_cell, (r(2, 8), r(2, 12), r(8, 2)))],
        "gru_cell": [Case(cells.gru_cell, (r(2, 6), r(2, 2), r(6, 2), r(6))),
                     Case(cells.gru_cell, (r(2, 6), r(2, 10), r(6, 2)))],
        "lstm_seq": [Case(cells.lstm_seq, (r(3, 2, 8), r(2, 4), r(8, 2), r(8))),
                     Case(lambda x, s, w: cells.lstm_seq(x, s, w, reverse=True),
                          (r(3, 2, 8), r(2, 4), r(8, 2)))],
        "lstm_cell_grad": [Case(lambda g, x, s, w, b: cells.lstm_cell_grad(
            g, cells.lstm_cell(x, s, w, b), x, s, w, b), (r(2, 12), r(2, 8), r(2, 4), r(8, 2), r(8)))],
        "gru_cell_grad": [Case(lambda g, x, s, w: cells.gru_cell_grad(
            g, cells.gru_cell(x, s, w), x, s, w), (r(2, 10), r(2, 6), r(2, 10), r(6, 2)))],
        "lstm_seq_grad": [Case(lambda g, x, s, w, b: cells.lstm_seq_grad(
            g, cells.lstm_seq(x, s, w, b), x, s, w, b),
            (r(2, 6, 2, 2), r(2, 2, 8), r(2, 4), r(8, 2), r(8)))],
        "gru_seq_grad": [Case(lambda g, x, s, w: cells.gru_seq_grad(
            g, cells.gru_seq(x, s, w, reverse=True), x, s, w, reverse=True),
            (r(2, 5, 2, 2), r(2, 2, 6), r(2, 2), r(6, 2)))],
        "gru_seq": [Case(cells.gru_seq, (r(3, 2, 6), r(2, 2), r(6, 2), r(6))),
                    Case(lambda x, s, w: cells.gru_seq(x, s, w, reverse=True),
                         (r(3, 2, 6), r(2, 2), r(6, 2)))],
        "binary_cross_entropy": [Case(F._bce_p, (r(3, 4, lo=0.05, hi=0.95), r(3, 4, lo=0, hi=1)))],
        "mse_loss": [Case(lambda x, t, red=red: F.mse_loss(x, t, reduction=red), (r(3, 2), r(3, 2)))
                     for red in ("mean", "sum", "none")],
        "huber_loss": [Case(lambda x, t, red=red: F.huber_loss(x, t, reduction=red, delta=0.5),
                            (t0 + away(3, 2, lo=0.1, hi=0.4) * np.array([1.0, 3.0]), t0))
                       for red in ("mean", "sum", "none") for t0 in [r(3, 2)]],
        "gammaln": [Case(special.gammaln, (r(4, lo=0.3, hi=4),))],
        "digamma": [Case(special.digamma, (r(4, lo=0.3, hi=4),))],
        "polygamma": [Case(lambda x: special.polygamma(2, x), (r(4, lo=0.3, hi=4),))],
        "erf": [Case(special.erf, (r(4),))],
        "erfinv": [Case(special.erfinv, (r(4, lo=-0.9, hi=0.9),))],
        "i1e": [Case(special.i1e, (r(4, lo=0.2, hi=3),))],  # (|x| kinks at 0: away from it)
        "erfc": [Case(special.erfc, (r(4),))],
        "erfcx": [Case(special.erfcx, (r(4, lo=-2, hi=30),))],
        "entr": [Case(special.entr, (r(4, lo=0.2, hi=3),))],
        "gammainc": [Case(lambda x: special.gammainc(np.array([0.5, 1.0, 2.5, 7.0]), x),
                          (r(4, lo=0.2, hi=6),))],
        "gammaincc": [Case(lambda x: special.gammaincc(np.array([0.5, 1.0, 2.5, 7.0]), x),
                           (r(4, lo=0.2, hi=6),))],
        "straight_through": [Case(estimators.straight_through, (r(3, 2), r(3, 2)))],
        **_linalg_cases(rng),
        **_lax_cases(rng),
        "ppo_clipped_surrogate": [Case(lambda lp: clipped_surrogate_loss(lp, old, adv, 0.2), (lp_ok,))],
        "categorical_pick": [Case(lambda x: categorical.pick(x, acts), (r(4, 3),))],
        "categorical_unpick": [Case(lambda g: categorical.unpick(g, acts, 3), (r(4),))],
        # vmap's physical ops (rlgrad/batching.py): stacks of matrices, a stride-0 copy
        "bmatmul": [Case(batching.bmatmul, (r(3, 2, 4), r(3, 4, 2))),
                    Case(batching.bmatmul, (r(3, 2, 1), r(3, 1, 4)))],
        "expand": [Case(lambda x: batching.expand(x, 3), (r(2, 3),))],
        # once_differentiable's guard: the value itself (its sources refuse a gradient)
        "once_differentiable": [Case(lambda x: _delayed_error(x, r(3), name="f"), (r(3),))],
    }


def _lax_cases(rng: np.random.Generator) -> dict[str, list[Case]]:
    """rlgrad.lax's nodes (what jit records for a loop or a branch), made eagerly."""
    from rlgrad import lax
    from rlgrad import numpy as rnp

    def scan_f(w: Any, h0: Any, xs: Any) -> Any:
        with lax.nodes_eagerly():
            h, ys = lax.scan(lambda h, x: (rnp.tanh(h * w + x), h * h), h0, xs, reverse=True)
        return rnp.concatenate([rnp.ravel(h), rnp.ravel(ys)])

    def switch_f(x: Any, y: Any) -> Any:
        with lax.nodes_eagerly():
            return lax.switch(rlgrad.tensor(1), [lambda x, y: x * y, lambda x, y: rnp.sin(x) * y * y],
                              x, y)

    def while_f(x: Any) -> Any:
        with lax.nodes_eagerly():
            return lax.while_loop(lambda c: c[1] < 3, lambda c: (rnp.sin(c[0]) * 1.5, c[1] + 1),
                                  (x, np.int64(0)))[0]

    return {
        "scan": [Case(scan_f, (rng.uniform(-1, 1, 3), rng.uniform(-1, 1, 3),
                               rng.uniform(-1, 1, (4, 3))))],
        "switch": [Case(switch_f, (rng.uniform(-2, 2, 3), rng.uniform(-2, 2, 3)))],
        # forward mode only (reverse refuses, as JAX): checked against finite differences
        "while_loop": [Case(while_f, (rng.uniform(-2, 2, 3),))],
        "while_loop_result": [Case(lambda x: lax.while_loop(lambda c: c[1] < 3, lambda c: (
            rnp.sin(c[0]) * 1.5, c[1] + 1), (x, np.int64(0)))[0], (rng.uniform(-2, 2, 3),))],
    }


_FORWARD_ONLY = ("while_loop", "while_loop_result")


def _linalg_cases(rng: np.random.Generator) -> dict[str, list[Case]]:
    """The decompositions, through sign-invariant functions of their vectors (a column of U and
    the row of Vh, or an eigenvector, may flip sign between two nearby matrices)."""
    la = rnp.linalg

    def eigh_f(a: Any) -> Any:
        w, v = la.eigh(a)
        return rnp.concatenate([w, rnp.ravel(v * v[..., :1, :])])

    def eig_f(a: Any) -> Any:
        e, u = la.eig(a)
        return rnp.concatenate([e, rnp.ravel(u * u[..., :1, :])])

    def svd_f(a: Any, full: bool = False) -> Any:
        u, s, vh = la.svd(a, full_matrices=full)
        k = s.shape[-1]
        outer = u[..., :, :k, None] * vh[..., None, :k, :]
        return rnp.concatenate([rnp.ravel(s), rnp.ravel(outer)])

    sym = rng.standard_normal((4, 4))
    q = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    real_eig = q @ np.diag([1.0, -0.5, 2.0]) @ np.linalg.inv(q)
    tall = rng.standard_normal((3, 2))
    return {
        "eigh": [Case(eigh_f, (sym + sym.T,)), Case(eigh_f, (rng.standard_normal((4, 4)),))],
        "eig": [Case(eig_f, (real_eig,))],
        "svd": [Case(svd_f, (rng.standard_normal((4, 3)),)), Case(svd_f, (rng.standard_normal((2, 5)),)),
                Case(lambda a: svd_f(a, True), (rng.standard_normal((3, 3)),))],
        "svdvals": [Case(lambda a: la.svd(a, compute_uv=False), (rng.standard_normal((4, 3)),))],
        "pinv": [Case(la.pinv, (rng.standard_normal((4, 3)),)),
                 Case(la.pinv, (rng.standard_normal((2, 5)),))],
        "qr": [Case(lambda a: rnp.concatenate([rnp.ravel(x) for x in la.qr(a)]), (tall,)),
               Case(lambda a: rnp.concatenate([rnp.ravel(x) for x in la.qr(a)]), (q,))],
        "solve_triangular": [Case(lambda a, b: la.solve_triangular(a, b, lower=True), (q, tall)),
                             Case(lambda a, b: la.solve_triangular(a, b, unit_diagonal=True),
                                  (q, tall))],
        "expm": [Case(la.expm, (0.5 * rng.standard_normal((3, 3)),))],
        # the check a decomposition's rule makes (the value unchanged where nothing is undefined)
        "refuse_where": [Case(lambda x: la._refuse(x, np.zeros(3, bool), message="m"),
                              (rng.standard_normal(3),))],
    }


def _as_f64(x: Any) -> np.ndarray:
    return np.asarray(x._value if isinstance(x, Tensor) else x, dtype=np.float64)


def _check_jvp(fn: Any, args: tuple, rng: np.random.Generator, fd: bool = True) -> None:
    """The JVP of ``fn`` along random tangents for all its arguments at once: against central
    differences (``fd``), and against the VJP (<J v, u> = <v, J^T u>)."""
    tangents = tuple(rng.standard_normal(np.shape(a)) for a in args)
    out, t = rlgrad.jvp(fn, args, tangents)
    u = rng.standard_normal(np.shape(out))
    _, vjp_fn = rlgrad.vjp(fn, *args)
    cts = vjp_fn(u)
    lhs = float(np.sum(np.asarray(t) * u))
    rhs = sum(float(np.sum(np.asarray(c) * v)) for c, v in zip(cts, tangents))
    scale = 1 + float(np.sum(np.abs(t) * np.abs(u)))
    assert abs(lhs - rhs) <= 1e-9 * scale, f"<JVP(v), u> = {lhs!r} but <v, VJP(u)> = {rhs!r}"
    if not fd:
        return
    plus = _as_f64(fn(*(a + EPS * v for a, v in zip(args, tangents))))
    minus = _as_f64(fn(*(a - EPS * v for a, v in zip(args, tangents))))
    fd = (plus - minus) / (2 * EPS)
    assert np.shape(t) == np.shape(out)
    np.testing.assert_allclose(t, fd, rtol=1e-5, atol=1e-6, err_msg="JVP vs finite differences")


def test_every_differentiable_primitive_has_a_case() -> None:
    """Coverage cannot rot: a new differentiable primitive, wherever it is made, needs a case."""
    covered = ({r.name for r in ROWS if r.primitive} | set(_extra_cases(np.random.default_rng(0)))
               | _CHECKED_BELOW)
    missing = sorted(_differentiable() - covered)
    assert not missing, f"differentiable primitives with no forward-mode case: {missing}"


# first order only, by definition: their second derivative raises (test below)
_CHECKED_BELOW = {"standard_gamma", "standard_gamma_grad"}


def test_jvp_of_the_gamma_draw_is_the_quantile_held_derivative() -> None:
    """Gamma.rsample's draw x(a) holds its quantile u = P(a, x): its JVP in a is dx/da, which
    is the finite difference of scipy's inverse P at a fixed u; its second derivative raises."""
    from scipy import special as sp

    from rlgrad import special

    a = np.array([0.3, 1.0, 2.5, 7.0])
    u = np.array([0.2, 0.5, 0.7, 0.95])
    x = sp.gammaincinv(a, u)
    t = np.array([1.0, -0.5, 2.0, 0.3])
    _, jvp_t = rlgrad.jvp(lambda a_: special.gamma_draw(a_, x), (a,), (t,))
    eps = 1e-6
    fd = (sp.gammaincinv(a + eps, u) - sp.gammaincinv(a - eps, u)) / (2 * eps)
    np.testing.assert_allclose(jvp_t, t * fd, rtol=1e-6)
    _, vjp_fn = rlgrad.vjp(lambda a_: special.gamma_draw(a_, x), a)
    np.testing.assert_allclose(vjp_fn(t)[0], t * fd, rtol=1e-6)
    with pytest.raises(NotImplementedError, match="no second derivative"):
        rlgrad.jvp(lambda a_: special.standard_gamma_grad(x, a_), (a,), (t,))


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
@settings(SETTINGS, max_examples=max(MAX_EXAMPLES // 3, 8))  # RLGRAD_GRADCHECK_EXAMPLES deepens it
@given(data=st.data())
def test_jvp_of_every_op(row: Any, data: st.DataObject) -> None:
    case = data.draw(row.cases, label="case")
    _check_jvp(case.fn, case.args, np.random.default_rng(data.draw(st.integers(0, 2**31))))


@pytest.mark.parametrize("name", sorted(_extra_cases(np.random.default_rng(0))))
def test_jvp_of_primitives_outside_ops(name: str) -> None:
    rng = np.random.default_rng(1)
    for case in _extra_cases(rng)[name]:
        out = case.fn(*(rlgrad.tensor(a, requires_grad=True) for a in case.args))
        assert name in recorded(out), f"the case for {name} does not record it"
        if name in _FORWARD_ONLY:  # JVP against finite differences, twice over (jacfwd of jvp)
            rlgrad.check_grads(case.fn, modes=("fwd",), order=2)(*case.args)
            continue
        # straight_through's derivative is its surrogate's by definition, not its value's
        _check_jvp(case.fn, case.args, rng, fd=name != "straight_through")
        if name != "straight_through":  # 2nd order, every mixture of forward and reverse
            rlgrad.check_grads(case.fn, modes=("fwd", "rev"), order=2)(*case.args)
    if name == "straight_through":
        a, b = case.args
        _, t = rlgrad.jvp(case.fn, (a, b), (np.ones_like(a), 2 * np.ones_like(b)))
        np.testing.assert_array_equal(t, 2.0)


def test_a_primitive_without_jvp_rule_raises_naming_it() -> None:
    def _cube(x: Any) -> Any:
        return x ** 3

    cube = rlgrad.primitive(_cube, "cube_without_jvp", arity=1)
    rlgrad.defvjp(cube, lambda g, ans, x: g * 3 * x * x)
    assert np.isclose(rlgrad.grad(lambda x: cube(x))(2.0), 12.0)  # reverse mode is fine
    with pytest.raises(NotImplementedError, match="cube_without_jvp"):
        rlgrad.jvp(cube, (np.array(2.0),), (np.array(1.0),))
    with pytest.raises(NotImplementedError, match="cube_without_jvp"):
        rlgrad.jacfwd(lambda x: rnp.sin(cube(x)))(np.ones(2))
    rlgrad.defjvp(cube, lambda t, ans, x: t * 3 * x * x)
    assert np.isclose(rlgrad.jvp(cube, (np.array(2.0),), (np.array(1.0),))[1], 12.0)


# ---- second order -----------------------------------------------------------------------------
def _loss(params: dict, x: Any) -> Any:
    h = rnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    return rnp.sum(rnp.logaddexp(0.0, logits) * rnp.arange(1.0, 3.0)) + rnp.sum(params["b1"] ** 3)


def _params(rng: np.random.Generator) -> dict:
    return {"w1": rng.standard_normal((3, 4)), "b1": rng.standard_normal(4),
            "w2": rng.standard_normal((4, 2))}


def _fd_hessian(f: Any, x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """Central differences of the gradient, one column per input element."""
    g = rlgrad.grad(f)
    cols = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = eps
        e = e.reshape(x.shape)
        cols.append((g(x + e) - g(x - e)) / (2 * eps))
    return np.stack(cols, axis=-1).reshape(x.shape + x.shape)


@pytest.mark.parametrize("fn_name", ["mlp", "logsumexp", "det", "prod_softmax"])
def test_hessian_is_jacfwd_of_jacrev_against_finite_differences(fn_name: str) -> None:
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((2, 3))
    p0 = _params(rng)
    fns = {
        "mlp": (lambda w1: _loss({**p0, "w1": w1}, xs), p0["w1"]),
        "logsumexp": (lambda x: rnp.sum(rlgrad.ops.logsumexp(x, axis=1) ** 2), rng.standard_normal((2, 3))),
        "det": (lambda a: rnp.linalg.det(a) ** 2, rng.standard_normal((3, 3)) + 3 * np.eye(3)),
        "prod_softmax": (lambda x: rnp.prod(rlgrad.ops.softmax(x, axis=-1) + 0.5), rng.standard_normal(4)),
    }
    f, x = fns[fn_name]
    h = rlgrad.hessian(f)(x)
    assert h.shape == x.shape + x.shape
    np.testing.assert_allclose(h, _fd_hessian(f, x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(h, rlgrad.jacrev(rlgrad.jacrev(f))(x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h, rlgrad.jacfwd(rlgrad.jacfwd(f))(x), rtol=1e-10, atol=1e-12)
    v = rng.standard_normal(x.shape)
    hv = np.tensordot(h, v, axes=v.ndim)
    np.testing.assert_allclose(rlgrad.hvp(f)(x, v), hv, rtol=1e-10, atol=1e-12)
    hvp_fn, g = rlgrad.make_hvp(f)(x)
    np.testing.assert_allclose(hvp_fn(v), hv, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g, rlgrad.grad(f)(x), rtol=1e-12)


def test_hessian_of_a_pytree_argument_has_jax_structure() -> None:
    rng = np.random.default_rng(3)
    p = _params(rng)
    x = rng.standard_normal((2, 3))
    h = rlgrad.hessian(_loss)(p, x)
    assert set(h) == {"w1", "b1", "w2"} and all(set(h[k]) == {"w1", "b1", "w2"} for k in h)
    assert h["w1"]["b1"].shape == (3, 4, 4) and h["b1"]["w2"].shape == (4, 4, 2)
    # the (b1, b1) block by finite differences of the gradient
    fd = _fd_hessian(lambda b: _loss({**p, "b1": b}, x), p["b1"])
    np.testing.assert_allclose(h["b1"]["b1"], fd, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(h["w1"]["b1"], np.moveaxis(h["b1"]["w1"], 0, -1), rtol=1e-10)


# ---- the transforms: pytrees, argnums, linearize -----------------------------------------------
def _pytree_fn(np_: Any) -> Any:
    def f(p: dict, y: Any) -> dict:
        return {"a": p["w"] * y, "b": np_.sum(p["u"]) * y[0] * y}
    return f


def test_jacfwd_and_jacrev_structure_is_jaxs() -> None:
    """Output structure outside, the argnums tuple and each argument's structure inside, each
    block out.shape + in.shape (the structure jax.jacfwd/jacrev give for this function)."""
    p = {"w": np.array([1.0, 2.0]), "u": np.array([[1.0, 2.0], [3.0, 4.0]])}
    y = np.array([3.0, 4.0])
    f = _pytree_fn(rnp)
    jf = rlgrad.jacfwd(f, argnums=(0, 1))(p, y)
    jr = rlgrad.jacrev(f, argnums=(0, 1))(p, y)
    for jac in (jf, jr):
        assert set(jac) == {"a", "b"}
        for k in ("a", "b"):
            dp, dy = jac[k]
            assert dp["u"].shape == (2, 2, 2) and dp["w"].shape == (2, 2) and dy.shape == (2, 2)
    for k in ("a", "b"):
        for got, want in zip(tree_flatten(jf[k])[0], tree_flatten(jr[k])[0]):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(jf["a"][1], np.diag(p["w"]))
    np.testing.assert_allclose(jf["b"][0]["u"], np.broadcast_to((y[0] * y)[:, None, None], (2, 2, 2)))
    single = rlgrad.jacfwd(f)(p, y)  # an int argnums: no tuple level
    assert set(single["a"]) == {"u", "w"}
    np.testing.assert_allclose(rlgrad.jacfwd(f, argnums=1)(p, y)["b"], rlgrad.jacrev(f, argnums=1)(p, y)["b"])


def test_jvp_with_several_pytree_primals_against_finite_differences() -> None:
    rng = np.random.default_rng(4)
    p = {"w": rng.standard_normal(2), "u": rng.standard_normal((2, 2))}
    y = rng.standard_normal(2)
    tp = {"w": rng.standard_normal(2), "u": rng.standard_normal((2, 2))}
    ty = rng.standard_normal(2)
    f = _pytree_fn(rnp)
    out, t = rlgrad.jvp(f, (p, y), (tp, ty))
    shift = {k: p[k] + EPS * tp[k] for k in p}, y + EPS * ty
    back = {k: p[k] - EPS * tp[k] for k in p}, y - EPS * ty
    for k in ("a", "b"):
        fd = (f(*shift)[k] - f(*back)[k]) / (2 * EPS)
        np.testing.assert_allclose(t[k], fd, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(out[k], f(p, y)[k])
    out2, f_jvp = rlgrad.linearize(f, p, y)
    for k in ("a", "b"):
        np.testing.assert_allclose(f_jvp(tp, ty)[k], t[k], rtol=1e-12)
        np.testing.assert_allclose(f_jvp(p, y)[k], rlgrad.jvp(f, (p, y), (p, y))[1][k], rtol=1e-12)
    # lists of arrays as primals, and a tuple output
    g = lambda xs: (xs[0] * xs[1], rnp.sin(xs[0]))  # noqa: E731
    o, tg = rlgrad.jvp(g, ([y, y + 1],), ([ty, 2 * ty],))
    np.testing.assert_allclose(tg[0], ty * (y + 1) + y * 2 * ty)
    np.testing.assert_allclose(tg[1], np.cos(y) * ty)


def test_jvp_has_aux_and_outputs_the_tangents_do_not_reach() -> None:
    x = np.array([1.0, 2.0])
    out, t, aux = rlgrad.jvp(lambda x: (x * x, {"n": x.shape[0]}), (x,), (np.ones(2),), has_aux=True)
    np.testing.assert_allclose(t, 2 * x)
    assert aux == {"n": 2}
    out, t = rlgrad.jvp(lambda x, c: (x * 2, c * 3, np.float64(7.0)), (x, x), (np.ones(2), np.zeros(2)))
    np.testing.assert_allclose(t[0], 2.0)
    np.testing.assert_array_equal(t[1], 0.0)
    assert t[2] == 0.0
    jac, aux = rlgrad.jacfwd(lambda x: (rnp.sin(x), x.shape), has_aux=True)(x)
    np.testing.assert_allclose(jac, np.diag(np.cos(x)))
    assert aux == (2,)


def test_make_jvp_and_jacobian_keep_autograd_semantics() -> None:
    x = np.array([0.3, -1.2, 2.0])
    y, t = rlgrad.make_jvp(lambda a, b: rnp.sin(a) * b, argnum=1)(x, x)(np.ones(3))
    np.testing.assert_allclose(t, np.sin(x))
    np.testing.assert_allclose(y, np.sin(x) * x)
    jac = rlgrad.jacobian(lambda a: rnp.outer(a, a))(x)
    assert jac.shape == (3, 3, 3)
    np.testing.assert_allclose(jac, rlgrad.jacfwd(lambda a: rnp.outer(a, a))(x), rtol=1e-12)
    ja, jb = rlgrad.jacobian(lambda a, b: a * b, argnum=(0, 1))(x, 2 * x)  # several arguments now
    np.testing.assert_allclose(ja, np.diag(2 * x))
    np.testing.assert_allclose(jb, np.diag(x))


# ---- nesting ----------------------------------------------------------------------------------
def test_reverse_over_forward_and_forward_over_forward() -> None:
    rng = np.random.default_rng(5)
    x, v = rng.standard_normal(3), rng.standard_normal(3)
    f = lambda x: rnp.sum(rnp.tanh(x) ** 3 * x[::-1])  # noqa: E731
    h = rlgrad.hessian(f)(x)
    np.testing.assert_allclose(h, _fd_hessian(f, x), rtol=1e-6, atol=1e-7)
    g = rlgrad.grad(lambda x: rlgrad.jvp(f, (x,), (v,))[1])(x)  # d/dx <grad f(x), v>
    np.testing.assert_allclose(g, h @ v, rtol=1e-10)
    gv = rlgrad.grad(lambda w: rlgrad.jvp(f, (x,), (w,))[1])(v)  # linear in the tangent
    np.testing.assert_allclose(gv, rlgrad.grad(f)(x), rtol=1e-12)
    ff = rlgrad.jacfwd(lambda x: rlgrad.jvp(f, (x,), (v,))[1])(x)
    np.testing.assert_allclose(ff, h @ v, rtol=1e-10)
    # torch style: tensors that require grad in, a tensor that requires grad out
    xt = rlgrad.tensor(x, requires_grad=True)
    _, t = rlgrad.jvp(f, (xt,), (v,))
    assert isinstance(t, Tensor) and t.requires_grad
    (gx,) = autograd.grad(t, [xt])
    np.testing.assert_allclose(gx._value, h @ v, rtol=1e-10)


def test_third_order_mixtures_of_modes() -> None:
    f = lambda x: rnp.sum(rnp.sin(x) * rnp.exp(x[::-1] * 0.5))  # noqa: E731
    x = np.array([0.2, -0.7, 1.1])
    t3 = rlgrad.jacrev(rlgrad.jacfwd(rlgrad.grad(f)))(x)
    np.testing.assert_allclose(rlgrad.jacfwd(rlgrad.hessian(f))(x), t3, rtol=1e-10, atol=1e-12)
    h = rlgrad.hessian(f)
    fd = np.stack([(h(x + e) - h(x - e)) / 2e-5 for e in np.eye(3) * 1e-5], axis=-1)
    np.testing.assert_allclose(t3, fd, rtol=1e-6, atol=1e-7)


def test_jvp_inside_jit_matches_eager() -> None:
    v = np.array([1.0, -2.0, 0.5])

    def step(x: Any) -> Any:
        return rlgrad.jvp(lambda x: rnp.tanh(x) * rnp.sum(x * x), (x,), (v,))[1]

    compiled = rlgrad.jit(step)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(3)
        np.testing.assert_allclose(compiled(x), step(x), rtol=1e-12)


def test_float32_tangents_stay_float32() -> None:
    x = np.array([0.5, 1.5], np.float32)
    out, t = rlgrad.jvp(lambda x: rnp.exp(x) * 2.0, (x,), (np.ones(2),))
    assert t.dtype == np.float32
    assert rlgrad.jacfwd(lambda x: rnp.exp(x) * 2.0)(x).dtype == np.float32


# ---- errors -----------------------------------------------------------------------------------
def test_bad_arguments_give_clear_errors() -> None:
    f = lambda x: x * 2  # noqa: E731
    x = np.ones(3)
    with pytest.raises(TypeError, match="tuples or lists"):
        rlgrad.jvp(f, x, np.ones(3))
    with pytest.raises(ValueError, match="2 primals but 1 tangents"):
        rlgrad.jvp(lambda a, b: a * b, (x, x), (x,))
    with pytest.raises(ValueError, match="shape"):
        rlgrad.jvp(f, (x,), (np.ones(2),))
    with pytest.raises(ValueError, match="structure"):
        rlgrad.jvp(lambda d: d["a"], ({"a": x},), (x,))
    with pytest.raises(TypeError, match="floating-point"):
        rlgrad.jacfwd(f)(np.arange(3))
    _, f_jvp = rlgrad.linearize(f, x)
    with pytest.raises(ValueError, match="1 primals but 2 tangents"):
        f_jvp(x, x)
    with pytest.raises(TypeError, match="pair"):
        rlgrad.jacfwd(f, has_aux=True)(x)


def test_a_tangent_or_gradient_through_complex_values_raises() -> None:
    """The rules are for real numbers: through a cast to complex, both modes raise (reverse mode
    returned the real part of a wrong number here, -1.34 for sqrt(5))."""
    f = lambda x: rnp.sum(rlgrad.ops.absolute(rlgrad.ops.astype(x, np.complex128) * (1 + 2j)))  # noqa: E731
    x = np.array([1.0, 2.0])
    with pytest.raises(TypeError, match="complex"):
        rlgrad.jvp(f, (x,), (np.ones(2),))
    with pytest.raises(TypeError, match="complex"):
        rlgrad.grad(f)(x)
    xt = rlgrad.tensor(x, requires_grad=True)
    with pytest.raises(TypeError, match="complex"):
        f(xt).backward()
    np.testing.assert_allclose(rlgrad.grad(lambda x: rnp.sum(rlgrad.ops.astype(x, np.float32) ** 2))(x),
                               2 * x)  # a real cast still differentiates


def test_a_graph_freed_inside_the_function_raises() -> None:
    def f(x: Any) -> Any:
        y = rnp.sin(x)
        autograd.grad(rnp.sum(y), [x])  # frees y's graph (no retain_graph)
        return y * 2

    with pytest.raises(RuntimeError, match="freed"):
        rlgrad.jvp(f, (np.ones(2),), (np.ones(2),))


def test_linalg_tangents_that_do_not_exist_raise() -> None:
    """As their VJPs: eigenvectors at a repeated eigenvalue, and the extra columns of a full
    non-square SVD, have no derivative; the eigenvalues there do."""
    def vecs(a: Any) -> Any:
        return rnp.linalg.eigh(a)[1]

    t = np.array([[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="repeated"):
        rlgrad.jvp(vecs, (np.eye(2),), (t,))
    _, dw = rlgrad.jvp(lambda a: rnp.linalg.eigh(a)[0], (np.diag([1.0, 2.0]),), (np.diag([3.0, 5.0]),))
    np.testing.assert_allclose(dw, [3.0, 5.0])
    with pytest.raises(NotImplementedError, match="full_matrices=False"):
        rlgrad.jvp(lambda a: rnp.linalg.svd(a)[0], (np.ones((3, 2)),), (np.ones((3, 2)),))

"""``rlgrad.func`` (torch.func) and ``rlgrad.vmap`` (JAX's): vmap batches through one rule per
primitive (``rlgrad/batching.py``). The plain reference is the Python loop over the slices and a
stack; the spec is torch.func (values, per-sample gradients, Jacobians, Hessians in float64)."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import numpy as np
import pytest
from helpers.programs import draw_program
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlgrad
import rlgrad.func as rf
import rlgrad.nn.functional as F
import rlgrad.numpy as rnp
from rlgrad import batching, nn
from rlgrad.tracer import NotBatchable, Primitive

torch = pytest.importorskip("torch")
tf = torch.func


def _r(a: Any) -> Any:
    return rlgrad.tensor(np.asarray(a))


def _t(a: Any) -> Any:
    return torch.tensor(np.asarray(a))


def _np(x: Any) -> np.ndarray:
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def _close(got: Any, want: Any, rtol: float = 1e-10, atol: float = 1e-12) -> None:
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(_np(got), _np(want), rtol=rtol, atol=atol)


# ---- every primitive has a rule ----------------------------------------------------------------
def _declared_primitives() -> dict[str, Primitive]:
    found: dict[str, Primitive] = {}
    for info in pkgutil.walk_packages(rlgrad.__path__, "rlgrad."):
        if info.name.startswith(("rlgrad.cli", "rlgrad.rl.", "rlgrad.presets")) and \
                info.name != "rlgrad.rl.ppo":
            continue
        mod = importlib.import_module(info.name)
        for name, v in vars(mod).items():
            p = getattr(v, "primitive", None)
            if isinstance(p, Primitive):
                found[f"{info.name}.{name}"] = p
    return found


def test_every_declared_primitive_has_a_batching_rule_or_says_why_not() -> None:
    prims = _declared_primitives()
    assert len(prims) > 120
    missing = sorted(n for n, p in prims.items() if p.batch is None)
    assert missing == []
    for name, p in prims.items():
        if isinstance(p.batch, str):
            assert p.batch in batching.RULES, name
        elif isinstance(p.batch, NotBatchable):
            assert len(p.batch.reason) > 20, name
        else:
            assert callable(p.batch), name


def test_a_primitive_without_a_rule_raises_one_line_naming_it() -> None:
    custom = rlgrad.primitive(lambda x: x * 2, "double_it")
    rlgrad.defvjp(custom, lambda g, ans, x: g * 2)
    with pytest.raises(batching.VmapError, match="primitive 'double_it' cannot be batched"):
        rf.vmap(custom)(_r(np.ones((3, 2))))


def test_per_sample_gradients_of_a_convolution_weight_match_torch_func() -> None:
    def loss(lib: Any) -> Any:
        conv = F.conv2d if lib is rlgrad else torch.nn.functional.conv2d
        return lambda w, x: lib.tanh(conv(x[None], w, stride=2, padding=1)).sum()

    got = rf.vmap(rf.grad(loss(rlgrad)), in_dims=(None, 0))(_r(KER), _r(IMG[:, 0]))
    _close(got, tf.vmap(tf.grad(loss(torch)), in_dims=(None, 0))(_t(KER), _t(IMG[:, 0])))


def test_library_code_reading_a_batched_index_raises_instead_of_using_one_slice() -> None:
    """Code that reads a tensor's array for its values sees no slice's values inside vmap:
    one line, never the first slice's answer for every slice."""
    logits, targets = _r(RNG.normal(size=(4, 3, 5))), _r(RNG.integers(0, 5, (4, 3)))
    with pytest.raises(batching.VmapError, match="reads the values of a batched tensor"):
        rf.vmap(lambda q, a: rlgrad.nonzero(a))(logits, targets)  # a shape from the values
    with pytest.raises(batching.VmapError, match="reads the values of a batched tensor"):
        rf.vmap(lambda q, a: q.repeat_interleave(a[0], dim=0))(logits, targets)


def test_reading_a_batched_value_raises() -> None:
    with pytest.raises(batching.VmapError, match="reads the values of a batched tensor"):
        rf.vmap(lambda x: x * 2 if x.sum() > 0 else x)(_r(np.ones((3, 2))))
    with pytest.raises(batching.VmapError, match="item"):
        rf.vmap(lambda x: x.sum().item())(_r(np.ones((3, 2))))


def test_random_draws_follow_randomness() -> None:
    x = _r(np.zeros((3, 2)))
    with pytest.raises(RuntimeError, match="randomness='error'"):
        rf.vmap(lambda a: a + rlgrad.randn(2))(x)
    rlgrad.manual_seed(3)
    out = rf.vmap(lambda a: a + rlgrad.randn(2), randomness="different")(x)
    rlgrad.manual_seed(3)
    np.testing.assert_array_equal(out.numpy(), rlgrad.randn(3, 2).numpy())
    rlgrad.manual_seed(3)
    out = rf.vmap(lambda a: a + rlgrad.randn(2), randomness="same")(x)
    rlgrad.manual_seed(3)
    np.testing.assert_array_equal(out.numpy(), np.broadcast_to(rlgrad.randn(2).numpy(), (3, 2)))


@pytest.mark.parametrize("call, match", [
    (lambda: rf.vmap(lambda x, y: x + y)(_r(np.ones((3, 2))), _r(np.ones((4, 2)))), "different sizes"),
    (lambda: rf.vmap(lambda x: x, in_dims=2)(_r(np.ones((3, 2)))), "out of range"),
    (lambda: rf.vmap(lambda x: x, in_dims=None)(_r(np.ones((3, 2)))), "no input is vmapped"),
    (lambda: rf.vmap(lambda x, y: x, in_dims=(0,))(_r(np.ones(3)), _r(np.ones(3))), "one entry per"),
    (lambda: rf.vmap(lambda x: x, randomness="sometimes"), "randomness"),
])
def test_bad_arguments_raise_one_clear_line(call: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


# ---- vmap against the loop ----------------------------------------------------------------------
def _loop(fn: Any, args: list[np.ndarray], dims: tuple) -> np.ndarray:
    n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    outs = [fn(*[_r(a) if d is None else _r(np.take(a, i, axis=d)) for a, d in zip(args, dims)])
            for i in range(n)]
    return np.stack([_np(o) for o in outs])


RNG = np.random.default_rng(0)
A, B, M, V = (RNG.uniform(0.2, 0.9, s) for s in ((4, 3, 5), (5, 2), (4, 3, 3), (4, 3)))
I3 = RNG.integers(0, 3, (4, 3, 2))
V5, W25 = RNG.uniform(0.2, 0.9, (4, 5)), RNG.uniform(0.2, 0.9, (4, 2, 5))
A4 = RNG.uniform(0.2, 0.9, (2, 3, 4, 5))
IMG, KER = RNG.normal(size=(3, 2, 1, 5, 5)), RNG.normal(size=(4, 1, 3, 3))
GRU, LSTM = nn.GRUCell(3, 4).double(), nn.LSTMCell(3, 4).double()
SPD = A[:, :, :3] @ np.swapaxes(A[:, :, :3], 1, 2) + 3 * np.eye(3)
CASES = {
    "sum_axis_none": (lambda x: x.sum(), [A], (0,)),
    "mean_keepdim": (lambda x: x.mean(dim=-1, keepdim=True), [A], (0,)),
    "amax_tuple": (lambda x: rlgrad.amax(x, dim=(0, 1)), [A], (0,)),
    "prod": (lambda x: x.prod(dim=0), [A], (0,)),
    "logsumexp": (lambda x: rlgrad.logsumexp(x, dim=1), [A], (0,)),
    "argmax_none": (lambda x: x.argmax(), [A], (0,)),
    "argmin_dim": (lambda x: x.argmin(dim=1, keepdim=True), [A], (0,)),
    "cumsum": (lambda x: x.cumsum(dim=-1), [A], (0,)),
    "cumsum_flat": (lambda x: rnp.cumsum(x), [A], (0,)),
    "logcumsumexp": (lambda x: rlgrad.logcumsumexp(x, dim=0), [A], (0,)),
    "softmax": (lambda x: F.softmax(x, dim=0), [A], (0,)),
    "log_softmax": (lambda x: F.log_softmax(x, dim=-1), [A], (0,)),
    "argsort": (lambda x: rnp.argsort(x), [A], (0,)),
    "broadcast_add": (lambda x, y: x + y, [A, B[:, 0]], (0, None)),
    "broadcast_mul_rank": (lambda x, y: x * y, [V5, A], (0, 0)),
    "where": (lambda c, x: rlgrad.where(c > 0.5, x, -x), [V5, A], (0, 0)),
    "clamp": (lambda x: x.clamp(0.3, 0.6), [A], (0,)),
    "matmul_mm": (lambda x, y: x @ y, [A, B], (0, None)),
    "matmul_shared_left": (lambda m, x: m @ x, [M, A], (None, 0)),
    "matmul_both": (lambda x, y: x @ y, [M, A], (0, 0)),
    "matmul_vec": (lambda v, x: v @ x, [V, A], (0, 0)),
    "matmul_mat_vec": (lambda x, v: x.transpose(0, 1) @ v, [A[:, :, :3], V], (0, 0)),
    "dot": (lambda u, v: u @ v, [V, V[0]], (0, None)),
    "einsum": (lambda x, y: rnp.einsum("ij,jk->ik", x, y), [A, B], (0, None)),
    "linear_batched_x": (lambda x, w: F.linear(x, w), [A, B.T], (0, None)),
    "linear_batched_w": (lambda x, w, b: F.linear(x, w, b), [A[0], W25, V[:, :2]], (None, 0, 0)),
    "reshape": (lambda x: x.reshape(5, 3), [A], (0,)),
    "transpose": (lambda x: x.T, [A], (0,)),
    "permute": (lambda x: rnp.transpose(x, (1, 0)), [A], (0,)),
    "broadcast_to": (lambda x: rnp.broadcast_to(x, (2, 3)), [V], (0,)),
    "cat_shared": (lambda x, y: rlgrad.cat([x, y], 0), [A, A[0]], (0, None)),
    "stack": (lambda x, y: rlgrad.stack([x, y], dim=-1), [A, A[0]], (0, None)),
    "flip": (lambda x: x.flip(dims=(0,)), [A], (0,)),
    "flip_all": (lambda x: rnp.flip(x), [A], (0,)),
    "roll": (lambda x: x.roll(1, 1), [A], (0,)),
    "roll_flat": (lambda x: rnp.roll(x, 2), [A], (0,)),
    "tile": (lambda x: rnp.tile(x, (2, 1, 2)), [A], (0,)),
    "repeat": (lambda x: rnp.repeat(x, 2, axis=1), [A], (0,)),
    "repeat_flat": (lambda x: rnp.repeat(x, 2), [A], (0,)),
    "pad": (lambda x: rnp.pad(x, ((1, 0), (0, 2))), [A], (0,)),
    "diag_of_matrix": (lambda x: x.diag(1), [A], (0,)),
    "diag_of_vector": (lambda v: rlgrad.diag(v, -1), [V], (0,)),
    "triu": (lambda x: x.triu(1), [A], (0,)),
    "getitem_basic": (lambda x: x[1:, None, ::2], [A], (0,)),
    "getitem_int_array": (lambda x: x[[0, 2, 2]], [A], (0,)),
    "getitem_separated": (lambda x: x[[0, 1], :, [2, 0]], [A4], (0,)),
    "getitem_int_and_list": (lambda x: x[0, :, [1, 3]], [A4], (0,)),
    "getitem_mask": (lambda x: x[np.array([True, False, True])], [A], (0,)),
    "take_along": (lambda x, i: rnp.take_along_axis(x, i, axis=1), [A, I3], (0, 0)),
    "take_along_shared_idx": (lambda x, i: rnp.take_along_axis(x, i, axis=1), [A, I3[0]], (0, None)),
    "gather": (lambda x, i: rlgrad.gather(x, 1, i), [A, I3], (0, 0)),
    "inv": (lambda m: rnp.linalg.inv(m), [SPD], (0,)),
    "det": (lambda m: rnp.linalg.det(m), [SPD], (0,)),
    "cholesky": (lambda m: rnp.linalg.cholesky(m), [SPD], (0,)),
    "solve_vec": (lambda m, b: rnp.linalg.solve(m, b), [SPD, V], (0, 0)),
    "solve_shared_matrix": (lambda m, b: rnp.linalg.solve(m, b), [SPD[0], V], (None, 0)),
    "eigh": (lambda m: rnp.linalg.eigh(m)[0], [SPD], (0,)),
    "mse": (lambda x, y: F.mse_loss(x, y), [A, A[::-1]], (0, 0)),
    "mse_shared": (lambda x, y: F.mse_loss(x, y, reduction="sum"), [A, A[0]], (0, None)),
    "huber": (lambda x, y: F.smooth_l1_loss(x, y), [A, A[0] * 2], (0, None)),
    "bce": (lambda x, y: F.binary_cross_entropy(x, y), [A, A[0]], (0, None)),
    "relu_tanh_sigmoid": (lambda x: F.relu(x - 0.5) + x.tanh() * x.sigmoid(), [A], (0,)),
    "leaky_elu": (lambda x: F.leaky_relu(x - 0.5, 0.1) + F.elu(x - 0.5), [A], (0,)),
    "any_count": (lambda x: rnp.count_nonzero(x > 0.5, axis=1), [A], (0,)),
    "in_dim_1": (lambda x: x.sum(0), [A], (1,)),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), [IMG, KER], (0, None)),
    "gru_cell": (lambda x: GRU(x), [A[:, :2, :3]], (0,)),
    "lstm_cell": (lambda x: LSTM(x)[1], [A[:, :2, :3]], (0,)),
    "astype": (lambda x: x.float() * 2, [A], (0,)),
    "categorical": (lambda lg, a: rlgrad.distributions.Categorical(logits=lg).log_prob(a),
                    [A, I3[:, :, 0]], (0, 0)),
    "xlogy": (lambda x, y: rlgrad.special.xlogy(x, y), [np.where(A > 0.5, 0.0, A), A], (0, 0)),
    "var_average": (lambda x: rnp.var(x, axis=0)[:3] + rnp.average(x, axis=1, weights=np.arange(5.0)),
                    [A], (0,)),
    "normal": (lambda m, s: rlgrad.distributions.Normal(m, s).log_prob(m * 0.5), [A, A + 0.1], (0, None)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_equals_the_loop(name: str) -> None:
    fn, args, dims = CASES[name]
    got = rf.vmap(fn, in_dims=dims)(*[_r(a) for a in args])
    want = _loop(fn, args, dims)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(_np(got), want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", sorted(n for n in CASES if n not in (
    "argmax_none", "argmin_dim", "argsort", "any_count", "categorical")))
def test_vmap_of_grad_equals_the_loop_of_grads(name: str) -> None:
    fn, args, dims = CASES[name]
    if not np.issubdtype(args[0].dtype, np.floating):
        pytest.skip("integer input")
    w = RNG.normal(size=np.shape(_np(fn(*[_r(np.take(a, 0, axis=d)) if d is not None else _r(a)
                                           for a, d in zip(args, dims)]))))

    def scalar(*xs: Any) -> Any:
        return (fn(*xs) * _r(w)).sum()

    got = rf.vmap(rf.grad(scalar), in_dims=dims)(*[_r(a) for a in args])
    want = _loop(rf.grad(scalar), args, dims)
    np.testing.assert_allclose(_np(got), want, rtol=1e-10, atol=1e-12)


def _inplace_add(a: Any) -> Any:
    b = a.clone()
    b += 1
    b.mul_(2)
    b.sub_(a, alpha=0.5)
    return b


def _inplace_setitem(a: Any) -> Any:
    b = a * 1
    b[0] = 7.0
    b[1:, ::2] = a[:2, ::2] * 3
    return b.clamp_(0.5, 6.0)


INPLACE = {"iadd_mul_sub": _inplace_add, "setitem_clamp": _inplace_setitem,
           "copy_fill_zero": lambda a: a.clone().copy_(a[0]) + a.clone().fill_(2.0) + a.clone().zero_(),
           "lerp": lambda a: a.clone().lerp_(a * 3, 0.25),
           "tensor_of": lambda a: rlgrad.tensor(a, dtype=np.float32) + rlgrad.tensor([a[0, 0], 1.0])[0]}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_in_place_operations_and_copies_inside_vmap_equal_the_loop(name: str) -> None:
    """In-place updates of a batched tensor change every slice (torch's semantics), and
    rlgrad.tensor of one copies each slice: never one slice's values."""
    fn = INPLACE[name]
    got = rf.vmap(fn)(_r(A))
    np.testing.assert_allclose(_np(got), _loop(fn, [A], (0,)), rtol=1e-6)


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                 HealthCheck.data_too_large])
@given(st.data())
def test_vmap_equals_the_loop_on_random_programs(data: Any) -> None:
    """The random programs (tests/helpers/programs.py) on a batch of 3 inputs: vmap's values and
    per-sample gradients are the loop's."""
    program = draw_program(data)
    rng = np.random.default_rng(len(program.steps))
    batch = [np.stack([x] + [x + rng.uniform(-0.01, 0.01, x.shape) for _ in range(2)])
             for x in program.inputs]
    with np.errstate(all="ignore"):
        got = rf.vmap(program)(*[_r(b) for b in batch])
        want = np.stack([_np(program(*[_r(b[i]) for b in batch])) for i in range(3)])
        np.testing.assert_allclose(_np(got), want, rtol=1e-10, atol=1e-12)
        g = rf.vmap(rf.grad(program, argnums=tuple(range(len(batch)))))(*[_r(b) for b in batch])
        for k, _b in enumerate(batch):
            loop = np.stack([rlgrad.grad(program, argnum=k)(*[c[i] for c in batch]) for i in range(3)])
            np.testing.assert_allclose(_np(g[k]), loop, rtol=1e-9, atol=1e-11)


# ---- against torch.func -------------------------------------------------------------------------
def _mlps(dtype: Any = np.float64) -> tuple[Any, Any]:
    torch.manual_seed(0)
    tnet = torch.nn.Sequential(torch.nn.Linear(6, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 2))
    rnet = nn.Sequential(nn.Linear(6, 64), nn.Tanh(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
    if dtype == np.float64:
        tnet, rnet = tnet.double(), rnet.double()
    rnet.load_state_dict({k: rlgrad.tensor(v.detach().numpy()) for k, v in tnet.state_dict().items()})
    return tnet, rnet


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-10), (np.float32, 2e-5)])
def test_per_sample_gradients_of_a_64_64_mlp_match_torch_func(dtype: Any, tol: float) -> None:
    tnet, rnet = _mlps(dtype)
    x = RNG.normal(size=(32, 6)).astype(dtype)
    y = RNG.normal(size=(32, 2)).astype(dtype)

    def loss(func: Any, call: Any, net: Any) -> Any:
        def f(params: Any, xb: Any, yb: Any) -> Any:
            return ((call(net, params, (xb[None],)) - yb[None]) ** 2).mean()
        return f

    tp = {k: v.detach() for k, v in tnet.named_parameters()}
    rp = {k: v.detach() for k, v in rnet.named_parameters()}
    want = tf.vmap(tf.grad(loss(tf, tf.functional_call, tnet)), in_dims=(None, 0, 0))(tp, _t(x), _t(y))
    got = rf.vmap(rf.grad(loss(rf, rf.functional_call, rnet)), in_dims=(None, 0, 0))(rp, _r(x), _r(y))
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == np.dtype(dtype)
        _close(got[k], want[k], rtol=tol, atol=tol)
    assert not got["0.weight"].requires_grad
    # the module is unchanged, and its own forward still gives torch's values
    _close(rnet(_r(x)), tnet(_t(x)), rtol=tol, atol=tol)
    values = rf.vmap(lambda p, xb: rf.functional_call(rnet, p, xb), in_dims=(None, 0))(rp, _r(x))
    _close(values, tnet(_t(x)), rtol=tol, atol=tol)


def test_per_sample_gradients_leave_no_reference_cycles() -> None:
    """The batch's gradients are freed when the caller drops them, not at the next garbage
    collection (a cycle in the pytree code held them: 2x the time of a vmap(grad) step)."""
    import gc

    _, rnet = _mlps()
    rp = {k: v.detach() for k, v in rnet.named_parameters()}
    fn = rf.vmap(rf.grad(lambda p, xb: rf.functional_call(rnet, p, (xb[None],)).sum()), in_dims=(None, 0))
    x = _r(RNG.normal(size=(8, 6)))
    fn(rp, x)
    gc.collect()
    fn(rp, x)
    assert gc.collect() == 0


def test_grad_and_value_with_aux_argnums_tuple_match_torch() -> None:
    w, xs = RNG.normal(size=(3, 4)), RNG.normal(size=(5, 4))

    def f(mod: Any) -> Any:
        def fn(w: Any, x: Any) -> Any:
            y = mod.tanh(x @ w.T)
            return (y ** 2).sum(), y
        return fn

    want = tf.vmap(tf.grad_and_value(f(torch), argnums=(0, 1), has_aux=True),
                   in_dims=(None, 0))(_t(w), _t(xs))
    got = rf.vmap(rf.grad_and_value(f(rlgrad), argnums=(0, 1), has_aux=True),
                  in_dims=(None, 0))(_r(w), _r(xs))
    (gw, gx), (v, aux) = got
    (tw, tx), (tv, taux) = want
    for a, b in ((gw, tw), (gx, tx), (v, tv), (aux, taux)):
        _close(a, b)
    g, aux = rf.grad(f(rlgrad), has_aux=True)(_r(w), _r(xs[0]))
    _close(g, tf.grad(f(torch), has_aux=True)(_t(w), _t(xs[0]))[0])


def test_nested_vmap_matches_torch() -> None:
    x, y = RNG.normal(size=(3, 4, 5)), RNG.normal(size=(4, 5))

    def f(mod: Any) -> Any:
        return lambda a, b: mod.tanh(a * b).sum(-1) + (a @ b).sum()

    want = tf.vmap(tf.vmap(f(torch), in_dims=(0, 0)), in_dims=(0, None))(_t(x), _t(y))
    got = rf.vmap(rf.vmap(f(rlgrad), in_dims=(0, 0)), in_dims=(0, None))(_r(x), _r(y))
    _close(got, want)
    want = tf.vmap(tf.vmap(f(torch), in_dims=(None, 0)), in_dims=(0, None))(_t(x[:, 0]), _t(y))
    got = rf.vmap(rf.vmap(f(rlgrad), in_dims=(None, 0)), in_dims=(0, None))(_r(x[:, 0]), _r(y))
    _close(got, want)
    # per-sample gradients of a per-sample function under two levels
    want = tf.vmap(tf.vmap(tf.grad(lambda a, b: (torch.sin(a) * b).sum())), in_dims=(0, None))(_t(x), _t(y))
    got = rf.vmap(rf.vmap(rf.grad(lambda a, b: (rlgrad.sin(a) * b).sum())), in_dims=(0, None))(_r(x), _r(y))
    _close(got, want)


def test_in_dims_out_dims_and_chunks_match_torch() -> None:
    x, y = RNG.normal(size=(4, 3)), RNG.normal(size=(3, 4))

    def f(a: Any, b: Any) -> Any:
        return a * b, a.sum()

    for xs, ys, in_dims, out_dims in ((x, y, (0, 1), 0), (x.T, y.T, (1, 0), (1, 0)),
                                      (x[0, :1], y, (None, 1), (0, None)), (x, y, (0, 1), (-1, 0))):
        want = tf.vmap(f, in_dims=in_dims, out_dims=out_dims)(_t(xs), _t(ys))
        got = rf.vmap(f, in_dims=in_dims, out_dims=out_dims)(_r(xs), _r(ys))
        for a, b in zip(got, want):
            _close(a, b)
    d = {"a": x, "b": y.T}
    dims = ({"a": 0, "b": None},)
    want = tf.vmap(lambda p: p["a"] - p["b"], in_dims=dims)({k: _t(v) for k, v in d.items()})
    got = rf.vmap(lambda p: p["a"] - p["b"], in_dims=dims)({k: _r(v) for k, v in d.items()})
    _close(got, want)
    want = tf.vmap(lambda a: a.cumsum(0), chunk_size=3)(_t(x))
    _close(rf.vmap(lambda a: a.cumsum(0), chunk_size=3)(_r(x)), want)
    _close(rf.vmap(lambda a: a.exp(), in_dims=1, out_dims=1, chunk_size=2)(_r(y)), torch.exp(_t(y)))


def test_ensemble_of_q_networks_as_one_call_matches_torch() -> None:
    torch.manual_seed(1)
    tmods = [torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).double()
             for _ in range(5)]
    rmods = [nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3)).double() for _ in range(5)]
    for r, t in zip(rmods, tmods):
        r.load_state_dict({k: rlgrad.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    obs = RNG.normal(size=(8, 4))
    tparams, tbuf = tf.stack_module_state(tmods)
    rparams, rbuf = rf.stack_module_state(rmods)
    assert rparams["0.weight"].shape == (5, 16, 4) and rparams["0.weight"].requires_grad

    def q(call: Any, base: Any) -> Any:
        return lambda p, b, x: call(base, (p, b), (x,))

    want = tf.vmap(q(tf.functional_call, tmods[0]), in_dims=(0, 0, None))(tparams, tbuf, _t(obs))
    got = rf.vmap(q(rf.functional_call, rmods[0]), in_dims=(0, 0, None))(rparams, rbuf, _r(obs))
    _close(got, want)
    want.sum().backward()
    got.sum().backward()  # through the batched graph, into the stacked leaves
    _close(rparams["0.weight"].grad, tparams["0.weight"].grad)


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian"])
def test_jacobians_and_hessians_match_torch_func(transform: str) -> None:
    w, xs = RNG.normal(size=(3, 4)), RNG.normal(size=(5, 4))

    def f(mod: Any) -> Any:
        if transform == "hessian":
            return lambda w, x: (mod.tanh(x @ w.T) ** 3).sum()
        return lambda w, x: mod.tanh(x @ w.T) ** 2

    for argnums in (0, 1, (0, 1)):
        want = getattr(tf, transform)(f(torch), argnums=argnums)(_t(w), _t(xs[0]))
        got = getattr(rf, transform)(f(rlgrad), argnums=argnums)(_r(w), _r(xs[0]))
        for a, b in zip(*(([got], [want]) if argnums != (0, 1) else (got, want))):
            if isinstance(a, tuple):
                for c, e in zip(a, b):
                    _close(c, e)
            else:
                _close(a, b)
        want = tf.vmap(getattr(tf, transform)(f(torch), argnums=argnums), in_dims=(None, 0))(_t(w), _t(xs))
        got = rf.vmap(getattr(rf, transform)(f(rlgrad), argnums=argnums), in_dims=(None, 0))(_r(w), _r(xs))
        flat_w = want if isinstance(want, tuple) else (want,)
        flat_g = got if isinstance(got, tuple) else (got,)
        for a, b in zip(flat_g, flat_w):
            if isinstance(a, tuple):
                for c, e in zip(a, b):
                    _close(c, e)
            else:
                _close(a, b)


def test_vjp_and_jvp_match_torch_func_inside_and_outside_vmap() -> None:
    x, v = RNG.normal(size=(5, 3)), RNG.normal(size=(5, 3))

    def f(mod: Any) -> Any:
        return lambda a: mod.sin(a) * a.sum()

    out, fn = rf.vjp(f(rlgrad), _r(x[0]))
    tout, tfn = tf.vjp(f(torch), _t(x[0]))
    _close(out, tout)
    _close(fn(_r(v[0]))[0], tfn(_t(v[0]))[0])
    got = rf.jvp(f(rlgrad), (_r(x[0]),), (_r(v[0]),))
    for a, b in zip(got, tf.jvp(f(torch), (_t(x[0]),), (_t(v[0]),))):
        _close(a, b)

    def per_sample_vjp(mod: Any, func: Any) -> Any:
        def g(a: Any, ct: Any) -> Any:
            return func.vjp(f(mod), a)[1](ct)[0]
        return g

    want = tf.vmap(per_sample_vjp(torch, tf))(_t(x), _t(v))
    _close(rf.vmap(per_sample_vjp(rlgrad, rf))(_r(x), _r(v)), want)
    got = rf.vmap(lambda a, t: rf.jvp(f(rlgrad), (a,), (t,))[1])(_r(x), _r(v))
    want = tf.vmap(lambda a, t: tf.jvp(f(torch), (a,), (t,))[1])(_t(x), _t(v))
    _close(got, want)


def test_second_order_through_vmap_matches_finite_differences() -> None:
    """A gradient of a vmapped per-sample gradient (a gradient penalty): the batched graph is
    differentiated again."""
    w = RNG.normal(size=(3, 4))
    xs = RNG.normal(size=(6, 4))

    def penalty(w_: Any) -> Any:
        g = rf.vmap(rf.grad(lambda x, w: (rlgrad.tanh(w @ x) ** 2).sum()), in_dims=(0, None))(_r(xs), w_)
        return (g ** 2).sum()

    got = rf.grad(penalty)(_r(w))
    eps, num = 1e-6, np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[idx] = eps
        num[idx] = (_np(penalty(_r(w + d))) - _np(penalty(_r(w - d)))) / (2 * eps)
    np.testing.assert_allclose(_np(got), num, rtol=1e-6, atol=1e-8)


# ---- the fast paths beside their reference -------------------------------------------------------
@pytest.mark.parametrize("case", ["b_shared", "a_shared", "outer", "outer_tall", "plain"])
def test_bmatmul_fast_paths_equal_numpys_matmul(case: str) -> None:
    a = RNG.normal(size=(7, 3, 4))
    b = RNG.normal(size=(7, 4, 5))
    if case == "b_shared":
        b = np.broadcast_to(b[0], b.shape)
    elif case == "a_shared":
        a = np.broadcast_to(a[0], a.shape)
    elif case == "outer":
        a, b = a[:, :, :1], b[:, :1, :]
    elif case == "outer_tall":  # the longer side first: einsum writes it transposed
        a, b = RNG.normal(size=(7, 5, 1)), RNG.normal(size=(7, 1, 3))
    np.testing.assert_allclose(batching._bmatmul(a, b), np.matmul(a, b), rtol=1e-13, atol=1e-14)
    rlgrad.check_grads(batching.bmatmul, modes=("rev", "fwd"), order=2)(np.array(a), np.array(b))


@pytest.mark.parametrize("kernels", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n", [(64, 64), (64, 8), (1, 9), (5, 1)])
def test_bmatmul_outer_products_are_matmuls_bits(monkeypatch: Any, kernels: bool, dtype: type,
                                                 m: int, n: int) -> None:
    """Per-sample weight gradients (a contraction of length 1): the C loop (rlgrad._kernels.outers)
    or einsum without it, each element the one product np.matmul computes."""
    if kernels and batching.ops._kernels is None:
        pytest.skip("rlgrad._kernels not built (or turned off)")
    if not kernels:
        monkeypatch.setattr(batching.ops, "_kernels", None)
    a, b = RNG.normal(size=(6, m, 1)).astype(dtype), RNG.normal(size=(6, 1, n)).astype(dtype)
    got = batching._bmatmul(a, b)
    assert got.dtype == dtype and np.array_equal(got, np.matmul(a, b))


# ---- JAX's spelling ----------------------------------------------------------------------------
def test_rlgrad_vmap_has_jaxs_signature_and_returns_arrays() -> None:
    w, xs = RNG.normal(size=(4, 3)), RNG.normal(size=(5, 4))

    def f(w: Any, x: Any) -> Any:
        return rnp.sum(rnp.tanh(x @ w) ** 2)

    g = rlgrad.vmap(rlgrad.grad(f), in_axes=(None, 0))(w, xs)
    assert isinstance(g, np.ndarray) and g.shape == (5, 4, 3)
    np.testing.assert_allclose(g, np.stack([rlgrad.grad(f)(w, x) for x in xs]), rtol=1e-12)
    v, gv = rlgrad.vmap(rlgrad.value_and_grad(f), in_axes=(None, 0), out_axes=(0, 1))(w, xs)
    np.testing.assert_allclose(np.moveaxis(gv, 1, 0), g, rtol=1e-12)
    np.testing.assert_allclose(v, [f(w, x) for x in xs], rtol=1e-12)
    # torch.vmap's keywords, after the import swap
    got = rlgrad.vmap(lambda a, b: a * b, in_dims=(1, None), out_dims=1)(_r(xs.T), _r(w[:, 0]))
    want = torch.vmap(lambda a, b: a * b, in_dims=(1, None), out_dims=1)(_t(xs.T), _t(w[:, 0]))
    _close(got, want)
    # the JAX-style Jacobians, Hessian, vjp and jvp run batched inside vmap too
    def h(x: Any) -> Any:
        return rnp.sum(rnp.tanh(x) ** 3)

    for got, one in ((rlgrad.vmap(rlgrad.jacobian(rnp.tanh))(xs), rlgrad.jacobian(rnp.tanh)),
                     (rlgrad.vmap(rlgrad.jacfwd(rnp.sin))(xs), rlgrad.jacfwd(rnp.sin)),
                     (rlgrad.vmap(rlgrad.hessian(h))(xs), rlgrad.hessian(h)),
                     (rlgrad.vmap(lambda x: rlgrad.vjp(rnp.sin, x)[1](x)[0])(xs),
                      lambda x: rlgrad.vjp(rnp.sin, x)[1](x)[0]),
                     (rlgrad.vmap(lambda x: rlgrad.jvp(rnp.sin, (x,), (x,))[1])(xs),
                      lambda x: rlgrad.jvp(rnp.sin, (x,), (x,))[1])):
        np.testing.assert_allclose(got, np.stack([one(x) for x in xs]), rtol=1e-12, atol=1e-14)
    with pytest.raises(TypeError, match="inside vmap is not batched"):
        rlgrad.vmap(rlgrad.elementwise_grad(rnp.tanh))(xs)


def test_vmap_and_jit_compose() -> None:
    """jit of a vmapped per-sample gradient replays the batched program on fresh inputs; a
    jitted function called inside vmap runs through the batching rules (never a trace of one
    slice)."""
    w, xs = _r(RNG.normal(size=(3, 2))), RNG.normal(size=(5, 3))
    f = rf.vmap(rf.grad(lambda w, x: (x @ w).tanh().sum()), in_dims=(None, 0))
    jitted = rlgrad.jit(f)
    for k in range(3):
        np.testing.assert_allclose(np.asarray(_np(jitted(w, _r(xs * (k + 1))))),
                                   _np(f(w, _r(xs * (k + 1)))), rtol=1e-12)
    inner = rf.vmap(rlgrad.jit(lambda x: (x * 2).sum()))
    np.testing.assert_allclose(_np(inner(_r(xs))), 2 * xs.sum(1), rtol=1e-12)


def test_vmap_of_cumprod_takes_no_branch_on_one_slice() -> None:
    """rnp.cumprod picks exp(cumsum(log)) for positive values: under vmap it may not look at the
    values (one slice positive, the next not; found by the random programs)."""
    x = np.array([[0.5, 2.0, 0.3], [0.7, -3.0, 0.0], [1.5, 0.2, 4.0]])

    def f(v: Any) -> Any:
        return rnp.cumprod(v, axis=0)

    got = rf.vmap(f)(_r(x))
    np.testing.assert_allclose(got.numpy(), np.cumprod(x, axis=1), rtol=1e-14)
    g = rf.vmap(rf.grad(lambda v: rnp.sum(f(v))))(_r(x))
    want = [np.asarray(rlgrad.grad(lambda v: rnp.sum(f(v)))(_r(row))) for row in x]
    np.testing.assert_allclose(np.asarray(g), np.stack(want), rtol=1e-12)

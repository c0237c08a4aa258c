"""vmap of index reads and writes whose index is batched (``q[arange(n), a]``, ``cross_entropy``,
``Embedding``, ``gather``, ``index_select``, ``take_along_dim``, ``index_put``, ``x[i] = v``),
conv with a batched weight, and ``randomness=``: each against torch.func in float64 (values,
per-sample gradients, second order), and what torch.func refuses refused in one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.func as rf
import rlgrad.nn.functional as F
from rlgrad import batching

torch = pytest.importorskip("torch")
tf = torch.func
TF = torch.nn.functional

RNG = np.random.default_rng(29)
Q = RNG.normal(size=(5, 3, 4))
Q4 = RNG.normal(size=(5, 2, 3, 4))
A = RNG.integers(0, 4, (5, 3))
A3 = RNG.integers(0, 3, (5, 3))
M = Q > 0
W = np.array([1.0, 2.0, 0.5, 3.0])


def _run(vmap: Callable, fn: Callable, args: tuple, in_dims: Any, lib: Any) -> Any:
    return vmap(fn, in_dims=in_dims)(*[lib.tensor(a) for a in args])


def _same(got: Any, want: Any) -> None:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        assert tuple(g.shape) == tuple(w.shape)
        assert g.dtype == {torch.float64: np.float64, torch.int64: np.int64,
                           torch.bool: np.bool_}[w.dtype]
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)


def _embedding(lib: Any) -> Callable:
    fn = TF.embedding if lib is torch else F.embedding
    return lambda w, a: fn(a, w, padding_idx=1)


def _put(lib: Any, accumulate: bool) -> Callable:
    def f(q: Any, a: Any) -> Any:
        ones = lib.ones(3, dtype=lib.float64) * 2
        return q.index_put((lib.arange(3), a), ones, accumulate=accumulate)
    return f


def _setitem(lib: Any) -> Callable:
    def f(q: Any, a: Any) -> Any:
        q = q.clone()
        q[lib.arange(3), a] = 1.0
        q[a[0] % 3] = q[a[0] % 3] * 2
        return q
    return f


def _fills(lib: Any) -> Callable:
    def f(q: Any, a: Any) -> Any:
        q = q.clone()
        q.masked_fill_(q > 0.5, 0.0)
        q.scatter_(1, a[:, None], -1.0)
        return q.index_add(1, a, q[:, :3] * 2)
    return f


def _functional(lib: Any, name: str) -> Callable:
    return getattr(TF if lib is torch else F, name)


# name: (function of the library, arguments, in_dims)
CASES: dict[str, tuple[Callable, tuple, Any]] = {
    "q[arange, a]": (lambda lib: lambda q, a: q[lib.arange(3), a], (Q, A), 0),
    "q[a] 0-d": (lambda lib: lambda q, a: q[a], (Q, A3[:, 0]), 0),
    "q[:, a]": (lambda lib: lambda q, a: q[:, a], (Q, A), 0),
    "q[0, :, a] torch's placement": (lambda lib: lambda q, a: q[0, :, a], (Q4, A), 0),
    "q[:, :, a]": (lambda lib: lambda q, a: q[:, :, a], (Q4, A), 0),
    "q[..., a[None]]": (lambda lib: lambda q, a: q[..., a[None]], (Q4, A), 0),
    "shared q, batched a": (lambda lib: lambda q, a: q[a % 3, 1:], (Q[0], A), (None, 0)),
    "shared q, q[:, a]": (lambda lib: lambda q, a: q[:, a], (Q, A3), (None, 0)),
    "cross_entropy": (lambda lib: lambda q, a: _functional(lib, "cross_entropy")(q, a), (Q, A), 0),
    "cross_entropy one sample": (lambda lib: lambda q, a: _functional(lib, "cross_entropy")(q[0], a[0]),
                                 (Q, A), 0),
    "cross_entropy none": (lambda lib: lambda q, a: _functional(lib, "cross_entropy")(
        q, a, reduction="none"), (Q, A), 0),
    "cross_entropy smoothing": (lambda lib: lambda q, a: _functional(lib, "cross_entropy")(
        q, a, label_smoothing=0.1), (Q, A), 0),
    "cross_entropy weight ignore": (lambda lib: lambda q, a: _functional(lib, "cross_entropy")(
        q, a, weight=lib.tensor(W), ignore_index=2), (Q, A), 0),
    "nll_loss": (lambda lib: lambda q, a: _functional(lib, "nll_loss")(q, a), (Q, A), 0),
    "embedding padding_idx": (_embedding, (Q[0], A3), (None, 0)),
    "embedding batched weight": (_embedding, (Q, A3), 0),
    "one_hot": (lambda lib: lambda a: _functional(lib, "one_hot")(a, 4), (A,), 0),
    "gather": (lambda lib: lambda q, a: q.gather(1, a[:, None]), (Q, A), 0),
    "gather shared q": (lambda lib: lambda q, a: q.gather(1, a[:, None]), (Q[0], A), (None, 0)),
    "index_select": (lambda lib: lambda q, a: q.index_select(1, a), (Q, A), 0),
    "index_select shared q": (lambda lib: lambda q, a: lib.index_select(q, 1, a), (Q[0], A), (None, 0)),
    "take_along_dim": (lambda lib: lambda q, a: lib.take_along_dim(q, a[:, None], 1), (Q, A), 0),
    "take_along_dim flat": (lambda lib: lambda q, a: q.take_along_dim(a), (Q, A), 0),
    "Categorical.log_prob": (lambda lib: lambda q, a: lib.distributions.Categorical(logits=q).log_prob(a),
                             (Q, A), 0),
    "where(mask)": (lambda lib: lambda q, m: lib.where(m, q, 0.0), (Q, M), 0),
    "masked_fill": (lambda lib: lambda q, m: q.masked_fill(m, 0.0), (Q, M), 0),
    "unbatched mask": (lambda lib: lambda q, m: q[m], (Q, M[0]), (0, None)),
    "index_put": (lambda lib: _put(lib, False), (Q, A), 0),
    "index_put accumulate": (lambda lib: _put(lib, True), (Q, A), 0),
    "x[idx] = v": (_setitem, (Q, A), 0),
    "masked_fill_ scatter_ index_add": (_fills, (Q, A), 0),
    "scatter_add": (lambda lib: lambda q, a: lib.zeros(3, 4, dtype=lib.float64).scatter_add(
        1, a[:, None], q[:, :1]), (Q, A), 0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_of_batched_index_reads_and_writes_matches_torch_func(name: str) -> None:
    make, args, in_dims = CASES[name]
    got = _run(rf.vmap, make(rlgrad), args, in_dims, rlgrad)
    _same(got, _run(tf.vmap, make(torch), args, in_dims, torch))


def _q_loss(lib: Any) -> Callable:
    def loss(w: Any, x: Any, a: Any, r: Any) -> Any:
        q = lib.tanh(x @ w)
        return ((q[lib.arange(2), a] - r) ** 2).sum() + _functional(lib, "cross_entropy")(q, a)
    return loss


def test_per_sample_gradients_through_batched_indices_match_torch_func() -> None:
    w, x, r = RNG.normal(size=(3, 4)), RNG.normal(size=(5, 2, 3)), RNG.normal(size=(5, 2))
    args, dims = (w, x, A[:, :2], r), (None, 0, 0, 0)
    for transform in ("grad", "jacrev", "jacfwd", "hessian"):
        got = _run(rf.vmap, getattr(rf, transform)(_q_loss(rlgrad)), args, dims, rlgrad)
        want = _run(tf.vmap, getattr(tf, transform)(_q_loss(torch)), args, dims, torch)
        _same(got, want)


def test_gradient_of_a_vmapped_index_read_matches_finite_differences() -> None:
    """First and second order through the physical graph (float64 central differences)."""
    def f(q: Any) -> Any:
        picked = rf.vmap(lambda row, a: rlgrad.tanh(row[rlgrad.arange(3), a]))(q, rlgrad.tensor(A))
        return (picked ** 3).sum()

    q = rlgrad.tensor(Q, requires_grad=True)
    (g,) = rlgrad.autograd.grad(f(q), q, create_graph=True)
    v = RNG.normal(size=Q.shape)
    (hv,) = rlgrad.autograd.grad((g * rlgrad.tensor(v)).sum(), q)
    eps = 1e-6
    fd = (f(rlgrad.tensor(Q + eps * v)) - f(rlgrad.tensor(Q - eps * v))).item() / (2 * eps)
    np.testing.assert_allclose((g.detach().numpy() * v).sum(), fd, rtol=1e-7)
    ts = [rlgrad.tensor(Q + s * eps * v, requires_grad=True) for s in (1, -1)]
    gp, gm = (rlgrad.autograd.grad(f(t), t)[0].numpy() for t in ts)
    np.testing.assert_allclose(hv.numpy(), (gp - gm) / (2 * eps), rtol=1e-5, atol=1e-8)


def test_nested_vmaps_with_indices_batched_at_either_level_match_torch() -> None:
    for dims in ((0, 0), (None, 0)):
        def f(lib: Any) -> Callable:
            return lambda q, a: q[a]
        got = rf.vmap(rf.vmap(f(rlgrad), in_dims=dims))(rlgrad.tensor(Q), rlgrad.tensor(A3))
        want = tf.vmap(tf.vmap(f(torch), in_dims=dims))(torch.tensor(Q), torch.tensor(A3))
        _same(got, want)
    got = rf.vmap(rf.vmap(lambda q, a: q[a], in_dims=(None, 0)), in_dims=(0, None))(
        rlgrad.tensor(Q), rlgrad.tensor(A3[0]))
    want = tf.vmap(tf.vmap(lambda q, a: q[a], in_dims=(None, 0)), in_dims=(0, None))(
        torch.tensor(Q), torch.tensor(A3[0]))
    _same(got, want)


@pytest.mark.parametrize("fn, match", [
    (lambda q, m: q[m], "batched boolean mask"),
    (lambda q, m: q.clone().__setitem__(m, 0.0), "batched boolean mask"),
])
def test_what_torch_func_refuses_raises_one_line(fn: Callable, match: str) -> None:
    with pytest.raises(batching.VmapError, match=match):
        rf.vmap(fn)(rlgrad.tensor(Q), rlgrad.tensor(M))
    with pytest.raises(RuntimeError, match="boolean mask"):
        tf.vmap(fn)(torch.tensor(Q), torch.tensor(M))


def test_out_of_range_batched_indices_raise_naming_the_index() -> None:
    bad = A.copy()
    bad[3, 1] = 7
    with pytest.raises(IndexError, match="7"):
        rf.vmap(lambda q, a: F.cross_entropy(q, a))(rlgrad.tensor(Q), rlgrad.tensor(bad))
    with pytest.raises(IndexError, match="7"):
        rf.vmap(lambda q, a: F.embedding(a, q))(rlgrad.tensor(Q), rlgrad.tensor(bad))
    with pytest.raises(IndexError, match="7"):
        rf.vmap(lambda q, a: q.index_select(1, a))(rlgrad.tensor(Q), rlgrad.tensor(bad))


# ---- randomness="error" | "same" | "different" (torch.func's) ---------------------------------
X = RNG.normal(size=(6, 3, 5))
DRAWS: dict[str, tuple[Callable, Callable]] = {  # inside vmap, and the unbatched call of a batch
    "randn": (lambda x: rlgrad.randn(3, 5, dtype=rlgrad.float64),
              lambda x: rlgrad.randn(6, 3, 5, dtype=rlgrad.float64)),
    "rand": (lambda x: rlgrad.rand(3, 5), lambda x: rlgrad.rand(6, 3, 5)),
    "randint": (lambda x: rlgrad.randint(0, 7, (3, 5)), lambda x: rlgrad.randint(0, 7, (6, 3, 5))),
    "randn_like": (lambda x: rlgrad.randn_like(x), lambda x: rlgrad.randn_like(x)),
    "normal_": (lambda x: x.clone().normal_(), lambda x: x.clone().normal_()),
    "uniform_": (lambda x: x.clone().uniform_(-1, 1), lambda x: x.clone().uniform_(-1, 1)),
    "dropout": (lambda x: F.dropout(x, 0.5), lambda x: F.dropout(x, 0.5)),
    "Categorical.sample": (lambda x: rlgrad.distributions.Categorical(logits=x).sample(),
                           lambda x: rlgrad.distributions.Categorical(logits=x).sample()),
    "Normal.rsample": (lambda x: rlgrad.distributions.Normal(x, 0.5).rsample(),
                       lambda x: rlgrad.distributions.Normal(x, 0.5).rsample()),
    "Normal.sample": (lambda x: rlgrad.distributions.Normal(x, 0.5).sample(),
                      lambda x: rlgrad.distributions.Normal(x, 0.5).sample()),
    "Bernoulli.sample": (lambda x: rlgrad.distributions.Bernoulli(logits=x).sample(),
                         lambda x: rlgrad.distributions.Bernoulli(logits=x).sample()),
    "bernoulli": (lambda x: rlgrad.bernoulli(rlgrad.sigmoid(x)),
                  lambda x: rlgrad.bernoulli(rlgrad.sigmoid(x))),
    "normal(mean)": (lambda x: rlgrad.normal(x, 2.0), lambda x: rlgrad.normal(x, 2.0)),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_randomness_different_draws_what_the_unbatched_call_draws(name: str) -> None:
    """One draw per slice, from the same stream: with the same seed, exactly the draw of the
    whole batch outside vmap (the vmapped dimension is the first of the draw)."""
    inside, outside = DRAWS[name]
    rlgrad.manual_seed(7)
    got = rf.vmap(inside, randomness="different")(rlgrad.tensor(X))
    rlgrad.manual_seed(7)
    want = outside(rlgrad.tensor(X))
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy().astype(got.numpy().dtype))
    with pytest.raises(RuntimeError, match="randomness='error'"):
        rf.vmap(inside)(rlgrad.tensor(X))


@pytest.mark.parametrize("name", ["randn", "rand", "randint", "normal_", "dropout", "uniform_"])
def test_randomness_same_shares_one_draw_as_torch_func_does(name: str) -> None:
    """On identical slices: 'same' gives identical results, 'different' does not, in both."""
    inside = DRAWS[name][0]
    ones = np.ones((6, 3, 5))
    same = rf.vmap(inside, randomness="same")(rlgrad.tensor(ones)).numpy()
    diff = rf.vmap(inside, randomness="different")(rlgrad.tensor(ones)).numpy()
    assert (same == same[0]).all() and not (diff == diff[0]).all()
    lib_t = {"randn": lambda x: torch.randn(3, 5), "rand": lambda x: torch.rand(3, 5),
             "randint": lambda x: torch.randint(0, 7, (3, 5)), "normal_": lambda x: x.clone().normal_(),
             "dropout": lambda x: TF.dropout(x, 0.5), "uniform_": lambda x: x.clone().uniform_(-1, 1)}[name]
    same_t = tf.vmap(lib_t, randomness="same")(torch.tensor(ones)).numpy()
    diff_t = tf.vmap(lib_t, randomness="different")(torch.tensor(ones)).numpy()
    assert (same_t == same_t[0]).all() and not (diff_t == diff_t[0]).all()
    with pytest.raises(RuntimeError, match="randomness"):
        tf.vmap(lib_t)(torch.tensor(ones))


def test_nested_randomness_varies_along_the_different_levels_only() -> None:
    x = rlgrad.tensor(X)
    rlgrad.manual_seed(3)
    both = rf.vmap(rf.vmap(lambda r: rlgrad.randn(2), randomness="different"), randomness="different")(x)
    rlgrad.manual_seed(3)
    np.testing.assert_array_equal(both.numpy(), rlgrad.randn(6, 3, 2).numpy())
    outer = rf.vmap(rf.vmap(lambda r: rlgrad.randn(2), randomness="same"), randomness="different")(x)
    o = outer.numpy()
    assert (o == o[:, :1]).all() and not (o == o[:1]).all()


def test_an_in_place_draw_into_an_unbatched_tensor_with_different_randomness_raises() -> None:
    def f(x: Any) -> Any:
        z = rlgrad.zeros(3)
        z.normal_()
        return x + z

    with pytest.raises(RuntimeError, match="different draw per slice"):
        rf.vmap(f, randomness="different")(rlgrad.tensor(X[:, 0]))


# ---- conv2d with a batched weight: an ensemble of CNN Q-networks ------------------------------
def _cnn(lib: Any) -> Any:
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(2, 4, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(4, 3, 2),
                         nn.Flatten(), nn.Linear(27, 5)).double()


def test_ensemble_of_cnn_q_networks_as_one_call_matches_torch_func() -> None:
    torch.manual_seed(2)
    tnets = [_cnn(torch) for _ in range(3)]
    rnets = [_cnn(rlgrad) for _ in range(3)]
    for r, t in zip(rnets, tnets, strict=True):
        r.load_state_dict({k: rlgrad.tensor(v.detach().numpy()) for k, v in t.state_dict().items()})
    obs = RNG.normal(size=(7, 2, 8, 8))
    tparams, tbuf = tf.stack_module_state(tnets)
    rparams, rbuf = rf.stack_module_state(rnets)

    def q(call: Any, base: Any) -> Any:
        return lambda p, b, x: call(base, (p, b), (x,))

    want = tf.vmap(q(tf.functional_call, tnets[0]), in_dims=(0, 0, None))(tparams, tbuf, torch.tensor(obs))
    got = rf.vmap(q(rf.functional_call, rnets[0]), in_dims=(0, 0, None))(rparams, rbuf, rlgrad.tensor(obs))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)
    (want ** 2).sum().backward()
    (got ** 2).sum().backward()
    for k in ("0.weight", "0.bias", "2.weight"):
        np.testing.assert_allclose(rparams[k].grad.numpy(), tparams[k].grad.numpy(), rtol=1e-9, atol=1e-11)


def test_batched_conv_weights_against_the_loop_and_finite_differences() -> None:
    """Each slice's own kernels, batched input or not, bias batched or not; the gradient of the
    batched form against central differences (first and second order)."""
    w, b, x = RNG.normal(size=(4, 3, 2, 3, 3)), RNG.normal(size=(4, 3)), RNG.normal(size=(4, 2, 2, 7, 6))
    for dims in ((0, 0, 0), (0, None, 0), (None, 0, 0), (0, 0, None)):
        args = [a if d is not None else a[0] for a, d in zip((x, w, b), dims)]
        got = rf.vmap(lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1), in_dims=dims)(
            *[rlgrad.tensor(a) for a in args])
        per = [[torch.tensor(a[k] if d is not None else a) for a, d in zip(args, dims)] for k in range(4)]
        want = torch.stack([TF.conv2d(*one, stride=(2, 1), padding=1) for one in per])
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-11, atol=1e-12)

    def f(wt: Any) -> Any:
        y = rf.vmap(lambda x, w: F.conv2d(x, w, padding=1))(rlgrad.tensor(x), wt)
        return (rlgrad.tanh(y) ** 2).sum()

    wt = rlgrad.tensor(w, requires_grad=True)
    (g,) = rlgrad.autograd.grad(f(wt), wt, create_graph=True)
    v = RNG.normal(size=w.shape)
    (hv,) = rlgrad.autograd.grad((g * rlgrad.tensor(v)).sum(), wt)
    eps = 1e-6
    fd = (f(rlgrad.tensor(w + eps * v)) - f(rlgrad.tensor(w - eps * v))).item() / (2 * eps)
    np.testing.assert_allclose((g.detach().numpy() * v).sum(), fd, rtol=1e-7)
    ts = [rlgrad.tensor(w + s * eps * v, requires_grad=True) for s in (1, -1)]
    gp, gm = (rlgrad.autograd.grad(f(t), t)[0].numpy() for t in ts)
    np.testing.assert_allclose(hv.numpy(), (gp - gm) / (2 * eps), rtol=1e-5, atol=1e-8)


# ---- the new Tensor methods inside vmap (tests/test_torch_methods2.py has their values) -------
NEW_METHODS: dict[str, Callable] = {
    "cummax": lambda lib: lambda x: lib.cummax(x, 1)[0] + lib.cummax(x, 0)[1],
    "cummin": lambda lib: lambda x: x.cummin(1).values * x.cummin(1).indices,
    "take": lambda lib: lambda x: lib.take(x, lib.tensor(np.array([[0, 14], [3, 7]]))),
    "index_fill": lambda lib: lambda x: x.index_fill(1, lib.tensor(np.array([1, 3])), -1.0),
    "renorm": lambda lib: lambda x: lib.renorm(x, 2, 0, 1.0),
    "aminmax": lambda lib: lambda x: lib.aminmax(x, dim=1)[0] - lib.aminmax(x, dim=1)[1],
    "clamp_min clamp_max": lambda lib: lambda x: x.clamp_min(-0.5).clamp_max(0.5),
    "cartesian_prod": lambda lib: lambda x: lib.cartesian_prod(x[0], x[1, :2]),
    "block_diag": lambda lib: lambda x: lib.block_diag(x[:2, :2], x[2]),
}


@pytest.mark.parametrize("name", sorted(NEW_METHODS))
def test_new_methods_inside_vmap_match_torch_func(name: str) -> None:
    x = RNG.normal(size=(4, 3, 5))
    got = rf.vmap(NEW_METHODS[name](rlgrad))(rlgrad.tensor(x))
    want = tf.vmap(NEW_METHODS[name](torch))(torch.tensor(x))
    _same(got, want)
    g = rf.vmap(rf.grad(lambda a: (NEW_METHODS[name](rlgrad)(a) ** 2).sum()))(rlgrad.tensor(x))
    gt = tf.vmap(tf.grad(lambda a: (NEW_METHODS[name](torch)(a) ** 2).sum()))(torch.tensor(x))
    _same(g, gt)

"""rlgrad.nn's RNN, LSTM, GRU and their cells against torch 2.13 (float64): torch's initialised
parameters are loaded through ``load_state_dict``, then outputs, final states and the gradients
w.r.t. the input, the initial state and every parameter are compared. Second-order gradients of a
tiny layer are checked against finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rlgrad
import rlgrad.nn.functional as F
from rlgrad import nn

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(29)
TOL = 1e-10


def _pair(name: str, *args, **kwargs):
    """The same layer in torch and rlgrad (float64), rlgrad's loaded from torch's state_dict."""
    tm = getattr(torch.nn, name)(*args, **kwargs).double()
    rm = getattr(nn, name)(*args, dtype=np.float64, **kwargs)
    assert list(rm.state_dict()) == list(tm.state_dict())
    for (k, a), b in zip(rm.state_dict().items(), tm.state_dict().values()):
        assert a.shape == tuple(b.shape), k
    rm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return rm, tm


def _leaves(*arrays):
    return ([rlgrad.tensor(a, requires_grad=True) for a in arrays],
            [torch.tensor(a, requires_grad=True) for a in arrays])


def _close(a, b) -> None:
    a = a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)
    np.testing.assert_allclose(a, b.detach().numpy(), rtol=TOL, atol=TOL)


def _states(out):
    """(output, h_n) or (output, (h_n, c_n)) flattened to a list."""
    o, s = out
    return [o, *s] if isinstance(s, tuple) else [o, s]


def _loss(outs, weights, sq):
    total = 0
    for o, w in zip(outs, weights):
        total = total + (sq(o) * w).sum()
    return total


CONFIGS = [
    ("LSTM", {}),
    ("LSTM", {"num_layers": 2, "bidirectional": True}),
    ("LSTM", {"batch_first": True, "bias": False}),
    ("GRU", {}),
    ("GRU", {"num_layers": 2, "batch_first": True, "bidirectional": True}),
    ("GRU", {"bias": False, "num_layers": 3}),
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu", "num_layers": 2, "bidirectional": True}),
    ("RNN", {"batch_first": True, "bias": False}),
]


@pytest.mark.parametrize("name,kwargs", CONFIGS)
@pytest.mark.parametrize("given_state", [False, True])
def test_layer_matches_torch(name: str, kwargs: dict, given_state: bool) -> None:
    rm, tm = _pair(name, 3, 5, **kwargs)
    T, B = 4, 2
    x = RNG.standard_normal((B, T, 3) if kwargs.get("batch_first") else (T, B, 3))
    L = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    h0 = [RNG.standard_normal((L, B, 5)) for _ in range(2 if name == "LSTM" else 1)]
    (rx, *rh), (tx, *th) = _leaves(x, *h0)
    if given_state:
        r_out = rm(rx, tuple(rh) if name == "LSTM" else rh[0])
        t_out = tm(tx, tuple(th) if name == "LSTM" else th[0])
    else:
        r_out, t_out = rm(rx), tm(tx)
    r_list, t_list = _states(r_out), _states(t_out)
    for a, b in zip(r_list, t_list):
        assert a.shape == tuple(b.shape)
        _close(a, b)
    weights = [RNG.standard_normal(tuple(b.shape)) for b in t_list]
    _loss(r_list, weights, lambda v: v * v).backward()
    _loss(t_list, [torch.tensor(w) for w in weights], lambda v: v * v).backward()
    _close(rx.grad, tx.grad)
    if given_state:
        for a, b in zip(rh, th):
            _close(a.grad, b.grad)
    for p, q in zip(rm.parameters(), tm.parameters()):
        _close(p.grad, q.grad)


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_unbatched_input_matches_torch(name: str) -> None:
    rm, tm = _pair(name, 3, 4, num_layers=2, bidirectional=True)
    x = RNG.standard_normal((5, 3))
    h0 = [RNG.standard_normal((4, 4)) for _ in range(2 if name == "LSTM" else 1)]
    (rx, *rh), (tx, *th) = _leaves(x, *h0)
    r_list = _states(rm(rx, tuple(rh) if name == "LSTM" else rh[0]))
    t_list = _states(tm(tx, tuple(th) if name == "LSTM" else th[0]))
    for a, b in zip(r_list, t_list):
        assert a.shape == tuple(b.shape)
        _close(a, b)
    _loss(r_list, [1.0] * 3, lambda v: v * v * v).backward()
    _loss(t_list, [1.0] * 3, lambda v: v * v * v).backward()
    _close(rx.grad, tx.grad)
    for a, b in zip(rh, th):
        _close(a.grad, b.grad)


@pytest.mark.parametrize("name", ["LSTMCell", "GRUCell", "RNNCell"])
@pytest.mark.parametrize("batched", [True, False])
def test_cells_match_torch(name: str, batched: bool) -> None:
    kwargs = {"nonlinearity": "relu"} if name == "RNNCell" and batched else {}
    rm, tm = _pair(name, 3, 6, **kwargs)
    shape = (4,) if batched else ()
    x, h, c = (RNG.standard_normal(shape + (n,)) for n in (3, 6, 6))
    (rx, rh, rc), (tx, th, tc) = _leaves(x, h, c)
    state_r, state_t = ((rh, rc), (th, tc)) if name == "LSTMCell" else (rh, th)
    for r_out, t_out in ((rm(rx, state_r), tm(tx, state_t)), (rm(rx), tm(tx))):
        r_list = list(r_out) if name == "LSTMCell" else [r_out]
        t_list = list(t_out) if name == "LSTMCell" else [t_out]
        for a, b in zip(r_list, t_list):
            assert a.shape == tuple(b.shape)
            _close(a, b)
        _loss(r_list, [1.0, 2.0], lambda v: v * v).backward()
        _loss(t_list, [1.0, 2.0], lambda v: v * v).backward()
    _close(rx.grad, tx.grad)
    _close(rh.grad, th.grad)
    for p, q in zip(rm.parameters(), tm.parameters()):
        _close(p.grad, q.grad)


def _with_params(m: nn.Module, names: list[str], fn):
    """``fn`` as a function of the input and the named parameters, for check_grads: the values
    are put in the module's attribute slots for the call, then the Parameters are put back."""
    def run(x, *values):
        saved = {n: m.__dict__[n] for n in names}
        m.__dict__.update(dict(zip(names, values)))
        try:
            return fn(m, x)
        finally:
            m.__dict__.update(saved)
    return run


@pytest.mark.parametrize("name,readout", [
    ("LSTM", lambda m, x: m(x)[1][1]),
    ("GRU", lambda m, x: m(x)[0]),
    ("RNN", lambda m, x: m(x)[1]),
])
def test_second_order_gradients_finite_differences(name: str, readout) -> None:
    m = getattr(nn, name)(2, 3, num_layers=2, bidirectional=True, dtype=np.float64)
    names = ["weight_ih_l0", "weight_hh_l0_reverse", "bias_hh_l1"]
    params = [m.__dict__[n].detach().numpy().copy() for n in names]
    for p in m.parameters():
        p.requires_grad_(False)  # constants here; the checked ones come in as arguments
    x = RNG.standard_normal((3, 2, 2))
    rlgrad.check_grads(_with_params(m, names, readout), order=2)(x, *params)


def test_cell_second_order_gradients() -> None:
    m = nn.LSTMCell(2, 3, dtype=np.float64)
    for p in m.parameters():
        p.requires_grad_(False)
    h, c = RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))
    rlgrad.check_grads(lambda x, h, c: m(x, (h, c))[1] * m(x, (h, c))[0], order=2)(
        RNG.standard_normal((2, 2)), h, c)


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"])
def test_initialisation_is_uniform_in_one_over_sqrt_hidden(name: str) -> None:
    rlgrad.manual_seed(0)
    m = getattr(nn, name)(10, 100)
    bound = 1 / math.sqrt(100)
    values = np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])
    assert np.abs(values).max() <= bound
    # a uniform sample of this size: mean ~0, variance bound^2/3 within a few percent
    assert abs(values.mean()) < 0.02 * bound
    assert values.var() == pytest.approx(bound ** 2 / 3, rel=0.05)


def test_dropout_between_layers_train_and_eval() -> None:
    # p = 1 is deterministic: the second layer sees zeros in training, as in torch
    rm, tm = _pair("LSTM", 3, 4, num_layers=2, dropout=1.0)
    x = RNG.standard_normal((5, 2, 3))
    for a, b in zip(_states(rm(x)), _states(tm(torch.tensor(x)))):
        _close(a, b)
    rm.eval()
    tm.eval()
    for a, b in zip(_states(rm(x)), _states(tm(torch.tensor(x)))):
        _close(a, b)
    g = nn.GRU(3, 4, num_layers=2, dropout=0.5, dtype=np.float64)
    rlgrad.manual_seed(1)
    first = g(x)[0].detach().numpy()
    rlgrad.manual_seed(1)
    np.testing.assert_array_equal(first, g(x)[0].detach().numpy())  # seeded: reproducible
    g.eval()
    assert not np.allclose(first, g(x)[0].detach().numpy())  # eval: no dropout


def test_functional_dropout() -> None:
    rlgrad.manual_seed(3)
    x = rlgrad.tensor(np.ones((400, 250)), requires_grad=True)
    y = F.dropout(x, 0.3)
    v = y.detach().numpy()
    kept = v != 0
    assert kept.mean() == pytest.approx(0.7, abs=0.01)
    np.testing.assert_allclose(v[kept], 1 / 0.7)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), v)  # d/dx of x * mask / (1-p)
    assert F.dropout(x, 0.3, training=False) is x
    assert np.all(F.dropout(x, 1.0).detach().numpy() == 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)


def test_bad_input_is_one_clear_line() -> None:
    m = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(ValueError, match="input_size=3"):
        m(np.zeros((5, 2, 7)))
    with pytest.raises(ValueError, match=r"h0 must have shape \(2, 2, 4\)"):
        m(np.zeros((5, 2, 3)), (np.zeros((1, 2, 4)), np.zeros((2, 2, 4))))
    with pytest.raises(ValueError, match="pair"):
        m(np.zeros((5, 2, 3)), np.zeros((2, 2, 4)))
    with pytest.raises(ValueError, match="2-D .* or 3-D"):
        nn.GRU(3, 4)(np.zeros(3))
    with pytest.raises(ValueError, match="empty sequence"):
        nn.LSTM(3, 4)(np.zeros((0, 2, 3)))
    with pytest.raises(ValueError, match="'tanh' or 'relu'"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match=r"hidden state must have shape \(2, 4\)"):
        nn.GRUCell(3, 4)(np.zeros((2, 3)), np.zeros((3, 4)))


def test_float32_default_and_observation_cast() -> None:
    m = nn.GRU(3, 4)
    out, h = m(np.zeros((2, 1, 3)))  # float64 observations become the layer's float32
    assert out.dtype == np.float32 and h.dtype == np.float32
    assert "GRU(3, 4)" == repr(m)


def test_fused_lstm_cell_matches_plain_reference_to_second_order() -> None:
    from rlgrad.nn.recurrent import _lstm_step, _lstm_step_reference

    H = 3
    xp, h, c = (RNG.standard_normal((2, n)) for n in (4 * H, H, H))
    w, b = RNG.standard_normal((4 * H, H)), RNG.standard_normal(4 * H)

    def both(step):  # (h', c') side by side, as a function of xp, h, c and W_hh
        return lambda xp, h, c, w: rlgrad.numpy.concatenate(list(step(xp, h, c, w, b)), axis=-1)

    fused, ref = both(_lstm_step), both(_lstm_step_reference)
    np.testing.assert_allclose(np.asarray(fused(xp, h, c, w)), np.asarray(ref(xp, h, c, w)),
                               rtol=1e-13, atol=1e-14)
    v = RNG.standard_normal((2, 2 * H))
    for argnum in range(4):
        g_fused = rlgrad.grad(lambda *a: (fused(*a) * v).sum(), argnum)(xp, h, c, w)
        g_ref = rlgrad.grad(lambda *a: (ref(*a) * v).sum(), argnum)(xp, h, c, w)
        np.testing.assert_allclose(np.asarray(g_fused), np.asarray(g_ref), rtol=1e-12, atol=1e-13)
    # the fused node's VJP (recorded form) and JVP rules, against finite differences
    rlgrad.check_grads(fused, modes=["rev", "fwd"], order=2)(xp, h, c, w)
    rlgrad.check_grads(F.lstm_cell_p, modes=["rev", "fwd"], order=2)(RNG.standard_normal((2, 5 * H)))


def test_fused_gru_cell_matches_plain_reference_to_second_order() -> None:
    from rlgrad.nn.recurrent import _gru_step, _gru_step_reference

    H = 3
    xp, h = RNG.standard_normal((2, 3 * H)) * 2, RNG.standard_normal((2, H))
    w, b = RNG.standard_normal((3 * H, H)), RNG.standard_normal(3 * H)
    fused = lambda xp, h, w: _gru_step(xp, h, w, b)  # noqa: E731
    ref = lambda xp, h, w: _gru_step_reference(xp, h, w, b)  # noqa: E731
    np.testing.assert_allclose(np.asarray(fused(xp, h, w)), np.asarray(ref(xp, h, w)),
                               rtol=1e-13, atol=1e-14)
    v = RNG.standard_normal((2, H))
    for argnum in range(3):
        g_fused = rlgrad.grad(lambda *a: (fused(*a) * v).sum(), argnum)(xp, h, w)
        g_ref = rlgrad.grad(lambda *a: (ref(*a) * v).sum(), argnum)(xp, h, w)
        np.testing.assert_allclose(np.asarray(g_fused), np.asarray(g_ref), rtol=1e-12, atol=1e-13)
    rlgrad.check_grads(fused, modes=["rev", "fwd"], order=2)(xp, h, w)
    rlgrad.check_grads(F.gru_cell_p, modes=["rev", "fwd"], order=2)(RNG.standard_normal((2, 7 * H)))


def test_jit_training_step_matches_eager() -> None:
    # under rlgrad.jit the fused cells' backward runs through the recorded (ops) formula
    m, g = nn.LSTM(3, 4, num_layers=2, dtype=np.float64), nn.GRU(3, 4, dtype=np.float64)
    params = list(m.parameters()) + list(g.parameters())
    x = RNG.standard_normal((5, 2, 3))

    def step(x):
        for p in params:
            p.grad = None
        loss = (m(x)[0] ** 2).sum() + (g(x)[1] ** 2).sum()
        loss.backward()
        return loss

    compiled = rlgrad.jit(step)
    for _ in range(2):
        lj = float(compiled(x))
        gj = [p.grad.numpy().copy() for p in params]
        assert lj == pytest.approx(float(step(x)), rel=1e-12)
        for a, p in zip(gj, params):
            np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-10, atol=1e-12)

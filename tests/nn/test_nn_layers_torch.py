"""rlgrad.nn's Embedding, Dropout, GELU, SiLU, Mish and BatchNorm1d/2d against torch 2.13
(float64): parameters and buffers loaded from torch's state_dict, then outputs, gradients w.r.t.
inputs and parameters, and the updated running statistics compared; activations also against
finite differences to second order."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rlgrad
import rlgrad.nn.functional as F
from rlgrad import nn
from rlgrad.tensor import TraceError

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(2913)
TOL = 1e-10


def _close(a, b, tol: float = TOL) -> None:
    a = a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)
    b = b.detach().numpy() if hasattr(b, "detach") else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


def _load_from(rm: nn.Module, tm) -> None:
    assert list(rm.state_dict()) == list(tm.state_dict())
    rm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


ACTIVATIONS = [
    ("GELU", {}, lambda x: F.gelu(x)),
    ("GELU", {"approximate": "tanh"}, lambda x: F.gelu(x, "tanh")),
    ("SiLU", {}, F.silu),
    ("Mish", {}, F.mish),
]


@pytest.mark.parametrize("name,kwargs,fn", ACTIVATIONS)
def test_activations_match_torch_and_finite_differences(name: str, kwargs: dict, fn) -> None:
    x = RNG.standard_normal((6, 7)) * 4
    x[0, :3] = [0.0, 30.0, -30.0]  # the origin and both tails
    rx, tx = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ry, ty = getattr(nn, name)(**kwargs)(rx), getattr(torch.nn, name)(**kwargs)(tx)
    _close(ry, ty)
    w = RNG.standard_normal(x.shape)
    (ry * ry * w).sum().backward()
    (ty * ty * torch.tensor(w)).sum().backward()
    _close(rx.grad, tx.grad)
    rlgrad.check_grads(fn, modes=["rev", "fwd"], order=2)(RNG.standard_normal((3, 4)))


def test_gelu_float32_and_bad_approximate() -> None:
    x = RNG.standard_normal(50).astype(np.float32)
    y = F.gelu(rlgrad.tensor(x))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), torch.nn.functional.gelu(torch.tensor(x)).numpy(),
                               rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="'none' or 'tanh'"):
        nn.GELU("fast")


def test_embedding_matches_torch_padding_row_gets_no_gradient() -> None:
    tm = torch.nn.Embedding(10, 4, padding_idx=-2).double()
    rm = nn.Embedding(10, 4, padding_idx=-2, dtype=np.float64)
    assert rm.padding_idx == tm.padding_idx == 8
    np.testing.assert_array_equal(rm.weight.detach().numpy()[8], 0)  # zeroed at init
    with torch.no_grad():
        tm.weight[8] = 1.5  # a non-zero padding row is still read, just never updated
    _load_from(rm, tm)
    idx = np.array([[1, 8, 8, 9], [0, 8, 3, 1]])
    ro, to = rm(idx), tm(torch.tensor(idx))
    _close(ro, to)
    w = RNG.standard_normal(ro.shape)
    (ro * ro * w).sum().backward()
    (to * to * torch.tensor(w)).sum().backward()
    _close(rm.weight.grad, tm.weight.grad)
    np.testing.assert_array_equal(rm.weight.grad.numpy()[8], 0)
    assert np.all(rm.weight.grad.numpy()[1] != 0)  # row 1 was used twice: gradients accumulate


def test_embedding_init_and_errors() -> None:
    rlgrad.manual_seed(0)
    w = nn.Embedding(1000, 50).weight.detach().numpy()
    assert abs(w.mean()) < 0.01 and w.std() == pytest.approx(1.0, rel=0.02)  # N(0, 1)
    m = nn.Embedding(5, 2)
    with pytest.raises(IndexError, match="out of range for 5 embeddings"):
        m(np.array([0, 5]))
    with pytest.raises(IndexError, match="out of range"):
        m(np.array([-1]))
    with pytest.raises(TypeError, match="integers"):
        m(np.array([0.5]))
    with pytest.raises(NotImplementedError, match="max_norm"):
        nn.Embedding(5, 2, max_norm=1.0)


def test_dropout_module_train_and_eval() -> None:
    m = nn.Dropout(0.25)
    x = rlgrad.tensor(np.ones((200, 200)), requires_grad=True)
    rlgrad.manual_seed(5)
    y = m(x).detach().numpy()
    assert (y == 0).mean() == pytest.approx(0.25, abs=0.01)
    np.testing.assert_allclose(y[y != 0], 1 / 0.75)
    rlgrad.manual_seed(5)
    np.testing.assert_array_equal(m(x).detach().numpy(), y)  # seeded: reproducible
    m.eval()
    assert m(x) is x
    with pytest.raises(ValueError, match="must be in"):
        nn.Dropout(-0.1)
    assert repr(m) == repr(torch.nn.Dropout(0.25))


BN_CASES = [
    ("BatchNorm1d", (6, 3), {}),
    ("BatchNorm1d", (5, 3, 4), {"momentum": None}),
    ("BatchNorm2d", (4, 3, 2, 5), {"affine": False}),
    ("BatchNorm2d", (4, 3, 2, 5), {"track_running_stats": False, "eps": 1e-3}),
    ("BatchNorm2d", (2, 3, 3, 3), {"momentum": 0.3}),
]


@pytest.mark.parametrize("name,shape,kwargs", BN_CASES)
def test_batchnorm_matches_torch_over_train_and_eval_steps(name: str, shape: tuple,
                                                           kwargs: dict) -> None:
    tm = getattr(torch.nn, name)(3, **kwargs).double()
    rm = getattr(nn, name)(3, dtype=np.float64, **kwargs)
    if tm.affine:
        with torch.no_grad():
            tm.weight.normal_()
            tm.bias.normal_()
    _load_from(rm, tm)
    for mode in ("train", "train", "eval", "train", "eval"):
        getattr(tm, mode)()
        getattr(rm, mode)()
        x = RNG.standard_normal(shape) * 2 + 1
        rx, tx = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        ro, to = rm(rx), tm(tx)
        _close(ro, to)
        w = RNG.standard_normal(shape)
        (ro * ro * w).sum().backward()
        (to * to * torch.tensor(w)).sum().backward()
        _close(rx.grad, tx.grad)
        for p, q in zip(rm.parameters(), tm.parameters()):
            _close(p.grad, q.grad)
            p.grad, q.grad = None, None
        for (k, a), b in zip(rm.state_dict().items(), tm.state_dict().values()):
            assert np.asarray(a).dtype == b.numpy().dtype, k
            _close(a, b)  # running statistics and num_batches_tracked


def test_batch_norm_second_order_finite_differences() -> None:
    rm, rv = np.zeros(3), np.ones(3)
    w, b = RNG.standard_normal(3), RNG.standard_normal(3)
    rlgrad.check_grads(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True) ** 2,
                       order=2)(RNG.standard_normal((4, 3, 2)), w, b)
    rlgrad.check_grads(lambda x, w: F.batch_norm(x, rm, rv, w, None, training=False) ** 2,
                       order=2)(RNG.standard_normal((4, 3)), w)


def test_batchnorm_running_stats_closed_form() -> None:
    m = nn.BatchNorm1d(2, momentum=None, dtype=np.float64)
    batches = [RNG.standard_normal((5, 2)) for _ in range(3)]
    for x in batches:
        m(x)
    # momentum=None: the plain average of the batch means and unbiased variances
    _close(m.running_mean, np.mean([x.mean(0) for x in batches], axis=0))
    _close(m.running_var, np.mean([x.var(0, ddof=1) for x in batches], axis=0))
    assert int(m.num_batches_tracked) == 3
    m.reset_running_stats()
    assert int(m.num_batches_tracked) == 0 and np.all(m.running_var == 1)


def test_batchnorm_buffers_are_tensors_as_torchs() -> None:
    """running_mean/var are registered buffers holding Tensors that never require grad (SB3's
    tests clone them and compare with th.allclose); F.batch_norm takes them as torch's does."""
    rm, tm = nn.BatchNorm1d(3, dtype=np.float64), torch.nn.BatchNorm1d(3).double()
    x = RNG.standard_normal((6, 3))
    rm(x), tm(torch.tensor(x))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        buf = getattr(rm, name)
        assert isinstance(buf, rlgrad.Tensor) and not buf.requires_grad, name
        assert dict(rm.named_buffers())[name] is buf
        snapshot = buf.clone()
        _close(snapshot, getattr(tm, name))
        assert torch.allclose(snapshot, getattr(tm, name))  # torch reads rlgrad's Tensors
    rm.eval(), tm.eval()
    _close(rm(x), tm(torch.tensor(x)).detach())
    _close(F.batch_norm(rlgrad.tensor(x), rm.running_mean, rm.running_var),
           torch.nn.functional.batch_norm(torch.tensor(x), tm.running_mean, tm.running_var))


def test_batchnorm_bad_input_is_one_clear_line() -> None:
    m = nn.BatchNorm2d(3)
    with pytest.raises(ValueError, match="4-D input"):
        m(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="num_features=3"):
        m(np.zeros((2, 4, 1, 1)))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(np.zeros((1, 3)))


def test_batchnorm_under_jit_training_raises() -> None:
    m = nn.BatchNorm1d(2)
    f = rlgrad.jit(lambda x: m(x).sum())
    with pytest.raises(TraceError, match="running statistics"):
        f(np.ones((4, 2), dtype=np.float32))
    m.eval()
    assert math.isfinite(float(rlgrad.jit(lambda x: m(x).sum())(np.ones((4, 2), np.float32))))


MHA_CASES = [
    {},
    {"attn_mask": "causal_bool"},
    {"attn_mask": "float"},
    {"key_padding_mask": True, "average_attn_weights": False},
    {"is_causal": True},
    {"need_weights": False},
]


def _mha_kwargs(kw: dict, L: int, S: int, B: int) -> dict:
    out = dict(kw)
    if kw.get("attn_mask") == "causal_bool":
        out["attn_mask"] = np.triu(np.ones((L, S), bool), 1)
    elif kw.get("attn_mask") == "float":
        out["attn_mask"] = RNG.standard_normal((L, S))
    if kw.get("key_padding_mask"):
        kp = np.zeros((B, S), bool)
        kp[-1, -1] = True
        out["key_padding_mask"] = kp
    if kw.get("is_causal"):
        out["attn_mask"] = np.triu(np.ones((L, S), bool), 1)  # torch wants the mask as a hint too
    return out


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kw", MHA_CASES)
def test_multihead_attention_matches_torch(batch_first: bool, kw: dict) -> None:
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first).double()
    rm = nn.MultiheadAttention(8, 2, batch_first=batch_first, dtype=np.float64)
    with torch.no_grad():
        tm.in_proj_bias.normal_()
        tm.out_proj.bias.normal_()
    _load_from(rm, tm)
    B, L, S = 3, 5, 5
    q, k = (RNG.standard_normal((B, n, 8) if batch_first else (n, B, 8)) for n in (L, S))
    kwargs = _mha_kwargs(kw, L, S, B)
    t_kwargs = {a: torch.tensor(b) if isinstance(b, np.ndarray) else b for a, b in kwargs.items()}
    (rq, rk), (tq, tk) = ([rlgrad.tensor(a, requires_grad=True) for a in (q, k)],
                          [torch.tensor(a, requires_grad=True) for a in (q, k)])
    (ro, rw), (to, tw) = rm(rq, rk, rk, **kwargs), tm(tq, tk, tk, **t_kwargs)
    _close(ro, to)
    assert (rw is None) == (tw is None)
    loss_r, loss_t = (ro * ro).sum(), (to * to).sum()
    if rw is not None:
        _close(rw, tw)
        loss_r, loss_t = loss_r + (rw * rw).sum(), loss_t + (tw * tw).sum()
    loss_r.backward()
    loss_t.backward()
    _close(rq.grad, tq.grad)
    _close(rk.grad, tk.grad)
    for p, q_ in zip(rm.parameters(), tm.parameters()):
        _close(p.grad, q_.grad)


def test_multihead_attention_unbatched_masks_matter_and_errors() -> None:
    tm = torch.nn.MultiheadAttention(4, 1).double()
    rm = nn.MultiheadAttention(4, 1, dtype=np.float64)
    _load_from(rm, tm)
    x = RNG.standard_normal((3, 4))
    ro, rw = rm(x, x, x)
    to, tw = tm(*(torch.tensor(x),) * 3)
    _close(ro, to)
    _close(rw, tw)
    causal = np.triu(np.ones((3, 3), bool), 1)
    masked = rm(x, x, x, attn_mask=causal)[1].detach().numpy()
    np.testing.assert_array_equal(masked[causal], 0)  # no weight where the mask says no
    assert not np.allclose(masked, rw.detach().numpy())
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(6, 4)
    with pytest.raises(NotImplementedError, match="kdim"):
        nn.MultiheadAttention(4, 2, kdim=3)
    with pytest.raises(ValueError, match="embed_dim=4"):
        rm(np.zeros((3, 5)), np.zeros((3, 5)), np.zeros((3, 5)))


@pytest.mark.parametrize("kw", [
    {"batch_first": True},
    {"norm_first": True, "activation": "gelu"},
    {"batch_first": True, "dropout": 0.0, "train": True, "mask": True},
])
def test_transformer_encoder_layer_matches_torch(kw: dict) -> None:
    kw = dict(kw)
    train, use_mask = kw.pop("train", False), kw.pop("mask", False)
    tm = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, **kw).double()
    rm = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dtype=np.float64, **kw)
    _load_from(rm, tm)
    with torch.no_grad():
        for p in tm.parameters():  # LayerNorm's ones/zeros and zero biases would hide mistakes
            p.add_(0.1 * torch.randn_like(p))
    _load_from(rm, tm)
    for m in (tm, rm):
        m.train(train)
    x = RNG.standard_normal((3, 5, 8))
    rx, tx = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    mask = np.triu(np.ones((5, 5), bool), 1) if use_mask else None
    ro = rm(rx, src_mask=mask)
    to = tm(tx, src_mask=None if mask is None else torch.tensor(mask))
    _close(ro, to, 1e-9)
    w = RNG.standard_normal(x.shape)
    (ro * ro * w).sum().backward()
    (to * to * torch.tensor(w)).sum().backward()
    _close(rx.grad, tx.grad, 1e-9)
    for p, q in zip(rm.parameters(), tm.parameters()):
        _close(p.grad, q.grad, 1e-9)


@pytest.mark.parametrize("final_norm", [False, True])
def test_transformer_encoder_matches_torch(final_norm: bool) -> None:
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    tm = torch.nn.TransformerEncoder(layer, 3, norm=torch.nn.LayerNorm(8) if final_norm else None,
                                     enable_nested_tensor=False).double()
    rlayer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True,
                                        dtype=np.float64)
    rm = nn.TransformerEncoder(rlayer, 3, norm=nn.LayerNorm(8, dtype=np.float64) if final_norm else None)
    assert list(rm.state_dict()) == list(tm.state_dict())
    with torch.no_grad():
        for p in tm.parameters():
            p.add_(0.1 * torch.randn_like(p))
    _load_from(rm, tm)
    x = RNG.standard_normal((3, 5, 8))
    rx, tx = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    mask = np.triu(np.ones((5, 5), bool), 1)
    ro, to = rm(rx, mask=mask), tm(tx, mask=torch.tensor(mask))
    _close(ro, to, 1e-9)
    (ro * ro).sum().backward()
    (to * to).sum().backward()
    _close(rx.grad, tx.grad, 1e-9)
    for p, q in zip(rm.parameters(), tm.parameters(), strict=True):
        _close(p.grad, q.grad, 1e-9)
    assert rm.layers[0].linear1.weight is not rm.layers[1].linear1.weight

"""rlgrad.nn: modules, layers, initializers, functional ops and losses.

Values are checked against hand-computed numbers, gradients against finite differences (float64,
first and second order), and against PyTorch when it is installed.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import rlgrad
import rlgrad.nn.functional as F
from rlgrad import nn
from rlgrad.nn import init
from rlgrad.serialization import CheckpointError, StateDictError

RNG = np.random.default_rng(1234)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def t64(a: np.ndarray, requires_grad: bool = True) -> rlgrad.Tensor:
    return rlgrad.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


# ---------------------------------------------------------------------------------------------
# Module
# ---------------------------------------------------------------------------------------------
class TwoLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.Tanh())
        self.head = nn.Linear(4, 2)
        self.scale = nn.Parameter(np.ones(2, dtype=np.float32))
        self.register_buffer("count", np.zeros((), dtype=np.int64))

    def forward(self, x):
        return self.head(self.body(x)) * self.scale


def test_named_parameters_follow_pytorch_names_and_order():
    m = TwoLayer()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["scale", "body.0.weight", "body.0.bias", "head.weight", "head.bias"]
    shapes = {n: p.shape for n, p in m.named_parameters()}
    assert shapes["body.0.weight"] == (4, 3) and shapes["head.bias"] == (2,)
    # PyTorch's order: a module's own parameters, then its buffers, then its children
    assert list(m.state_dict()) == ["scale", "count"] + names[1:]
    assert len(list(m.parameters())) == 5
    assert [n for n, _ in m.named_modules()] == ["", "body", "body.0", "body.1", "head"]


def test_shared_parameter_is_listed_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, lin)
    assert len(list(seq.parameters())) == 2


def _shared(lib):
    """A model with a child under two names, a shared Sequential entry and a tied parameter,
    built the same way from ``lib`` (rlgrad.nn or torch.nn)."""

    class Shared(lib.Module):
        def __init__(self):
            super().__init__()
            self.trunk = lib.Linear(3, 4)
            self.alias = self.trunk  # the same child, a second name
            self.heads = lib.Sequential(lib.Linear(4, 2), lib.Tanh())
            self.heads.append(self.heads[0])  # reached twice inside a child
            self.out = lib.Linear(2, 2)
            self.tied = lib.Linear(2, 2)
            self.tied.weight = self.out.weight  # a parameter of two modules

    return Shared()


def test_shared_children_state_dict_is_pytorchs():
    """PyTorch's ``state_dict`` lists a shared child under each name (its recursion over
    ``_modules`` keeps no memo) while ``named_parameters`` lists each tensor once; its strict
    ``load_state_dict`` expects every name, and each name is written in turn."""
    torch = pytest.importorskip("torch")
    ours, theirs = _shared(nn), _shared(torch.nn)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert "alias.weight" in ours.state_dict() and "heads.2.bias" in ours.state_dict()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert len(list(ours.parameters())) == len(list(theirs.parameters())) == 7
    # the same values both ways, strictly: ours from torch's, and torch's from ours
    sd = {k: v.detach().numpy() + 1.0 for k, v in theirs.state_dict().items()}
    assert ours.load_state_dict(sd) == ([], [])
    theirs.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in ours.state_dict().items()})
    for (n, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=n)
    np.testing.assert_array_equal(ours.alias.weight._value, sd["alias.weight"])
    # two names, two values: the later name's stay, as in torch
    two = {**sd, "trunk.bias": np.zeros(4), "alias.bias": np.full(4, 5.0)}
    ours.load_state_dict(two)
    theirs.load_state_dict({k: torch.as_tensor(v, dtype=torch.float32) for k, v in two.items()})
    np.testing.assert_array_equal(ours.trunk.bias._value, theirs.trunk.bias.detach().numpy())
    np.testing.assert_array_equal(ours.trunk.bias._value, 5.0)
    # every name is expected: a missing alias is missing, as in torch
    lack = {k: v for k, v in sd.items() if not k.startswith("alias.")}
    with pytest.raises(RuntimeError, match='Missing key.*"alias.weight", "alias.bias"'):
        ours.load_state_dict(lack)
    with pytest.raises(RuntimeError, match="Missing key.*alias.weight"):
        theirs.load_state_dict({k: torch.from_numpy(v) for k, v in lack.items()})
    res = ours.load_state_dict(lack, strict=False)
    want = theirs.load_state_dict({k: torch.from_numpy(v) for k, v in lack.items()}, strict=False)
    assert res.missing_keys == want.missing_keys == ["alias.weight", "alias.bias"]


def test_state_dict_of_the_older_layout_fills_its_shared_names():
    """A state dict rlgrad wrote when it listed a shared child once (under its first name):
    ``fill_shared_names`` (what rlgrad.rl's checkpoint readers call) makes it load strictly,
    the shared tensors from the one name; anything else missing is still missing."""
    from rlgrad.nn.module import fill_shared_names

    m = _shared(nn)
    once = {n: p for n, p in m.named_parameters()}  # the older layout's names (first path)
    old = {k: np.asarray(v.numpy()) + 2.0 for k, v in m.state_dict().items() if k in once}
    assert "alias.weight" not in old and "heads.2.weight" not in old
    with pytest.raises(RuntimeError, match="Missing key"):
        m.load_state_dict(old)
    full = fill_shared_names(m, old)
    assert sorted(full) == sorted(m.state_dict())
    assert m.load_state_dict(full) == ([], [])
    np.testing.assert_array_equal(m.alias.weight._value, old["trunk.weight"])
    np.testing.assert_array_equal(m.tied.weight._value, old["out.weight"])
    partial = {k: v for k, v in old.items() if k != "out.bias"}
    with pytest.raises(RuntimeError, match='Missing key.*"out.bias"'):
        m.load_state_dict(fill_shared_names(m, partial))


def test_assigning_a_plain_tensor_to_a_parameter_slot_is_refused():
    lin = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'weight'"):
        lin.weight = rlgrad.tensor(np.zeros((2, 2)))
    lin.bias = None
    assert [n for n, _ in lin.named_parameters()] == ["weight"]


def test_setattr_before_init_explains_super_init():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(np.zeros(2))

    with pytest.raises(AttributeError, match="super\\(\\).__init__"):
        Bad()


def test_state_dict_values_alias_the_parameters_and_round_trip():
    """As PyTorch's: detached Tensors sharing the parameters' memory; a kept copy (clone) does
    not move, and loads back."""
    m = TwoLayer()
    sd = m.state_dict()
    assert isinstance(sd["head.weight"], rlgrad.Tensor) and not sd["head.weight"].requires_grad
    kept = {k: v.clone() for k, v in sd.items()}
    w0 = np.array(sd["head.weight"])
    with rlgrad.no_grad():
        m.head.weight += 1.0
    np.testing.assert_array_equal(np.asarray(sd["head.weight"]), w0 + 1.0)  # it aliases
    sd["head.bias"].fill_(3.0)
    np.testing.assert_array_equal(m.head.bias._value, 3.0)
    m.load_state_dict(kept)
    np.testing.assert_array_equal(m.head.weight._value, w0)
    assert m.state_dict(keep_vars=True)["head.weight"] is m.head.weight


def test_load_state_dict_is_in_place_and_casts_dtype():
    m = nn.Linear(2, 3)
    arr = m.weight._value
    m.load_state_dict({"weight": np.ones((3, 2), dtype=np.float64), "bias": np.zeros(3)})
    assert m.weight._value is arr and m.weight.dtype == np.float32
    np.testing.assert_array_equal(arr, np.ones((3, 2), dtype=np.float32))


def test_load_state_dict_lists_missing_unexpected_and_misshaped_keys():
    m = TwoLayer()
    sd = m.state_dict()
    before = m.head.bias._value.copy()
    del sd["body.0.bias"]
    sd["extra"] = np.zeros(1)
    sd["head.weight"] = np.zeros((3, 4))
    sd["head.bias"] = np.full(2, 7.0)
    with pytest.raises(StateDictError) as e:
        m.load_state_dict(sd)
    msg = str(e.value)
    assert "Error(s) in loading state_dict for TwoLayer" in msg
    assert 'Missing key(s) in state_dict: "body.0.bias".' in msg
    assert 'Unexpected key(s) in state_dict: "extra".' in msg
    assert ("size mismatch for head.weight: copying a param with shape (3, 4) from checkpoint, "
            "the shape in current model is (2, 4).") in msg
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, ValueError)
    np.testing.assert_array_equal(m.head.bias._value, before)  # nothing was written

    # strict=False skips missing/unexpected keys but never a shape mismatch
    with pytest.raises(StateDictError, match="size mismatch for head.weight"):
        m.load_state_dict(sd, strict=False)
    sd["head.weight"] = np.zeros((2, 4))
    res = m.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["body.0.bias"] and res.unexpected_keys == ["extra"]
    np.testing.assert_array_equal(m.head.bias._value, np.full(2, 7.0, dtype=np.float32))


def test_load_state_dict_error_names_the_checkpoint_file_and_key(tmp_path):
    path = tmp_path / "agent.ckpt"
    rlgrad.save({"policy": nn.Linear(3, 2).state_dict()}, path)
    with pytest.raises(StateDictError) as e:
        nn.Linear(4, 2).load_state_dict(rlgrad.load(path)["policy"])
    msg = str(e.value)
    assert f"from checkpoint '{path}', key 'policy'" in msg
    assert "size mismatch for weight: copying a param with shape (2, 3)" in msg
    assert isinstance(e.value, CheckpointError)


def test_train_eval_and_requires_grad_recurse():
    m = TwoLayer()
    assert m.training and m.body[1].training
    m.eval()
    assert not m.training and not m.body[0].training and not m.head.training
    m.train()
    assert m.body[0].training
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())
    out = m(np.ones((1, 3), dtype=np.float32))
    assert not out.requires_grad
    m.body.requires_grad_(True)
    m(np.ones((1, 3), dtype=np.float32)).sum().backward()
    assert m.body[0].weight.grad is not None and m.head.weight.grad is None


def test_deepcopy_gives_an_independent_target_network():
    m = nn.MLP([3, 8, 2])
    x = np.ones((2, 3), dtype=np.float32)
    m(x).sum().backward()
    target = copy.deepcopy(m)
    assert target[0].weight is not m[0].weight
    assert target[0].weight._value is not m[0].weight._value
    np.testing.assert_array_equal(target(x)._value, m(x)._value)
    assert list(target._parameters) == list(m._parameters)
    assert target._modules["0"].weight is target[0].weight  # registry and attribute agree
    m[0].weight._value += 1.0
    assert not np.array_equal(target(x)._value, m(x)._value)
    assert target[0].weight.requires_grad


def test_to_double_and_zero_grad():
    m = nn.MLP([2, 3, 1]).double()
    assert all(p.dtype == np.float64 for p in m.parameters())
    m(np.ones((1, 2))).sum().backward()
    m.zero_grad(set_to_none=False)
    assert all(np.all(p.grad._value == 0) for p in m.parameters())
    m.zero_grad()
    assert all(p.grad is None for p in m.parameters())


def test_float64_observations_do_not_turn_the_model_float64():
    lin = nn.Linear(3, 2)
    y = lin(np.ones((4, 3)))  # float64 input, no gradient needed: cast to the layer's dtype
    assert y.dtype == np.float32
    conv = nn.Conv2d(1, 2, 2)
    assert conv(np.ones((1, 1, 3, 3), dtype=np.uint8)).dtype == np.float32


def test_sequential_indexing_and_modulelist():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert isinstance(seq[-1], nn.Linear) and len(seq) == 3
    assert [n for n, _ in seq[1:].named_parameters()] == ["2.weight", "2.bias"]  # keys kept
    ml = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
    assert [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    md = nn.ModuleDict({"q1": nn.Linear(1, 1)})
    assert "q1" in md and [n for n, _ in md.named_parameters()] == ["q1.weight", "q1.bias"]


# ---------------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------------
def test_linear_matches_hand_computation_and_layout():
    lin = nn.Linear(3, 2)
    lin.load_state_dict({"weight": np.array([[1.0, 2, 3], [0, -1, 1]]), "bias": np.array([0.5, -2])})
    y = lin(np.array([[1.0, 1, 1], [2, 0, -1]], dtype=np.float32))
    np.testing.assert_allclose(y._value, [[6.5, -2.0], [-0.5, -3.0]])
    assert lin.weight.shape == (2, 3)  # (out_features, in_features), as PyTorch


def test_linear_gradients_first_and_second_order():
    x, w, b = randn(5, 3), randn(4, 3), randn(4)
    rlgrad.check_grads(lambda x, w, b: rlgrad.numpy.tanh(F.linear(x, w, b)), order=2)(x, w, b)
    rlgrad.check_grads(lambda x, w: F.linear(x, w), order=2)(randn(3), w)  # 1-D input, no bias
    rlgrad.check_grads(lambda x, w, b: F.linear(x, w, b) ** 2, order=2)(randn(2, 5, 3), w, b)


def test_linear_with_leading_dimensions_is_the_stacked_product() -> None:
    # the fast path (one (rows, in) GEMM) against its plain reference, NumPy's stacked matmul
    from rlgrad.nn.functional import _linear, _linear_relu

    for dt in (np.float32, np.float64):
        x, w, b = randn(7, 5, 3).astype(dt), randn(4, 3).astype(dt), randn(4).astype(dt)
        ref = np.matmul(x, w.T) + b
        np.testing.assert_allclose(_linear(x, w, b), ref, rtol=1e-6 if dt == np.float32 else 1e-13)
        out = np.empty((7, 5, 4), dt)
        assert _linear_relu(x, w, b, out=out) is out
        np.testing.assert_array_equal(out, np.maximum(_linear(x, w, b), 0))
        strided = x[:, ::2]  # not contiguous: a copy, the same numbers
        np.testing.assert_array_equal(_linear(strided, w), _linear(np.ascontiguousarray(strided), w))


def test_linear_backward_values():
    x = t64([[1.0, 2.0]])
    lin = nn.Linear(2, 1, dtype=np.float64)
    lin.load_state_dict({"weight": [[3.0, -1.0]], "bias": [0.5]})
    (lin(x) ** 2).sum().backward()  # y = 1.5, dy = 3
    np.testing.assert_allclose(lin.weight.grad._value, [[3.0, 6.0]])
    np.testing.assert_allclose(lin.bias.grad._value, [3.0])
    np.testing.assert_allclose(x.grad._value, [[9.0, -3.0]])


def test_default_init_bounds_follow_pytorch():
    init.manual_seed(0)
    lin = nn.Linear(100, 50)
    bound = 1 / math.sqrt(100)
    assert np.abs(lin.weight._value).max() <= bound and np.abs(lin.bias._value).max() <= bound
    assert np.abs(lin.weight._value).max() > 0.9 * bound
    conv = nn.Conv2d(4, 8, 3)
    cb = 1 / math.sqrt(4 * 9)
    assert np.abs(conv.weight._value).max() <= cb and np.abs(conv.weight._value).max() > 0.9 * cb
    init.manual_seed(0)
    again = nn.Linear(100, 50)
    np.testing.assert_array_equal(again.weight._value, lin.weight._value)


def test_conv2d_matches_a_direct_loop():
    x, w, b = randn(2, 3, 6, 7), randn(4, 3, 3, 2), randn(4)
    y = F.conv2d(x, w, b, stride=(2, 1), padding=1)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (6 + 2 - 3) // 2 + 1, (7 + 2 - 2) // 1 + 1
    ref = np.zeros((2, 4, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, 2 * i:2 * i + 3, j:j + 2]
            ref[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3])) + b
    np.testing.assert_allclose(y, ref, atol=1e-12)


@pytest.mark.parametrize("k,s,p", [(3, 1, 0), (3, 2, 1), (4, 3, 2)])
def test_conv2d_gradients_first_and_second_order(k, s, p):
    x, w, b = randn(2, 2, 7, 6), randn(3, 2, k, k), randn(3)
    rlgrad.check_grads(lambda x, w, b: rlgrad.numpy.tanh(F.conv2d(x, w, b, s, p)), order=2)(x, w, b)


def test_conv2d_third_order():
    x, w = randn(1, 1, 4, 4), randn(2, 1, 2, 2)
    rlgrad.check_grads(lambda x, w: F.conv2d(x, w, None, 2, 0) ** 3, order=3)(x, w)


def test_conv2d_module_backward_uses_cached_columns_correctly():
    conv = nn.Conv2d(2, 3, 3, stride=2, padding=1, dtype=np.float64)
    x = t64(randn(2, 2, 5, 5))
    g = randn(2, 3, 3, 3)
    conv(x).backward(g)
    # the same gradient through the recomputing path (weight given as a plain array)
    wgrad = F.conv2d_weight_grad(x._value, g, (2, 2), (1, 1), conv.weight.shape)
    np.testing.assert_allclose(conv.weight.grad._value, wgrad, atol=1e-12)
    np.testing.assert_allclose(conv.bias.grad._value, g.sum(axis=(0, 2, 3)))
    assert x.grad.shape == x.shape


def _direct_conv(x, w, b, s, p):
    """conv2d as a loop over output positions (the definition), float64."""
    (sh, sw), (ph, pw) = s, p
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    kh, kw = w.shape[2:]
    oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    ref = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, sh * i:sh * i + kh, sw * j:sw * j + kw]
            ref[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3])) + b
    return ref


@pytest.mark.parametrize("block", [1, 64, 1 << 18])  # one sample (or fewer) per block .. all in one
@pytest.mark.parametrize("k,s,p", [((3, 2), (2, 1), (1, 0)), ((5, 5), (3, 3), (2, 1)),
                                   ((1, 1), (1, 2), (0, 0))])
def test_conv2d_blocks_match_the_definition_and_finite_differences(monkeypatch, block, k, s, p):
    """The column blocks (a few samples each) give the definition's values and exact gradients,
    first and second order, for odd sizes, unequal strides and paddings."""
    monkeypatch.setattr(F, "_BLOCK_ELEMS", block)
    x, w, b = randn(3, 2, 7, 8), randn(4, 2, *k), randn(4)
    np.testing.assert_allclose(F.conv2d(x, w, b, s, p), _direct_conv(x, w, b, s, p), atol=1e-12)
    rlgrad.check_grads(lambda x, w, b: rlgrad.numpy.tanh(F.conv2d(x, w, b, s, p)), order=2)(x, w, b)


_FOLDED_CASES = [  # (input N, C, H, W), (out, kernel), stride, padding: kernel rows a multiple of stride
    ((2, 4, 36, 36), (3, (8, 8)), (4, 4), (0, 0)),   # the Nature CNN's first layer, smaller
    ((3, 2, 11, 13), (4, (6, 3)), (3, 2), (1, 0)),   # q = 2, unequal strides, padding
    ((2, 3, 14, 9), (2, (6, 2)), (2, 1), (0, 1)),    # q = 3 shifted adds
]


@pytest.mark.parametrize("block", [1, 1 << 18])
@pytest.mark.parametrize("xs,ok,s,p", _FOLDED_CASES)
def test_conv2d_folded_rows_match_the_definition_and_the_im2col_path(monkeypatch, block, xs, ok, s,
                                                                     p):
    """The row-folded convolution (kernel rows in stride-high blocks: one GEMM and q shifted
    adds) gives the definition's values and the im2col path's values and weight gradients."""
    monkeypatch.setattr(F, "_BLOCK_ELEMS", block)
    monkeypatch.setattr(F, "_FOLD_MIN_ROWS", 0)
    taken = []
    fwd, wgrad = F._folded_fwd, F._folded_weight_grad
    monkeypatch.setattr(F, "_folded_fwd", lambda *a: taken.append("fwd") or fwd(*a))
    monkeypatch.setattr(F, "_folded_weight_grad", lambda *a: taken.append("w") or wgrad(*a))
    (o, k), c = ok, xs[1]
    x, w, b = randn(*xs), randn(o, c, *k), randn(o)
    y = F.conv2d(x, w, b, s, p)
    g = randn(*y.shape)
    gw = F.conv2d_weight_grad(x, g, s, p, w.shape)
    assert taken == ["fwd", "w"]
    np.testing.assert_allclose(y, _direct_conv(x, w, b, s, p), atol=1e-12)
    monkeypatch.setattr(F, "_FOLD_ROWS", False)
    np.testing.assert_allclose(y, F.conv2d(x, w, b, s, p), rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(gw, F.conv2d_weight_grad(x, g, s, p, w.shape), rtol=1e-13, atol=1e-11)
    assert taken == ["fwd", "w"]  # the im2col path this time


@pytest.mark.parametrize("xs,ok,s,p", _FOLDED_CASES[1:])
def test_conv2d_folded_rows_gradients_first_and_second_order(monkeypatch, xs, ok, s, p):
    monkeypatch.setattr(F, "_FOLD_MIN_ROWS", 0)
    (o, k), c = ok, xs[1]
    x, w, b = randn(*xs), randn(o, c, *k), randn(o)
    rlgrad.check_grads(lambda x, w, b: rlgrad.numpy.tanh(F.conv2d(x, w, b, s, p)), order=2)(x, w, b)


def test_conv2d_folds_the_nature_cnn_first_layer_only():
    """The fold is taken where its extra rows are few (20 output rows: conv1 on 84x84 frames),
    not for conv2 (9 rows, where it measured slower)."""
    assert F._folds(84, 8, 4) and not F._folds(20, 4, 2) and not F._folds(84, 3, 1)


def test_conv2d_output_is_channels_last_and_reads_any_layout():
    """The result is NHWC memory behind an NCHW view; an input in either layout gives the same
    numbers, and a gradient given in either layout the same gradients."""
    x, w = randn(2, 3, 9, 9), randn(5, 3, 3, 3)
    y = F.conv2d(x, w, None, 2)
    assert y.shape == (2, 5, 4, 4) and y.transpose(0, 2, 3, 1).flags.c_contiguous
    x_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(F.conv2d(x_last, w, None, 2), y)
    g = randn(*y.shape)
    g_last = np.ascontiguousarray(g.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(F.conv2d_input_grad(g_last, w, 2, 0, x.shape),
                                  F.conv2d_input_grad(g, w, 2, 0, x.shape))
    np.testing.assert_array_equal(F.conv2d_weight_grad(x_last, g_last, 2, 0, w.shape),
                                  F.conv2d_weight_grad(x, g, 2, 0, w.shape))
    with pytest.raises(ValueError, match="does not fit an input"):
        F.conv2d_input_grad(g[:, :, :3], w, 2, 0, x.shape)


def test_layers_cast_a_traced_input_at_every_call():
    """A float64 batch into a float32 layer under rlgrad.jit: the cast is part of the compiled
    step, not the first call's values baked in as a constant."""
    lin, conv = nn.Linear(3, 2), nn.Conv2d(2, 3, 2)
    f = rlgrad.jit(lambda x, y: (lin(x), conv(y)))
    rng = np.random.default_rng(0)
    for _ in range(3):
        x, y = rng.standard_normal((4, 3)), rng.integers(0, 9, (2, 2, 4, 4)).astype(np.uint8)
        a, c = f(x, y)
        np.testing.assert_array_equal(a, lin(x)._value)
        np.testing.assert_array_equal(c, conv(y)._value)


def test_conv2d_rejects_wrong_channels():
    with pytest.raises(ValueError, match="input has 3 channels"):
        nn.Conv2d(4, 2, 3)(np.zeros((1, 3, 8, 8), dtype=np.float32))


def test_flatten_mlp_and_dqn_stack_shapes():
    net = nn.Sequential(nn.Conv2d(4, 8, 8, stride=4), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 20 * 20, 3))
    assert net(np.zeros((2, 4, 84, 84), dtype=np.float32)).shape == (2, 3)
    mlp = nn.MLP([4, 16, 16, 2], activation="tanh", output_activation=nn.Tanh)
    assert [type(m).__name__ for m in mlp] == ["Linear", "Tanh", "Linear", "Tanh", "Linear", "Tanh"]
    assert list(mlp.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    assert np.all(np.abs(mlp(np.ones((3, 4)))._value) <= 1)
    with pytest.raises(ValueError, match="unknown activation 'swishy'"):
        nn.MLP([2, 2, 2], activation="swishy")


def test_layernorm_values_and_gradients():
    ln = nn.LayerNorm(4, dtype=np.float64)
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    mu, var = 2.5, 1.25
    np.testing.assert_allclose(ln(x)._value, (x - mu) / np.sqrt(var + 1e-5))
    w, b = randn(4), randn(4)
    rlgrad.check_grads(lambda x, w, b: F.layer_norm(x, 4, w, b), order=2)(randn(3, 4), w, b)


# ---------------------------------------------------------------------------------------------
# Activations and functional
# ---------------------------------------------------------------------------------------------
def test_activation_values():
    x = np.array([-2.0, -0.5, 0.0, 1.5])
    np.testing.assert_allclose(F.relu(x), [0, 0, 0, 1.5])
    np.testing.assert_allclose(F.elu(x), [np.expm1(-2), np.expm1(-0.5), 0, 1.5])
    np.testing.assert_allclose(F.elu(x, alpha=2.0), [2 * np.expm1(-2), 2 * np.expm1(-0.5), 0, 1.5])
    np.testing.assert_allclose(F.softplus(x), np.log1p(np.exp(x)))
    np.testing.assert_allclose(F.softplus(x, beta=2.0), np.log1p(np.exp(2 * x)) / 2)
    np.testing.assert_allclose(F.sigmoid(x), 1 / (1 + np.exp(-x)))
    np.testing.assert_allclose(np.asarray(nn.ELU()(x)), F.elu(x))
    np.testing.assert_allclose(np.asarray(nn.Softplus()(x)), F.softplus(x))
    np.testing.assert_allclose(np.asarray(nn.Tanh()(x)), np.tanh(x))


def test_activations_are_stable_for_large_inputs():
    x = np.array([-1000.0, 1000.0], dtype=np.float32)
    assert np.all(np.isfinite(F.elu(x))) and F.elu(x)[0] == -1.0
    np.testing.assert_array_equal(F.softplus(x), [0.0, 1000.0])
    np.testing.assert_array_equal(F.sigmoid(x), [0.0, 1.0])
    xt = rlgrad.tensor(x, requires_grad=True)
    F.elu(xt).sum().backward()
    np.testing.assert_array_equal(xt.grad._value, [0.0, 1.0])  # no nan from the unused branch


@pytest.mark.parametrize("fn", [F.elu, F.softplus, F.sigmoid, F.tanh, lambda x: F.softplus(x, beta=3.0),
                                lambda x: F.elu(x, 0.7), F.silu, F.leaky_relu])
def test_activation_gradients(fn):
    x = np.array([-2.1, -0.4, 0.3, 1.7, 2.5])
    rlgrad.check_grads(fn, order=2)(x)


def test_softmax_family_is_stable_for_large_logits():
    z = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, 1000.0]])
    p = F.softmax(z, dim=-1)
    ref0 = np.exp([-2.0, -1.0, 0.0]) / np.exp([-2.0, -1.0, 0.0]).sum()
    np.testing.assert_allclose(p[0], ref0)
    np.testing.assert_allclose(p[1], [0, 0, 1])
    np.testing.assert_allclose(F.log_softmax(z, dim=-1)[0], np.log(ref0))
    np.testing.assert_allclose(F.logsumexp(z, dim=-1), [1002 + np.log(np.exp([-2.0, -1, 0]).sum()), 1000.0])
    assert F.logsumexp(z).shape == ()
    assert F.logsumexp(z, dim=1, keepdim=True).shape == (2, 1)
    zt = rlgrad.tensor(z, requires_grad=True)
    F.log_softmax(zt, dim=1)[:, 0].sum().backward()
    assert np.all(np.isfinite(zt.grad._value))
    np.testing.assert_allclose(zt.grad._value[0], [1, 0, 0] - ref0)


@pytest.mark.parametrize("shape, dim", [((3, 0), 1), ((0, 3), 1), ((3, 0), 0)])
def test_log_softmax_of_an_empty_tensor_is_empty_without_a_warning(shape, dim):
    import warnings

    x = rlgrad.tensor(np.zeros(shape, np.float32), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch gives an empty result, no log(0) on the way
        y = F.log_softmax(x, dim=dim)
        y.sum().backward()
    assert y.shape == shape and y.dtype == rlgrad.float32 and x.grad.shape == shape


def test_softmax_gradients():
    z = randn(3, 4)
    rlgrad.check_grads(lambda z: F.softmax(z, dim=1), order=2)(z)
    rlgrad.check_grads(lambda z: F.log_softmax(z, dim=0), order=2)(z)
    rlgrad.check_grads(lambda z: F.logsumexp(z, dim=1), order=2)(z)


def test_one_hot():
    np.testing.assert_array_equal(F.one_hot(np.array([0, 2]), 3), [[1, 0, 0], [0, 0, 1]])
    out = F.one_hot(rlgrad.tensor(np.array([1])), 2)
    assert isinstance(out, rlgrad.Tensor) and out.dtype == np.int64


# ---------------------------------------------------------------------------------------------
# Losses
# ---------------------------------------------------------------------------------------------
X = np.array([[0.5, -1.0], [2.0, 0.0]])
Y = np.array([[0.0, 1.0], [0.5, 0.25]])


def test_mse_loss_values_and_reductions():
    d = X - Y
    assert F.mse_loss(X, Y) == pytest.approx(np.mean(d**2))
    assert F.mse_loss(X, Y, reduction="sum") == pytest.approx(np.sum(d**2))
    np.testing.assert_allclose(F.mse_loss(X, Y, reduction="none"), d**2)
    with pytest.raises(ValueError, match="reduction must be"):
        F.mse_loss(X, Y, reduction="avg")
    with pytest.raises(ValueError, match=r"input shape \(3, 1\) and target shape \(3,\) differ"):
        F.mse_loss(np.zeros((3, 1)), np.zeros(3))
    assert F.mse_loss(X, 0.0) == pytest.approx(np.mean(X**2))


def test_huber_and_smooth_l1_values():
    x = np.array([0.0, 0.5, 2.0, -3.0])
    y = np.zeros(4)
    # delta = 1: 0.5 d^2 inside, |d| - 0.5 outside
    np.testing.assert_allclose(F.huber_loss(x, y, reduction="none"), [0, 0.125, 1.5, 2.5])
    # delta = 2: 0.5 d^2 for |d| < 2, 2 (|d| - 1) beyond
    np.testing.assert_allclose(F.huber_loss(x, y, reduction="none", delta=2.0), [0, 0.125, 2.0, 4.0])
    # smooth_l1 with beta: huber(beta) / beta
    np.testing.assert_allclose(F.smooth_l1_loss(x, y, reduction="none", beta=2.0), [0, 0.0625, 1.0, 2.0])
    assert F.smooth_l1_loss(x, y) == pytest.approx(np.mean([0, 0.125, 1.5, 2.5]))
    np.testing.assert_allclose(F.smooth_l1_loss(x, y, beta=0.0, reduction="none"), np.abs(x))


def test_cross_entropy_and_nll_values():
    logits = np.array([[2.0, 1.0, 0.1], [0.5, 2.5, 0.3]])
    target = np.array([0, 2])
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    per = -logp[[0, 1], target]
    assert F.cross_entropy(logits, target) == pytest.approx(per.mean())
    np.testing.assert_allclose(F.cross_entropy(logits, target, reduction="none"), per)
    assert F.nll_loss(logp, target, reduction="sum") == pytest.approx(per.sum())
    w = np.array([1.0, 2.0, 3.0])
    assert F.cross_entropy(logits, target, weight=w) == pytest.approx((per * [1, 3]).sum() / 4)
    assert F.cross_entropy(logits, np.array([0, -100])) == pytest.approx(per[0])  # ignore_index
    probs = np.array([[1.0, 0, 0], [0, 0.5, 0.5]])
    assert F.cross_entropy(logits, probs) == pytest.approx(-(probs * logp).sum(axis=1).mean())
    with pytest.raises(TypeError, match="integer class indices"):
        F.nll_loss(logp, np.array([0.0, 1.0, 0.0]))
    with pytest.raises(IndexError, match="target 5 is out of bounds for 3 classes"):
        F.cross_entropy(logits, np.array([0, 5]))


def test_binary_cross_entropy_with_logits_values_and_stability():
    x = np.array([-2.0, 0.0, 3.0])
    t = np.array([0.0, 1.0, 0.3])
    s = 1 / (1 + np.exp(-x))
    ref = -(t * np.log(s) + (1 - t) * np.log(1 - s))
    np.testing.assert_allclose(F.binary_cross_entropy_with_logits(x, t, reduction="none"), ref)
    pw = np.array([2.0, 2.0, 2.0])
    ref_pw = -(pw * t * np.log(s) + (1 - t) * np.log(1 - s))
    np.testing.assert_allclose(
        F.binary_cross_entropy_with_logits(x, t, reduction="none", pos_weight=pw), ref_pw)
    big = F.binary_cross_entropy_with_logits(np.array([1000.0, -1000.0]), np.array([0.0, 1.0]),
                                             reduction="none")
    np.testing.assert_allclose(big, [1000.0, 1000.0])


@pytest.mark.parametrize("loss", [
    lambda x, y: F.mse_loss(x, y),
    lambda x, y: F.mse_loss(x, y, reduction="sum"),
    lambda x, y: F.mse_loss(x, y, reduction="none"),
    lambda x, y: F.huber_loss(x, y, delta=0.8),
    lambda x, y: F.huber_loss(x, y, reduction="none"),
    lambda x, y: F.smooth_l1_loss(x, y, beta=0.5, reduction="sum"),
    lambda x, y: F.binary_cross_entropy_with_logits(x, rlgrad.numpy.sigmoid(y)),
    lambda x, y: F.binary_cross_entropy_with_logits(x, rlgrad.numpy.sigmoid(y), pos_weight=2.0),
])
def test_regression_loss_gradients_in_both_arguments(loss):
    x = np.array([[0.3, -1.7, 2.2], [0.05, 1.1, -0.6]])
    y = np.array([[0.0, 0.4, 0.9], [1.3, -0.2, -0.5]])
    rlgrad.check_grads(loss, order=2)(x, y)


def test_classification_loss_gradients():
    logits = randn(4, 3)
    target = np.array([0, 2, 1, 2])
    rlgrad.check_grads(lambda z: F.cross_entropy(z, target), order=2)(logits)
    rlgrad.check_grads(lambda z: F.cross_entropy(z, target, label_smoothing=0.1), order=2)(logits)
    rlgrad.check_grads(lambda z: F.nll_loss(F.log_softmax(z, 1), target, reduction="sum"), order=2)(logits)
    rlgrad.check_grads(lambda z: F.cross_entropy(z.reshape(2, 3, 2), target.reshape(2, 2)), order=2)(logits)


def test_loss_modules():
    assert nn.MSELoss()(X, Y).item() == pytest.approx(F.mse_loss(X, Y))
    assert nn.SmoothL1Loss(beta=0.5)(X, Y).item() == pytest.approx(F.smooth_l1_loss(X, Y, beta=0.5))
    assert nn.HuberLoss(reduction="sum", delta=2.0)(X, Y).item() == pytest.approx(
        F.huber_loss(X, Y, reduction="sum", delta=2.0))
    with pytest.raises(ValueError, match="reduction must be"):
        nn.MSELoss(reduction="bad")


def test_float32_loss_keeps_float32():
    lin = nn.Linear(3, 1)
    x = np.ones((4, 3), dtype=np.float32)
    loss = F.smooth_l1_loss(lin(x), np.zeros((4, 1), dtype=np.float32))
    assert loss.dtype == np.float32
    loss.backward()
    assert lin.weight.grad.dtype == np.float32


# ---------------------------------------------------------------------------------------------
# Initializers
# ---------------------------------------------------------------------------------------------
def test_orthogonal_init_with_gain():
    for shape in [(6, 4), (4, 6), (8, 2, 2)]:
        w = np.empty(shape)
        init.orthogonal_(w, gain=2.0, generator=np.random.default_rng(0))
        flat = w.reshape(shape[0], -1)
        if flat.shape[0] <= flat.shape[1]:
            np.testing.assert_allclose(flat @ flat.T, 4.0 * np.eye(flat.shape[0]), atol=1e-12)
        else:
            np.testing.assert_allclose(flat.T @ flat, 4.0 * np.eye(flat.shape[1]), atol=1e-12)
    p = nn.Parameter(np.empty((3, 3), dtype=np.float32))
    init.orthogonal_(p, gain=np.sqrt(2))
    assert p.dtype == np.float32


def test_xavier_kaiming_gains_and_bounds():
    g = np.random.default_rng(0)
    w = init.xavier_uniform_(np.empty((300, 200)), gain=2.0, generator=g)
    bound = 2.0 * math.sqrt(6 / 500)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.98 * bound
    w = init.xavier_normal_(np.empty((300, 200)), generator=g)
    assert np.std(w) == pytest.approx(math.sqrt(2 / 500), rel=0.02)
    w = init.kaiming_uniform_(np.empty((300, 200)), nonlinearity="relu", generator=g)
    bound = math.sqrt(2) * math.sqrt(3 / 200)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.98 * bound
    w = init.kaiming_normal_(np.empty((300, 200)), mode="fan_out", nonlinearity="relu", generator=g)
    assert np.std(w) == pytest.approx(math.sqrt(2 / 300), rel=0.02)
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    np.testing.assert_array_equal(init.constant_(np.empty(3), 0.5), [0.5] * 3)


# ---------------------------------------------------------------------------------------------
# Cross-checks with PyTorch
# ---------------------------------------------------------------------------------------------
def test_against_pytorch():
    torch = pytest.importorskip("torch")
    tF = torch.nn.functional
    x, w, b = randn(5, 3), randn(4, 3), randn(4)
    np.testing.assert_allclose(F.linear(x, w, b), tF.linear(*map(torch.tensor, (x, w, b))).numpy())
    xc, wc, bc = randn(2, 3, 9, 8), randn(5, 3, 3, 2), randn(5)
    np.testing.assert_allclose(
        F.conv2d(xc, wc, bc, stride=(2, 3), padding=(1, 2)),
        tF.conv2d(*map(torch.tensor, (xc, wc, bc)), stride=(2, 3), padding=(1, 2)).numpy(),
        atol=1e-12)
    a, y = randn(6), randn(6)
    ta, ty = torch.tensor(a), torch.tensor(y)
    assert F.huber_loss(a, y, delta=0.7) == pytest.approx(tF.huber_loss(ta, ty, delta=0.7).item())
    assert F.smooth_l1_loss(a, y, beta=0.3) == pytest.approx(tF.smooth_l1_loss(ta, ty, beta=0.3).item())
    np.testing.assert_allclose(F.softplus(a * 15, beta=2.0), tF.softplus(ta * 15, beta=2.0).numpy())
    np.testing.assert_allclose(F.elu(a, 0.5), tF.elu(ta, 0.5).numpy())
    logits, target = randn(4, 5), np.array([1, 0, 4, 2])
    wt = np.array([1.0, 0.5, 2.0, 1.0, 3.0])
    for kw in [{}, {"label_smoothing": 0.2}, {"weight": wt}, {"weight": wt, "label_smoothing": 0.1}]:
        tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        assert F.cross_entropy(logits, target, **kw) == pytest.approx(
            tF.cross_entropy(torch.tensor(logits), torch.tensor(target), **tkw).item())
    t01 = RNG.random(6)
    assert F.binary_cross_entropy_with_logits(a, t01, pos_weight=np.full(6, 3.0)) == pytest.approx(
        tF.binary_cross_entropy_with_logits(ta, torch.tensor(t01), pos_weight=torch.full((6,), 3.0)).item())
    ln = randn(3, 4)
    np.testing.assert_allclose(F.layer_norm(ln, 4), tF.layer_norm(torch.tensor(ln), (4,)).numpy(), atol=1e-12)


def test_state_dict_loads_into_pytorch_and_back():
    torch = pytest.importorskip("torch")
    ours = nn.MLP([4, 8, 2])
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    theirs.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in ours.state_dict().items()})
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(ours(x)._value, theirs(torch.from_numpy(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    back = nn.MLP([4, 8, 2])
    back.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    np.testing.assert_array_equal(back(x)._value, ours(x)._value)


def test_conv_gradients_match_pytorch():
    torch = pytest.importorskip("torch")
    x, w, b, g = randn(2, 4, 20, 20), randn(6, 4, 8, 8), randn(6), randn(2, 6, 4, 4)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    torch.nn.functional.conv2d(xt, wt, bt, stride=4).backward(torch.tensor(g))
    xs, ws, bs = t64(x), t64(w), t64(b)
    F.conv2d(xs, ws, bs, stride=4).backward(g)
    for ours, theirs in [(xs, xt), (ws, wt), (bs, bt)]:
        np.testing.assert_allclose(ours.grad._value, theirs.grad.numpy(), atol=1e-10)


def test_gradient_penalty_through_a_model_matches_pytorch():
    """Second order through Linear, Conv2d, Tanh and ELU: d/dW of ||d out / d x||^2."""
    torch = pytest.importorskip("torch")
    conv = nn.Conv2d(2, 3, 3, stride=2, dtype=np.float64)
    lin = nn.Linear(3 * 2 * 2, 2, dtype=np.float64)
    x = randn(2, 2, 5, 5)

    def ours():
        xt = t64(x)
        out = lin(F.elu(F.conv2d(xt, conv.weight, conv.bias, 2).reshape(2, -1)))
        (gx,) = rlgrad.autograd.grad(F.tanh(out).sum(), xt, create_graph=True)
        (gx * gx).sum().backward()
        return [p.grad._value for p in (*conv.parameters(), *lin.parameters())]

    tc = torch.nn.Conv2d(2, 3, 3, stride=2).double()
    tl = torch.nn.Linear(12, 2).double()
    tc.load_state_dict({k: torch.tensor(v.numpy()) for k, v in conv.state_dict().items()})
    tl.load_state_dict({k: torch.tensor(v.numpy()) for k, v in lin.state_dict().items()})
    xt = torch.tensor(x, requires_grad=True)
    out = tl(torch.nn.functional.elu(tc(xt).reshape(2, -1)))
    (gx,) = torch.autograd.grad(torch.tanh(out).sum(), xt, create_graph=True)
    (gx * gx).sum().backward()
    theirs = [p.grad.numpy() for p in (*tc.parameters(), *tl.parameters())]
    for a, b in zip(ours(), theirs):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def _direct_input_grad(g, w, s, p, x_shape):
    """The definition of conv2d's input gradient: every output position's g, through the kernel,
    added onto the input patch it read (float64 loops)."""
    (sh, sw), (ph, pw) = s, p
    n, c, h, wd = x_shape
    kh, kw = w.shape[2:]
    gx = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    for i in range(g.shape[2]):
        for j in range(g.shape[3]):
            gx[:, :, sh * i:sh * i + kh, sw * j:sw * j + kw] += np.tensordot(g[:, :, i, j], w, 1)
    return gx[:, :, ph:ph + h, pw:pw + wd]


_INPUT_GRAD_CASES = [  # (input N, C, H, W), (out, kernel), stride, padding, path taken
    ((3, 2, 7, 8), (4, (3, 3)), (1, 1), (0, 0), "offsets"),
    ((2, 3, 6, 9), (5, (2, 4)), (1, 1), (1, 2), "offsets"),
    ((2, 3, 20, 20), (4, (4, 4)), (2, 2), (0, 0), "subpixel"),  # the Nature CNN's conv2, smaller
    ((2, 2, 21, 14), (3, (6, 4)), (3, 2), (0, 1), "subpixel"),  # unequal strides, padding
    ((2, 2, 11, 13), (3, (5, 3)), (3, 2), (1, 0), "subpixel!"),  # kernel not a stride multiple
    ((3, 2, 36, 36), (2, (8, 8)), (4, 4), (0, 0), "subpixel"),  # conv1's shape
    ((2, 2, 7, 8), (4, (3, 2)), (2, 1), (1, 0), "col2im"),      # sub-pixel's FLOPs too many
]


@pytest.mark.parametrize("block", [1, 1 << 18])
@pytest.mark.parametrize("xs,ok,s,p,path", _INPUT_GRAD_CASES)
def test_conv2d_input_grad_paths_match_the_definition_and_col2im(monkeypatch, block, xs, ok, s, p,
                                                                 path):
    """Stride 1 (a GEMM per kernel offset, row adds) and stride > 1 (sub-pixel: one GEMM over
    windows of g, no adds) give the definition's input gradient, and col2im's to rounding
    (they are taken where col2im runs in NumPy)."""
    monkeypatch.setattr(F, "_BLOCK_ELEMS", block)
    monkeypatch.setattr(F, "_C_COLUMNS", False)
    if path.endswith("!"):  # taken although its FLOPs are more than _SUBPIXEL_MAX_FLOPS allows
        monkeypatch.setattr(F, "_SUBPIXEL_MAX_FLOPS", 100.0)
        path = path[:-1]
    taken = []
    for name in ("_offsets_input_grad", "_subpixel_input_grad", "_col2im_input_grad"):
        fn = getattr(F, name)
        monkeypatch.setattr(F, name, lambda *a, _f=fn, _n=name: taken.append(_n) or _f(*a))
    (o, k), c = ok, xs[1]
    w = randn(o, c, *k)
    oh = (xs[2] + 2 * p[0] - k[0]) // s[0] + 1
    ow = (xs[3] + 2 * p[1] - k[1]) // s[1] + 1
    g = randn(xs[0], o, oh, ow)
    gx = F.conv2d_input_grad(g, w, s, p, xs)
    assert taken == [f"_{path}_input_grad"] and gx.shape == xs
    np.testing.assert_allclose(gx, _direct_input_grad(g, w, s, p, xs), rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(F, "_INPUT_GRAD_PATHS", False)
    np.testing.assert_allclose(gx, F.conv2d_input_grad(g, w, s, p, xs), rtol=1e-12, atol=1e-12)
    assert taken[-1] == "_col2im_input_grad"
    g32, w32 = g.astype(np.float32), w.astype(np.float32)
    monkeypatch.setattr(F, "_INPUT_GRAD_PATHS", True)
    np.testing.assert_allclose(F.conv2d_input_grad(g32, w32, s, p, xs), gx, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("xs,ok,s,p,path", _INPUT_GRAD_CASES[1:4])
def test_conv2d_input_grad_paths_second_order(xs, ok, s, p, path):
    (o, k), c = ok, xs[1]
    x, w = randn(1, *xs[1:]), randn(o, c, *k)
    rlgrad.check_grads(lambda x, w: rlgrad.numpy.tanh(F.conv2d(x, w, None, s, p)), order=2)(x, w)

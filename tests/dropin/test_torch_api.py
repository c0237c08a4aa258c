"""The PyTorch surface RL scripts use, each call checked against PyTorch 2.x itself where it is
installed (values, dtypes, shapes) and against closed forms otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
import rlgrad as torch_like  # what a ported script writes: `import rlgrad as torch`

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def same(a, b, rtol: float = 0.0, atol: float = 0.0) -> None:
    """Values, dtype and shape of an rlgrad result equal PyTorch's (within float tolerances
    where the two compute in different orders)."""
    a_np = np.asarray(a.detach() if isinstance(a, rlgrad.Tensor) else a)
    b_np = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a_np.shape == b_np.shape, (a_np.shape, b_np.shape)
    assert a_np.dtype == b_np.dtype, (a_np.dtype, b_np.dtype)
    np.testing.assert_allclose(a_np, b_np, rtol=rtol, atol=atol)


# ---- seeding, devices, backends --------------------------------------------------------------
def test_manual_seed_makes_sampling_and_init_reproducible() -> None:
    def run():
        torch_like.manual_seed(3)
        layer = torch_like.nn.Linear(4, 2)
        noise = torch_like.randn(5)
        d = torch_like.distributions.categorical.Categorical(logits=torch_like.zeros(6))
        return layer.weight.detach().numpy().copy(), noise.numpy(), d.sample((4,)).numpy()

    a, b = run(), run()
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
    torch_like.manual_seed(4)
    assert not np.array_equal(torch_like.randn(5).numpy(), a[1])


def test_devices_cpu_everywhere_and_one_line_for_cuda() -> None:
    torch_like.backends.cudnn.deterministic = True
    torch_like.backends.cudnn.benchmark = False
    assert torch_like.cuda.is_available() is False
    device = torch_like.device("cuda" if torch_like.cuda.is_available() else "cpu")
    assert str(device) == "cpu" and device == "cpu" and device.type == "cpu"
    x = torch_like.zeros((2, 3)).to(device)
    assert x.device == device and x.to("cpu") is x and x.cpu() is x
    assert torch_like.tensor([1.0], device="cpu").device.type == "cpu"
    net = torch_like.nn.Linear(2, 2).to(device)
    assert net.cpu() is net
    for bad in (lambda: x.to("cuda"), lambda: torch_like.zeros(2, device="cuda:0"),
                lambda: net.to(torch_like.device("cuda")), lambda: x.cuda()):
        with pytest.raises(RuntimeError, match="CPU only|no CUDA"):
            bad()


def test_to_with_dtype_device_and_other_tensor() -> None:
    x = torch_like.tensor([1.5, -2.0])
    assert x.to("cpu", torch_like.float64).dtype == np.float64
    assert x.to(dtype=torch_like.long).dtype == np.int64
    assert x.to(torch_like.tensor([1], dtype=torch_like.int32)).dtype == np.int32
    assert x.float() is x and x.to(torch_like.float32) is x  # no change: the same tensor, as torch


# ---- constructors and dtypes -----------------------------------------------------------------
@pytest.mark.parametrize("data", [np.zeros(2), np.array([True, False]), np.array([1, 2]),
                                  [1.0, 2.0], [[1, 2]], (3,)])
def test_Tensor_constructor_uses_the_default_dtype_and_tensor_keeps_the_input(data) -> None:
    same(torch_like.Tensor(data), torch.Tensor(data))
    same(torch_like.tensor(data), torch.tensor(data))


def test_Tensor_constructor_shares_a_float32_array_and_takes_sizes() -> None:
    a = np.zeros(3, np.float32)
    t = torch_like.Tensor(a)
    a[0] = 5.0
    assert t[0].item() == 5.0  # torch.Tensor(float32 array) shares it too
    assert torch_like.Tensor(2, 3).shape == tuple(torch.Tensor(2, 3).shape)


def test_default_dtype_round_trip() -> None:
    assert torch_like.get_default_dtype() == np.float32
    torch_like.set_default_dtype(torch_like.float64)
    try:
        assert torch_like.Tensor([1]).dtype == np.float64 and torch_like.zeros(1).dtype == np.float64
    finally:
        torch_like.set_default_dtype(torch_like.float32)
    assert torch_like.Tensor([1]).dtype == np.float32


def test_as_tensor_and_from_numpy_share_memory() -> None:
    a = np.arange(3.0)
    t, u = torch_like.from_numpy(a), torch_like.as_tensor(a)
    a[1] = 7.0
    assert t[1].item() == 7.0 and u[1].item() == 7.0 and t.dtype == np.float64
    same(torch_like.as_tensor([1, 2]), torch.as_tensor([1, 2]))
    same(torch_like.as_tensor(a, dtype=torch_like.float32), torch.as_tensor(a, dtype=torch.float32))
    with pytest.raises(TypeError, match="NumPy array"):
        torch_like.from_numpy([1.0])


@pytest.mark.parametrize("args", [(5,), (1, 4), (0.0, 1.0, 0.25), (2, 8, 3)])
def test_arange_dtypes(args) -> None:
    same(torch_like.arange(*args), torch.arange(*args))


def test_dtype_names() -> None:
    for name in ("float32", "float", "float64", "double", "int64", "long", "int32", "int", "bool",
                 "uint8", "float16"):
        assert np.dtype(getattr(torch_like, name)) == np.dtype(str(getattr(torch, name))[6:])


# ---- Tensor methods against PyTorch ----------------------------------------------------------
X = RNG.standard_normal((4, 5)).astype(np.float32)


@pytest.mark.parametrize("call", [
    lambda m, x: x.std(), lambda m, x: x.var(), lambda m, x: x.std(0),
    lambda m, x: x.std(dim=1, keepdim=True), lambda m, x: x.var(1, unbiased=False),
    lambda m, x: x.std(correction=0), lambda m, x: x.var(dim=0, correction=2),
    lambda m, x: x.mean(1), lambda m, x: x.sum(dim=0, keepdim=True), lambda m, x: x.sum((0, 1)),
    lambda m, x: x.view(-1), lambda m, x: x.view(2, 10), lambda m, x: x.reshape(-1, 2),
    lambda m, x: x.flatten(), lambda m, x: x.reshape(2, 2, 5).flatten(1),
    lambda m, x: x.reshape(2, 2, 5).flatten(0, 1), lambda m, x: x[None].squeeze(0),
    lambda m, x: x.squeeze(0), lambda m, x: x[:, :1].squeeze(), lambda m, x: x.unsqueeze(-1),
    lambda m, x: x.max(), lambda m, x: x.max(1)[0], lambda m, x: x.max(1)[1],
    lambda m, x: x.min(dim=0).values, lambda m, x: x.min(0, keepdim=True).indices,
    lambda m, x: x.argmax(), lambda m, x: x.argmax(1), lambda m, x: x.argmin(dim=0, keepdim=True),
    lambda m, x: x.clamp(-0.5, 0.5), lambda m, x: x.clamp(min=0.0), lambda m, x: x.t(),
    lambda m, x: x.expand(2, 4, 5), lambda m, x: x[:1].expand(3, -1), lambda m, x: x.abs().pow(2),
    lambda m, x: x.exp().log(), lambda m, x: x.tanh(), lambda m, x: x.long(), lambda m, x: x.bool(),
    lambda m, x: x.double(), lambda m, x: x.repeat(2, 1), lambda m, x: x.masked_fill(x > 0, 0.0),
    lambda m, x: x.transpose(0, 1), lambda m, x: x.permute(1, 0), lambda m, x: (x > 0).any(1),
    lambda m, x: (x > -9).all(), lambda m, x: x.gather(1, m.tensor([[0, 1]] * 4)),
    lambda m, x: m.clamp(x, -0.1, 0.2), lambda m, x: m.max(x, m.zeros_like(x)),
    lambda m, x: m.min(x, 1)[0], lambda m, x: m.max(x, dim=0).indices, lambda m, x: m.argmax(x, 1),
    lambda m, x: m.argmin(x), lambda m, x: m.cat([x, x], 1), lambda m, x: m.stack([x, x]),
    lambda m, x: m.sum(x, 1), lambda m, x: m.mean(x, dim=0), lambda m, x: m.prod(x[:, :2], 1),
    lambda m, x: m.exp(x), lambda m, x: m.tanh(x), lambda m, x: m.log(x.abs()),
    lambda m, x: m.where(x > 0, x, m.zeros_like(x)), lambda m, x: m.flatten(x),
    lambda m, x: m.squeeze(x[None]), lambda m, x: m.unsqueeze(x, 0),
])
def test_methods_and_functions_match_torch(call) -> None:
    ours = call(torch_like, torch_like.tensor(X))
    theirs = call(torch, torch.tensor(X))
    same(ours, theirs, rtol=2e-6, atol=2e-7)


def test_size_is_torch_style() -> None:
    x = torch_like.zeros(3, 4)
    assert x.size() == (3, 4) == tuple(torch.zeros(3, 4).size())
    assert x.size(0) == 3 and x.size(-1) == 4 and x.size().numel() == 12
    assert x.numel() == 12 and x.dim() == 2 and x.shape == (3, 4)


def test_advantage_normalisation_matches_torch_to_float32() -> None:
    """CleanRL's `(adv - adv.mean()) / (adv.std() + 1e-8)`: the unbiased std, as torch's."""
    adv = RNG.standard_normal(8).astype(np.float32) * 3 + 1
    ours = (torch_like.tensor(adv) - torch_like.tensor(adv).mean()) / (torch_like.tensor(adv).std() + 1e-8)
    t = torch.tensor(adv)
    theirs = (t - t.mean()) / (t.std() + 1e-8)
    same(ours, theirs, rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match="unbiased"):
        torch_like.tensor(adv).std(0, 1)  # a NumPy-style ddof by position is refused


def test_max_of_two_tensors_gradient_and_max_dim_gradient_match_torch() -> None:
    a0, b0 = RNG.standard_normal(6), RNG.standard_normal(6)
    a, b = torch_like.tensor(a0, requires_grad=True), torch_like.tensor(b0, requires_grad=True)
    ta, tb = torch.tensor(a0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    (torch_like.max(a, b) * torch_like.arange(6.0).double()).sum().backward()
    (torch.max(ta, tb) * torch.arange(6.0).double()).sum().backward()
    same(a.grad, ta.grad)
    same(b.grad, tb.grad)
    x = torch_like.tensor(X, requires_grad=True)
    tx = torch.tensor(X, requires_grad=True)
    torch_like.max(x, 1)[0].sum().backward()
    torch.max(tx, 1)[0].sum().backward()
    same(x.grad, tx.grad)


def test_gather_method_matches_torch_with_gradient() -> None:
    q = RNG.standard_normal((5, 3))
    idx = np.array([[0], [2], [1], [1], [0]])
    x, tx = torch_like.tensor(q, requires_grad=True), torch.tensor(q, requires_grad=True)
    out, tout = x.gather(1, torch_like.tensor(idx)), tx.gather(1, torch.tensor(idx))
    same(out, tout)
    out.sum().backward()
    tout.sum().backward()
    same(x.grad, tx.grad)


def test_inplace_methods_match_torch() -> None:
    for name, args in (("copy_", (X[0],)), ("fill_", (2.5,)), ("zero_", ()), ("add_", (X[1],)),
                       ("sub_", (1.0,)), ("mul_", (X[2],)), ("div_", (4.0,)),
                       ("clamp_", (-0.1, 0.1)), ("lerp_", (X[3], 0.25))):
        ours, theirs = torch_like.tensor(X[3] * 2), torch.tensor(X[3] * 2)
        conv = [torch_like.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        tconv = [torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args]
        assert getattr(ours, name)(*conv) is ours
        getattr(theirs, name)(*tconv)
        same(ours, theirs, rtol=1e-6, atol=1e-7)
    t = torch_like.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="no_grad"):
        t.mul_(2.0)
    with torch_like.no_grad():
        t.mul_(2.0)
    assert t.item() == 2.0


def test_normal_and_randn_like_shapes_and_moments() -> None:
    torch_like.manual_seed(0)
    scale = torch_like.tensor([0.1, 10.0])
    draws = torch_like.stack([torch_like.normal(0, scale) for _ in range(4000)])
    assert draws.shape == (4000, 2) and draws.dtype == np.float32
    np.testing.assert_allclose(draws.numpy().std(0), [0.1, 10.0], rtol=0.05)
    z = torch_like.randn_like(torch_like.zeros((2, 3), dtype=torch_like.float64), device="cpu")
    assert z.shape == (2, 3) and z.dtype == np.float64
    r = torch_like.randint(0, 4, (1000,))
    assert r.dtype == np.int64 and set(np.unique(r.numpy())) == {0, 1, 2, 3}


# ---- .data: a Tensor outside the graph sharing memory, as PyTorch's ---------------------------
def test_data_is_a_tensor_sharing_memory_outside_the_graph() -> None:
    p = torch_like.nn.Parameter(torch_like.ones(3))
    d = p.data
    assert isinstance(d, rlgrad.Tensor) and not d.requires_grad and d.is_leaf and d.grad_fn is None
    d[0] = 5.0
    assert p[0].item() == 5.0
    p.data = torch_like.zeros(2)  # assignment replaces the values, as PyTorch's
    assert p.shape == (2,) and p.requires_grad


def test_soft_target_update_through_data_matches_torch() -> None:
    tau = 0.05
    src, tgt = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((3, 4)).astype(np.float32)
    results = []
    for m in (torch_like, torch):
        p, t = m.nn.Parameter(m.tensor(src)), m.nn.Parameter(m.tensor(tgt))
        t.data.copy_(tau * p.data + (1 - tau) * t.data)
        p.data.add_(p.data, alpha=-0.5)
        p.data -= 1.0
        results.append((t, p))
    same(results[0][0], results[1][0], rtol=1e-6, atol=1e-7)
    same(results[0][1], results[1][1])


def test_writes_through_data_are_not_version_tracked_as_in_torch() -> None:
    """PyTorch: `w.data.mul_(2)` after w was saved for backward is not detected (the backward
    reads the new value); `w.mul_(2)` under no_grad is, and backward raises."""
    grads = []
    for m in (torch_like, torch):
        w = m.tensor([1.0, 2.0], requires_grad=True)
        y = (w * w).sum()
        w.data.mul_(2.0)
        y.backward()
        grads.append(w.grad)
    same(grads[0], grads[1])
    w = torch_like.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    with torch_like.no_grad():
        w.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation|in-place"):
        y.backward()


def test_summary_writer_takes_tensors(tmp_path) -> None:
    pytest.importorskip("tensorboardX")
    from rlgrad.cli.events import STEP_KEY, event_rows
    from rlgrad.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    writer.add_text("hyperparameters", "|param|value|")
    writer.add_scalar("losses/value_loss", torch_like.tensor(0.25), 7)
    writer.add_scalar("charts/episodic_return", 12.0, 7)
    writer.close()
    assert event_rows(tmp_path, 10) == [{"losses/value_loss": 0.25, "charts/episodic_return": 12.0,
                                         STEP_KEY: 7}]


def test_module_to_device_and_dtype() -> None:
    net = torch_like.nn.Linear(3, 2)
    assert net.to("cpu") is net and net.weight.dtype == np.float32
    net.to(torch_like.device("cpu"), torch_like.float64)
    assert net.weight.dtype == np.float64 and net.bias.dtype == np.float64
    assert net.to(dtype=torch_like.float32).weight.dtype == np.float32


def test_save_and_load_as_cleanrl_does(tmp_path) -> None:
    actor, qf = torch_like.nn.Linear(3, 2), torch_like.nn.Linear(5, 1)
    path = tmp_path / "model.cleanrl_model"
    torch_like.save((actor.state_dict(), qf.state_dict()), path)
    a_sd, q_sd = torch_like.load(path, map_location=torch_like.device("cpu"), weights_only=True)
    fresh = torch_like.nn.Linear(3, 2)
    fresh.load_state_dict(a_sd)
    np.testing.assert_array_equal(fresh.weight.detach().numpy(), actor.weight.detach().numpy())
    with pytest.raises(RuntimeError, match="CPU only"):
        torch_like.load(path, map_location="cuda")


@pytest.mark.parametrize("fill", [0, 1.5, True])
def test_full_takes_its_dtype_from_the_fill_value(fill) -> None:
    same(torch_like.full((2, 3), fill), torch.full((2, 3), fill))
    same(torch_like.full_like(torch_like.zeros(2), fill), torch.full_like(torch.zeros(2), fill))


@pytest.mark.parametrize("data", [[1.5, 2.0], [1, 2], [True, False]], ids=["float", "int", "bool"])
def test_type_names_and_casts_match_torch(data) -> None:
    x, t = torch_like.tensor(data), torch.tensor(data)
    assert x.type() == t.type()
    assert x.type("torch.DoubleTensor").type() == t.type("torch.DoubleTensor").type()
    assert x.type(torch_like.int64).type() == t.type(torch.int64).type()
    with pytest.raises(ValueError, match="unknown tensor type 'torch.Nope'"):
        x.type("torch.Nope")


def test_reductions_take_dtype_and_mean_of_ints_raises_as_torch() -> None:
    data = [[1, 2, 3], [4, 5, 7]]
    x, t = torch_like.tensor(data), torch.tensor(data)
    for kw in ({}, {"dtype": torch_like.float64}):
        got = x.sum(1, **kw)
        want = t.sum(1, **({"dtype": torch.float64} if kw else {}))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert str(got.dtype) == str(want.dtype).removeprefix("torch.")
    np.testing.assert_allclose(x.mean(dtype=torch_like.float64).item(),
                               t.mean(dtype=torch.float64).item())
    with pytest.raises(RuntimeError):
        t.mean()
    with pytest.raises(RuntimeError, match="mean\\(\\): .*int64.*float\\(\\)"):
        x.mean()


@pytest.mark.parametrize("shape,dim", [((3, 0), 1), ((0, 4), 1), ((2, 3, 0), -1), ((2, 0, 3), 1)])
@pytest.mark.parametrize("fn", ["log_softmax", "softmax"])
def test_softmax_over_an_empty_axis_is_empty_as_torch(shape, dim, fn) -> None:
    x = torch_like.zeros(*shape, requires_grad=True)
    t = torch.zeros(*shape, requires_grad=True)
    y, ty = getattr(torch_like.nn.functional, fn)(x, dim=dim), getattr(torch.nn.functional, fn)(t, dim=dim)
    y.sum().backward()
    ty.sum().backward()
    assert y.shape == tuple(ty.shape) and x.grad.shape == tuple(t.grad.shape)

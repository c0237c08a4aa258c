"""NatureCNN and MinAtarCNN: gradients against finite differences (float64, 1st and 2nd order),
outputs and gradients against the equivalent torch.nn.Sequential with the same weights, and the
uint8 input path (scaled by 1/255 inside the Nature CNN, cast only in the MinAtar one)."""

import numpy as np
import pytest

import rlgrad
import rlgrad.numpy as rnp
from rlgrad.rl.cnn import MinAtarCNN, NatureCNN, minatar_cnn, nature_cnn


def _frames(shape, seed=0):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _torch_nature(torch, c, n_flat, features):
    """SB3's NatureCNN layout in torch: ``cnn`` (convolutions, flatten) and ``linear``."""
    nn = torch.nn

    class Nature(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(nn.Conv2d(c, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2),
                                     nn.ReLU(), nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten())
            self.linear = nn.Sequential(nn.Linear(n_flat, features), nn.ReLU())

        def forward(self, x):
            return self.linear(self.cnn(x))

    return Nature()


def _torch_minatar(torch, c, features):
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(c, 16, 3, 1), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 8 * 8, features),
                         nn.ReLU())


def test_state_dict_keys_are_sb3s():
    nat = NatureCNN()
    assert list(nat.state_dict()) == ["cnn.0.weight", "cnn.0.bias", "cnn.2.weight", "cnn.2.bias",
                                      "cnn.4.weight", "cnn.4.bias", "linear.0.weight",
                                      "linear.0.bias"]
    assert nat.state_dict()["linear.0.weight"].shape == (512, 64 * 7 * 7)
    assert nat.features_dim == 512
    mini = MinAtarCNN((6, 10, 10))
    assert list(mini.state_dict()) == ["0.weight", "0.bias", "3.weight", "3.bias"]
    assert mini.state_dict()["3.weight"].shape == (128, 1024) and mini.features_dim == 128
    with pytest.raises(ValueError, match="at least 36x36"):
        NatureCNN((4, 30, 30))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nature_cnn_matches_pytorch(dtype):
    torch = pytest.importorskip("torch")
    rlgrad.random.seed(0)  # the same weights at every run
    ours = NatureCNN(dtype=dtype)
    theirs = _torch_nature(torch, 4, 3136, 512).to(torch.float64 if dtype == np.float64 else torch.float32)
    theirs.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in ours.state_dict().items()})
    x = _frames((3, 4, 84, 84))
    tx = torch.from_numpy(x).to(theirs.cnn[0].weight.dtype) / 255.0
    out = ours(x)
    want = theirs(tx)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-12)
    assert out._value.dtype == dtype and out.shape == (3, 512)
    np.testing.assert_allclose(out._value, want.detach().numpy(), **tol)
    assert (out._value > 0).mean() > 0.1  # not a network whose ReLUs are all off
    # gradients of one loss with respect to every weight
    g = np.random.default_rng(1).standard_normal((3, 512)).astype(dtype)
    (out * rlgrad.tensor(g)).sum().backward()
    (want * torch.from_numpy(g)).sum().backward()
    for p, (name, tp) in zip(ours.parameters(), theirs.named_parameters()):
        if dtype == np.float64:
            np.testing.assert_allclose(p.grad._value, tp.grad.numpy(), err_msg=name, **tol)
        else:  # a float32 ReLU input near 0 may switch on in one library and off in the other,
            # moving a few entries by ~1e-3 of their scale: compare the whole array's error
            err = np.linalg.norm(p.grad._value - tp.grad.numpy()) / np.linalg.norm(tp.grad.numpy())
            assert err < 1e-4, (name, err)
    # and back: torch's weights into a fresh module give torch's outputs
    back = NatureCNN(dtype=dtype)
    back.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    np.testing.assert_array_equal(back(x)._value, out._value)


def test_older_layout_state_dicts_load():
    """A state dict of the former layout (one Sequential: 0, 2, 4, 7; or, from
    rlgrad.rl.common.torch_layers' former wrapper, that Sequential as ``cnn``: cnn.7) loads into
    the SB3 layout, strictly, with the same outputs."""
    from gymnasium import spaces

    from rlgrad.rl.common.torch_layers import NatureCNN as SB3NatureCNN

    rlgrad.random.seed(2)
    src = NatureCNN((2, 36, 36), features_dim=6, dtype=np.float64)
    new = {k: v.numpy() for k, v in src.state_dict().items()}
    old = {k.replace("cnn.", "").replace("linear.0.", "7."): v for k, v in new.items()}
    assert sorted(old) == ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight",
                           "7.bias", "7.weight"]
    x = _frames((3, 2, 36, 36), seed=5)
    dst = NatureCNN((2, 36, 36), features_dim=6, dtype=np.float64)
    assert dst.load_state_dict(old) == ([], [])
    np.testing.assert_array_equal(dst(x)._value, src(x)._value)
    # inside a parent, under its prefix
    parent = rlgrad.nn.Sequential(NatureCNN((2, 36, 36), features_dim=6, dtype=np.float64))
    parent.load_state_dict({f"0.{k}": v for k, v in old.items()})
    np.testing.assert_array_equal(parent(x)._value, src(x)._value)
    # SB3's class: its keys are SB3's; the former wrapper's (cnn.0 ... cnn.7) load
    space = spaces.Box(0, 255, (2, 36, 36), np.uint8)
    ext = SB3NatureCNN(space, features_dim=6)
    assert list(ext.state_dict()) == list(src.state_dict())
    wrapper_keys = {f"cnn.{k}": v.astype(np.float32) for k, v in old.items()}
    assert ext.load_state_dict(wrapper_keys) == ([], [])
    np.testing.assert_allclose(ext(x)._value, src(x)._value, rtol=1e-5, atol=1e-6)
    # an unknown key is still one
    with pytest.raises(RuntimeError, match='Unexpected key.*"9.weight"'):
        dst.load_state_dict({**old, "9.weight": old["7.weight"]})


def test_minatar_cnn_matches_pytorch():
    torch = pytest.importorskip("torch")
    ours = MinAtarCNN((4, 10, 10), dtype=np.float64)
    theirs = _torch_minatar(torch, 4, 128).double()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(2).random((5, 4, 10, 10)) < 0.2
    out = ours(x.astype(np.uint8))
    np.testing.assert_allclose(out._value, theirs(torch.from_numpy(x).double()).detach().numpy(),
                               rtol=1e-12, atol=1e-13)
    assert out.shape == (5, 128)


def test_uint8_inputs():
    nat = NatureCNN((4, 36, 36), features_dim=16)
    x = _frames((2, 4, 36, 36), seed=3)
    raw = NatureCNN((4, 36, 36), features_dim=16, normalize=False)
    raw.load_state_dict(nat.state_dict())
    scaled = x.astype(np.float32) / np.float32(255)
    assert scaled.max() <= 1.0 and scaled.max() > 0.99
    # dividing by 255 inside the network = feeding the [0, 1] frames to an unscaled one
    np.testing.assert_array_equal(nat(x)._value, raw(scaled)._value)
    np.testing.assert_array_equal(nat(x)._value, nat(rlgrad.tensor(x.astype(np.float32)))._value)
    assert not np.array_equal(nat(x)._value, raw(x)._value)
    mini = MinAtarCNN((4, 10, 10))
    b = np.random.default_rng(4).random((3, 4, 10, 10)) < 0.3
    np.testing.assert_array_equal(mini(b.astype(np.uint8))._value, mini(b)._value)
    np.testing.assert_array_equal(mini(b.astype(np.uint8))._value, mini(b.astype(np.float32))._value)


def _weights(model, seed):
    """Weights of ``model``'s shapes from a local generator (independent of the global seed):
    He-scaled, biases small and positive so that about half the ReLUs are on."""
    rng = np.random.default_rng(seed)
    out = []
    for p in model.parameters():
        if p.ndim == 1:
            out.append(rng.uniform(0.0, 0.1, p.shape))
        else:
            out.append(rng.standard_normal(p.shape) * np.sqrt(2.0 / np.prod(p.shape[1:])))
    out[-1] = out[-1] + 0.5  # the outputs' units on for this batch
    return out


def test_nature_cnn_gradients_finite_differences():
    """Every weight and the input, first and second order, float64, on a 36x36 input."""
    params = _weights(NatureCNN((2, 36, 36), features_dim=3, dtype=np.float64), seed=7)
    x = _frames((2, 2, 36, 36), seed=5).astype(np.float64)
    loss = lambda x, *ps: rnp.sum(rnp.tanh(nature_cnn(x, ps)) ** 2)
    assert (np.asarray(nature_cnn(x, params)) > 0).all()  # every output unit alive: nothing is zeroed
    rlgrad.check_grads(loss, order=2)(x, *params)


def test_minatar_cnn_gradients_finite_differences():
    params = _weights(MinAtarCNN((3, 10, 10), features_dim=5, dtype=np.float64), seed=13)
    x = np.random.default_rng(6).random((2, 3, 10, 10))
    loss = lambda x, *ps: rnp.sum(rnp.tanh(minatar_cnn(x, ps)) ** 2)
    assert (np.asarray(minatar_cnn(x, params)) > 0).all()
    rlgrad.check_grads(loss, order=2)(x, *params)


@pytest.mark.parametrize("make", [lambda: NatureCNN((4, 36, 36), features_dim=8),
                                  lambda: MinAtarCNN((4, 10, 10), features_dim=8)])
def test_compiled_update_reads_every_batch(make):
    """The uint8 -> float step of the trunk is recorded: a compiled DQN-style update (jit) gives
    the eager loss and gradients on every batch, not on the first one it was traced with."""
    from rlgrad.rl.steps import grad_step

    net = make()
    params = list(net.parameters())
    step = grad_step(lambda b: ((net(b["obs"]) ** 2).mean(), {}), params)
    shape = (3, *net.observation_shape)
    for seed in range(3):
        x = _frames(shape, seed) if isinstance(net, NatureCNN) else _frames(shape, seed) % 2
        loss, _, grads = step({"obs": x})
        net.zero_grad()
        eager = (net(x) ** 2).mean()
        eager.backward()
        np.testing.assert_allclose(loss, eager._value, rtol=1e-6)
        for g, p in zip(grads, params):
            np.testing.assert_allclose(g, p.grad._value, rtol=1e-5, atol=1e-7)

"""The on-policy rollout step's shared parts against their references: a trunk's features for
acting without the module call (rlgrad.rl.cnn.PLAIN_FEATURES, under PLAIN_ACTING) against the
modules' own forward, bit for bit; a fixed-seed PPO run on SB3's SimpleMultiObsEnv with every
acting fast path on against all of them off (the same buffer and trained parameters)."""

import numpy as np
import pytest
from gymnasium import spaces

import rlgrad
from rlgrad.nn import functional as F
from rlgrad.rl import cnn
from rlgrad.rl.cnn import MinAtarCNN, NatureCNN
from rlgrad.rl.layers import CombinedExtractor
from rlgrad.rl.policies import trunk_numpy

_IMG = spaces.Box(0, 255, (1, 64, 64), np.uint8)
_SMALL = spaces.Box(0, 255, (2, 10, 10), np.uint8)
_VEC = spaces.Box(-1.0, 1.0, (5,), np.float64)


def _trunks():
    rlgrad.random.seed(0)
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (3, 64 * 64)).astype(np.float32)
    small = rng.integers(0, 256, (3, 2 * 10 * 10)).astype(np.float32)
    vec = rng.standard_normal((3, 5)).astype(np.float32)
    both = CombinedExtractor(spaces.Dict({"img": _IMG, "vec": _VEC}), cnn_output_dim=64)
    two = CombinedExtractor(spaces.Dict({"a": _SMALL, "b": _IMG, "v": _VEC}))
    return [(both, np.concatenate([img, vec], axis=1)),
            (two, np.concatenate([small, img, vec], axis=1)),
            (NatureCNN((1, 64, 64), 32), img.reshape(3, 1, 64, 64).astype(np.uint8)),
            (MinAtarCNN((2, 10, 10), 16), small.reshape(3, 2, 10, 10))]


def test_plain_features_give_the_modules_bits(monkeypatch):
    """``trunk_numpy`` of a Dict extractor (images and a vector) or a CNN takes the registered
    plain path and gives the bits of the module's own forward (PLAIN_ACTING off)."""
    taken = []
    for cls, fn in list(cnn.PLAIN_FEATURES.items()):
        monkeypatch.setitem(cnn.PLAIN_FEATURES, cls,
                            lambda m, x, fn=fn: taken.append(type(m)) or fn(m, x))
    for trunk, x in _trunks():
        taken.clear()
        fast = trunk_numpy(trunk, x)
        assert type(trunk) in taken and isinstance(fast, np.ndarray)
        monkeypatch.setattr(cnn, "PLAIN_ACTING", False)
        taken.clear()
        ref = trunk_numpy(trunk, x)
        monkeypatch.setattr(cnn, "PLAIN_ACTING", True)
        assert not taken and ref.dtype == fast.dtype and (fast != 0).any()
        np.testing.assert_array_equal(fast, ref)


def test_a_hooked_or_subclassed_trunk_is_called_as_a_module():
    """A trunk with a forward hook (nn.hooks moves it to a class of its own) or of a subclass
    that changes its forward is called as a module: the hook runs, the forward is its own."""
    trunk, x = _trunks()[0]
    seen = []
    handle = trunk.register_forward_hook(lambda m, i, o: seen.append(o.shape) or o * 2)
    hooked = trunk_numpy(trunk, x)
    handle.remove()
    assert seen == [(3, trunk.features_dim)]
    np.testing.assert_array_equal(hooked, 2 * trunk_numpy(trunk, x))

    class Doubled(NatureCNN):
        def forward(self, x):
            return super().forward(x) * 2

    net = Doubled((1, 64, 64), 32)
    img = x[:, :64 * 64].reshape(3, 1, 64, 64).astype(np.uint8)
    plain = NatureCNN((1, 64, 64), 32)
    plain.load_state_dict(net.state_dict())
    np.testing.assert_array_equal(trunk_numpy(net, img), 2 * trunk_numpy(plain, img))


def test_plain_features_leave_tensors_and_gradients_to_the_module():
    trunk, x = _trunks()[0]
    assert cnn.plain_features(trunk, rlgrad.as_tensor(x)) is None
    assert cnn.plain_features(trunk, x) is None  # gradients on: the recorded path
    with rlgrad.no_grad():
        assert cnn.plain_features(trunk, x) is not None
        assert cnn.plain_features(rlgrad.nn.Flatten(), x) is None  # (not registered)


def _ppo_run(with_callback):
    from rlgrad.rl import PPO
    from rlgrad.rl.common.envs import SimpleMultiObsEnv

    np.random.seed(3)  # (the env draws its images from NumPy's global generator)
    model = PPO("MultiInputPolicy", SimpleMultiObsEnv(random_start=False), n_steps=96,
                batch_size=32, n_epochs=1, seed=3)
    # 192 steps: the first episode's 100 steps end (truncated) inside the last rollout
    model.learn(192, callback=(lambda _locals, _globals: True) if with_callback else None)
    buf = model.rollout_buffer
    return [buf.observations.copy(), buf.actions.copy(), buf.log_probs.copy(),
            buf.values.copy(), buf.bootstrap.copy(), buf.returns.copy(),
            *(p._value.copy() for p in model.policy.parameters())]


@pytest.mark.parametrize("with_callback", [False, True])
def test_a_dict_image_run_gives_the_reference_paths_bits(monkeypatch, with_callback):
    """PPO on SB3's SimpleMultiObsEnv with the acting fast paths on (plain features, conv plans,
    kept weight columns) and all of them off: the same rollout buffer and trained parameters,
    bit for bit."""
    fast = _ppo_run(with_callback)
    monkeypatch.setattr(cnn, "PLAIN_ACTING", False)
    monkeypatch.setattr(F, "CONV_PLANS", False)
    monkeypatch.setattr(F, "KEEP_WEIGHT_COLS", False)
    ref = _ppo_run(with_callback)
    assert np.isfinite(ref[4]).any()  # truncations were bootstrapped (NaN: none)
    for a, b in zip(fast, ref, strict=True):
        np.testing.assert_array_equal(a, b)

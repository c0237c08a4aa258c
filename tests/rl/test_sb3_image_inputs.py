"""Image observations beyond the plain CnnPolicy: VecNormalize over images (SB3's image-like
input: normalised floats, ``normalize_images=False``) and the off-policy CNN policies."""

import numpy as np
import pytest

from rlgrad.rl import PPO
from rlgrad.rl.common.envs import FakeImageEnv
from rlgrad.rl.common.vec_env import DummyVecEnv, VecNormalize
from rlgrad.rl.normalize import Normalizer


def _image_env(discrete: bool = True) -> VecNormalize:
    env = FakeImageEnv(screen_height=36, screen_width=36, n_channels=1, channel_first=True,
                       discrete=discrete)
    return VecNormalize(DummyVecEnv([lambda: env]))


def test_normalizer_takes_image_batches_as_flat_rows():
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (5, 2, 3, 4)).astype(np.uint8)
    n = Normalizer(2 * 3 * 4, 5)
    n.update_obs(imgs)
    rows = imgs.reshape(5, -1).astype(np.float64)
    np.testing.assert_allclose(n.obs_rms.mean, rows.mean(0), rtol=1e-3)  # epsilon's prior
    out = n.normalize_obs(imgs)
    assert out.shape == imgs.shape and out.dtype == np.float32
    expect = np.clip((rows - n.obs_rms.mean) / np.sqrt(n.obs_rms.var + 1e-8), -10, 10)
    np.testing.assert_allclose(out.reshape(5, -1), expect, rtol=1e-5)


def test_vecnormalize_images_train_a_cnn_on_normalised_floats():
    venv = _image_env()
    model = PPO("CnnPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0,
                policy_kwargs=dict(normalize_images=False,
                                   features_extractor_kwargs=dict(features_dim=8)))
    model.learn(16)
    rms = venv.obs_rms
    assert rms.mean.size == 36 * 36
    assert rms.count == pytest.approx(17 + 1e-4)  # the reset and 16 steps, each seen once
    raw = model._last_obs  # the env's last raw image, (1, 1, 36, 36) uint8
    got = venv.normalize_obs(raw)
    expect = np.clip((raw.reshape(1, -1) - rms.mean) / np.sqrt(rms.var + 1e-8), -10, 10)
    np.testing.assert_allclose(got.reshape(1, -1), expect, rtol=1e-5)
    # the policy reads those floats as they are (no second division by 255)
    x = got.astype(np.float32)
    a, _ = model.predict(x, deterministic=True)
    logits = model.policy.action_net(model.policy.extract_features(x)).detach().numpy()
    assert int(a[0]) == int(np.argmax(logits[0]))


def test_vecnormalize_images_with_image_scaling_refused_as_sb3():
    with pytest.raises(AssertionError, match="normalize_images=False"):
        PPO("CnnPolicy", _image_env(), n_steps=16, batch_size=16, seed=0)
    with pytest.raises(ValueError, match="normalize_images=False"):
        PPO("CnnPolicy", _image_env(), n_steps=16, batch_size=16, seed=0,
            policy_kwargs=dict(normalize_images=True))

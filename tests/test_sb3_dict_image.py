"""Dict and image observations as SB3 handles them: ``preprocess_obs`` (torch in, torch out, and
rlgrad Tensors for arrays) against SB3's own on every space."""

import numpy as np
import pytest
from gymnasium import spaces

import rlgrad
from rlgrad.rl.common.preprocessing import preprocess_obs

th = pytest.importorskip("torch")
sb3_pre = pytest.importorskip("stable_baselines3.common.preprocessing")

IMAGE = spaces.Box(0, 255, (3, 8, 8), np.uint8)
SPACES = [spaces.Discrete(3), spaces.MultiDiscrete([3, 2]), spaces.MultiBinary(3),
          spaces.MultiBinary([3, 2]), spaces.Box(-2, 2, (3, 2)), IMAGE,
          spaces.Dict({"img": IMAGE, "vec": spaces.Box(-1, 1, (2,)), "d": spaces.Discrete(4)})]


def _batch(space, n=4):
    space.seed(0)
    if isinstance(space, spaces.Dict):
        return {k: _batch(s, n) for k, s in space.spaces.items()}
    return np.stack([np.asarray(space.sample()) for _ in range(n)])


def _torch(x):
    return {k: _torch(v) for k, v in x.items()} if isinstance(x, dict) else th.as_tensor(x)


def _check(mine, ref):
    if isinstance(ref, dict):
        assert set(mine) == set(ref)
        for k in ref:
            _check(mine[k], ref[k])
        return
    assert mine.dtype == th.float32 if isinstance(mine, th.Tensor) else mine.dtype == np.float32
    np.testing.assert_allclose(np.asarray(mine), ref.numpy(), rtol=1e-7)


@pytest.mark.parametrize("space", SPACES, ids=str)
@pytest.mark.parametrize("normalize_images", [True, False])
def test_preprocess_obs_matches_sb3(space, normalize_images):
    obs = _batch(space)
    ref = sb3_pre.preprocess_obs(_torch(obs), space, normalize_images)
    out = preprocess_obs(_torch(obs), space, normalize_images)
    if not isinstance(space, spaces.Dict):  # torch in, torch out
        assert isinstance(out, th.Tensor)
    _check(out, ref)
    arrays = preprocess_obs(obs, space, normalize_images)  # arrays in: rlgrad Tensors
    leaves = arrays.values() if isinstance(arrays, dict) else [arrays]
    assert all(isinstance(t, rlgrad.Tensor) for t in leaves)
    _check({k: v._value for k, v in arrays.items()} if isinstance(arrays, dict)
           else arrays._value, ref)

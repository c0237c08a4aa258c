"""LeanSyncVectorEnv: the same steps as Gymnasium's SyncVectorEnv (it only drops overhead)."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import SyncVectorEnv

from rlgrad.rl.envs import LeanSyncVectorEnv, make_vec_env


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_lean_steps_as_gymnasium_does(env_id):
    lean = make_vec_env(env_id, n_envs=2, vectorization_mode="sync", record_statistics=False)
    assert type(lean) is LeanSyncVectorEnv
    ref = gym.make_vec(env_id, num_envs=2, vectorization_mode="sync", vector_kwargs={})
    assert type(ref) is SyncVectorEnv
    o1, _ = lean.reset(seed=3)
    o2, _ = ref.reset(seed=3)
    np.testing.assert_array_equal(o1, o2)
    lean.action_space.seed(5)
    dones = 0
    for _ in range(600):  # CartPole's random episodes end many times: resets are covered
        a = lean.action_space.sample()
        out1, out2 = lean.step(a), ref.step(a.copy())
        for x, y in zip(out1[:4], out2[:4]):
            assert x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y)
        assert out1[4].keys() == out2[4].keys()
        assert out1[0] is not lean._observations  # a copy, as Gymnasium returns
        dones += int(np.count_nonzero(out1[2] | out1[3]))
    assert dones > 0


def test_lean_falls_back_to_gymnasium_for_lists():
    lean = make_vec_env("CartPole-v1", n_envs=2, vectorization_mode="sync")
    lean.reset(seed=0)
    obs, rew, term, trunc, _ = lean.step([0, 1])  # not an array: Gymnasium's own step
    assert obs.shape == (2, 4) and rew.shape == (2,)

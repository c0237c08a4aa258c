"""``OneEnvSyncVectorEnv`` returns, step for step, what Gymnasium's ``SyncVectorEnv`` returns for
the same environment: observations (bitwise), rewards, terminations, truncations, infos (nested
ones too), through NEXT_STEP autoresets after terminations and truncations."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import RecordEpisodeStatistics

from rlgrad.rl.envs import make_vec_env
from rlgrad.rl.one_env import OneEnvSyncVectorEnv


def _same_info(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        if k == "t":  # RecordEpisodeStatistics' episode wall time: compared by key only
            continue
        if isinstance(a[k], dict):
            _same_info(a[k], b[k])
        elif np.asarray(a[k]).dtype == object:  # SAME_STEP's final_obs: arrays per env
            for x, y in zip(a[k], b[k]):
                np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_array_equal(a[k], b[k])
            assert np.asarray(a[k]).dtype == np.asarray(b[k]).dtype


def _compare(make, n_steps: int = 400, seed: int = 3, **kw) -> tuple[int, int]:
    ours, ref = OneEnvSyncVectorEnv([make], **kw), SyncVectorEnv([make], **kw)
    o1, i1 = ours.reset(seed=seed)
    o2, i2 = ref.reset(seed=seed)
    np.testing.assert_array_equal(o1, o2)
    rng = np.random.default_rng(seed)
    ref.action_space.seed(seed)  # the actions, and so the episode ends counted, are fixed
    ref.single_action_space.seed(seed + 1)
    terms = truncs = 0
    for _ in range(n_steps):
        a = ref.action_space.sample() if rng.random() < 0.5 else np.array(
            [ref.single_action_space.sample()])
        r1, r2 = ours.step(a), ref.step(a)
        for x, y in zip(r1[:4], r2[:4]):
            assert type(x) is type(y) and x.dtype == y.dtype and x.shape == y.shape
            np.testing.assert_array_equal(x, y)
        _same_info(r1[4], r2[4])
        # a fresh copy each step, as SyncVectorEnv's deepcopy (copy=False: its one buffer)
        assert (r1[0] is ours._batch) == (not kw.get("copy", True))
        terms += int(r2[2][0])
        truncs += int(r2[3][0])
    return terms, truncs


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_cartpole_step_for_step_through_terminations_and_truncations(mode) -> None:
    terms, truncs = _compare(lambda: gym.make("CartPole-v1", max_episode_steps=15),
                             autoreset_mode=mode)
    assert terms > 3 and truncs > 3  # both kinds of episode end, each followed by a reset step


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_nested_infos_discrete_observations_and_no_copy(mode) -> None:
    # FrozenLake: Discrete observations, an info dict every step ({"prob": ...}); the episode
    # statistics wrapper adds a nested {"episode": {...}} dict at the ends
    def make():
        return RecordEpisodeStatistics(gym.make("FrozenLake-v1", max_episode_steps=6))

    terms, truncs = _compare(make, copy=False, autoreset_mode=mode)
    assert terms + truncs > 10


def test_observations_not_of_the_spaces_dtype_are_cast_as_syncvectorenv_casts_them() -> None:
    # float64 observations of a float32 space: np.stack's cast into the batch, not the in-place row
    def make():
        return gym.wrappers.TransformObservation(gym.make("CartPole-v1", max_episode_steps=15),
                                                 lambda o: o.astype(np.float64) / 3.0, None)

    terms, truncs = _compare(make)
    assert terms + truncs > 3


def test_box_actions() -> None:
    _compare(lambda: gym.make("Pendulum-v1", max_episode_steps=25), n_steps=120)


def test_other_modes_and_batches_take_syncvectorenvs_step() -> None:
    env = OneEnvSyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=5)],
                              autoreset_mode=AutoresetMode.DISABLED)
    assert not env._short
    one = OneEnvSyncVectorEnv([lambda: gym.make("CartPole-v1")])
    one.reset(seed=0)
    with pytest.raises(ValueError):  # two actions for one env: SyncVectorEnv's strict zip
        one.step(np.array([0, 1]))
    with pytest.raises(ValueError, match="one environment"):
        OneEnvSyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)


def test_reset_in_the_middle_of_an_episode_and_after_its_end() -> None:
    ours = OneEnvSyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=4)])
    ref = SyncVectorEnv([lambda: gym.make("CartPole-v1", max_episode_steps=4)])
    a = np.array([0])
    for seed in (1, 2, 3):
        np.testing.assert_array_equal(ours.reset(seed=seed)[0], ref.reset(seed=seed)[0])
        for _ in range(seed + 2):  # seed 2, 3: past the truncation, into (or onto) the reset step
            for x, y in zip(ours.step(a)[:4], ref.step(a)[:4]):
                np.testing.assert_array_equal(x, y)
    mask = {"reset_mask": np.array([True])}
    np.testing.assert_array_equal(ours.reset(seed=9, options=dict(mask))[0],
                                  ref.reset(seed=9, options=dict(mask))[0])
    for _ in range(6):
        for x, y in zip(ours.step(a)[:4], ref.step(a)[:4]):
            np.testing.assert_array_equal(x, y)


def test_make_vec_env_builds_it_for_one_env_only() -> None:
    one = make_vec_env("CartPole-v1", 1, vectorization_mode="sync", record_statistics=False)
    ref = gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync")
    assert type(one) is OneEnvSyncVectorEnv and one.spec == ref.spec
    two = make_vec_env("CartPole-v1", 2, vectorization_mode="sync", record_statistics=False)
    assert type(two) is SyncVectorEnv
    a = np.array([1])
    one.reset(seed=5)
    ref.reset(seed=5)
    for _ in range(60):
        np.testing.assert_array_equal(one.step(a)[0], ref.step(a)[0])

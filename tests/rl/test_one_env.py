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
                if isinstance(x, dict):  # (a Dict space's final observation)
                    assert list(x) == list(y)
                    for key in x:
                        np.testing.assert_array_equal(x[key], y[key])
                else:
                    np.testing.assert_array_equal(x, y)
        else:
            np.testing.assert_array_equal(a[k], b[k])
            assert np.asarray(a[k]).dtype == np.asarray(b[k]).dtype


def _same_obs(a, b) -> None:
    """The same batch, bitwise, of the same types (a Dict space's: dicts, in the same key order)."""
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same_obs(a[k], b[k])
        return
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


def _batch_arrays(obs) -> list:
    return list(obs.values()) if isinstance(obs, dict) else [obs]


def _compare(make, n_steps: int = 400, seed: int = 3, **kw) -> tuple[int, int]:
    ours, ref = OneEnvSyncVectorEnv([make], **kw), SyncVectorEnv([make], **kw)
    assert ours._short
    o1, i1 = ours.reset(seed=seed)
    o2, i2 = ref.reset(seed=seed)
    _same_obs(o1, o2)
    rng = np.random.default_rng(seed)
    ref.action_space.seed(seed)  # the actions, and so the episode ends counted, are fixed
    ref.single_action_space.seed(seed + 1)
    terms = truncs = 0
    for _ in range(n_steps):
        a = ref.action_space.sample() if rng.random() < 0.5 else np.array(
            [ref.single_action_space.sample()])
        r1, r2 = ours.step(a), ref.step(a)
        for x, y in zip(r1[:4], r2[:4]):
            _same_obs(x, y)
        _same_info(r1[4], r2[4])
        # a fresh copy each step, as SyncVectorEnv's deepcopy (copy=False: its one buffer)
        for x, buf in zip(_batch_arrays(r1[0]), _batch_arrays(ours._batch), strict=True):
            assert (x is buf) == (not kw.get("copy", True))
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


class _Goals(gym.Env):
    """A Dict of a float32 Box (written as float64: cast into the batch), a Discrete and a
    MultiBinary (HER's goal layout); ends after a random number of steps."""

    observation_space = gym.spaces.Dict({
        "pos": gym.spaces.Box(-5.0, 5.0, (2,), np.float32), "room": gym.spaces.Discrete(4),
        "bits": gym.spaces.MultiBinary(3)})
    action_space = gym.spaces.Discrete(3)

    def _obs(self):
        return {"room": self.t % 4, "pos": np.array([self.t, -self.t], np.float64) / 3.0,
                "bits": np.array([self.t & 1, self.t & 2, 0], np.int8).clip(0, 1)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += int(action) + 1
        return self._obs(), 1.0, bool(self.np_random.random() < 0.1), False, {"n": self.t}


@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_dict_observations_step_for_step(mode, copy) -> None:
    """Dict observations (entries cast into the batch or written in place) through
    terminations and truncations, with and without the copy."""
    terms, truncs = _compare(lambda: gym.wrappers.TimeLimit(_Goals(), 12), copy=copy,
                             autoreset_mode=mode)
    assert terms > 3 and truncs > 3


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

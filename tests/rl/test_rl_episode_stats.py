"""The episode statistics the step adapter keeps equal Gymnasium's RecordEpisodeStatistics."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from rlgrad.rl import PPO
from rlgrad.rl.envs import EpisodeStatistics, StepAdapter


@pytest.mark.parametrize("mode,autoreset,n", [
    ("vector_entry_point", None, 3), ("sync", None, 3), ("sync", AutoresetMode.SAME_STEP, 3),
    ("sync", None, 1)])  # one env: the scalar sums
def test_adapter_statistics_equal_gymnasiums_wrapper(mode, autoreset, n):
    kw = {} if autoreset is None else {"vector_kwargs": {"autoreset_mode": autoreset}}
    venv = RecordEpisodeStatistics(gym.make_vec("CartPole-v1", num_envs=n,
                                                vectorization_mode=mode, **kw), buffer_length=7)
    ours = EpisodeStatistics(n, buffer_length=7)
    ad = StepAdapter(venv, statistics=ours)
    ad.reset(seed=1)
    rng = np.random.default_rng(0)
    for _ in range(400 * (4 - n)):
        ad.step(rng.integers(0, 2, size=n))
        assert ours.episode_count == venv.episode_count
        assert list(ours.return_queue) == [float(x) for x in venv.return_queue]
        assert list(ours.length_queue) == [int(x) for x in venv.length_queue]
    assert ours.episode_count > 10  # many episodes ended, the queue wrapped around


def test_algorithm_statistics_without_wrapper_and_in_checkpoints():
    m = PPO("CartPole-v1", n_envs=2, n_steps=64, batch_size=64, seed=0).learn(512)
    st = m._ep_stats
    assert isinstance(st, EpisodeStatistics) and st.episode_count > 0
    assert not isinstance(m.env, RecordEpisodeStatistics)
    assert abs(sum(st.length_queue) + st.episode_lengths.sum() - m.num_timesteps) <= 2 * st.episode_count
    other = PPO("CartPole-v1", n_envs=2, n_steps=64, batch_size=64, seed=0)
    other.set_state(m.get_state())
    assert list(other._ep_stats.return_queue) == list(st.return_queue)
    np.testing.assert_array_equal(other._ep_stats.episode_returns, st.episode_returns)
    assert other._ep_stats.episode_count == st.episode_count


def test_checkpoint_with_gymnasiums_wrapper_loads_into_the_adapters_statistics():
    # the layout of checkpoints written before the adapter kept the statistics: the vector env's
    # snapshot has RecordEpisodeStatistics as its outer layer
    wrapped = RecordEpisodeStatistics(gym.make_vec("CartPole-v1", num_envs=2,
                                                   vectorization_mode="sync"), buffer_length=100)
    old = PPO(wrapped, n_steps=64, batch_size=64, seed=0).learn(512)
    assert old._ep_stats is wrapped
    state = old.get_state()
    assert "return_queue" in state["env"]["vector_env"]
    new = PPO("CartPole-v1", n_envs=2, n_steps=64, batch_size=64, seed=0,
              vectorization_mode="sync")
    new.set_state(state)
    st = new._ep_stats
    assert list(st.return_queue) == [float(x) for x in wrapped.return_queue]
    assert st.episode_count == wrapped.episode_count
    # both continue the same episodes: the same returns from here on
    old.learn(512, reset_num_timesteps=False)
    new.learn(512, reset_num_timesteps=False)
    assert list(st.return_queue) == [float(x) for x in wrapped.return_queue]
    for p, q in zip(old.policy.parameters(), new.policy.parameters()):
        np.testing.assert_array_equal(p._value, q._value)


def test_valid_rows_and_statistics_after_prev_done_is_restored():
    # the adapter skips the invert when no row was done at the previous step; a prev_done set
    # from outside (a checkpoint) must still mark its rows' next step as the reset (not valid)
    venv = gym.make_vec("CartPole-v1", num_envs=3, vectorization_mode="vector_entry_point")
    ours = EpisodeStatistics(3)
    ad = StepAdapter(venv, statistics=ours)
    ad.reset(seed=1)
    acts = np.zeros(3, dtype=np.int64)
    _, _, _, _, valid, _ = ad.step(acts)
    assert valid.all()
    ad.prev_done = np.array([False, True, False])
    _, _, _, _, valid, _ = ad.step(acts)
    np.testing.assert_array_equal(valid, [True, False, True])
    np.testing.assert_array_equal(ours.episode_lengths, [2, 1, 2])
    _, _, _, _, valid, _ = ad.step(acts)
    assert valid.all()
    np.testing.assert_array_equal(ours.episode_lengths, [3, 2, 3])

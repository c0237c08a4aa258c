"""GAE, rollout and replay buffers, normalisation, autoreset: against hand-computed values."""

import gymnasium as gym
import numpy as np
import pytest

from rlgrad.rl.buffers import ReplayBuffer, RolloutBuffer, compute_gae
from rlgrad.rl.envs import StepAdapter, make_vec_env
from rlgrad.rl.normalize import Normalizer, RunningMeanStd


def test_gae_hand_computed():
    # one env, 3 steps, no done: lambda-weighted sum of TD errors
    g, lam = 0.9, 0.5
    r = np.array([[1.0], [2.0], [3.0]], dtype=np.float32)
    v = np.array([[0.5], [1.0], [1.5]], dtype=np.float32)
    nv = np.array([[1.0], [1.5], [2.0]], dtype=np.float32)
    z = np.zeros((3, 1), dtype=bool)
    adv, ret = compute_gae(r, v, nv, z, z, g, lam)
    d = [1 + 0.9 * 1.0 - 0.5, 2 + 0.9 * 1.5 - 1.0, 3 + 0.9 * 2.0 - 1.5]
    a2 = d[2]
    a1 = d[1] + g * lam * a2
    a0 = d[0] + g * lam * a1
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], rtol=1e-6)
    np.testing.assert_allclose(ret, adv + v, rtol=1e-6)


def test_gae_termination_vs_truncation():
    g, lam = 0.9, 0.8
    r = np.array([[1.0, 1.0], [1.0, 1.0]], dtype=np.float32)
    v = np.array([[2.0, 2.0], [3.0, 3.0]], dtype=np.float32)
    nv = np.array([[5.0, 5.0], [7.0, 7.0]], dtype=np.float32)
    term = np.array([[True, False], [False, False]])
    done = np.array([[True, True], [False, False]])  # env 0 terminated, env 1 truncated at t=0
    adv, _ = compute_gae(r, v, nv, term, done, g, lam)
    # terminated: no bootstrap, no carry
    assert adv[0, 0] == pytest.approx(1 - 2.0)
    # truncated: bootstrap with V(final obs) = nv[0, 1], but no carry from the next episode
    assert adv[0, 1] == pytest.approx(1 + 0.9 * 5.0 - 2.0)
    assert adv[1, 0] == pytest.approx(1 + 0.9 * 7.0 - 3.0)


def test_gae_lambda_one_is_monte_carlo():
    g = 0.5
    r = np.ones((4, 1), dtype=np.float32)
    v = np.zeros((4, 1), dtype=np.float32)
    done = np.zeros((4, 1), dtype=bool)
    done[-1] = True
    adv, ret = compute_gae(r, v, v, done, done, g, 1.0)
    np.testing.assert_allclose(ret[:, 0], [1 + .5 + .25 + .125, 1 + .5 + .25, 1.5, 1.0])


def test_rollout_buffer_next_step_bootstrap_and_mask():
    buf = RolloutBuffer(3, 1, obs_dim=1, action_shape=(), action_dtype=np.int64, gamma=0.5,
                        gae_lambda=1.0)
    # step 0: truncated; step 1 is the NEXT_STEP reset step (invalid) whose obs is the final obs
    buf.add(np.zeros((1, 1)), np.zeros(1), np.array([1.0]), np.array([False]), np.array([True]),
            np.array([0.0]), np.zeros(1), np.array([True]))
    buf.add(np.zeros((1, 1)), np.zeros(1), np.array([0.0]), np.array([False]), np.array([False]),
            np.array([4.0]), np.zeros(1), np.array([False]))
    buf.add(np.zeros((1, 1)), np.zeros(1), np.array([1.0]), np.array([False]), np.array([False]),
            np.array([0.0]), np.zeros(1), np.array([True]))
    buf.compute_returns_and_advantage(np.array([2.0]))
    # truncated step bootstraps with V(final obs) = value stored at the reset step
    assert buf.returns[0, 0] == pytest.approx(1 + 0.5 * 4.0)
    assert buf.returns[2, 0] == pytest.approx(1 + 0.5 * 2.0)
    assert list(buf.valid_indices()) == [0, 2]
    batches = list(buf.get(None))
    assert len(batches) == 1 and len(batches[0].returns) == 2


def test_rollout_buffer_minibatches_cover_valid_rows():
    buf = RolloutBuffer(4, 3, 2, (), np.int64)
    for t in range(4):
        valid = np.array([True, t != 2, True])
        buf.add(np.full((3, 2), t), np.arange(3), np.ones(3), np.zeros(3, bool), np.zeros(3, bool),
                np.zeros(3), np.zeros(3), valid)
    buf.compute_returns_and_advantage(np.zeros(3))
    rng = np.random.default_rng(0)
    got = np.concatenate([b.observations[:, 0] for b in buf.get(5, rng)])
    assert len(got) == 11
    assert sorted(got.tolist()) == sorted([0] * 3 + [1] * 3 + [2] * 2 + [3] * 3)


def test_replay_buffer_ring_and_flags():
    rb = ReplayBuffer(5, obs_dim=2, action_shape=(1,))
    for i in range(3):
        rb.add(np.full((2, 2), i), np.full((2, 2), i + 1), np.zeros((2, 1)), np.array([i, i]),
               np.array([True, False]), np.array([False, True]))
    assert rb.full and rb.pos == 1 and len(rb) == 5
    assert rb.rewards.tolist() == [2, 0, 1, 1, 2]  # row 0 overwritten by the wrap
    assert rb.terminated.tolist() == [False, False, True, False, True]
    assert rb.truncated.tolist() == [True, True, False, True, False]
    b = rb.sample(64, np.random.default_rng(0))
    assert b.observations.shape == (64, 2) and b.actions.shape == (64, 1)
    np.testing.assert_array_equal(b.next_observations, b.observations + 1)
    state = rb.state_dict()
    rb2 = ReplayBuffer(5, 2, (1,))
    rb2.load_state_dict(state)
    np.testing.assert_array_equal(rb2.rewards, rb.rewards)
    assert rb2.pos == rb.pos and rb2.full


def test_running_mean_std_matches_numpy():
    rms = RunningMeanStd((3,), epsilon=0.0)
    x = np.random.default_rng(0).normal(size=(100, 3)) * 3 + 1
    for chunk in np.split(x, 10):
        rms.update(chunk)
    np.testing.assert_allclose(rms.mean, x.mean(0), rtol=1e-10)
    np.testing.assert_allclose(rms.var, x.var(0), rtol=1e-10)


def test_reward_normalizer_uses_discounted_return():
    n = Normalizer(1, 1, norm_obs=False, norm_reward=True, gamma=0.5, epsilon=1e-8)
    n.ret_rms.count = 0.0
    out1 = n.process_reward(np.array([2.0]), np.array([False]), np.array([True]))
    assert n.returns[0] == 2.0 and out1.shape == (1,)
    n.process_reward(np.array([2.0]), np.array([True]), np.array([True]))
    assert n.returns[0] == 0.0  # reset on done
    np.testing.assert_allclose(n.ret_rms.mean, (2.0 + 3.0) / 2)


def test_next_step_autoreset_marks_reset_transition_invalid():
    venv = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    ad = StepAdapter(venv)
    ad.reset(seed=0)
    seen_done = False
    done_rows = np.zeros(0, dtype=np.int64)
    for _ in range(200):
        obs, r, term, trunc, valid, final = ad.step(np.zeros(2, dtype=np.int64))
        if seen_done:
            assert not valid[done_rows].any() and (r[done_rows] == 0).all()
            break
        if (term | trunc).any():
            done_rows = np.flatnonzero(term | trunc)
            np.testing.assert_array_equal(final[done_rows], obs[done_rows])
            seen_done = True
    assert seen_done


def test_truncation_reaches_time_limit_not_termination():
    venv = make_vec_env(lambda: gym.make("Pendulum-v1", max_episode_steps=5), n_envs=1, seed=0)
    ad = StepAdapter(venv)
    ad.reset(seed=0)
    for _ in range(5):
        obs, r, term, trunc, valid, final = ad.step(np.zeros((1, 1), dtype=np.float32))
    assert trunc[0] and not term[0]

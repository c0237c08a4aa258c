"""FrameReplayBuffer: each frame stored once, stacks rebuilt at sample time exactly as Gymnasium's
FrameStackObservation builds them (checked against the wrapper's own output on recorded vector-env
trajectories with terminations, truncations, several envs, NEXT_STEP autoreset and ring wrap-around)."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import SyncVectorEnv
from gymnasium.wrappers import FrameStackObservation, TimeLimit

from rlgrad.rl.frame_replay import FrameReplayBuffer

H, W, K = 5, 6, 4


class FlickerEnv(gym.Env):
    """Random uint8 frames; a third of them repeat the previous frame (equal neighbours exercise
    the padding logic); terminates with probability 0.12 a step (episodes of one step included).
    ``palette``: frames drawn from 3 fixed images, so equal frames recur at unrelated positions."""

    observation_space = spaces.Box(0, 255, (H, W), np.uint8)
    action_space = spaces.Discrete(3)
    PALETTE = np.random.default_rng(99).integers(0, 256, (3, H, W), dtype=np.uint8)

    def __init__(self, palette=False):
        self.palette = palette

    def _draw(self):
        if self.palette:
            return self.PALETTE[self.np_random.integers(3)].copy()
        return self.np_random.integers(0, 256, (H, W), dtype=np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.frame = self._draw()
        return self.frame.copy(), {}

    def step(self, action):
        if self.np_random.random() > 0.33:
            self.frame = self._draw()
        terminated = bool(self.np_random.random() < 0.12)
        return self.frame.copy(), float(action) - 1.0, terminated, False, {}


def _make_venv(n_envs, palette=False):
    fn = lambda: FrameStackObservation(TimeLimit(FlickerEnv(palette), max_episode_steps=9), K)
    return SyncVectorEnv([fn] * n_envs)


def _record(venv, steps, seed, rb=(), warmup=0):
    """Steps ``venv`` (NEXT_STEP autoreset: the step after a done is a reset, not a transition);
    adds the real transitions to the buffers ``rb`` and returns them (the wrapper's own stacks)."""
    rng = np.random.default_rng(seed)
    n = venv.num_envs
    obs, _ = venv.reset(seed=seed)
    prev_done = np.zeros(n, dtype=bool)
    rows = []
    for t in range(warmup + steps):
        act = rng.integers(0, 3, n)
        nxt, rew, term, trunc, _ = venv.step(act)
        valid = ~prev_done
        if t >= warmup:
            ids = np.flatnonzero(valid)
            for i in ids:
                rows.append((obs[i].copy(), nxt[i].copy(), int(act[i]), rew[i], term[i], trunc[i]))
            for buf in rb or ():
                buf.add(obs[valid], nxt[valid], act[valid], rew[valid], term[valid], trunc[valid],
                        env_ids=ids)
        prev_done = term | trunc
        obs = nxt
    return rows


def _check_live_rows(rb, rows, first_row=0):
    """Every live row of ``rb`` equals the recorded transition of the same absolute index."""
    live = np.arange(rb.row_tail, rb.rows_added)
    assert len(live) == rb.size() > 0
    b = rb.take(live % rb.buffer_size)
    want = [rows[r - first_row] for r in live]
    np.testing.assert_array_equal(b.observations, np.stack([w[0] for w in want]))
    np.testing.assert_array_equal(b.next_observations, np.stack([w[1] for w in want]))
    np.testing.assert_array_equal(b.actions, [w[2] for w in want])
    np.testing.assert_array_equal(b.rewards, np.float32([w[3] for w in want]))
    np.testing.assert_array_equal(b.terminated, [w[4] for w in want])
    np.testing.assert_array_equal(b.truncated, [w[5] for w in want])


@pytest.mark.parametrize("palette", [False, True])
@pytest.mark.parametrize("frame_capacity", [None, 10_000, 5, 7, 12, 23])
def test_stacks_match_frame_stack_observation(frame_capacity, palette):
    n_envs, N = 3, 60
    venv = _make_venv(n_envs, palette)
    rb = FrameReplayBuffer(N, (K, H, W), n_envs=n_envs, frame_capacity=frame_capacity)
    rows = []
    rng = np.random.default_rng(0)
    obs, _ = venv.reset(seed=0)
    prev_done = np.zeros(n_envs, dtype=bool)
    for _ in range(150):  # 2.5 times round the ring, checking every live row after every step
        act = rng.integers(0, 3, n_envs)
        nxt, rew, term, trunc, _ = venv.step(act)
        valid = ~prev_done
        ids = np.flatnonzero(valid)
        rows += [(obs[i].copy(), nxt[i].copy(), int(act[i]), rew[i], term[i], trunc[i]) for i in ids]
        rb.add(obs[valid], nxt[valid], act[valid], rew[valid], term[valid], trunc[valid], env_ids=ids)
        _check_live_rows(rb, rows)
        prev_done = term | trunc
        obs = nxt
    terms = sum(bool(r[4]) for r in rows)
    truncs = sum(bool(r[5]) for r in rows)
    assert terms >= 10 and truncs >= 3 and rb.rows_added > 2 * N  # what the test covers
    assert rb.full
    if frame_capacity is None:  # the default frame ring is smaller than 60 transitions' frames here
        assert rb.frame_capacity == 63 and 0 < rb.size() < N
    elif frame_capacity > 1000:
        assert rb.size() == N
    else:  # a ring of about one step's worth of frames: rows are evicted with their frames
        assert rb.frame_capacity == frame_capacity and rb.size() < frame_capacity


def test_same_step_autoreset():
    """SAME_STEP vector envs: every row is real, a done row's next_obs is info["final_obs"]."""
    from gymnasium.vector import AutoresetMode

    fn = lambda: FrameStackObservation(TimeLimit(FlickerEnv(), max_episode_steps=9), K)
    venv = SyncVectorEnv([fn] * 3, autoreset_mode=AutoresetMode.SAME_STEP)
    rb = FrameReplayBuffer(70, (K, H, W), n_envs=3)
    rng = np.random.default_rng(4)
    obs, _ = venv.reset(seed=4)
    rows, dones = [], 0
    for _ in range(60):
        act = rng.integers(0, 3, 3)
        nxt, rew, term, trunc, info = venv.step(act)
        final = nxt.copy()
        for i in np.flatnonzero(term | trunc):
            final[i] = info["final_obs"][i]
        rows += [(obs[i].copy(), final[i].copy(), int(act[i]), rew[i], term[i], trunc[i])
                 for i in range(3)]
        rb.add(obs, final, act, rew, term, trunc)
        dones += int((term | trunc).sum())
        obs = nxt
    assert dones >= 10
    _check_live_rows(rb, rows)


def test_start_mid_episode_and_pattern_of_equal_frames():
    """A buffer that first sees envs mid-episode (stacks of distinct frames) is exact too."""
    venv = _make_venv(2)
    rb = FrameReplayBuffer(500, (K, H, W), n_envs=2)
    rows = _record(venv, 120, seed=5, rb=[rb], warmup=7)
    assert not np.array_equal(rows[0][0][0], rows[0][0][-1])  # the first stack is not a reset's
    _check_live_rows(rb, rows)
    assert rb.size() == len(rows)
    # frames stored once: about one per transition plus one per episode start, not 2 * K
    assert rb.frames_added < 1.4 * len(rows)


def test_sampling_is_deterministic_and_splits_like_one_draw():
    venv = _make_venv(3)
    rb = FrameReplayBuffer(40, (K, H, W), n_envs=3)
    _record(venv, 60, seed=1, rb=[rb])
    a = rb.sample_indices(96, np.random.default_rng(7))
    g = np.random.default_rng(7)
    b = np.concatenate([rb.sample_indices(32, g) for _ in range(3)])
    np.testing.assert_array_equal(a, b)
    live = set((np.arange(rb.row_tail, rb.rows_added) % rb.buffer_size).tolist())
    assert set(a.tolist()) <= live
    x, y = rb.sample(16, np.random.default_rng(3)), rb.sample(16, np.random.default_rng(3))
    for u, v in zip(x, y):
        np.testing.assert_array_equal(u, v)


def test_state_dict_round_trip_then_continue():
    venv = _make_venv(2)
    rb = FrameReplayBuffer(30, (K, H, W), n_envs=2)
    rows = _record(venv, 40, seed=2, rb=[rb])
    rb2 = FrameReplayBuffer(30, (K, H, W), n_envs=2)
    rb2.load_state_dict(rb.state_dict())
    _check_live_rows(rb2, rows)
    # both take the same next steps (the envs restarted: new segments) and stay exact and equal
    rows += _record(venv, 30, seed=4, rb=[rb, rb2])
    for buf in (rb, rb2):
        _check_live_rows(buf, rows)
    assert rb.row_tail == rb2.row_tail and rb.frames_added == rb2.frames_added
    with pytest.raises(ValueError, match="buffer_size mismatch"):
        FrameReplayBuffer(31, (K, H, W), n_envs=2).load_state_dict(rb.state_dict())


def test_bad_input_one_line():
    rb = FrameReplayBuffer(10, (K, H, W), n_envs=2)
    obs = np.zeros((2, K, H, W), np.uint8)
    nxt = obs.copy()
    nxt[:, 1] = 1  # not a shift of obs
    z = np.zeros(2)
    with pytest.raises(ValueError, match="shifted by one frame"):
        rb.add(obs, nxt, z, z, z, z)
    with pytest.raises(ValueError, match="pass env_ids"):
        rb.add(obs[:1], obs[:1], z[:1], z[:1], z[:1], z[:1])
    with pytest.raises(ValueError, match=r"env_ids must be"):
        rb.add(obs[:1], obs[:1], z[:1], z[:1], z[:1], z[:1], env_ids=np.array([2]))
    with pytest.raises(ValueError, match="empty"):
        rb.sample(4, np.random.default_rng(0))


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_one_million_atari_transitions_fit_7_5_gb_and_memory_grows_with_use():
    before = _rss_bytes()
    rb = FrameReplayBuffer(1_000_000, (4, 84, 84), n_envs=8)
    assert rb.nbytes() <= 7.5e9
    created = _rss_bytes()
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (200, 84, 84), dtype=np.uint8)
    for t in range(60):  # 480 transitions of 8 envs
        obs = np.stack([frames[(t + e) % 197:(t + e) % 197 + 4] for e in range(8)])
        nxt = np.stack([frames[(t + e) % 197 + 1:(t + e) % 197 + 5] for e in range(8)])
        rb.add(obs, nxt, np.zeros(8, np.int64), np.zeros(8), np.zeros(8, bool), np.zeros(8, bool))
    used = _rss_bytes()
    assert created - before < 16e6  # nothing committed for the 7.4 GB asked for
    assert used - created < 64e6  # what 480 transitions wrote (about 8 MB of frames), not 7.4 GB
    assert rb.size() == 480

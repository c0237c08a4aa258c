"""Atari (ALE) and MinAtar environments: DeepMind preprocessing from Gymnasium's wrappers plus the
three small ones rlgrad adds (game statistics, life-loss soft reset, fire on reset)."""

import sys

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("ale_py", reason="the atari extra (pip install 'rlgrad[atari]') is not installed")
pytest.importorskip("minatar")

from gymnasium.wrappers import AtariPreprocessing  # noqa: E402

from rlgrad.rl.atari import (  # noqa: E402
    GAME_LENGTH,
    GAME_RETURN,
    FireReset,
    MinAtarRender,
    make_atari_env,
    make_minatar_env,
    pixel_env_kind,
    register_pixel_envs,
    wrap_atari,
)


class BaseRecorder(gym.Wrapper):
    """Around the raw ALE env: every frame's action and unclipped reward."""

    def __init__(self, env):
        super().__init__(env)
        self.actions, self.rewards = [], []

    def step(self, action):
        out = self.env.step(action)
        self.actions.append(int(action))
        self.rewards.append(float(out[1]))
        return out


def _recorded(env_id, training, **kw):
    register_pixel_envs(env_id)
    base = BaseRecorder(gym.make(env_id, frameskip=1))
    return wrap_atari(base, training, **kw), base


def test_ids():
    assert pixel_env_kind("ALE/Breakout-v5") == "atari"
    assert pixel_env_kind("PongNoFrameskip-v4") == "atari"
    assert pixel_env_kind("MinAtar/Breakout-v1") == "minatar"
    assert pixel_env_kind("CartPole-v1") is None
    assert register_pixel_envs("BreakoutNoFrameskip-v4") == "atari"
    assert register_pixel_envs("MinAtar/Seaquest-v0") == "minatar"


def test_shapes_and_dtypes():
    for env_id in ("ALE/Breakout-v5", "PongNoFrameskip-v4"):
        env = make_atari_env(env_id, training=True)
        assert env.observation_space.shape == (4, 84, 84)
        assert env.observation_space.dtype == np.uint8
        obs, _ = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        # the reset pads the stack with the first frame (FrameStackObservation's default)
        np.testing.assert_array_equal(obs[0], obs[-1])
        obs2, *_ = env.step(env.action_space.sample())
        assert obs2.shape == (4, 84, 84) and obs2.dtype == np.uint8
        np.testing.assert_array_equal(obs2[:3], obs[1:])  # the stack shifts by one frame
        env.close()


def test_fire_reset_launches_the_ball():
    """Breakout waits for FIRE: with only NOOPs a life is never lost, unless FireReset pressed it."""
    register_pixel_envs("ALE/Breakout-v5")

    def lives_after_noops(fire):
        rec = BaseRecorder(gym.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0))
        env = AtariPreprocessing(rec, noop_max=0)
        if fire:
            env = FireReset(env)
        env.reset(seed=1)
        for _ in range(150):
            env.step(0)
        return env.unwrapped.ale.lives(), rec.actions

    lives_nofire, acts_nofire = lives_after_noops(False)
    lives_fire, acts_fire = lives_after_noops(True)
    assert lives_nofire == 5 and set(acts_nofire) == {0}
    assert lives_fire < 5
    assert acts_fire[:4] == [1, 1, 1, 1] and set(acts_fire[4:]) == {0}  # one FIRE step = 4 frames
    # games without FIRE get no FireReset
    assert "FireReset" not in str(make_atari_env("ALE/Freeway-v5", training=True))


def _play_until_game_over(env, action=0):
    """A still paddle in Breakout (after FireReset's FIRE): it misses and lives go 5 -> 0."""
    env.reset(seed=0)
    events = []
    for step in range(2000):
        _, _, term, trunc, info = env.step(action)
        if term or trunc:
            events.append((step, info["lives"], term, GAME_RETURN in info, info["episode_frame_number"]))
            if GAME_RETURN in info:
                return events, info
            env.reset()
    raise AssertionError("the game did not end")


def test_life_loss_soft_reset_training_only():
    train, base = _recorded("ALE/Breakout-v5", training=True)
    events, info = _play_until_game_over(train)
    # one training episode per life; the game (and the ALE's frame counter) continues across them
    assert [e[1] for e in events] == [4, 3, 2, 1, 0]
    assert all(e[2] for e in events)
    assert [e[3] for e in events] == [False] * 4 + [True]
    frames = [e[4] for e in events]
    assert frames == sorted(frames) and frames[0] > 0
    # the soft reset is a no-op step, not a new game: 4 no-op steps + 5 FIRE steps in the game
    n_agent = events[-1][0] + 1
    assert info[GAME_LENGTH] == n_agent + 4 + 5
    assert base.actions.count(1) == 5 * 4  # FIRE after the reset and after every life loss

    evaluation, _ = _recorded("ALE/Breakout-v5", training=False)
    # FIRE (a still paddle too) relaunches the ball: evaluation has no FireReset after a life loss
    events_eval, info_eval = _play_until_game_over(evaluation, action=1)
    assert len(events_eval) == 1 and events_eval[0][1] == 0 and info_eval[GAME_LENGTH] > 5
    # Gymnasium's own terminal_on_life_loss restarts the game at a life loss (why EpisodicLife)
    register_pixel_envs("ALE/Breakout-v5")
    gym_env = FireReset(AtariPreprocessing(gym.make("ALE/Breakout-v5", frameskip=1),
                                           terminal_on_life_loss=True))
    gym_env.reset(seed=0)
    for _ in range(2000):
        _, _, term, _, _ = gym_env.step(0)
        if term:
            break
    assert gym_env.unwrapped.ale.lives() == 4
    gym_env.reset()
    assert gym_env.unwrapped.ale.lives() == 5


def test_raw_game_score_vs_clipped_reward():
    """SpaceInvaders pays 5..30 points an invader: training sees signs, GAME_RETURN the raw sum."""
    env, base = _recorded("ALE/SpaceInvaders-v5", training=True)
    rng = np.random.default_rng(0)
    env.reset(seed=3)
    env.action_space.seed(3)
    clipped, resets, info = [], 0, {}
    for _ in range(3000):
        _, r, term, trunc, info = env.step(int(rng.integers(env.action_space.n)))
        clipped.append(r)
        if GAME_RETURN in info:
            break
        if term or trunc:
            env.reset()
            resets += 1
    assert GAME_RETURN in info, "no game ended"
    clipped = np.asarray(clipped)
    assert set(np.unique(clipped)) <= {0.0, 1.0}
    raw = float(np.sum(base.rewards))  # every frame of the game, FIRE and no-op steps included
    assert info[GAME_RETURN] == raw
    assert raw > 2 * clipped.sum() > 0  # invaders are worth at least 5 points
    # the agent's steps, plus per (re)start one FIRE step, plus one no-op step per soft reset
    assert info[GAME_LENGTH] == len(clipped) + (resets + 1) + resets


def test_eval_env_rewards_are_raw():
    env, base = _recorded("ALE/SpaceInvaders-v5", training=False, noop_max=0)
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    total = 0.0
    for _ in range(300):
        _, r, term, trunc, _ = env.step(int(rng.integers(env.action_space.n)))
        total += r
        assert not term
    assert total == sum(base.rewards) and total > 10


def test_missing_extra_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ale_py", None)
    with pytest.raises(ImportError) as ei:
        make_atari_env("ALE/Breakout-v5", training=True)
    msg = str(ei.value)
    assert "pip install 'rlgrad[atari]'" in msg and "\n" not in msg and "ALE/Breakout-v5" in msg
    monkeypatch.setitem(sys.modules, "minatar.gym", None)
    with pytest.raises(ImportError, match=r"pip install 'rlgrad\[atari\]'"):
        make_minatar_env("MinAtar/Breakout-v1")


def test_unknown_game_did_you_mean():
    with pytest.raises(ValueError, match=r"Did you mean: ALE/Breakout-v5"):
        make_atari_env("ALE/Breakot-v5", training=True)
    with pytest.raises(ValueError, match=r"Did you mean: BreakoutNoFrameskip-v4"):
        make_atari_env("BreakotNoFrameskip-v4", training=True)
    with pytest.raises(ValueError, match=r"Did you mean: MinAtar/Breakout-v"):
        make_minatar_env("MinAtar/Breakout-v2")


def test_minatar_channels_first_uint8():
    for env_id, c in (("MinAtar/Breakout-v1", 4), ("MinAtar/SpaceInvaders-v1", 6)):
        env = make_minatar_env(env_id)
        assert env.observation_space.shape == (c, 10, 10)
        assert env.observation_space.dtype == np.uint8
        obs, _ = env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(200):
            assert obs.shape == (c, 10, 10) and obs.dtype == np.uint8 and obs.flags.c_contiguous
            state = env.unwrapped.game.state()  # (10, 10, C) booleans
            np.testing.assert_array_equal(obs, np.moveaxis(state, -1, 0).astype(np.uint8))
            obs, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                obs, _ = env.reset()


def test_frame_replay_rebuilds_real_atari_stacks():
    """Two Breakout training envs (life-loss soft resets, FIRE resets, NEXT_STEP autoreset): every
    stored obs and next_obs comes back from the frame buffer as the wrappers built it."""
    from rlgrad.rl.frame_replay import FrameReplayBuffer

    venv = gym.vector.SyncVectorEnv([lambda: make_atari_env("ALE/Breakout-v5", training=True)] * 2)
    rb = FrameReplayBuffer(10_000, (4, 84, 84), n_envs=2)
    obs, _ = venv.reset(seed=0)
    rng = np.random.default_rng(0)
    prev_done = np.zeros(2, dtype=bool)
    rows, ends = [], 0
    for _ in range(250):
        act = rng.integers(0, 4, 2)
        nxt, rew, term, trunc, _ = venv.step(act)
        valid = ~prev_done
        ids = np.flatnonzero(valid)
        rows += [(obs[i].copy(), nxt[i].copy()) for i in ids]
        rb.add(obs[valid], nxt[valid], act[valid], rew[valid], term[valid], trunc[valid], env_ids=ids)
        ends += int((term & valid).sum())
        prev_done = term | trunc
        obs = nxt
    assert ends >= 4 and rb.size() == len(rows)
    b = rb.take(np.arange(len(rows)))
    np.testing.assert_array_equal(b.observations, np.stack([r[0] for r in rows]))
    np.testing.assert_array_equal(b.next_observations, np.stack([r[1] for r in rows]))
    assert rb.frames_added <= len(rows) + 2 * (ends + 2)  # one frame a step, one per episode start


def test_minatar_rgb_render_is_uint8_and_upscaled():
    env = make_minatar_env("MinAtar/Breakout-v1", render_mode="rgb_array")
    assert isinstance(env, MinAtarRender) and env.metadata["render_fps"] == 15
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (160, 160, 3) and frame.dtype == np.uint8
    raw = env.unwrapped.render()  # (10, 10, 3) floats in [0, 1]
    np.testing.assert_array_equal(frame[::16, ::16], np.round(raw * 255).astype(np.uint8))
    np.testing.assert_array_equal(frame[5:16, 3:16], np.broadcast_to(frame[0, 0], (11, 13, 3)))
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 3  # background and two objects at least
    assert not isinstance(make_minatar_env("MinAtar/Breakout-v1"), MinAtarRender)


def test_evaluation_fires_after_a_life_loss():
    """A policy that never presses FIRE still plays whole Breakout games in evaluation (without
    it, the game waits for FIRE until its 27,000-step limit)."""
    env, base = _recorded("ALE/Breakout-v5", training=False)
    events, info = _play_until_game_over(env, action=0)
    assert len(events) == 1 and events[0][1] == 0 and info[GAME_LENGTH] < 1000
    assert base.actions.count(1) == 5 * 4  # FIRE at the reset and after each of 4 lost lives


def test_training_env_gives_sb3s_atari_wrapper_frames_rewards_and_ends():
    """On the same actions (no-op reset off: its random count is drawn differently) rlgrad's
    training env and SB3's ``AtariWrapper`` give the same newest frame, clipped reward and
    life-loss ends. SB3's FIRE reset also presses RIGHT (action 2) once: rlgrad's env takes that
    step after each reset to line the two up. The frames differ only where SB3 max-pools the two
    last RGB frames before the grey conversion and Gymnasium after it (a few pixels in a million)."""
    atari_wrappers = pytest.importorskip("stable_baselines3.common.atari_wrappers")
    env_id = "BreakoutNoFrameskip-v4"
    ours = make_atari_env(env_id, training=True, noop_max=0)
    theirs = atari_wrappers.AtariWrapper(gym.make(env_id), noop_max=0)

    ours.reset(seed=0)
    b = theirs.reset(seed=0)[0]
    a = ours.step(2)[0]
    rng = np.random.default_rng(0)
    differ, ends = [], 0
    for _ in range(400):
        differ.append(np.mean(a[-1] != b[..., 0]))
        act = int(rng.integers(4))
        a, ra, ta, tra, _ = ours.step(act)
        b, rb, tb, trb, _ = theirs.step(act)
        assert (ra, ta, tra) == (rb, tb, trb) and ours.unwrapped.ale.lives() == theirs.unwrapped.ale.lives()
        if ta:
            ends += 1
            ours.reset()
            b = theirs.reset()[0]
            a = ours.step(2)[0]
    assert ends >= 5 and np.mean(differ) < 1e-4

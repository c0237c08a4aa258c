"""SB3's VecEnv stack in rlgrad (``rlgrad.rl.common.vec_env``), checked against
Stable-Baselines3's own classes on the same envs: same observations, rewards, dones, infos,
shapes, dtypes and exception types."""

from __future__ import annotations

import functools
import os
from collections import OrderedDict

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import rlgrad.rl.common.vec_env as ours
from rlgrad.rl.common.env_util import make_vec_env
from rlgrad.rl.monitor import Monitor

sb3_vec = pytest.importorskip("stable_baselines3.common.vec_env")
sb3_env_util = pytest.importorskip("stable_baselines3.common.env_util")


class CountEnv(gym.Env):
    """Observation = [step, seed-dependent offset]; ends (truncated) after ``length`` steps."""

    def __init__(self, length: int = 3, space: spaces.Space | None = None) -> None:
        self.length = length
        self.observation_space = space or spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.render_mode = "rgb_array"
        self.t, self.offset, self.options = 0, 0.0, None

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.offset], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.offset = float(seed)
        self.t, self.options = 0, options
        return self._obs(), {"reset_at": self.offset}

    def step(self, action):
        self.t += 1
        return self._obs(), float(action) + 0.5, False, self.t >= self.length, {"a": int(action)}

    def render(self):
        return np.full((2, 3, 3), self.t, dtype=np.uint8)


def _fns(lengths=(3, 4, 5)):
    return [functools.partial(lambda n: Monitor(CountEnv(n)), n) for n in lengths]


def _sb3_fns(lengths=(3, 4, 5)):
    from stable_baselines3.common.monitor import Monitor as SB3Monitor

    return [functools.partial(lambda n: SB3Monitor(CountEnv(n)), n) for n in lengths]


def _roll(venv, steps: int = 7, seed: int = 5):
    venv.seed(seed)
    out = [venv.reset()]
    for t in range(steps):
        obs, rew, dones, infos = venv.step(np.array([t % 2] * venv.num_envs))
        clean = [{k: v for k, v in i.items() if k != "episode"} for i in infos]
        eps = [(i["episode"]["r"], i["episode"]["l"]) if "episode" in i else None for i in infos]
        # (a wrapper's reset_infos: SB3's stay empty, rlgrad's are the wrapped env's)
        out.append((obs, rew, dones, clean, eps, [dict(r) for r in venv.unwrapped.reset_infos]))
    return out


def _same(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == np.asarray(b).dtype and a.shape == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-6)
    else:
        assert a == pytest.approx(b)


@pytest.mark.parametrize("wrap", [None, "normalize", "framestack", "monitor", "checknan"])
def test_dummy_vec_env_steps_as_sb3(wrap: str | None) -> None:
    def build(mod, fns):
        v = mod.DummyVecEnv(fns)
        return {None: lambda: v, "normalize": lambda: mod.VecNormalize(v, gamma=0.9),
                "framestack": lambda: mod.VecFrameStack(v, n_stack=3),
                "monitor": lambda: mod.VecMonitor(v),
                "checknan": lambda: mod.VecCheckNan(v, raise_exception=True)}[wrap]()

    with pytest.warns(UserWarning) if wrap == "monitor" else _nothing():
        mine = _roll(build(ours, _fns()))
    with pytest.warns(UserWarning) if wrap == "monitor" else _nothing():
        theirs = _roll(build(sb3_vec, _sb3_fns()))
    _same(mine, theirs)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def test_subproc_vec_env_matches_dummy_and_forwards_calls() -> None:
    sub = ours.SubprocVecEnv(_fns(), start_method="fork")
    try:
        _same(_roll(sub), _roll(ours.DummyVecEnv(_fns())))
        sub.set_attr("length", 9, indices=[0])
        assert sub.get_attr("length") == [9, 4, 5]
        assert sub.env_method("render", indices=2)[0].shape == (2, 3, 3)
        assert sub.env_is_wrapped(Monitor) == [True] * 3
        assert sub.render().shape == (4, 6, 3)  # 3 images tiled 2 x 2
        with pytest.raises(AttributeError):
            sub.get_attr("no_such_attribute")
    finally:
        sub.close()


def test_seed_options_and_reset_infos_apply_at_next_reset_only() -> None:
    for mod in (ours, sb3_vec):
        v = mod.DummyVecEnv(_fns())
        assert v.seed(10) == [10, 11, 12]
        v.set_options([{"k": 0}, {"k": 1}, {"k": 2}])
        obs = v.reset()
        assert obs[:, 1].tolist() == [10, 11, 12]
        assert v.get_attr("options") == [{"k": 0}, {"k": 1}, {"k": 2}]
        assert [r["reset_at"] for r in v.reset_infos] == [10, 11, 12]
        v.reset()
        assert v.get_attr("options") == [None] * 3


def test_dict_and_tuple_observations_stack_per_key() -> None:
    space = spaces.Dict({"b": spaces.Discrete(3), "a": spaces.Box(0, 1, (2,), np.float32)})

    def make():
        env = CountEnv(2, space)
        env._obs = lambda: {"a": np.zeros(2, np.float32), "b": env.t % 3}  # unordered keys
        return env

    for mod in (ours, sb3_vec):
        v = mod.DummyVecEnv([make] * 2)
        v.reset()
        obs = v.reset()
        assert list(obs) == list(space.spaces) and obs["a"].shape == (2, 2) and obs["b"].shape == (2,)
    with pytest.raises(NotImplementedError, match="nested"):
        ours.DummyVecEnv([lambda: CountEnv(2, spaces.Dict({"d": space}))])


def test_same_instance_twice_is_refused_as_sb3_does() -> None:
    env = CountEnv()
    with pytest.raises(ValueError, match="same environment instance"):
        ours.DummyVecEnv([lambda: env] * 2)


def test_wrapper_attribute_lookup_and_ambiguity() -> None:
    class A(ours.VecNormalize):
        def __init__(self, venv):
            super().__init__(venv)
            self.only_a = 1

    v = ours.DummyVecEnv(_fns())
    w = ours.VecFrameStack(A(v), n_stack=2)
    assert w.only_a == 1 and w.venv.venv is v and w.unwrapped is v
    twice = ours.VecFrameStack(A(A(v)), n_stack=2)
    with pytest.raises(AttributeError, match="ambiguous"):
        _ = twice.only_a
    with pytest.raises(AttributeError):
        _ = w.missing


def test_vec_normalize_accepts_rlgrad_make_vec_env_and_matches_sb3() -> None:
    """The idiom issue 28 quotes: VecNormalize over make_vec_env, with SB3's numbers."""
    from rlgrad.rl import make_vec_env as rl_make_vec_env

    gym_venv = ours.VecNormalize(rl_make_vec_env("CartPole-v1", n_envs=2, seed=0), clip_obs=10.0)
    assert gym_venv.reset().shape == (2, 4)
    mine = ours.VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0), clip_obs=10.0)
    theirs = sb3_vec.VecNormalize(sb3_env_util.make_vec_env("CartPole-v1", n_envs=2, seed=0),
                                  clip_obs=10.0)
    _same(mine.reset(), theirs.reset())
    for t in range(40):
        a = np.array([t % 2, (t // 3) % 2])
        _same(mine.step(a)[:3], theirs.step(a)[:3])
    _same(mine.obs_rms.mean, theirs.obs_rms.mean)
    _same(mine.ret_rms.var, theirs.ret_rms.var)
    raw = mine.get_original_obs()
    _same(mine.unnormalize_obs(mine.normalize_obs(raw)), raw.astype(np.float64))


def test_vec_normalize_dict_keys_and_save_load(tmp_path) -> None:
    space = spaces.Dict({"x": spaces.Box(-1e6, 1e6, (2,), np.float32), "d": spaces.Discrete(3)})
    with pytest.raises(ValueError, match="norm_obs_keys"):
        ours.VecNormalize(ours.DummyVecEnv([lambda: CountEnv(3, space)]))
    with pytest.raises(AssertionError):  # SB3's type as well
        ours.VecNormalize(ours.DummyVecEnv([lambda: CountEnv(3, space)]))

    def dict_env():
        env = CountEnv(3, space)
        env._obs = lambda: {"x": np.array([env.t, 1.0], np.float32), "d": env.t % 3}
        return env

    mine = ours.VecNormalize(ours.DummyVecEnv([dict_env]), norm_obs_keys=["x"])
    theirs = sb3_vec.VecNormalize(sb3_vec.DummyVecEnv([dict_env]), norm_obs_keys=["x"])
    _same(mine.reset(), theirs.reset())
    for _ in range(5):
        _same(mine.step(np.array([1]))[:3], theirs.step(np.array([1]))[:3])
    mine.save(str(tmp_path / "vn"))
    loaded = ours.VecNormalize.load(str(tmp_path / "vn"), ours.DummyVecEnv([dict_env]))
    _same(loaded.obs_rms["x"].mean, mine.obs_rms["x"].mean)
    assert loaded.norm_obs_keys == ["x"] and loaded.gamma == mine.gamma


def test_sync_and_unwrap() -> None:
    a = ours.VecNormalize(ours.DummyVecEnv(_fns()))
    b = ours.VecNormalize(ours.DummyVecEnv(_fns()), training=False)
    a.reset()
    a.step(np.zeros(3, dtype=int))
    ours.sync_envs_normalization(a, b)
    _same(b.obs_rms.mean, a.obs_rms.mean)
    assert b.obs_rms is not a.obs_rms
    stack = ours.VecFrameStack(a, 2)
    assert ours.unwrap_vec_normalize(stack) is a and ours.is_vecenv_wrapped(stack, ours.VecNormalize)
    assert ours.unwrap_vec_wrapper(stack, ours.VecMonitor) is None


def test_transpose_and_extract_dict_obs_match_sb3() -> None:
    img = spaces.Box(0, 255, (4, 5, 3), np.uint8)
    both = spaces.Dict({"img": img, "vec": spaces.Box(-1e6, 1e6, (2,), np.float32)})

    def env_of(space):
        def make():
            env = CountEnv(3, space)
            base = env._obs
            env._obs = lambda: ({"img": np.full((4, 5, 3), env.t, np.uint8), "vec": base()}
                                if isinstance(space, spaces.Dict) else np.full((4, 5, 3), env.t, np.uint8))
            return env
        return make

    for mod in (ours, sb3_vec):
        t = mod.VecTransposeImage(mod.DummyVecEnv([env_of(img)]))
        assert t.observation_space.shape == (3, 4, 5) and t.reset().shape == (1, 3, 4, 5)
        d = mod.VecTransposeImage(mod.DummyVecEnv([env_of(both)]))
        assert d.reset()["img"].shape == (1, 3, 4, 5)
        e = mod.VecExtractDictObs(mod.DummyVecEnv([env_of(both)]), "vec")
        e.reset()
        for _ in range(3):
            obs, _, done, info = e.step(np.array([0]))
        assert obs.shape == (1, 2) and done[0] and info[0]["terminal_observation"].shape == (2,)
    with pytest.raises(AssertionError):
        ours.VecTransposeImage(ours.DummyVecEnv(_fns()))


def test_transposed_dict_observations_are_copies_as_sb3s() -> None:
    """SB3 deep-copies a Dict observation before transposing its images: the same values, the
    same dict type, and nothing shared with what the wrapped env returned."""
    img = spaces.Box(0, 255, (4, 5, 3), np.uint8)
    both = spaces.Dict({"img": img, "vec": spaces.Box(-1e6, 1e6, (2,), np.float32)})
    rng = np.random.default_rng(0)
    obs = OrderedDict(img=rng.integers(0, 256, (2, 4, 5, 3)).astype(np.uint8),
                      vec=rng.standard_normal((2, 2)).astype(np.float32))
    got = []
    for mod in (ours, sb3_vec):
        t = mod.VecTransposeImage(mod.DummyVecEnv([lambda: CountEnv(3, both)]))
        out = t.transpose_observations(obs)
        assert type(out) is OrderedDict and list(out) == ["img", "vec"]
        assert not any(np.shares_memory(out[k], obs[k]) for k in out)
        got.append(out)
    for k in obs:
        np.testing.assert_array_equal(got[0][k], got[1][k])
        assert got[0][k].dtype == got[1][k].dtype and got[0][k].shape == got[1][k].shape


def test_algorithm_trains_through_every_wrapper() -> None:
    """A wrapper the algorithm does not know still runs in training (VecFrameStack's stacks
    reach the policy); a DummyVecEnv alone keeps the SyncVectorEnv fast path."""
    from gymnasium.vector import SyncVectorEnv

    from rlgrad.rl import PPO

    plain = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    assert isinstance(plain.as_vector_env(), SyncVectorEnv)
    assert isinstance(ours.VecNormalize(plain).as_vector_env(), SyncVectorEnv)
    stacked = ours.VecFrameStack(make_vec_env("CartPole-v1", n_envs=2, seed=0), n_stack=3)
    model = PPO("MlpPolicy", stacked, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    assert model.observation_space.shape == (12,)
    model.learn(64)
    assert model.num_timesteps == 64
    assert model.predict(stacked.reset())[0].shape == (2,)


class _BadEnv(gym.Env):
    """Configurable mistakes: observations outside the space, a non-bool done, a bad space."""

    def __init__(self, obs_space: spaces.Space, obs, done=False,
                 act_space: spaces.Space | None = None) -> None:
        self.observation_space, self.action_space = obs_space, act_space or spaces.Discrete(2)
        self._obs, self._done = obs, done

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs, {}

    def step(self, action):
        return self._obs, 0.0, self._done, False, {}


BOX = spaces.Box(-1.0, 1.0, (3,), np.float32)


@pytest.mark.parametrize("env_args", [
    (BOX, np.array([0.0, 2.0, 0.0], np.float32)),  # out of bounds
    (BOX, np.zeros(3, np.float64)),  # cannot cast
    (BOX, np.zeros((1, 3), np.float32)),  # shape
    (spaces.Dict({"x": BOX}), {"y": np.zeros(3, np.float32)}),  # keys
    (BOX, np.zeros(3, np.float32), 1),  # terminated not a bool
])
def test_check_env_fails_where_sb3s_does(env_args) -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    from rlgrad.rl.common.env_checker import EnvCheckError, check_env

    with pytest.raises(AssertionError) as theirs:
        sb3_check_env(_BadEnv(*env_args))
    with pytest.raises(EnvCheckError) as mine:
        check_env(_BadEnv(*env_args))
    assert isinstance(mine.value, AssertionError) and isinstance(mine.value, ValueError)
    assert "\n" not in str(mine.value)
    first = str(theirs.value).split(":")[0].split(".")[0]
    assert first[:40] in str(mine.value)


@pytest.mark.parametrize("env_args", [
    (spaces.Box(0, 255, (8, 8, 3), np.float32), np.zeros((8, 8, 3), np.float32)),  # small image
    (spaces.Discrete(3, start=1), 1),  # non-zero start
    (BOX, np.zeros(3, np.float32), False, spaces.Box(-2, 2, (2,), np.float64)),  # action space
])
def test_check_env_warns_as_sb3s(env_args) -> None:
    import warnings

    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    from rlgrad.rl.common.env_checker import check_env

    counts = []
    for fn in (sb3_check_env, check_env):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            fn(_BadEnv(*env_args))
        counts.append(len([w for w in rec if issubclass(w.category, UserWarning)]))
    assert counts[0] == counts[1] > 0


def test_atari_wrapper_steps_as_sb3s() -> None:
    """SB3's AtariWrapper and rlgrad's, on the same seeded game, give the same frames, rewards
    and episode ends (no-op starts, skip and max-pool, life loss, FIRE, 84x84 gray, clipping)."""
    ale_py = pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    from stable_baselines3.common.atari_wrappers import AtariWrapper as SB3AtariWrapper

    from rlgrad.rl.common.atari_wrappers import AtariWrapper

    gym.register_envs(ale_py)

    def run(wrapper):
        env = wrapper(gym.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0))
        obs, _ = env.reset(seed=3)
        out = [obs]
        for t in range(120):
            obs, r, term, trunc, _ = env.step(t % 4)
            out.append((obs, r, term, trunc))
            if term or trunc:
                out.append(env.reset()[0])
        env.close()
        return out

    mine, theirs = run(AtariWrapper), run(SB3AtariWrapper)
    assert mine[0].shape == (84, 84, 1) and mine[0].dtype == np.uint8
    _same(mine, theirs)


def test_make_vec_env_seeds_and_wraps_as_sb3s(tmp_path) -> None:
    from stable_baselines3.common.env_util import unwrap_wrapper as sb3_unwrap

    from rlgrad.rl.common.env_util import is_wrapped, unwrap_wrapper

    mine = make_vec_env("Pendulum-v1", n_envs=2, seed=4, monitor_dir=str(tmp_path))
    theirs = sb3_env_util.make_vec_env("Pendulum-v1", n_envs=2, seed=4)
    assert mine.render_mode == theirs.render_mode == "rgb_array"
    _same(mine.reset(), theirs.reset())
    acts = np.array([[0.5], [-1.0]], np.float32)
    _same(mine.step(acts)[:3], theirs.step(acts)[:3])
    assert sorted(os.listdir(tmp_path)) == ["0.monitor.csv", "1.monitor.csv"]
    env = mine.envs[0]
    assert is_wrapped(env, Monitor) and unwrap_wrapper(env, Monitor) is env
    assert unwrap_wrapper(env, gym.wrappers.RecordVideo) is None
    assert sb3_unwrap(theirs.envs[0], gym.wrappers.RecordVideo) is None


def test_video_recorder_writes_sb3s_file_names(tmp_path) -> None:
    pytest.importorskip("imageio_ffmpeg")
    venv = ours.VecNormalize(make_vec_env("CartPole-v1", n_envs=1, seed=0))
    rec = ours.VecVideoRecorder(venv, str(tmp_path), record_video_trigger=lambda s: s % 20 == 0,
                                video_length=5, name_prefix="cp")
    rec.reset()
    for _ in range(30):
        rec.step(np.array([0]))
    rec.close()
    names = sorted(os.listdir(tmp_path))
    assert names == ["cp-step-0-to-step-5.mp4", "cp-step-20-to-step-25.mp4"]
    assert all(os.path.getsize(tmp_path / n) > 0 for n in names)
    with pytest.raises(AssertionError, match="rgb_array"):
        ours.VecVideoRecorder(make_vec_env("CartPole-v1", env_kwargs={"render_mode": None}),
                              str(tmp_path), lambda s: True)


def test_subproc_worker_errors_reach_the_parent() -> None:
    class Broken(CountEnv):
        def step(self, action):
            raise RuntimeError("boom in the worker")

    sub = ours.SubprocVecEnv([Broken, Broken], start_method="fork")
    try:
        sub.reset()
        with pytest.raises(RuntimeError, match="boom in the worker"):
            sub.step(np.array([0, 1]))
        assert sub.get_attr("length") == [3, 3]  # the workers are still alive
    finally:
        sub.close()


def test_bad_vec_env_input_is_one_line() -> None:
    for bad, match in (([], "non-empty list"), (CountEnv(), "non-empty list"),
                       ([CountEnv()], "functions that make an env")):
        with pytest.raises(ValueError, match=match) as e:
            ours.DummyVecEnv(bad)
        assert "\n" not in str(e.value)
    v = ours.DummyVecEnv(_fns())
    v.reset()
    with pytest.raises(ValueError, match="2 actions for 3 environments"):
        v.step(np.array([0, 1]))
    v.step(np.array([0, 1, 0, 1]))  # extra actions ignored, as SB3's DummyVecEnv does

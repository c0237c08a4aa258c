"""``rlgrad.rl.common.<module>`` against ``stable_baselines3.common.<module>``: the same inputs
give the same outputs (utils, running_mean_std, envs, preprocessing, sb2_compat, callbacks)."""

from __future__ import annotations

import random
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

import rlgrad

sb3 = pytest.importorskip("stable_baselines3")
th = pytest.importorskip("torch")

from stable_baselines3.common import envs as sb3_envs  # noqa: E402
from stable_baselines3.common import preprocessing as sb3_pre  # noqa: E402
from stable_baselines3.common import utils as sb3_utils  # noqa: E402
from stable_baselines3.common.running_mean_std import RunningMeanStd as SB3RMS  # noqa: E402

from rlgrad.rl.common import envs, preprocessing, utils  # noqa: E402
from rlgrad.rl.common.running_mean_std import RunningMeanStd  # noqa: E402


def _quiet(fn: Any, *args: Any) -> Any:
    """SB3's deprecated schedule functions warn; the result is what is compared."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


# ---- common.utils -------------------------------------------------------------------------------
PROGRESS = np.linspace(1.0, 0.0, 21)


@pytest.mark.parametrize("args", [(1.0, 0.05, 0.1), (0.5, 2.0, 0.5), (3e-4, 0.0, 1.0)])
def test_get_linear_fn(args: tuple[float, float, float]) -> None:
    with pytest.warns(FutureWarning, match="LinearSchedule"):
        ours = utils.get_linear_fn(*args)
    theirs = _quiet(sb3_utils.get_linear_fn, *args)
    np.testing.assert_allclose([ours(p) for p in PROGRESS], [theirs(p) for p in PROGRESS],
                               rtol=1e-15)


def test_constant_and_schedule_fn() -> None:
    theirs = _quiet(sb3_utils.constant_fn, 0.25)
    with pytest.warns(FutureWarning, match="ConstantSchedule"):
        ours = utils.constant_fn(0.25)
    assert [ours(p) for p in PROGRESS] == [theirs(p) for p in PROGRESS]
    for value in (3, 0.125, lambda p: 0.5 * p, lambda p: np.float32(p)):
        with pytest.warns(FutureWarning, match="FloatSchedule"):
            ours = utils.get_schedule_fn(value)
        ref = _quiet(sb3_utils.get_schedule_fn, value)
        got = [ours(p) for p in PROGRESS]
        assert got == [ref(p) for p in PROGRESS] and all(type(v) is float for v in got)


def test_safe_mean_explained_variance_zip_strict() -> None:
    from collections import deque

    assert np.isnan(utils.safe_mean([])) and np.isnan(sb3_utils.safe_mean([]))
    for arr in ([1.0, 2.0, 4.0], deque([3, 5]), np.arange(7.0)):
        assert utils.safe_mean(arr) == sb3_utils.safe_mean(arr)
    rng = np.random.default_rng(0)
    y, pred = rng.normal(size=50), rng.normal(size=50)
    for p in (pred, y, y + 0.1 * pred, np.zeros(50)):
        assert utils.explained_variance(p, y) == sb3_utils.explained_variance(p, y)
    assert np.isnan(utils.explained_variance(y, np.ones(50)))
    assert list(utils.zip_strict([1, 2], "ab")) == list(sb3_utils.zip_strict([1, 2], "ab"))
    with pytest.raises(ValueError):
        list(utils.zip_strict([1, 2], [1]))


def test_polyak_update_matches_sb3() -> None:
    rng = np.random.default_rng(1)
    src = [rng.normal(size=(3, 4)), rng.normal(size=(4,))]
    dst = [rng.normal(size=(3, 4)), rng.normal(size=(4,))]
    ours_dst = [rlgrad.tensor(d) for d in dst]
    th_dst = [th.tensor(d) for d in dst]
    for tau in (0.005, 0.5, 1.0):
        utils.polyak_update([rlgrad.tensor(s) for s in src], ours_dst, tau)
        sb3_utils.polyak_update([th.tensor(s) for s in src], th_dst, tau)
        for o, t in zip(ours_dst, th_dst, strict=True):
            np.testing.assert_allclose(o.numpy(), t.numpy(), rtol=1e-14, atol=1e-15)


def test_set_random_seed_obs_as_tensor_get_device() -> None:
    draws = []
    for seed_fn in (utils.set_random_seed, sb3_utils.set_random_seed):
        seed_fn(7)
        draws.append((random.random(), np.random.random(3).tolist()))
    assert draws[0] == draws[1]
    utils.set_random_seed(7)
    first = rlgrad.randn(3).numpy()
    utils.set_random_seed(7)
    np.testing.assert_array_equal(rlgrad.randn(3).numpy(), first)

    obs = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = utils.obs_as_tensor(obs, "cpu")
    assert isinstance(t, rlgrad.Tensor) and t.dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), sb3_utils.obs_as_tensor(obs, "cpu").numpy())
    d = utils.obs_as_tensor({"a": obs, "b": obs[:, :1]}, "cpu")
    assert set(d) == {"a", "b"} and d["b"].shape == (2, 1)
    with pytest.raises(TypeError, match="NumPy array"):
        utils.obs_as_tensor([1, 2], "cpu")
    for name in ("auto", "cpu", "cuda"):  # this machine, like rlgrad, has no GPU for SB3 either
        assert utils.get_device(name).type == sb3_utils.get_device(name).type == "cpu"


def test_get_system_info(capsys: pytest.CaptureFixture[str]) -> None:
    info, text = utils.get_system_info(print_info=True)
    ref, _ = sb3_utils.get_system_info(print_info=False)
    for key in ("OS", "Python", "Numpy", "Gymnasium", "GPU Enabled"):
        assert info[key] == ref[key]
    assert info["rlgrad"] == rlgrad.__version__
    # every key SB3 reports is there (scripts index them): "Stable-Baselines3" is the SB3 release
    # rlgrad.rl follows (the one installed here), "PyTorch" says rlgrad does not use it
    from rlgrad import rl

    assert set(ref) <= set(info), set(ref) - set(info)
    assert info["Stable-Baselines3"] == rl.__version__ == ref["Stable-Baselines3"]
    assert "- PyTorch: not used" in text
    assert text == "".join(f"- {k}: {v}\n" for k, v in info.items())
    assert capsys.readouterr().out.strip() == text.strip()


def test_float_schedule_and_run_ids(tmp_path: Any) -> None:
    for value in (2, 0.5, utils.LinearSchedule(1.0, 0.0, 0.5), lambda p: np.float32(p)):
        ours, theirs = utils.FloatSchedule(value), sb3_utils.FloatSchedule(value)
        got = [ours(p) for p in PROGRESS]
        assert got == [theirs(p) for p in PROGRESS] and all(type(v) is float for v in got)
    assert utils.FloatSchedule(utils.FloatSchedule(0.3)).value_schedule.val == 0.3
    with pytest.raises(TypeError, match="number or a callable"):
        utils.FloatSchedule("fast")
    for name in ("PPO_1", "PPO_3", "PPO_x", "PPO_2_1", "A2C_7", "PPO_12"):
        (tmp_path / name).mkdir()
    for log_name in ("PPO", "PPO_2", "A2C", "SAC"):
        assert (utils.get_latest_run_id(str(tmp_path), log_name)
                == sb3_utils.get_latest_run_id(str(tmp_path), log_name))


def test_parameters_by_name_and_learning_rate() -> None:
    from rlgrad import nn, optim

    net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    tnet = th.nn.Sequential(th.nn.Linear(2, 3), th.nn.Tanh(), th.nn.Linear(3, 1))
    for names in (["bias"], ["2."], ["0.weight", "2.bias"], ["nothing"]):
        got = utils.get_parameters_by_name(net, names)
        ref = sb3_utils.get_parameters_by_name(tnet, names)
        assert [tuple(g.shape) for g in got] == [tuple(r.shape) for r in ref]
        sd = net.state_dict()
        want = [sd[k] for k in sd if any(n in k for n in names)]
        assert all(np.array_equal(np.asarray(g), np.asarray(w)) for g, w in zip(got, want,
                                                                                 strict=True))
    opt = optim.Adam(net.parameters(), lr=1e-3)
    utils.update_learning_rate(opt, 0.25)
    assert [g["lr"] for g in opt.param_groups] == [0.25]


OBS_CASES = [
    (spaces.Box(-1, 1, (3,)), [np.zeros(3), np.zeros((2, 3)), np.zeros((2, 2))]),
    (spaces.Box(-1, 1, (2, 3)), [np.zeros((2, 3)), np.zeros((4, 2, 3)), np.zeros(3)]),
    (spaces.Discrete(4), [np.array(1), np.arange(3), np.zeros((2, 2))]),
    (spaces.MultiDiscrete([2, 3]), [np.zeros(2), np.zeros((5, 2)), np.zeros((5, 3))]),
    (spaces.MultiBinary(4), [np.zeros(4), np.zeros((3, 4)), np.zeros((3, 4, 1))]),
    (spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3)}),
     [{"a": np.zeros(2), "b": np.array(1)}, {"a": np.zeros((4, 2)), "b": np.arange(4)},
      {"a": np.zeros((4, 2)), "b": np.zeros((4, 2))}]),
]


@pytest.mark.parametrize("space,observations", OBS_CASES, ids=[str(c[0]) for c in OBS_CASES])
def test_is_vectorized_observation_like_sb3(space: spaces.Space, observations: list) -> None:
    for obs in observations:
        try:
            expected: Any = sb3_utils.is_vectorized_observation(obs, space)
        except ValueError:
            expected = ValueError
        if expected is ValueError:
            with pytest.raises(ValueError):
                utils.is_vectorized_observation(obs, space)
        else:
            assert utils.is_vectorized_observation(obs, space) is expected
    with pytest.raises(ValueError, match="Cannot determine"):
        utils.is_vectorized_observation(np.zeros(1), spaces.Tuple([spaces.Discrete(2)]))


def test_space_checks_like_sb3() -> None:
    env = envs.IdentityEnv(3)
    utils.check_for_correct_spaces(env, spaces.Discrete(3), spaces.Discrete(3))
    for obs_space, act_space in ((spaces.Discrete(4), spaces.Discrete(3)),
                                 (spaces.Discrete(3), spaces.Discrete(2))):
        with pytest.raises(ValueError, match="do not match"):
            utils.check_for_correct_spaces(env, obs_space, act_space)
    box, other = spaces.Box(-1, 1, (2,)), spaces.Box(0, 5, (2,))
    utils.check_shape_equal(box, other)
    utils.check_shape_equal(spaces.Dict({"a": box}), spaces.Dict({"a": other}))
    for a, b in ((box, spaces.Box(-1, 1, (3,))), (spaces.Dict({"a": box}), spaces.Dict({"b": box})),
                 (spaces.Dict({"a": box}), spaces.Dict({"a": spaces.Box(-1, 1, (1,))}))):
        with pytest.raises(AssertionError):  # SB3's type, and ValueError too
            sb3_utils.check_shape_equal(a, b)
        with pytest.raises(AssertionError) as err:
            utils.check_shape_equal(a, b)
        assert isinstance(err.value, ValueError)


# ---- common.running_mean_std --------------------------------------------------------------------
def test_running_mean_std_matches_sb3() -> None:
    rng = np.random.default_rng(2)
    ours, theirs = RunningMeanStd(1e-3, (3,)), SB3RMS(1e-3, (3,))
    for n in (1, 5, 17, 2):
        batch = rng.normal(2.0, 3.0, size=(n, 3))
        ours.update(batch)
        theirs.update(batch)
    np.testing.assert_allclose(ours.mean, theirs.mean, rtol=1e-13)
    np.testing.assert_allclose(ours.var, theirs.var, rtol=1e-13)
    assert ours.count == pytest.approx(theirs.count, rel=1e-15)

    other, other_ref = RunningMeanStd(shape=(3,)), SB3RMS(shape=(3,))
    batch = rng.normal(size=(9, 3))
    other.update(batch)
    other_ref.update(batch)
    copy = ours.copy()
    ours.combine(other)
    theirs.combine(other_ref)
    np.testing.assert_allclose(ours.mean, theirs.mean, rtol=1e-13)
    np.testing.assert_allclose(ours.var, theirs.var, rtol=1e-13)
    assert isinstance(copy, RunningMeanStd) and copy.count != ours.count
    assert not np.shares_memory(copy.mean, ours.mean)


# ---- common.envs --------------------------------------------------------------------------------
def _rollout(env: gym.Env, actions: list[Any], seed_space: str = "action_space") -> list[Any]:
    getattr(env, seed_space).seed(3)
    out: list[Any] = [env.reset(seed=3)]
    out += [env.step(a) for a in actions]
    return out


def _same(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, tuple | list):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    else:
        np.testing.assert_array_equal(a, b)
        assert np.asarray(a).dtype == np.asarray(b).dtype


IDENTITY_CASES = [
    ("IdentityEnv", {"dim": 4, "ep_length": 5}, lambda s: [0, 1, 2, 3, 1, 2, 0]),
    ("IdentityEnvBox", {"eps": 0.5, "ep_length": 4}, lambda s: [np.array([x], np.float32)
                                                               for x in (0.0, 0.7, -0.2, 0.4)]),
    ("IdentityEnvMultiDiscrete", {"dim": 3}, lambda s: [np.array([i % 3, i // 3])
                                                       for i in range(9)]),
    ("IdentityEnvMultiBinary", {"dim": 2}, lambda s: [np.array([i % 2, i // 2]) for i in range(4)]),
]


@pytest.mark.parametrize("name,kwargs,actions", IDENTITY_CASES, ids=[c[0] for c in IDENTITY_CASES])
def test_identity_envs_step_like_sb3(name: str, kwargs: dict, actions: Any) -> None:
    ours, theirs = getattr(envs, name)(**kwargs), getattr(sb3_envs, name)(**kwargs)
    assert ours.observation_space == theirs.observation_space
    assert ours.action_space == theirs.action_space
    _same(_rollout(ours, actions(ours)), _rollout(theirs, actions(theirs)))
    assert ours.num_resets == theirs.num_resets == 1
    with pytest.raises(ValueError, match="at most one"):
        envs.IdentityEnv(dim=2, space=spaces.Discrete(2))


def test_identity_env_rewards_the_repeated_observation() -> None:
    env = envs.IdentityEnv(5)
    obs, _ = env.reset(seed=0)
    total = 0.0
    for _ in range(100):
        obs, r, term, trunc, _ = env.step(obs)
        total += r
    assert total == 100.0 and trunc and not term


@pytest.mark.parametrize("kwargs", [{}, {"channel_first": True, "n_channels": 3},
                                    {"discrete": False, "screen_height": 8, "screen_width": 6}])
def test_fake_image_env_like_sb3(kwargs: dict) -> None:
    ours, theirs = envs.FakeImageEnv(**kwargs), sb3_envs.FakeImageEnv(**kwargs)
    assert ours.observation_space == theirs.observation_space
    assert ours.action_space == theirs.action_space
    actions = [ours.action_space.sample() for _ in range(10)]
    _same(_rollout(ours, actions, "observation_space"),
          _rollout(theirs, actions, "observation_space"))


BIT_CASES = [{}, {"n_bits": 4, "continuous": True}, {"n_bits": 5, "discrete_obs_space": True},
             {"n_bits": 6, "image_obs_space": True}, {"image_obs_space": True,
                                                      "channel_first": False, "max_steps": 3}]


@pytest.mark.parametrize("kwargs", BIT_CASES)
def test_bit_flipping_env_like_sb3(kwargs: dict) -> None:
    ours, theirs = envs.BitFlippingEnv(**kwargs), sb3_envs.BitFlippingEnv(**kwargs)
    assert ours.observation_space == theirs.observation_space
    assert ours.action_space == theirs.action_space and ours.spec.id == theirs.spec.id
    n = ours._obs_space.n
    if kwargs.get("continuous"):
        actions = [np.where(np.arange(n) % (i + 2) == 0, 1.0, -1.0) for i in range(n)]
    else:
        actions = [i % n for i in range(2 * n)]
    _same(_rollout(ours, actions, "_obs_space"), _rollout(theirs, actions, "_obs_space"))
    # HER relabels in batches: goals stacked, one reward per row
    o1, o2 = ours._get_obs(), ours.reset(seed=1)[0]
    ach = np.stack([o1["achieved_goal"], o2["achieved_goal"], o1["desired_goal"]])
    des = np.stack([o1["desired_goal"]] * 3)
    if kwargs.get("discrete_obs_space"):  # a buffer's column of integers
        ach, des = ach.reshape(3, 1), des.reshape(3, 1)
    np.testing.assert_array_equal(ours.compute_reward(ach, des, None),
                                  theirs.compute_reward(ach, des, None))
    assert ours.compute_reward(ach, des, None).dtype == np.float32


def test_bit_flipping_env_reaches_the_goal() -> None:
    env = envs.BitFlippingEnv(n_bits=6)
    obs, _ = env.reset(seed=0)
    for i in np.flatnonzero(obs["observation"] == 0):
        obs, r, term, _, info = env.step(int(i))
    assert term and r == 0.0 and info["is_success"]
    assert np.all(obs["achieved_goal"] == 1)
    with pytest.raises(ValueError, match="at most one"):
        envs.BitFlippingEnv(discrete_obs_space=True, image_obs_space=True)


@pytest.mark.parametrize("kwargs", [{}, {"random_start": False, "channel_last": False},
                                    {"discrete_actions": False}])
def test_simple_multi_obs_env_like_sb3(kwargs: dict) -> None:
    rng = np.random.default_rng(4)
    raw = rng.integers(0, 4, size=60)
    discrete = kwargs.get("discrete_actions", True)
    actions = [int(a) if discrete else np.eye(4)[a].astype(np.float32) for a in raw]
    runs = []
    for module in (envs, sb3_envs):
        np.random.seed(5)  # both draw the cells' observations and the start from NumPy's
        env = module.SimpleMultiObsEnv(**kwargs)
        obs = [env.reset(seed=5)]
        for a in actions:
            step = env.step(a)
            obs.append(step)
            if step[2] or step[3]:
                obs.append(env.reset())
        runs.append((env.observation_space, env.action_space, obs, env.log))
    assert runs[0][:2] == runs[1][:2]
    _same(runs[0][2], runs[1][2])
    assert runs[0][3] == runs[1][3]


def test_simple_multi_obs_env_shortest_path() -> None:
    np.random.seed(0)
    env = envs.SimpleMultiObsEnv(random_start=False)
    env.reset()
    rewards = [env.step(a)[1] for a in (2, 2, 2, 1, 1, 1)]  # right x3, down x3 to cell 15
    assert rewards == [-0.1] * 5 + [1.0] and env.state == 15


INVALID_CASES = [("InvalidActionEnvDiscrete", {"dim": 6, "n_invalid_actions": 3}),
                 ("InvalidActionEnvDiscrete", {"dim": 1}),
                 ("InvalidActionEnvMultiDiscrete", {"dims": [3, 4, 2], "n_invalid_actions": 5}),
                 ("InvalidActionEnvMultiBinary", {"dims": 4, "n_invalid_actions": 4})]


@pytest.mark.parametrize("name,kwargs", INVALID_CASES)
def test_invalid_action_envs_like_sb3_contrib(name: str, kwargs: dict) -> None:
    contrib = pytest.importorskip("sb3_contrib.common.envs")
    runs = []
    for module in (envs, contrib):
        np.random.seed(6)  # the hidden slots are drawn from NumPy's generator
        env = getattr(module, name)(ep_length=20, **kwargs)
        env.action_space.seed(6)
        obs, _ = env.reset()
        steps = []
        for _ in range(20):
            mask = env.action_masks()
            steps.append((obs, list(env.invalid_actions), mask))
            obs, r, _, trunc, _ = env.step(obs)
            assert r == 1.0
        assert trunc
        runs.append(steps)
    _same(runs[0], runs[1])
    n = kwargs.get("n_invalid_actions", 0)
    for obs, _, mask in runs[0]:
        assert sum(mask) == len(mask) - n
        assert all(mask[int(i)] for i in _used_slots(name, kwargs, obs))  # right one allowed


def _used_slots(name: str, kwargs: dict, obs: Any) -> np.ndarray:
    """The mask slots of the observation's values (the action that earns the reward)."""
    if name.endswith("MultiDiscrete"):
        return np.cumsum([0, *kwargs["dims"][:-1]]) + obs
    if name.endswith("MultiBinary"):
        return 2 * np.arange(len(obs)) + obs
    return np.atleast_1d(obs)


def test_invalid_action_envs_refuse_too_many() -> None:
    for cls, kwargs in ((envs.InvalidActionEnvDiscrete, {"dim": 3, "n_invalid_actions": 3}),
                        (envs.InvalidActionEnvMultiDiscrete, {"dims": [2, 2],
                                                              "n_invalid_actions": 3}),
                        (envs.InvalidActionEnvMultiBinary, {"dims": 2, "n_invalid_actions": 3})):
        with pytest.raises(ValueError, match="n_invalid_actions"):
            cls(**kwargs)


# ---- common.preprocessing -----------------------------------------------------------------------
SPACES = [
    spaces.Box(0, 255, (3, 8, 8), np.uint8), spaces.Box(0, 255, (8, 8, 3), np.uint8),
    spaces.Box(0, 255, (8, 8, 5), np.uint8), spaces.Box(0, 1, (4, 8, 8), np.float32),
    spaces.Box(0, 200, (1, 8, 8), np.uint8), spaces.Box(-1, 1, (5,)), spaces.Box(-1, 1, (2, 3)),
    spaces.Discrete(4), spaces.Discrete(3, start=0), spaces.MultiDiscrete([2, 3, 4]),
    spaces.MultiBinary(5), spaces.MultiBinary([2, 3]),
    spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3)}),
]


@pytest.mark.parametrize("space", SPACES, ids=[str(s) for s in SPACES])
def test_space_helpers_like_sb3(space: spaces.Space) -> None:
    for flags in ({}, {"check_channels": True}, {"normalized_image": True}):
        assert preprocessing.is_image_space(space, **flags) == sb3_pre.is_image_space(space, **flags)
    assert preprocessing.get_obs_shape(space) == sb3_pre.get_obs_shape(space)
    assert preprocessing.get_flattened_obs_dim(space) == sb3_pre.get_flattened_obs_dim(space)
    if isinstance(space, spaces.Dict) or (isinstance(space, spaces.MultiBinary)
                                          and len(space.shape) > 1):
        with pytest.raises((NotImplementedError, ValueError)):
            preprocessing.get_action_dim(space)
    else:
        assert preprocessing.get_action_dim(space) == sb3_pre.get_action_dim(space)


def _batch(space: spaces.Space, n: int = 4) -> Any:
    space.seed(0)
    if isinstance(space, spaces.Dict):
        return {k: _batch(s, n) for k, s in space.spaces.items()}
    return np.stack([np.asarray(space.sample()) for _ in range(n)])


def _to_numpy(x: Any) -> Any:
    return {k: _to_numpy(v) for k, v in x.items()} if isinstance(x, dict) else x.numpy()


@pytest.mark.parametrize("space", SPACES[:11] + SPACES[12:], ids=lambda s: str(s))
@pytest.mark.parametrize("normalize_images", [True, False])
def test_preprocess_obs_like_sb3(space: spaces.Space, normalize_images: bool) -> None:
    obs = _batch(space)
    as_torch = ({k: th.as_tensor(v) for k, v in obs.items()} if isinstance(obs, dict)
                else th.as_tensor(obs))
    ref = _to_numpy(sb3_pre.preprocess_obs(as_torch, space, normalize_images))
    for given in (obs, {k: rlgrad.as_tensor(v) for k, v in obs.items()} if isinstance(obs, dict)
                  else rlgrad.as_tensor(obs)):
        got = _to_numpy(preprocessing.preprocess_obs(given, space, normalize_images))
        _same(got, ref)


def test_preprocess_obs_keeps_the_gradient_and_rejects_bad_input() -> None:
    x = rlgrad.tensor(np.array([[1.0, -2.0]]), requires_grad=True)
    (preprocessing.preprocess_obs(x, spaces.Box(-5, 5, (2,))) * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[3.0, 3.0]])
    with pytest.raises(TypeError, match="dict"):
        preprocessing.preprocess_obs(np.zeros((1, 2)), SPACES[-1])
    with pytest.raises(NotImplementedError, match="not supported"):
        preprocessing.preprocess_obs(np.zeros((1, 2)), spaces.Tuple([spaces.Discrete(2)]))


def test_maybe_transpose_like_sb3() -> None:
    chw = spaces.Box(0, 255, (3, 8, 6), np.uint8)
    rng = np.random.default_rng(0)
    for obs in (rng.integers(0, 255, (8, 6, 3), dtype=np.uint8),
                rng.integers(0, 255, (2, 8, 6, 3), dtype=np.uint8),
                rng.integers(0, 255, (3, 8, 6), dtype=np.uint8),
                rng.integers(0, 255, (5, 5, 5), dtype=np.uint8)):
        _same(preprocessing.maybe_transpose(obs, chw), sb3_pre.maybe_transpose(obs, chw))
    vec = np.zeros((2, 4), np.float32)
    assert preprocessing.maybe_transpose(vec, spaces.Box(-1, 1, (4,))) is vec


# ---- common.sb2_compat, common.callbacks --------------------------------------------------------
def test_rmsprop_tf_like_steps_like_sb3() -> None:
    from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike as SB3RMSprop

    from rlgrad.optim import RMSpropTFLike as Ours
    from rlgrad.rl.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

    assert RMSpropTFLike is Ours
    rng = np.random.default_rng(3)
    w0 = rng.normal(size=(3,))
    w, wt = rlgrad.tensor(w0.copy(), requires_grad=True), th.tensor(w0.copy(), requires_grad=True)
    opt = RMSpropTFLike([w], lr=0.01, alpha=0.99, eps=1e-5, momentum=0.9)
    opt_t = SB3RMSprop([wt], lr=0.01, alpha=0.99, eps=1e-5, momentum=0.9)
    for _ in range(5):
        g = rng.normal(size=(3,))
        opt.zero_grad()
        opt_t.zero_grad()
        (w * rlgrad.tensor(g)).sum().backward()
        (wt * th.tensor(g)).sum().backward()
        opt.step()
        opt_t.step()
    np.testing.assert_allclose(w.detach().numpy(), wt.detach().numpy(), rtol=1e-12)


def test_log_every_n_timesteps_dumps_rows() -> None:
    from rlgrad.rl import A2C
    from rlgrad.rl.common.callbacks import LogEveryNTimesteps
    from rlgrad.rl.logger import Logger

    class Rows:
        def __init__(self) -> None:
            self.steps: list[int] = []

        def write(self, row: dict[str, Any], step: int) -> None:
            self.steps.append(step)
            assert "time/fps" in row

    rows = Rows()
    model = A2C("MlpPolicy", "CartPole-v1", n_steps=5, seed=0)
    model.set_logger(Logger([rows]))
    model.learn(40, callback=LogEveryNTimesteps(n_steps=10), log_interval=10_000)
    assert rows.steps == [10, 20, 30, 40]

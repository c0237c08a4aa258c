"""SB3's archive layout (``rlgrad.rl.common.save_util``): torch's ``.pth`` files written and read
without torch, the ``data`` entry read without running a file's code, and models moving
between SB3 and rlgrad through ``save("x.zip")`` / ``load`` with the same actions."""

from __future__ import annotations

import collections
import io
import pickle
import warnings
import zipfile
from typing import Any

import numpy as np
import pytest

import rlgrad.rl as rl
from rlgrad.rl.common import save_util
from rlgrad.rl.common.save_util_pth import Missing, PthError, read_pth, safe_loads, write_pth

torch = pytest.importorskip("torch")
sb3 = pytest.importorskip("stable_baselines3")

ARRAYS = {"f32": np.arange(6, dtype=np.float32).reshape(2, 3), "f64": np.array([1.5, -2.0]),
          "i64": np.array(7, dtype=np.int64), "u8": np.arange(4, dtype=np.uint8),
          "bool": np.array([True, False]), "empty": np.zeros((0, 3), np.float32)}


def test_write_pth_is_what_torch_loads() -> None:
    obj = collections.OrderedDict(ARRAYS)
    got = torch.load(io.BytesIO(write_pth(obj)), weights_only=True)
    assert isinstance(got, collections.OrderedDict) and list(got) == list(ARRAYS)
    for k, a in ARRAYS.items():
        assert tuple(got[k].shape) == a.shape
        assert got[k].numpy().dtype == a.dtype
        np.testing.assert_array_equal(got[k].numpy(), a)


def test_write_pth_nested_optimizer_state() -> None:
    state = {"state": {0: {"step": np.array(3.0, np.float32), "exp_avg": np.ones(2, np.float32)}},
             "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "amsgrad": False,
                               "foreach": None, "params": [0], "big": 2**40, "neg": -5}]}
    got = torch.load(io.BytesIO(write_pth(state)), weights_only=True)
    assert got["param_groups"] == state["param_groups"]
    assert float(got["state"][0]["step"]) == 3.0
    np.testing.assert_array_equal(got["state"][0]["exp_avg"].numpy(), np.ones(2))


def test_read_pth_reads_torch_save() -> None:
    buf = io.BytesIO()
    t = torch.arange(12.0).reshape(3, 4)
    torch.save({"t": t.t(), "slice": t[1:, 2:], "p": torch.nn.Parameter(torch.ones(2)),
                "d": torch.tensor([1, 2], dtype=torch.int32), "n": [1, (2.5, None)]}, buf)
    got = read_pth(buf.getvalue())
    np.testing.assert_array_equal(got["t"], t.t().numpy())  # strides honoured
    np.testing.assert_array_equal(got["slice"], t[1:, 2:].numpy())  # storage offset honoured
    np.testing.assert_array_equal(got["p"], np.ones(2, np.float32))
    assert got["d"].dtype == np.int32 and got["n"] == [1, (2.5, None)]
    roundtrip = read_pth(write_pth(collections.OrderedDict(ARRAYS)))
    for k, a in ARRAYS.items():
        assert roundtrip[k].dtype == a.dtype and roundtrip[k].shape == a.shape


def test_read_pth_refuses_in_one_line() -> None:
    with pytest.raises(PthError, match="not a .pth file"):
        read_pth(b"plain bytes")
    with pytest.raises(PthError, match="cannot store a object"):
        write_pth({"x": object()})


def test_safe_loads_builds_no_code() -> None:
    cloudpickle = pytest.importorskip("cloudpickle")
    from gymnasium import spaces

    space = spaces.Dict({"a": spaces.Box(-1, 1, (2,)), "b": spaces.Discrete(3)})
    space.seed(3)
    assert safe_loads(pickle.dumps(space)) == space
    got = safe_loads(cloudpickle.dumps(lambda x: x))  # a function's code: not built
    assert isinstance(got, Missing) and "cloudpickle" in got.qualname
    assert safe_loads(pickle.dumps(torch.nn.Tanh)).__module__.startswith("rlgrad.nn")
    evil = b"\x80\x02cos\nsystem\n(X\x04\x00\x00\x00truetR."  # os.system("true")
    assert isinstance(safe_loads(evil), Missing)


def test_json_to_data_warns_and_leaves_code_out() -> None:
    import base64
    import json

    evil = b"\x80\x02cos\nsystem\n(X\x04\x00\x00\x00truetR."  # os.system("true")
    data = json.dumps({"lr": 0.1, "fn": {":serialized:": base64.b64encode(evil).decode()}})
    with pytest.warns(UserWarning, match="custom_objects"):
        out = save_util.json_to_data(data)
    assert out == {"lr": 0.1}
    named = save_util.json_to_data(save_util.data_to_json(
        {"cls": save_util.PickledGlobal("stable_baselines3.common.policies", "ActorCriticPolicy")}))
    assert isinstance(named["cls"], Missing) and not named["cls"].called  # a name, kept
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert save_util.json_to_data(data, custom_objects={"fn": 1}) == {"lr": 0.1, "fn": 1}


def test_open_path_and_pickles(tmp_path: Any) -> None:
    save_util.save_to_pkl(tmp_path / "a", {"x": 1})
    assert save_util.load_from_pkl(tmp_path / "a") == {"x": 1}  # .pkl added, then found
    assert (tmp_path / "a.pkl").exists()
    with pytest.raises(TypeError):
        save_util.open_path(123, "w")
    with pytest.raises(ValueError, match="mode"):
        save_util.open_path(io.BytesIO(), "append")
    (tmp_path / "d.pkl").mkdir()
    with pytest.warns(UserWarning, match="is a folder"):
        save_util.open_path(tmp_path / "d.pkl", "w", suffix="pkl").close()
    assert (tmp_path / "d.pkl_2").exists()
    with pytest.warns(UserWarning, match="does not exist"):
        save_util.open_path(tmp_path / "new" / "f", "w", suffix="pkl").close()
    assert (tmp_path / "new" / "f.pkl").exists()


def test_load_from_zip_file_bad_zip(tmp_path: Any) -> None:
    bad = tmp_path / "bad.zip"
    bad.write_text("not a zip")
    with pytest.raises(ValueError, match="wasn't a zip-file"):
        save_util.load_from_zip_file(bad)
    with pytest.raises(ValueError, match="wasn't a zip-file"):
        rl.PPO.load(bad)


CASES = [("PPO", "Pendulum-v1"), ("A2C", "CartPole-v1"), ("DQN", "CartPole-v1"),
         ("SAC", "Pendulum-v1"), ("TD3", "Pendulum-v1"), ("DDPG", "Pendulum-v1")]


def _obs(space: Any) -> np.ndarray:
    space.seed(0)
    return np.stack([space.sample() for _ in range(8)])


@pytest.mark.parametrize("algo,env", CASES)
def test_sb3_archive_loads_in_rlgrad_with_same_actions(tmp_path: Any, algo: str, env: str) -> None:
    theirs = getattr(sb3, algo)("MlpPolicy", env, seed=0, learning_rate=5e-4,
                                policy_kwargs=dict(net_arch=[16, 8],
                                                   activation_fn=torch.nn.Tanh))
    theirs.learn(20)
    theirs.save(tmp_path / "m.zip")
    with zipfile.ZipFile(tmp_path / "m.zip") as z:
        assert "policy.pth" in z.namelist()
    mine = getattr(rl, algo).load(tmp_path / "m.zip")
    obs = _obs(theirs.observation_space)
    np.testing.assert_allclose(mine.predict(obs, deterministic=True)[0],
                               theirs.predict(obs, deterministic=True)[0], rtol=1e-5, atol=1e-6)
    assert mine.num_timesteps == theirs.num_timesteps and mine.learning_rate == 5e-4
    with pytest.raises(ValueError, match="without its environment"):
        mine.learn(10)  # no env in an SB3 archive: predict only
    mine = getattr(rl, algo).load(tmp_path / "m.zip", env=env)
    mine.learn(10)  # and with one, training goes on


@pytest.mark.parametrize("algo,env", CASES)
def test_rlgrad_archive_loads_in_sb3_with_same_actions(tmp_path: Any, algo: str, env: str) -> None:
    mine = getattr(rl, algo)("MlpPolicy", env, seed=1, learning_rate="lin_0.001",
                             policy_kwargs=dict(net_arch=[8], activation_fn="tanh"))
    mine.learn(20)
    mine.save(tmp_path / "m.zip")
    theirs = getattr(sb3, algo).load(tmp_path / "m.zip")
    obs = _obs(mine.observation_space)
    np.testing.assert_allclose(theirs.predict(obs, deterministic=True)[0],
                               mine.predict(obs, deterministic=True)[0], rtol=1e-5, atol=1e-6)
    assert theirs.policy_kwargs["activation_fn"] is torch.nn.Tanh
    assert theirs.learning_rate == pytest.approx(1e-3)  # the schedule's start, for SB3
    theirs.set_env(theirs.get_env() or sb3.common.env_util.make_vec_env(env))
    again = getattr(rl, algo).load(tmp_path / "m.zip")  # rlgrad's own: its schedule and env id
    assert again.env_id == env and again.get_hyperparams()["learning_rate"] == "lin_0.001"
    np.testing.assert_array_equal(again.predict(obs, deterministic=True)[0],
                                  mine.predict(obs, deterministic=True)[0])

"""SB3's logger in rlgrad (``rlgrad.rl.common.logger``), checked against Stable-Baselines3's
own formats: the same files and tables for the same records, the same exclusions and errors."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest

import rlgrad.rl.common.logger as ours
from rlgrad.rl.monitor import Monitor, load_results

sb3_logger = pytest.importorskip("stable_baselines3.common.logger")

ROWS = [{"a": 3, "b": 2.5}, {"b": -2.5, "a": 5.5, "c/x": 1e-7},
        {"f": "text, with \"quotes\"", "a": 1}]


def _log_all(mod, folder: str, formats: list[str]) -> None:
    logger = mod.configure(folder, formats)
    for row in ROWS:
        for k, v in row.items():
            logger.record(k, v)
        logger.record("skipped", 1.0, exclude=("csv", "json", "stdout", "log"))
        logger.dump(step=7)
    logger.close()


def test_csv_and_json_files_read_back_as_sb3s(tmp_path) -> None:
    pd = pytest.importorskip("pandas")
    _log_all(ours, str(tmp_path / "ours"), ["csv", "json"])
    _log_all(sb3_logger, str(tmp_path / "sb3"), ["csv", "json"])
    mine = ours.read_csv(str(tmp_path / "ours" / "progress.csv"))
    theirs = pd.read_csv(str(tmp_path / "sb3" / "progress.csv"), index_col=None, comment="#")
    assert sorted(mine.columns) == sorted(theirs.columns) == ["a", "b", "c/x", "f"]
    for col in ["a", "b", "c/x", "f"]:
        assert mine[col].astype(str).tolist() == theirs[col].astype(str).tolist()
    with open(tmp_path / "ours" / "progress.json") as f, \
            open(tmp_path / "sb3" / "progress.json") as g:
        assert [json.loads(x) for x in f] == [json.loads(x) for x in g]


def test_human_table_is_sb3s_text() -> None:
    row = {"rollout/ep_rew_mean": 21.5, "time/fps": 100, "train/loss": 0.12345,
           "time/total_timesteps": 2048, "plain": "x"}
    excluded = dict.fromkeys(row)
    a, b = io.StringIO(), io.StringIO()
    ours.HumanOutputFormat(a).write(row, excluded)
    sb3_logger.HumanOutputFormat(b).write(row, excluded)
    assert a.getvalue() == b.getvalue()
    long = {"k" * 40: 1, "k" * 39: 2}
    for mod in (ours, sb3_logger):
        with pytest.raises(ValueError, match="truncated"):
            mod.HumanOutputFormat(io.StringIO()).write(long, dict.fromkeys(long))


@pytest.mark.parametrize("fmt", ["stdout", "log", "json", "csv"])
@pytest.mark.parametrize("value", ["video", "figure", "image", "hparam"])
def test_rich_values_refused_by_text_formats(tmp_path, fmt: str, value: str) -> None:
    values = {"video": lambda m: m.Video(np.zeros((1, 2, 3, 4, 4)), fps=5),
              "figure": lambda m: m.Figure(object(), close=True),
              "image": lambda m: m.Image(np.zeros((4, 4, 3)), "HWC"),
              "hparam": lambda m: m.HParam({"lr": 1e-3}, {"r": 0.0})}
    w = ours.make_output_format(fmt, str(tmp_path))
    with pytest.raises(ours.FormatUnsupportedError, match=fmt):
        w.write({"v": values[value](ours)}, {"v": ()})
    assert issubclass(ours.FormatUnsupportedError, NotImplementedError)
    with pytest.raises(ValueError, match="Unknown format"):
        ours.make_output_format("nope", str(tmp_path))


def test_tensorboard_writes_scalars_text_histograms_and_images(tmp_path) -> None:
    from tensorboardX.event_file_writer import EventFileWriter  # noqa: F401 (installed)

    w = ours.make_output_format("tensorboard", str(tmp_path))
    w.write({"s": 1.5, "t": "hello", "h": np.arange(10.0), "img": ours.Image(
        np.zeros((4, 4, 3), np.uint8), "HWC"), "hp": ours.HParam({"lr": 0.1}, {"r": 1.0})},
        {"s": None, "t": None, "h": None, "img": None, "hp": None}, step=3)
    w.close()
    files = [f for f in os.listdir(tmp_path) if "tfevents" in f]
    assert files
    import struct

    from tensorboardX.proto import event_pb2

    tags = set()
    for name in files:
        data = open(tmp_path / name, "rb").read()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("Q", data[i:i + 8])
            ev = event_pb2.Event.FromString(data[i + 12:i + 12 + n])
            tags |= {v.tag for v in ev.summary.value}
            i += 12 + n + 4
    assert {"s", "h", "img"} <= tags and any(t.startswith("t") for t in tags)


def test_logger_levels_record_mean_and_history() -> None:
    buf = io.StringIO()
    logger = ours.Logger(None, [ours.HumanOutputFormat(buf)])
    logger.debug("hidden")
    logger.info("shown", 1)
    logger.set_level(ours.DEBUG)
    logger.debug("now shown")
    logger.record_mean("m", 1.0)
    logger.record_mean("m", 4.0)
    row = logger.dump(step=12)
    assert row == {"m": 2.5, "time/total_timesteps": 12} and logger.history == [row]
    assert buf.getvalue().splitlines()[:2] == ["shown 1", "now shown"]
    logger.set_level(ours.DISABLED)
    logger.record("x", 1)
    assert logger.dump() == {} and len(logger.history) == 1


def test_model_logger_follows_sb3(tmp_path, monkeypatch) -> None:
    from rlgrad.rl import A2C

    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path / "env"))
    m = A2C("MlpPolicy", "CartPole-v1", verbose=0, seed=0).learn(10)
    assert m.logger.output_formats == [] and m.logger.dir == str(tmp_path / "env")
    m = A2C("MlpPolicy", "CartPole-v1", verbose=1, tensorboard_log=str(tmp_path), seed=0)
    m.learn(10)
    assert [type(f) for f in m.logger.output_formats] == [ours.HumanOutputFormat,
                                                           ours.TensorBoardOutputFormat]
    assert m.logger.dir == str(tmp_path / "A2C_1")
    custom = ours.configure(str(tmp_path / "c"), ["csv"])
    m.set_logger(custom)
    m.learn(20, log_interval=1)
    assert m.logger is custom and len(custom.output_formats) == 1
    assert "time/fps" in ours.read_csv(str(tmp_path / "c" / "progress.csv")).columns


def test_monitor_files_read_back_as_sb3s(tmp_path) -> None:
    import gymnasium as gym
    from stable_baselines3.common.monitor import load_results as sb3_load_results

    env = Monitor(gym.make("CartPole-v1"), str(tmp_path / "run"), info_keywords=())
    env.reset(seed=0)
    for _ in range(60):
        if env.step(env.action_space.sample())[2:4] != (False, False):
            env.reset()
    env.close()
    mine, theirs = load_results(str(tmp_path)), sb3_load_results(str(tmp_path))
    assert list(mine.columns) == list(theirs.columns)
    np.testing.assert_array_equal(mine["r"], theirs["r"])
    np.testing.assert_array_equal(mine["l"], theirs["l"])
    with pytest.raises(Exception, match="No monitor files"):
        load_results(str(tmp_path / "none"))


@pytest.mark.parametrize("algo", ["A2C", "PPO"])
def test_rows_are_dumped_before_the_update_as_sb3s(algo: str) -> None:
    """SB3's on-policy loop writes a row (every ``log_interval`` iterations) before the update:
    the row holds the previous update's train/ values, and after ``learn`` the last update's
    stay in ``logger.name_to_value``. Same rows (their train/n_updates) as SB3 itself."""
    import stable_baselines3 as sb3

    import rlgrad.rl

    kw = dict(n_steps=8, seed=0) | ({"batch_size": 8, "n_epochs": 2} if algo == "PPO" else {})
    rows: dict[str, list] = {}
    for name, mod in (("ours", rlgrad.rl), ("sb3", sb3)):
        m = getattr(mod, algo)("MlpPolicy", "CartPole-v1", **kw)
        logger = (ours if name == "ours" else sb3_logger).configure(None, [])
        seen: list = []
        logger.dump = lambda step=0, logger=logger, seen=seen: (
            seen.append(logger.name_to_value.get("train/n_updates")),
            logger.name_to_value.clear())
        m.set_logger(logger)
        m.learn(5 * 8, log_interval=2)
        rows[name] = seen + [m.logger.name_to_value["train/n_updates"]]
        assert np.isfinite(m.logger.name_to_value["train/loss"])
    per = 2 if algo == "PPO" else 1  # updates per iteration
    assert rows["ours"] == rows["sb3"] == [per, 3 * per, 5 * per]

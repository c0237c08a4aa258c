"""``Monitor``: Stable-Baselines3's episode recorder for one Gymnasium environment.

At the end of every episode it puts ``info["episode"] = {"r": return, "l": length, "t": seconds
since the wrapper was made}`` into the step's info (what ``evaluate_policy`` and SB3 scripts read)
and, with a ``filename``, appends the episode to a CSV file in SB3's format (``ResultsWriter``):
a first line ``#{"t_start": ..., "env_id": ...}`` then ``r,l,t`` rows (``<filename>.monitor.csv``
unless the name already ends so; a folder gets ``monitor.csv`` inside it). ``load_results``
reads a folder of them back (pandas).
"""

from __future__ import annotations

import csv
import json
import os
import time
from glob import glob
from typing import Any

import gymnasium as gym

EXT = "monitor.csv"


class LoadMonitorResultsError(Exception):
    """No monitor file where one was expected."""


class ResultsWriter:
    """Episodes as rows of a ``*.monitor.csv`` file (its folders made if missing)."""

    def __init__(self, filename: str = "", header: dict[str, Any] | None = None,
                 extra_keys: tuple[str, ...] = (), override_existing: bool = True) -> None:
        if not filename.endswith(EXT):
            filename = os.path.join(filename, EXT) if os.path.isdir(filename) else f"{filename}.{EXT}"
        filename = os.path.realpath(filename)
        os.makedirs(os.path.dirname(filename), exist_ok=True)
        self.file_handler = open(filename, "wt" if override_existing else "at", newline="\n")  # noqa: SIM115
        self.logger = csv.DictWriter(self.file_handler, fieldnames=("r", "l", "t", *extra_keys))
        if override_existing:
            self.file_handler.write(f"#{json.dumps(header or {})}\n")
            self.logger.writeheader()
        self.file_handler.flush()

    def write_row(self, epinfo: dict[str, Any]) -> None:
        self.logger.writerow(epinfo)
        self.file_handler.flush()  # a crash loses no finished episode

    def close(self) -> None:
        self.file_handler.close()


class Monitor(gym.Wrapper):
    EXT = EXT

    def __init__(self, env: gym.Env, filename: str | None = None, allow_early_resets: bool = True,
                 reset_keywords: tuple[str, ...] = (), info_keywords: tuple[str, ...] = (),
                 override_existing: bool = True) -> None:
        super().__init__(env)
        self.t_start = time.time()
        self.results_writer: ResultsWriter | None = None
        if filename is not None:
            env_id = env.spec.id if env.spec is not None else None
            self.results_writer = ResultsWriter(
                filename, header={"t_start": self.t_start, "env_id": str(env_id)},
                extra_keys=tuple(reset_keywords) + tuple(info_keywords),
                override_existing=override_existing)
        self.reset_keywords = tuple(reset_keywords)
        self.info_keywords = tuple(info_keywords)
        self.allow_early_resets = allow_early_resets
        self.rewards: list[float] = []
        self.needs_reset = True
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []
        self.episode_times: list[float] = []
        self.total_steps = 0
        self.current_reset_info: dict[str, Any] = {}  # the reset_keywords of this episode

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if not self.allow_early_resets and not self.needs_reset:
            raise RuntimeError("Tried to reset an environment before done. If you want to allow "
                               "early resets, wrap your env with Monitor(env, path, "
                               "allow_early_resets=True)")
        self.rewards = []
        self.needs_reset = False
        for key in self.reset_keywords:
            if kwargs.get(key) is None:
                raise ValueError(f"Expected you to pass keyword argument {key} into reset")
            self.current_reset_info[key] = kwargs[key]
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        if self.needs_reset:
            raise RuntimeError("Tried to step environment that needs reset")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.rewards.append(float(reward))
        if terminated or truncated:
            self.needs_reset = True
            ep_rew, ep_len = sum(self.rewards), len(self.rewards)
            ep = {"r": round(ep_rew, 6), "l": ep_len, "t": round(time.time() - self.t_start, 6)}
            for k in self.info_keywords:
                ep[k] = info[k]
            self.episode_returns.append(ep_rew)
            self.episode_lengths.append(ep_len)
            self.episode_times.append(time.time() - self.t_start)
            ep.update(self.current_reset_info)
            if self.results_writer is not None:
                self.results_writer.write_row(ep)
            info["episode"] = ep
        self.total_steps += 1
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        super().close()
        if self.results_writer is not None:
            self.results_writer.close()

    def get_total_steps(self) -> int:
        return self.total_steps

    def get_episode_rewards(self) -> list[float]:
        return self.episode_returns

    def get_episode_lengths(self) -> list[int]:
        return self.episode_lengths

    def get_episode_times(self) -> list[float]:
        return self.episode_times


def get_monitor_files(path: str) -> list[str]:
    """The ``*monitor.csv`` files in folder ``path``."""
    return glob(os.path.join(path, "*" + EXT))


def load_results(path: str) -> Any:
    """Every monitor file of folder ``path`` as one pandas DataFrame (columns r, l, t, ...),
    sorted by time, ``t`` counted from the earliest file's start."""
    try:
        import pandas
    except ImportError:
        raise ImportError("pandas is required for loading results: pip install pandas") from None
    files = get_monitor_files(path)
    if not files:
        raise LoadMonitorResultsError(f"No monitor files of the form *{EXT} found in {path}")
    frames, starts = [], []
    for name in files:
        with open(name) as fh:
            first = fh.readline()
            if not first.startswith("#"):
                raise LoadMonitorResultsError(f"{name}: not a monitor file (no '#{{...}}' header "
                                              "line)")
            header = json.loads(first[1:])
            frame = pandas.read_csv(fh, index_col=None)
        frame["t"] += header["t_start"]
        starts.append(header["t_start"])
        frames.append(frame)
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pandas.DataFrame(columns=["r", "l", "t"]).reset_index()
    out = pandas.concat(frames).sort_values("t").reset_index()
    out["t"] -= min(starts)
    return out


__all__ = ["LoadMonitorResultsError", "Monitor", "ResultsWriter", "get_monitor_files",
           "load_results"]

"""``Monitor``: Stable-Baselines3's episode recorder for one Gymnasium environment.

At the end of every episode it puts ``info["episode"] = {"r": return, "l": length, "t": seconds
since the wrapper was made}`` into the step's info (what ``evaluate_policy`` and SB3 scripts read)
and, with a ``filename``, appends the episode to a CSV file in SB3's format: a first line
``#{"t_start": ..., "env_id": ...}`` then ``r,l,t`` rows (``<filename>.monitor.csv`` unless the
name already ends so; a folder gets ``monitor.csv`` inside it).
"""

from __future__ import annotations

import csv
import json
import os
import time
from typing import Any

import gymnasium as gym

EXT = "monitor.csv"


class Monitor(gym.Wrapper):
    def __init__(self, env: gym.Env, filename: str | None = None, allow_early_resets: bool = True,
                 reset_keywords: tuple[str, ...] = (), info_keywords: tuple[str, ...] = (),
                 override_existing: bool = True) -> None:
        super().__init__(env)
        self.t_start = time.time()
        self.info_keywords = tuple(info_keywords)
        self.allow_early_resets = allow_early_resets
        self.rewards: list[float] = []
        self.needs_reset = True
        self.episode_returns: list[float] = []
        self.episode_lengths: list[int] = []
        self.episode_times: list[float] = []
        self.total_steps = 0
        self._file = None
        self._writer: Any = None
        if filename is not None:
            self._open(filename, override_existing)

    def _open(self, filename: str, override: bool) -> None:
        if os.path.isdir(filename):
            filename = os.path.join(filename, EXT)
        elif not filename.endswith(EXT):
            filename = filename + "." + EXT
        exists = os.path.exists(filename) and not override
        self._file = open(filename, "a" if exists else "w", newline="", encoding="utf-8")  # noqa: SIM115
        if not exists:
            env_id = getattr(self.env.spec, "id", None)
            self._file.write("#" + json.dumps({"t_start": self.t_start, "env_id": env_id}) + "\n")
        self._writer = csv.DictWriter(self._file, fieldnames=("r", "l", "t", *self.info_keywords))
        if not exists:
            self._writer.writeheader()
        self._file.flush()

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if not self.allow_early_resets and not self.needs_reset:
            raise RuntimeError("Monitor: tried to reset an environment before its episode ended; "
                               "pass allow_early_resets=True")
        self.rewards = []
        self.needs_reset = False
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        if self.needs_reset:
            raise RuntimeError("Monitor: step() after the episode ended; call reset() first")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.rewards.append(float(reward))
        self.total_steps += 1
        if terminated or truncated:
            self.needs_reset = True
            ep = {"r": round(sum(self.rewards), 6), "l": len(self.rewards),
                  "t": round(time.time() - self.t_start, 6)}
            for k in self.info_keywords:
                ep[k] = info[k]
            self.episode_returns.append(ep["r"])
            self.episode_lengths.append(ep["l"])
            self.episode_times.append(ep["t"])
            if self._writer is not None:
                self._writer.writerow(ep)
                self._file.flush()
            info = dict(info)
            info["episode"] = ep
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        super().close()
        if self._file is not None:
            self._file.close()
            self._file = None

    def get_total_steps(self) -> int:
        return self.total_steps

    def get_episode_rewards(self) -> list[float]:
        return self.episode_returns

    def get_episode_lengths(self) -> list[int]:
        return self.episode_lengths

    def get_episode_times(self) -> list[float]:
        return self.episode_times

"""``VecVideoRecorder``: MP4 videos of an ``rgb_array`` VecEnv's rendering, each
``video_length`` steps long, started when ``record_video_trigger(step)`` says so
(``<name_prefix>-step-<a>-to-step-<b>.mp4`` in ``video_folder``; written with ffmpeg, from the
``imageio-ffmpeg`` package or the PATH, as ``rlgrad evaluate --video``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlgrad.rl.vec_env import VecEnv, VecEnvError, VecEnvWrapper


class VecVideoRecorder(VecEnvWrapper):
    def __init__(self, venv: VecEnv, video_folder: str, record_video_trigger: Callable[[int], bool],
                 video_length: int = 200, name_prefix: str = "rl-video") -> None:
        super().__init__(venv)
        self.env = venv
        inner = venv.unwrapped
        metadata = (inner.get_attr("metadata")[0] if hasattr(inner, "envs")
                    or hasattr(inner, "remotes") else inner.metadata)
        self.env.metadata = metadata
        if self.env.render_mode != "rgb_array":
            raise VecEnvError(f"The render_mode must be 'rgb_array', not {self.env.render_mode}")
        self.frames_per_sec = metadata.get("render_fps", 30)
        self.record_video_trigger = record_video_trigger
        self.video_folder = os.path.abspath(video_folder)
        os.makedirs(self.video_folder, exist_ok=True)
        self.name_prefix = name_prefix
        self.step_id = 0
        self.video_length = video_length
        self.recording = False
        self.recorded_frames: list[np.ndarray] = []
        self.video_name, self.video_path = "", ""

    def reset(self) -> Any:
        obs = self.venv.reset()
        if self.record_video_trigger(self.step_id):
            self._start_video_recorder()
        return obs

    def _start_video_recorder(self) -> None:
        self.video_name = (f"{self.name_prefix}-step-{self.step_id}-to-step-"
                           f"{self.step_id + self.video_length}.mp4")
        self.video_path = os.path.join(self.video_folder, self.video_name)
        if self.recording:
            self._stop_recording()
        self.recording = True
        self._capture_frame()

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.step_id += 1
        if self.recording:
            self._capture_frame()
            if len(self.recorded_frames) > self.video_length:
                self._stop_recording()
        elif self.record_video_trigger(self.step_id):
            self._start_video_recorder()
        return obs, rewards, dones, infos

    def _capture_frame(self) -> None:
        frame = self.env.render()
        if isinstance(frame, np.ndarray):
            self.recorded_frames.append(frame)
        else:
            self._stop_recording()
            warnings.warn(f"Recording stopped: render returned {type(frame).__name__}, not an "
                          "image array", stacklevel=3)

    def _stop_recording(self) -> None:
        if self.recorded_frames:
            from rlgrad.cli.evaluate import write_mp4

            print(f"Saving video to {self.video_path}")
            write_mp4(self.recorded_frames, Path(self.video_path), float(self.frames_per_sec))
        self.recorded_frames = []
        self.recording = False

    def close(self) -> None:
        VecEnvWrapper.close(self)
        if self.recording:
            self._stop_recording()


__all__ = ["VecVideoRecorder"]

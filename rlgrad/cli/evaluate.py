"""``rlgrad eval RUN_DIR [--episodes 20] [--video FILE]``: mean and std of the return of the last
checkpoint's policy, and optionally a video of one episode.

Video frames come from Gymnasium's ``rgb_array`` rendering. A ``.gif`` is written with Pillow
(which matplotlib brings along, so it needs no extra install); an ``.mp4`` needs an ffmpeg, found
through the ``imageio-ffmpeg`` package or as an ``ffmpeg`` program on the PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from rlgrad.cli.env_ids import ModuleTrust
from rlgrad.cli.errors import CLIError
from rlgrad.cli.run_dir import RunDir, run_inside

VIDEO_FORMATS = (".gif", ".mp4")


def _ffmpeg_exe() -> str | None:
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except Exception:  # not installed, or installed without its binary
        return shutil.which("ffmpeg")


def check_video_path(video: str) -> Path:
    """Fail before evaluating when the video cannot be written."""
    path = Path(video)
    ext = path.suffix.lower()
    if ext not in VIDEO_FORMATS:
        raise CLIError(f"--video {video}: the file name must end in .gif or .mp4")
    if not path.parent.is_dir():
        raise CLIError(f"--video {video}: folder '{path.parent}' does not exist")
    if ext == ".mp4" and _ffmpeg_exe() is None:
        raise CLIError(f"--video {video}: writing MP4 needs ffmpeg, which was not found; use a "
                       ".gif file name (no extra install), or install ffmpeg (pip install "
                       "imageio-ffmpeg, or the system's ffmpeg package)")
    return path


def record_episode(agent: Any, env_id: str, seed: int, deterministic: bool, max_frames: int
                   ) -> tuple[list[np.ndarray], float, float]:
    """(frames, episode return, frames per second) of one episode rendered as RGB arrays."""
    import gymnasium as gym
    from gymnasium.error import DependencyNotInstalled

    # pygame (classic-control rendering) needs no window for rgb_array: keep SDL off the display
    # and quiet
    for k, v in (("SDL_VIDEODRIVER", "dummy"), ("SDL_AUDIODRIVER", "dummy"),
                 ("PYGAME_HIDE_SUPPORT_PROMPT", "1")):
        os.environ.setdefault(k, v)
    from rlgrad.rl.atari import make_pixel_env, pixel_env_kind

    try:
        if pixel_env_kind(env_id):  # the evaluation form: whole games, raw scores
            env = make_pixel_env(env_id, training=False, render_mode="rgb_array")
        else:
            env = gym.make(env_id, render_mode="rgb_array")
    except DependencyNotInstalled as e:
        raise CLIError(f"cannot render {env_id}: {e}") from None
    except Exception as e:  # an env that does not take render_mode
        raise CLIError(f"cannot render {env_id}: {type(e).__name__}: {e}") from None
    try:
        obs, _ = env.reset(seed=seed)
        try:
            frames = [np.asarray(env.render())]
        except DependencyNotInstalled as e:
            raise CLIError(f"cannot render {env_id}: {e}") from None
        if frames[0].ndim != 3:
            raise CLIError(f"cannot render {env_id}: its rgb_array render gave no image")
        total, done = 0.0, False
        while not done and len(frames) < max_frames:
            action, _ = agent.predict(obs, deterministic=deterministic)
            obs, r, term, trunc, _ = env.step(action)
            total += float(r)
            done = bool(term or trunc)
            frames.append(np.asarray(env.render()))
        fps = float(env.metadata.get("render_fps") or 30)
    finally:
        env.close()
    return frames, total, fps


def write_gif(frames: list[np.ndarray], path: Path, fps: float) -> None:
    from PIL import Image

    # GIF delays are in 1/100 s and viewers clamp delays under 2/100 s: drop frames above 50 fps
    step = max(1, int(np.ceil(fps / 50)))
    duration = int(round(1000 * step / fps / 10) * 10) or 20
    images = [Image.fromarray(f.astype(np.uint8)) for f in frames[::step]]
    tmp = path.with_name(f".{path.name}.tmp")
    images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:],
                   duration=max(duration, 20), loop=0, optimize=False)
    tmp.replace(path)


def write_mp4(frames: list[np.ndarray], path: Path, fps: float) -> None:
    exe = _ffmpeg_exe()
    if exe is None:
        raise CLIError("writing MP4 needs ffmpeg; use a .gif file name or install imageio-ffmpeg")
    h, w = frames[0].shape[:2]
    h2, w2 = h - h % 2, w - w % 2  # yuv420p wants even sizes
    cmd = [exe, "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
           "-s", f"{w2}x{h2}", "-r", f"{fps:g}", "-i", "-", "-an", "-vcodec", "libx264",
           "-pix_fmt", "yuv420p", "-f", "mp4", str(path.with_name(f".{path.name}.tmp"))]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    try:
        for f in frames:
            proc.stdin.write(np.ascontiguousarray(f[:h2, :w2, :3], dtype=np.uint8).tobytes())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.wait() != 0:
        raise CLIError(f"ffmpeg could not write {path}: {' '.join(err.split())[:300]}")
    path.with_name(f".{path.name}.tmp").replace(path)


def evaluate_run(rd: RunDir, episodes: int, deterministic: bool = True, seed: int = 10_000,
                 trust: ModuleTrust | None = None) -> tuple[Any, dict[str, Any], float, float]:
    """(algorithm at its last checkpoint, config, mean return, std) of a run directory."""
    from rlgrad.cli.train import restore
    from rlgrad.rl.evaluation import evaluate

    if episodes < 1:
        raise CLIError(f"--episodes must be at least 1, got {episodes}")
    algo, cfg, _ = restore(rd, purpose="eval", trust=trust)
    mean, std = evaluate(algo, str(cfg["env_id"]), n_episodes=episodes,
                         deterministic=deterministic, seed=seed)
    print(f"{rd.path}: {str(cfg['algo']).upper()} on {cfg['env_id']} at step {algo.num_timesteps}")
    print(f"mean return {mean:.2f} +/- {std:.2f} over {episodes} episodes", flush=True)
    return algo, cfg, mean, std


def cmd_eval(run_dir: str, episodes: int, video: str | None, deterministic: bool, seed: int,
             max_frames: int, trust: ModuleTrust | None = None) -> int:
    vpath = check_video_path(video) if video else None
    algo, cfg, _, _ = evaluate_run(run_inside(run_dir), episodes, deterministic, seed, trust)
    if vpath is not None:
        frames, ret, fps = record_episode(algo, str(cfg["env_id"]), seed, deterministic,
                                          max_frames)
        try:
            (write_gif if vpath.suffix.lower() == ".gif" else write_mp4)(frames, vpath, fps)
        except OSError as e:
            raise CLIError(f"cannot write {vpath}: {e.strerror or e}") from None
        print(f"video: {vpath} ({len(frames)} frames, episode return {ret:.1f})")
    return 0

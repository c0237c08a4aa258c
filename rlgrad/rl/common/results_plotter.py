"""``stable_baselines3.common.results_plotter``: episode returns of ``Monitor`` files plotted
against timesteps, episodes or wall time (needs pandas and matplotlib, checked at import)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

try:
    import pandas  # noqa: F401
except ImportError:
    raise ImportError("pandas is required for plotting functionality: pip install pandas") from None
try:
    from matplotlib import pyplot as plt
except ImportError:
    raise ImportError("matplotlib is required for plotting functionality: pip install "
                      "matplotlib") from None

from rlgrad.rl.monitor import load_results

X_TIMESTEPS = "timesteps"
X_EPISODES = "episodes"
X_WALLTIME = "walltime_hrs"
POSSIBLE_X_AXES = [X_TIMESTEPS, X_EPISODES, X_WALLTIME]
EPISODES_WINDOW = 100


def rolling_window(array: np.ndarray, window: int) -> np.ndarray:
    """Views of ``array``'s last axis, ``window`` consecutive values each."""
    return np.lib.stride_tricks.sliding_window_view(array, window, axis=-1)


def window_func(var_1: np.ndarray, var_2: np.ndarray, window: int,
                func: Callable[..., np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``func`` over each window of ``var_2``, with the ``var_1`` values where windows end."""
    return var_1[window - 1:], func(rolling_window(var_2, window), axis=-1)


def ts2xy(data_frame: Any, x_axis: str) -> tuple[np.ndarray, np.ndarray]:
    """(x, episode returns) of a ``load_results`` frame for ``x_axis``."""
    if x_axis == X_TIMESTEPS:
        return np.cumsum(data_frame.l.values), data_frame.r.values
    if x_axis == X_EPISODES:
        return np.arange(len(data_frame)), data_frame.r.values
    if x_axis == X_WALLTIME:
        return data_frame.t.values / 3600.0, data_frame.r.values
    raise NotImplementedError(f"Unsupported x_axis={x_axis!r}, please use one of {POSSIBLE_X_AXES}")


def plot_curves(xy_list: list[tuple[np.ndarray, np.ndarray]], x_axis: str, title: str,
                figsize: tuple[int, int] = (8, 2)) -> None:
    """Each curve's points, and its mean over ``EPISODES_WINDOW`` episodes when long enough."""
    plt.figure(title, figsize=figsize)
    for x, y in xy_list:
        plt.scatter(x, y, s=2)
        if x.shape[0] >= EPISODES_WINDOW:
            plt.plot(*window_func(x, y, EPISODES_WINDOW, np.mean))
    plt.xlim(0, max(xy[0][-1] for xy in xy_list))
    plt.title(title)
    plt.xlabel(x_axis)
    plt.ylabel("Episode Rewards")
    plt.tight_layout()


def plot_results(dirs: list[str], num_timesteps: int | None, x_axis: str, task_name: str,
                 figsize: tuple[int, int] = (8, 2)) -> None:
    """The Monitor files of each folder in ``dirs`` as one curve (up to ``num_timesteps``)."""
    frames = []
    for folder in dirs:
        frame = load_results(folder)
        if num_timesteps is not None:
            frame = frame[frame.l.cumsum() <= num_timesteps]
        frames.append(frame)
    plot_curves([ts2xy(f, x_axis) for f in frames], x_axis, task_name, figsize)


__all__ = ["EPISODES_WINDOW", "POSSIBLE_X_AXES", "X_EPISODES", "X_TIMESTEPS", "X_WALLTIME",
           "plot_curves", "plot_results", "rolling_window", "ts2xy", "window_func"]

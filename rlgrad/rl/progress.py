"""The progress bar of ``learn(progress_bar=True)`` (rich): steps, steps per second, recent mean
return, ETA. It reads the algorithm's counters; it never changes them."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


class ProgressBar:
    """A rich progress bar: steps, steps per second, recent mean return, ETA."""

    def __init__(self, total: int, algo: Any) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.algo = algo
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[fps]} steps/s"), TextColumn("return {task.fields[ret]}"),
            TimeRemainingColumn(),
        )
        self.task = self.progress.add_task(type(algo).__name__, total=total,
                                           completed=algo.num_timesteps, fps="-", ret="-")
        self.t0 = time.perf_counter()
        self.n0 = algo.num_timesteps
        self.progress.start()

    def update(self) -> None:
        a = self.algo
        q = a._ep_stats.return_queue
        fps = (a.num_timesteps - self.n0) / max(time.perf_counter() - self.t0, 1e-9)
        self.progress.update(self.task, completed=a.num_timesteps, fps=f"{fps:.0f}",
                             ret=f"{np.mean(q):.1f}" if len(q) else "-")

    def close(self) -> None:
        self.progress.stop()

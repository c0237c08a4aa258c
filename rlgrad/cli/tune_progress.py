"""``rlgrad tune``'s own progress lines, printed by the driver as Tune starts and ends trials.

The trials' output stays in their run directories (``rlgrad tune`` starts Ray without sending
the workers' output to the driver: it came prefixed, coloured and deduplicated, drowning these
lines). Imported only by ``rlgrad tune``, with Ray installed; a module of its own so that Tune
can pickle the callback with the sweep's state (``--resume``).
"""

from __future__ import annotations

import math
import sys
from typing import Any

from ray.tune import Callback

from rlgrad.cli.plot import short


def settings_text(config: dict[str, Any]) -> str:
    """``learning_rate=0.000608, n_steps=32``: a trial's sampled values, floats to 3 digits."""
    return ", ".join(f"{k}={short(v)}" for k, v in config.items())


def first_error_line(error: Any) -> str:
    """The line of a trial's error that says what happened (rlgrad's own, when there is one)."""
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    ours = [ln for ln in lines if "rlgrad " in ln]
    return (ours or lines or [type(error).__name__])[-1]


class Progress(Callback):
    """One line per trial started, finished or failed, with the count of trials done."""

    def __init__(self, total: int, metric: str, time_attr: str) -> None:
        self.total, self.metric, self.time_attr = total, metric, time_attr
        self.done = 0

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        print(f"trial {trial.trial_id}: started ({settings_text(trial.config)})", flush=True)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.done += 1
        last = trial.last_result or {}
        ret, step = last.get(self.metric), last.get(self.time_attr)
        what = (f"mean episode return {ret:.1f} at step {step}"
                if isinstance(ret, float) and math.isfinite(ret) else "no episode finished")
        print(f"trial {trial.trial_id}: finished, {what} ({self.done}/{self.total} done)",
              flush=True)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.done += 1
        try:
            why = first_error_line(trial.get_error())
        except Exception:  # noqa: BLE001 - an error that cannot be read is still a failure
            why = "see its run directory"
        print(f"trial {trial.trial_id}: failed: {why} ({self.done}/{self.total} done)",
              file=sys.stderr, flush=True)

"""Learning curves: one run's ``learning_curve.png``, and ``rlgrad plot`` over several runs.

Runs of the same configuration (same environment, algorithm and hyperparameters, any seed) form
one group, drawn as the mean across seeds with a band of plus or minus one standard deviation and
the seeds themselves as thin lines; the groups of one environment are overlaid in its panel, and
each environment has a panel of its own (titled with it). Matplotlib is used through its Agg
canvas directly (no pyplot, no global backend switch), and the PNG is written atomically.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlgrad.cli.errors import CLIError
from rlgrad.cli.run_dir import CONFIG, STEP_KEY, RunDir, atomic_write_bytes

RETURN_KEY = "rollout/ep_rew_mean"


@dataclass
class Run:
    path: Path
    config: dict[str, Any]
    steps: np.ndarray
    values: np.ndarray

    @property
    def group_key(self) -> str:
        c = self.config
        return json.dumps([c.get("env_id"), c.get("algo"), c.get("hyperparams", {})],
                          sort_keys=True, default=str)


def short(v: Any) -> str:
    """A value for a label or a line: floats to 3 significant digits (0.000608, 0.993)."""
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def load_run(path: str | Path, key: str = RETURN_KEY, rows: list[dict[str, Any]] | None = None
             ) -> Run:
    rd = RunDir(path)
    cfg = rd.read_config()
    rows = rd.read_metrics() if rows is None else rows
    pts = [(r[STEP_KEY], r[key]) for r in rows if isinstance(r.get(key), float)]
    steps = np.array([p[0] for p in pts], dtype=np.float64)
    values = np.array([p[1] for p in pts], dtype=np.float64)
    return Run(Path(path), cfg, steps, values)


def expand(paths: list[str]) -> list[Path]:
    """Run directories from the arguments; a folder of runs (``runs/``) stands for all of them."""
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise CLIError(f"no run directory at '{p}'")
        if (p / CONFIG).exists():
            out.append(p)
            continue
        subs = sorted(d for d in p.iterdir() if (d / CONFIG).exists())
        if not subs:
            raise CLIError(f"'{p}' is not a run directory (no {CONFIG}) and holds none")
        out.extend(subs)
    return out


#: hyperparameters named first when groups differ in them (a legend shows a few)
_FIRST = ("learning_rate", "n_steps", "batch_size", "buffer_size", "gamma")
_MAX_KEYS = 5


def _label(group: list[Run], differing: list[str], with_family: bool) -> str:
    """A group's legend entry: what tells it apart (its algorithm and environment only when the
    panel holds several), and its seed or number of seeds."""
    c = group[0].config
    hp = c.get("hyperparams", {}) or {}
    parts = [f"{str(c.get('algo', '?')).upper()} on {c.get('env_id', '?')}"] if with_family else []
    parts += [f"{k}={short(hp.get(k))}" for k in differing]
    seeds = {r.config.get("seed") for r in group}
    if len(group) == 1:
        parts.append(f"seed {c.get('seed')}")
    else:
        parts.append(f"{len(group)} {'seeds' if len(seeds) == len(group) else 'runs'}")
    return ", ".join(parts)


def _differing_keys(groups: list[list[Run]]) -> list[list[str]]:
    """For each group, the hyperparameters that tell it apart from the other groups of the same
    algorithm and environment (a few of them, the usual suspects first: a legend is not a
    config file)."""
    def family(g: list[Run]) -> tuple[str, str]:
        return str(g[0].config.get("algo")), str(g[0].config.get("env_id"))

    out = []
    for g in groups:
        same = [h for h in groups if family(h) == family(g)]
        hps = [h[0].config.get("hyperparams", {}) or {} for h in same]
        keys = sorted(set.intersection(*(set(h) for h in hps))) if len(hps) > 1 else []
        keys.sort(key=lambda k: (_FIRST.index(k) if k in _FIRST else len(_FIRST), k))
        out.append([k for k in keys
                    if len({json.dumps(h.get(k), default=str) for h in hps}) > 1][:_MAX_KEYS])
    return out


def _draw_group(ax: Any, group: list[Run], color: str, label: str) -> bool:
    """One group's curves on ``ax``: a single run as a line, several as their mean with a band
    of one standard deviation and each seed thin; False if none has a point yet."""
    curves = [r for r in group if len(r.steps)]
    if not curves:
        return False
    few = max(len(r.steps) for r in curves) <= 3  # a line of one point is invisible
    marker = {"marker": "o", "ms": 4} if few else {}
    if len(curves) == 1:
        ax.plot(curves[0].steps, curves[0].values, color=color, lw=1.8, label=label, **marker)
        return True
    end = min(r.steps[-1] for r in curves)
    grid = np.unique(np.concatenate([r.steps[r.steps <= end] for r in curves]))
    if len(grid) == 0:
        grid = np.array([end])
    ys = np.stack([np.interp(grid, r.steps, r.values) for r in curves])
    mean, std = ys.mean(axis=0), ys.std(axis=0)
    for r in curves:
        ax.plot(r.steps, r.values, color=color, lw=0.6, alpha=0.35)
    ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.2, lw=0)
    ax.plot(grid, mean, color=color, lw=2.0, label=f"{label} (mean \u00b1 std)", **marker)
    return True


def _panels(runs: list[Run]) -> dict[str, list[list[Run]]]:
    """Environment id -> its groups (same algorithm and hyperparameters, any seed): returns of
    different environments share no scale, so each gets a panel of its own."""
    panels: dict[str, dict[str, list[Run]]] = {}
    for r in runs:
        env = str(r.config.get("env_id", "?"))
        panels.setdefault(env, {}).setdefault(r.group_key, []).append(r)
    return {env: list(groups.values()) for env, groups in panels.items()}


def figure(runs: list[Run], key: str = RETURN_KEY, title: str | None = None) -> Any:
    """The Matplotlib figure of the learning curves of ``runs``: one panel per environment,
    titled, its legend under it and inside the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = _panels(runs)
    n_entries = sum(len(g) for g in panels.values())
    fig = Figure(figsize=(8, (4.2 + 0.5) * len(panels) + 0.22 * n_entries + 0.4), dpi=100)
    FigureCanvasAgg(fig)
    legends = []
    for i, (env, glist) in enumerate(panels.items()):
        ax = fig.add_subplot(len(panels), 1, i + 1)
        algos = sorted({str(g[0].config.get("algo", "?")).upper() for g in glist})
        diffs = _differing_keys(glist)
        drew = False
        for j, (group, diff) in enumerate(zip(glist, diffs, strict=True)):
            label = _label(group, diff, with_family=len(algos) > 1)
            drew = _draw_group(ax, group, f"C{j % 10}", label) or drew
        if not drew:
            ax.text(0.5, 0.5, f"no '{key}' logged yet", ha="center", va="center",
                    transform=ax.transAxes, color="gray")
        ax.set_title(f"{' / '.join(algos)} on {env}" if len(panels) > 1 or not title else title)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("episode return (mean of the last 100)" if key == RETURN_KEY else key)
        ax.grid(True, alpha=0.3)
        if drew:  # under the axes, where it hides no curve
            legends.append(ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13),
                                     fontsize=8, frameon=False))
    if title and len(panels) > 1:
        fig.suptitle(title)
    _fit_legends(fig, legends)
    return fig


def _fit_legends(fig: Any, legends: list[Any]) -> None:
    """Lay the figure out, widened if a legend is wider than it (long labels ran off it)."""
    if legends:  # a legend's width does not depend on the layout: measure it first
        fig.canvas.draw()
        widest = max(leg.get_window_extent().width for leg in legends) / fig.dpi
        fig.set_figwidth(max(fig.get_figwidth(), widest + 0.4))
    fig.tight_layout()


def render(runs: list[Run], key: str = RETURN_KEY, title: str | None = None) -> bytes:
    """The PNG bytes of ``figure(runs, key, title)``."""
    buf = io.BytesIO()
    figure(runs, key, title).savefig(buf, format="png")
    return buf.getvalue()


def write_curve(runs: list[Run], out: Path, key: str = RETURN_KEY, title: str | None = None
                ) -> Path:
    try:
        atomic_write_bytes(out, render(runs, key, title))
    except OSError as e:
        raise CLIError(f"cannot write {out}: {e.strerror or e}") from None
    return out


def run_curve(rd: RunDir, rows: list[dict[str, Any]] | None = None) -> Path:
    """Refresh a run's own learning_curve.png (called on every checkpoint and at the end)."""
    run = load_run(rd.path, rows=rows)
    c = run.config
    title = f"{str(c.get('algo')).upper()} on {c.get('env_id')}, seed {c.get('seed')}"
    return write_curve([run], rd.curve, title=title)


def _load_runs(dirs: list[Path], key: str) -> list[Run]:
    """The runs that can be read; a damaged metrics.csv among several is skipped with a warning
    (the others still make a plot), alone it is the error."""
    import sys

    from rlgrad.cli.run_dir import DamagedMetrics

    runs, damaged = [], []
    for p in dirs:
        try:
            runs.append(load_run(p, key))
        except DamagedMetrics as e:
            damaged.append(e)
    if damaged and not runs:
        raise damaged[0]
    for e in damaged:
        print(f"rlgrad plot: warning: {e.message}; that run is left out", file=sys.stderr)
    return runs


def cmd_plot(paths: list[str], output: str | None, key: str) -> int:
    dirs = expand(paths)
    runs = _load_runs(dirs, key)
    if not any(len(r.steps) for r in runs):
        raise CLIError(f"none of these runs has logged '{key}' yet")
    if output is None:
        out = dirs[0] / "learning_curve.png" if len(dirs) == 1 else Path("learning_curves.png")
    else:
        out = Path(output)
        if out.suffix.lower() != ".png":
            raise CLIError(f"-o {output}: the output must be a .png file")
    if not out.parent.is_dir():
        raise CLIError(f"-o {output}: folder '{out.parent}' does not exist")
    write_curve(runs, out, key)
    n_groups = len({r.group_key for r in runs})
    print(f"{len(runs)} run(s) in {n_groups} configuration(s) -> {out}")
    return 0

"""Learning curves: one run's ``learning_curve.png``, and ``rlgrad plot`` over several runs.

Runs of the same configuration (same environment, algorithm and hyperparameters, any seed) form
one group, drawn as the mean across seeds with a band of plus or minus one standard deviation and
the seeds themselves as thin lines; groups are overlaid. Matplotlib is used through its Agg
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


def _label(group: list[Run], differing: list[str]) -> str:
    c = group[0].config
    hp = c.get("hyperparams", {}) or {}
    extra = ", ".join(f"{k}={hp.get(k)}" for k in differing)
    base = f"{str(c.get('algo', '?')).upper()} on {c.get('env_id', '?')}"
    if extra:
        base += f" ({extra})"
    if len(group) == 1:
        return f"{base}, seed {c.get('seed')}"
    seeds = {r.config.get("seed") for r in group}
    return f"{base}, {len(group)} {'seeds' if len(seeds) == len(group) else 'runs'}"


def _differing_keys(groups: list[list[Run]]) -> list[list[str]]:
    """For each group, the hyperparameters that tell it apart from the other groups of the same
    algorithm and environment (a few of them: a legend is not a config file)."""
    def family(g: list[Run]) -> tuple[str, str]:
        return str(g[0].config.get("algo")), str(g[0].config.get("env_id"))

    out = []
    for g in groups:
        same = [h for h in groups if family(h) == family(g)]
        hps = [h[0].config.get("hyperparams", {}) or {} for h in same]
        keys = sorted(set.intersection(*(set(h) for h in hps))) if len(hps) > 1 else []
        out.append([k for k in keys
                    if len({json.dumps(h.get(k), default=str) for h in hps}) > 1][:4])
    return out


def render(runs: list[Run], key: str = RETURN_KEY, title: str | None = None) -> bytes:
    """The PNG bytes of the overlaid learning curves of ``runs``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(r.group_key, []).append(r)
    glist = list(groups.values())
    differing = _differing_keys(glist)

    # the legend goes under the axes, where it hides no curve
    fig = Figure(figsize=(8, 4.8 + 0.22 * len(glist)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    colors = [f"C{i % 10}" for i in range(len(glist))]
    drew = False
    for color, group, diff in zip(colors, glist, differing):
        label = _label(group, diff)
        curves = [r for r in group if len(r.steps)]
        if not curves:
            continue
        drew = True
        if len(curves) == 1:
            ax.plot(curves[0].steps, curves[0].values, color=color, lw=1.8, label=label)
            continue
        end = min(r.steps[-1] for r in curves)
        grid = np.unique(np.concatenate([r.steps[r.steps <= end] for r in curves]))
        if len(grid) == 0:
            grid = np.array([end])
        ys = np.stack([np.interp(grid, r.steps, r.values) for r in curves])
        mean, std = ys.mean(axis=0), ys.std(axis=0)
        for r in curves:
            ax.plot(r.steps, r.values, color=color, lw=0.6, alpha=0.35)
        ax.fill_between(grid, mean - std, mean + std, color=color, alpha=0.2, lw=0)
        ax.plot(grid, mean, color=color, lw=2.0, label=f"{label} (mean \u00b1 std)")
    if not drew:
        ax.text(0.5, 0.5, f"no '{key}' logged yet", ha="center", va="center",
                transform=ax.transAxes, color="gray")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return (mean of the last 100)" if key == RETURN_KEY else key)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if drew:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), fontsize=8, frameon=False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
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

"""Learning curves on MinAtar: DQN and PPO with their ``minatar`` presets, several games and seeds.

    .venv/bin/python bench/minatar_curves.py [--games Breakout,SpaceInvaders] [--algos ppo,dqn]
        [--seeds 0,1,2] [--steps 200000] [--png docs/minatar_curves.png] [--json runs.json] [--quick]
    .venv/bin/python bench/minatar_curves.py --plot a.json b.json --png docs/minatar_curves.png
    .venv/bin/python bench/minatar_curves.py --speed      # DQN's steps/s and where its time goes

Each run trains ``--steps`` environment steps (the presets' budgets are 5-10M: a CPU run here is
a much shorter stretch of the same curve) and records the mean raw return of the last 20 training
episodes every 5,000 steps; at the end 20 deterministic evaluation episodes. Prints a markdown
table per run and one per game and algorithm (mean +/- std over seeds) next to a uniformly random
policy's return (100 episodes), saves the runs as JSON (``--json``, after every run; ``--plot``
tabulates and draws saved runs of several invocations) and the curves to a PNG (one panel per
game: per algorithm the mean over seeds and the band between the lowest and highest seed, and
each seed's own curve thin). A
benchmark, not a test: the numbers are evidence of learning.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import _timing  # noqa: F401 - first: pins BLAS to one thread before NumPy loads
import numpy as np  # noqa: E402

from rlgrad.rl import evaluate, make_from_preset  # noqa: E402

EVERY = 5_000


def train(algo: str, env_id: str, seed: int, steps: int, every: int = EVERY, last: int = 20,
          eval_episodes: int = 20, partial: Any = None, deadline: float | None = None,
          **overrides: Any) -> dict[str, Any]:
    """One run of ``algo``'s preset for ``env_id``: the curve (step, mean return of the last
    ``last`` training episodes) every ``every`` steps, then ``eval_episodes`` deterministic ones.
    ``partial(run)``, if given, gets the run so far at every point (a run stopped early keeps
    its curve: ``eval`` NaN, ``steps`` the steps done). ``deadline`` (``time.time()`` seconds):
    training stops at the first point past it, and the evaluation runs on what was learned."""
    model, _ = make_from_preset(algo, env_id, seed=seed, **overrides)
    curve: list[tuple[int, float]] = []
    mark, done = [every], [steps]
    t = time.perf_counter()

    def record(m: Any) -> bool:
        if m.num_timesteps >= mark[0]:
            mark[0] += every
            q = list(m._ep_stats.return_queue)[-last:]
            if q:
                curve.append((m.num_timesteps, float(np.mean(q))))
            if partial is not None:
                partial(result(m.num_timesteps, np.nan, np.nan))
            if m.num_timesteps % (10 * every) < m.n_envs:  # a sign of life in long runs
                print(f"  {algo} {env_id} seed {seed}: {m.num_timesteps:,} steps, "
                      f"{curve[-1][1] if curve else float('nan'):.2f} "
                      f"({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
            if deadline is not None and time.time() > deadline:
                done[0] = m.num_timesteps
                return False
        return True

    def result(done: int, mean: float, std: float) -> dict[str, Any]:
        return {"algo": algo, "game": env_id.split("/")[-1].split("-")[0], "env_id": env_id,
                "seed": seed, "curve": list(curve), "eval": float(mean), "eval_std": float(std),
                "wall": time.perf_counter() - t, "final": curve[-1][1] if curve else float("nan"),
                "steps": done}

    model.learn(steps, callback=record)
    wall = time.perf_counter() - t
    mean, std = evaluate(model, env_id, n_episodes=eval_episodes) if eval_episodes else (np.nan,) * 2
    return {**result(done[0], mean, std), "wall": wall}


class Uniform:
    """A uniformly random policy with ``predict``'s interface (for ``evaluate``)."""

    def __init__(self, n: int) -> None:
        self.rng, self.n = np.random.default_rng(0), n

    def predict(self, obs: Any, deterministic: bool = True) -> tuple[np.ndarray, None]:
        return self.rng.integers(0, self.n, len(obs)), None


def random_return(env_id: str, episodes: int = 100) -> tuple[float, float]:
    """(mean, std) of a uniformly random policy's raw return (Atari: whole games)."""
    import gymnasium as gym

    from rlgrad.rl.atari import pixel_env_kind, register_pixel_envs

    if pixel_env_kind(env_id) is None:  # a MinAtar game's name
        env_id = f"MinAtar/{env_id}-v1"
    register_pixel_envs(env_id)
    n = gym.make(env_id).action_space.n
    return evaluate(Uniform(n), env_id, n_episodes=episodes)


def mean_curve(runs: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """The seeds' curves on the first one's steps, up to the shortest: (steps, (n_seeds, len))."""
    curves = [np.asarray(r["curve"], dtype=float) for r in runs if r["curve"]]
    end = min(c[-1, 0] for c in curves)
    x = curves[0][curves[0][:, 0] <= end, 0]
    return x, np.stack([np.interp(x, c[:, 0], c[:, 1]) for c in curves])


def plot(runs: list[dict[str, Any]], path: Path, rand: dict[str, tuple[float, float]],
         ylabel: str = "mean return, last 20 episodes") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = sorted({r["game"] for r in runs})
    fig, axes = plt.subplots(1, len(games), figsize=(5.2 * len(games), 3.8), squeeze=False)
    colors = {"ppo": "tab:blue", "dqn": "tab:red", "a2c": "tab:green", "sb3 ppo": "tab:orange",
              "sb3 a2c": "tab:olive", "rlgrad ppo": "tab:blue", "rlgrad a2c": "tab:green"}
    for ax, game in zip(axes[0], games):
        env_id = next(r.get("env_id", f"MinAtar/{game}-v1") for r in runs if r["game"] == game)
        for algo in sorted({r["algo"] for r in runs if r["game"] == game}):
            sel = [r for r in runs if r["game"] == game and r["algo"] == algo and r["curve"]]
            if not sel:
                continue
            x, ys = mean_curve(sel)
            c = colors.get(algo, "k")
            seeds = f"{len(sel)} seeds: mean, min-max" if len(sel) > 1 else "1 seed"
            ax.plot(x, ys.mean(0), color=c, label=f"{algo.upper()} ({seeds})")
            if len(sel) > 1:
                ax.fill_between(x, ys.min(0), ys.max(0), color=c, alpha=0.2, lw=0)
                for r in sel:  # each seed thin, also past the shortest one's end
                    ax.plot(*zip(*r["curve"]), color=c, alpha=0.35, lw=0.7)
        ax.axhline(rand[game][0], color="gray", ls="--", lw=1, label="uniform random policy")
        if env_id.startswith("MinAtar/") and any(r["game"] == game and r["algo"] == "dqn" for r in runs):
            ax.axvline(100_000, color="tab:red", ls=":", lw=1, label="DQN's epsilon reaches 0.1")
        ax.set_title(env_id)
        ax.set_xlabel("environment steps")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def report(runs: list[dict[str, Any]], png: str | None) -> None:
    rand = {g: random_return(g) for g in sorted({r["game"] for r in runs})}
    print("| MinAtar game | algorithm | steps | seed | last 20 training episodes | "
          "20 evaluation episodes | wall time |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in runs:
        print(f"| {r['game']} | {r['algo'].upper()} | {r['steps']:,} | {r['seed']} | "
              f"{r['final']:.2f} | {r['eval']:.2f} +/- {r['eval_std']:.2f} | {r['wall']:.0f} s |")
    print("\n| MinAtar game | algorithm | steps | seeds | last 20 training episodes, mean +/- std "
          "over seeds | evaluation, mean +/- std over seeds | uniform random policy (100 episodes) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for game, algo in sorted({(r["game"], r["algo"]) for r in runs}):
        sel = [r for r in runs if r["game"] == game and r["algo"] == algo]
        fin, ev = np.array([r["final"] for r in sel]), np.array([r["eval"] for r in sel])
        print(f"| {game} | {algo.upper()} | {min(r['steps'] for r in sel):,} | {len(sel)} | "
              f"{fin.mean():.2f} +/- {fin.std():.2f} | {ev.mean():.2f} +/- {ev.std():.2f} | "
              f"{rand[game][0]:.2f} +/- {rand[game][1]:.2f} |")
    if png:
        plot(runs, Path(png), rand)
        print(f"curves: {png}")


def speed(game: str = "Breakout", warm: int = 6_000, steps: int = 3_000) -> None:
    """DQN's (preset) steps/s on MinAtar past its learning start, CPU time, and the share of the
    step's parts from a profile of the same steps."""
    import cProfile
    import pstats

    model, _ = make_from_preset("dqn", f"MinAtar/{game}-v1", seed=0)
    model.learn(warm)
    c = time.process_time()
    model.learn(steps, reset_num_timesteps=False)
    cpu = time.process_time() - c
    print(f"DQN MinAtar/{game}-v1: {steps / cpu:,.0f} steps/s of CPU time "
          f"({1e3 * cpu / steps:.2f} ms a step, one gradient step each)")
    prof = cProfile.Profile()
    prof.enable()
    model.learn(steps, reset_num_timesteps=False)
    prof.disable()
    st = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in st.values())  # tottime: every function's own share
    parts = {"gradient step (compiled forward + backward + Adam)": ("<rlgrad.jit>", "step"),
             "target network's forward (the TD target)": ("dqn.py", "td_target"),
             "collection (acting, environment step, replay add)": ("off_policy.py",
                                                                   "collect_rollouts")}
    print("| part | share of the step |\n|---|---:|")
    rest = 100.0
    for label, (file, fn) in parts.items():
        cum = sum(v[3] for k, v in st.items() if k[2] == fn and k[0].endswith(file))
        rest -= 100 * cum / total
        print(f"| {label} | {100 * cum / total:.0f}% |")
    print(f"| the rest (replay sampling, Python around the step) | {rest:.0f}% |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", default="Breakout,SpaceInvaders")
    ap.add_argument("--algos", default="ppo,dqn")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--png", default=None, help="where to write the curves (default: none)")
    ap.add_argument("--json", default=None, help="save the runs here")
    ap.add_argument("--plot", nargs="+", default=None, help="JSON files of earlier runs: table + PNG")
    ap.add_argument("--quick", action="store_true", help="one game, PPO, seed 0, 10k steps")
    ap.add_argument("--speed", action="store_true", help="DQN's steps/s and its profile")
    args = ap.parse_args()
    if args.speed:
        speed(args.games.split(",")[0])
        return
    if args.plot:
        report([r for f in args.plot for r in json.loads(Path(f).read_text())], args.png)
        return
    games, algos, seeds = args.games.split(","), args.algos.split(","), args.seeds.split(",")
    if args.quick:
        games, algos, seeds, args.steps = games[:1], ["ppo"], ["0"], 10_000
    runs: list[dict[str, Any]] = []

    def save(extra: list[dict[str, Any]]) -> None:  # a long benchmark stopped early keeps its runs
        if args.json:
            Path(args.json).write_text(json.dumps(runs + extra))

    for game in games:
        for algo in algos:
            for seed in seeds:
                r = train(algo, f"MinAtar/{game}-v1", int(seed), args.steps,
                          partial=lambda run: save([run]))
                runs.append(r)
                save([])
                print(f"{algo} {game} seed {seed}: final {r['final']:.2f}, eval {r['eval']:.2f} "
                      f"({r['wall']:.0f} s)", file=sys.stderr, flush=True)
    report(runs, args.png)


if __name__ == "__main__":
    main()

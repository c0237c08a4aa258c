"""Learning curves on MinAtar: DQN and PPO with their ``minatar`` presets, several games and seeds.

    .venv/bin/python bench/minatar_curves.py [--games Breakout,SpaceInvaders] [--algos ppo,dqn]
        [--seeds 0,1] [--steps 200000] [--png docs/minatar_curves.png] [--json runs.json] [--quick]
    .venv/bin/python bench/minatar_curves.py --plot a.json b.json --png docs/minatar_curves.png

Each run trains ``--steps`` environment steps (the presets' budgets are 5-10M: a CPU run here is
a much shorter stretch of the same curve) and records the mean raw return of the last 20 training
episodes every 5,000 steps; at the end 20 deterministic evaluation episodes. Prints a markdown
table (final training mean and evaluation mean per run, wall time), saves the runs as JSON
(``--json``; ``--plot`` draws and tabulates saved runs of several invocations) and the curves to a
PNG (one panel per game, one line per algorithm and seed). A benchmark, not a test: the numbers
are evidence of learning, compared with a uniformly random policy's return in the same table.
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


def train(algo: str, game: str, seed: int, steps: int) -> dict[str, Any]:
    env_id = f"MinAtar/{game}-v1"
    model, _ = make_from_preset(algo, env_id, seed=seed)
    curve: list[tuple[int, float]] = []
    mark = [EVERY]

    def record(m: Any) -> bool:
        if m.num_timesteps >= mark[0]:
            mark[0] += EVERY
            q = list(m._ep_stats.return_queue)[-20:]
            if q:
                curve.append((m.num_timesteps, float(np.mean(q))))
        return True

    t = time.perf_counter()
    model.learn(steps, callback=record)
    wall = time.perf_counter() - t
    mean, std = evaluate(model, env_id, n_episodes=20)
    return {"algo": algo, "game": game, "seed": seed, "curve": curve, "eval": mean,
            "eval_std": std, "wall": wall, "final": curve[-1][1] if curve else float("nan")}


def random_return(game: str, episodes: int = 20) -> float:
    class Uniform:
        def __init__(self, n: int) -> None:
            self.rng, self.n = np.random.default_rng(0), n

        def predict(self, obs: Any, deterministic: bool = True) -> tuple[np.ndarray, None]:
            return self.rng.integers(0, self.n, len(obs)), None

    import gymnasium as gym

    from rlgrad.rl.atari import register_pixel_envs

    env_id = f"MinAtar/{game}-v1"
    register_pixel_envs(env_id)
    n = gym.make(env_id).action_space.n
    return evaluate(Uniform(n), env_id, n_episodes=episodes)[0]


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = sorted({r["game"] for r in runs})
    fig, axes = plt.subplots(1, len(games), figsize=(5 * len(games), 3.6), squeeze=False)
    colors = {"ppo": "tab:blue", "dqn": "tab:red"}
    for ax, game in zip(axes[0], games):
        for r in (r for r in runs if r["game"] == game):
            if r["curve"]:
                x, y = zip(*r["curve"])
                ax.plot(x, y, color=colors.get(r["algo"], "k"), alpha=0.8,
                        label=f"{r['algo'].upper()} seed {r['seed']}")
        ax.set_title(f"MinAtar/{game}-v1")
        ax.set_xlabel("environment steps")
        ax.set_ylabel("mean return, last 20 episodes")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", default="Breakout,SpaceInvaders")
    ap.add_argument("--algos", default="ppo,dqn")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--png", default=None, help="where to write the curves (default: none)")
    ap.add_argument("--json", default=None, help="save the runs here")
    ap.add_argument("--plot", nargs="+", default=None, help="JSON files of earlier runs: table + PNG")
    ap.add_argument("--quick", action="store_true", help="one game, PPO, seed 0, 10k steps")
    args = ap.parse_args()
    if args.plot:
        runs = [r for f in args.plot for r in json.loads(Path(f).read_text())]
        report(runs, args.png)
        return
    games, algos, seeds = args.games.split(","), args.algos.split(","), args.seeds.split(",")
    if args.quick:
        games, algos, seeds, args.steps = games[:1], ["ppo"], ["0"], 10_000
    runs = []
    for game in games:
        for algo in algos:
            for seed in seeds:
                r = train(algo, game, int(seed), args.steps)
                runs.append({**r, "steps": args.steps})
                if args.json:  # after every run: a long benchmark stopped early keeps its runs
                    Path(args.json).write_text(json.dumps(runs))
                print(f"{algo} {game} seed {seed}: final {r['final']:.2f}, eval {r['eval']:.2f} "
                      f"({r['wall']:.0f} s)", file=sys.stderr, flush=True)
    report(runs, args.png)


def report(runs: list[dict[str, Any]], png: str | None) -> None:
    print("| MinAtar game | algorithm | steps | seed | last 20 training episodes | "
          "20 evaluation episodes | uniform random policy | wall time |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    rand = {g: random_return(g) for g in sorted({r["game"] for r in runs})}
    for r in runs:
        print(f"| {r['game']} | {r['algo'].upper()} | {r['steps']:,} | {r['seed']} | "
              f"{r['final']:.2f} | {r['eval']:.2f} +/- {r['eval_std']:.2f} | "
              f"{rand[r['game']]:.2f} | {r['wall']:.0f} s |")
    if png:
        plot(runs, Path(png))
        print(f"curves: {png}")


if __name__ == "__main__":
    main()

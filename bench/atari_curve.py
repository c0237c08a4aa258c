"""A short Atari learning curve in raw game score: one algorithm's zoo ``atari`` preset on one game.

    .venv/bin/python bench/atari_curve.py [--env BreakoutNoFrameskip-v4] [--algo a2c] [--seeds 0]
        [--steps 200000] [--json atari.json] [--png docs/atari_curve.png] [--stop-at HH:MM]
    .venv/bin/python bench/atari_curve.py --library sb3 --algo ppo [...]   # SB3 beside it
    .venv/bin/python bench/atari_curve.py --plot atari.json sb3.json --png docs/atari_curve.png

The presets' budgets are 10M steps (40M frames); a CPU run here is the first stretch of that
curve. Every 10,000 steps it records the mean raw score of the last 10 whole games (all lives,
unclipped: ``RecordGameStatistics``), at the end 10 evaluation games (deterministic, whole games),
and prints a markdown table next to a uniformly random policy's score (10 games). A benchmark,
not a test.

``--library sb3`` trains Stable-Baselines3's PPO/A2C instead, with the same zoo hyperparameters
(rlgrad's preset file, which states the zoo's values) on SB3's own ``make_atari_env``
(``AtariWrapper``) + ``VecFrameStack(4)``, one torch thread; its curve is the mean raw score of
the last 10 games of its ``Monitor`` (whole games: the Monitor sits inside the life-loss wrapper),
its evaluation SB3's ``evaluate_policy`` (deterministic, 10 whole games on the same wrappers).
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
from minatar_curves import plot, random_return, train  # noqa: E402

from rlgrad.rl import load_preset  # noqa: E402
from rlgrad.rl.atari import register_pixel_envs  # noqa: E402


def _sb3_kwargs(algo: str, env_id: str) -> tuple[int, dict[str, Any]]:
    """(n_envs, SB3 constructor kwargs) from rlgrad's preset: the zoo's own values."""
    hp = load_preset(algo, env_id)
    n_envs = int(hp.pop("n_envs", 1))
    hp.pop("n_timesteps", None)
    hp.pop("policy", None)
    for key, value in list(hp.items()):
        if isinstance(value, str) and value.startswith("lin_"):  # the zoo's linear schedule
            hp[key] = (lambda v: lambda progress: progress * v)(float(value[4:]))
    if algo == "a2c":  # the zoo's A2C atari entry: RMSpropTFLike(eps=1e-5) (in the preset)
        from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

        hp["policy_kwargs"] = {"optimizer_class": RMSpropTFLike, "optimizer_kwargs": {"eps": 1e-5}}
    return n_envs, hp


def train_sb3(algo: str, env_id: str, seed: int, steps: int, every: int = 10_000, last: int = 10,
              eval_episodes: int = 10, partial: Any = None,
              deadline: float | None = None) -> dict[str, Any]:
    """``train``'s run record for Stable-Baselines3's ``algo`` (ppo or a2c) with the zoo preset."""
    import torch
    from stable_baselines3 import A2C, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecFrameStack

    torch.set_num_threads(1)
    register_pixel_envs(env_id)  # ale-py's ids in Gymnasium's registry
    n_envs, hp = _sb3_kwargs(algo, env_id)
    env = VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed), n_stack=4)
    model = {"ppo": PPO, "a2c": A2C}[algo]("CnnPolicy", env, seed=seed, device="cpu", **hp)
    curve: list[tuple[int, float]] = []
    t = time.perf_counter()

    def result(done: int, mean: float, std: float) -> dict[str, Any]:
        return {"library": "sb3", "algo": algo, "game": env_id.split("/")[-1].split("-")[0],
                "env_id": env_id, "seed": seed, "curve": list(curve), "eval": float(mean),
                "eval_std": float(std), "wall": time.perf_counter() - t, "steps": done,
                "final": curve[-1][1] if curve else float("nan")}

    class Record(BaseCallback):
        mark = every

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.mark:
                self.mark += every
                q = [e["r"] for e in list(self.model.ep_info_buffer)[-last:]]
                if q:
                    curve.append((self.num_timesteps, float(np.mean(q))))
                if partial is not None:
                    partial(result(self.num_timesteps, np.nan, np.nan))
                if self.num_timesteps % (10 * every) < n_envs:
                    print(f"  sb3 {algo} {env_id} seed {seed}: {self.num_timesteps:,} steps, "
                          f"{curve[-1][1] if curve else float('nan'):.2f} "
                          f"({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
                if deadline is not None and time.time() > deadline:
                    return False
            return True

    model.learn(steps, callback=Record())
    wall = time.perf_counter() - t
    eval_env = VecFrameStack(make_atari_env(env_id, n_envs=1, seed=seed + 1000), n_stack=4)
    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=eval_episodes, deterministic=True)
    return {**result(min(model.num_timesteps, steps), mean, std), "wall": wall}


def _deadline(hhmm: str | None) -> float | None:
    """``time.time()`` at the next HH:MM UTC (today's, or tomorrow's if it has passed)."""
    if hhmm is None:
        return None
    import datetime as dt

    now = dt.datetime.now(dt.timezone.utc)
    h, m = (int(v) for v in hhmm.split(":"))
    at = now.replace(hour=h, minute=m, second=0, microsecond=0)
    return (at if at > now else at + dt.timedelta(days=1)).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="BreakoutNoFrameskip-v4")
    ap.add_argument("--algo", default="a2c")
    ap.add_argument("--library", default="rlgrad", choices=("rlgrad", "sb3"),
                    help="sb3: Stable-Baselines3's PPO/A2C on its AtariWrapper, same preset")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--json", default=None, help="save the runs here (after every run)")
    ap.add_argument("--stop-at", default=None, metavar="HH:MM",
                    help="UTC time at which training stops (then the evaluation runs)")
    ap.add_argument("--png", default=None)
    ap.add_argument("--plot", nargs="+", default=None, help="JSON files of earlier runs")
    args = ap.parse_args()
    if args.plot:
        runs = [r for f in args.plot for r in json.loads(Path(f).read_text())]
    else:
        runs = []
        for seed in args.seeds.split(","):
            def save(extra: list) -> None:
                if args.json:  # after every run and every point: a run stopped early stays
                    Path(args.json).write_text(json.dumps(runs + extra))

            fit = train_sb3 if args.library == "sb3" else train
            runs.append(fit(args.algo, args.env, int(seed), args.steps, every=10_000, last=10,
                            eval_episodes=10, partial=lambda run: save([run]),
                            deadline=_deadline(args.stop_at)))
            save([])
    rand = {r["game"]: random_return(r["env_id"], episodes=10) for r in runs}
    if any(r.get("library", "rlgrad") != "rlgrad" for r in runs):
        for r in runs:  # the library in the label: "RLGRAD PPO" beside "SB3 PPO"
            lib = r.get("library", "rlgrad")
            if not r["algo"].startswith(lib):
                r["algo"] = f"{lib} {r['algo']}"
    print("| game | algorithm | steps | seed | last 10 training games (raw score) | "
          "10 evaluation games | uniform random policy (10 games) | wall time |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        print(f"| {r['env_id']} | {r['algo'].upper()} | {r['steps']:,} | {r['seed']} | "
              f"{r['final']:.2f} | " + (f"{r['eval']:.2f} +/- {r['eval_std']:.2f}" if r["eval"] == r["eval"]
                                        else "- (stopped before the end)") + " | "
              f"{rand[r['game']][0]:.2f} +/- {rand[r['game']][1]:.2f} | {r['wall']:.0f} s |")
    if args.png:
        plot(runs, Path(args.png), rand, ylabel="raw game score, last 10 games")
        print(f"curves: {args.png}", file=sys.stderr)
    print(f"(first recorded mean {np.asarray(runs[0]['curve'])[0, 1]:.2f})" if runs[0]["curve"]
          else "(no game finished)")


if __name__ == "__main__":
    main()

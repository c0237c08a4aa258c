"""SAC and PPO on HalfCheetah-v5 and Hopper-v5, rlgrad beside Stable-Baselines3 (issue 28).

    .venv/bin/python bench/mujoco_sb3.py run --lib rlgrad --algo sac --env Hopper-v5 [--seed 0]
                                         [--steps 200000] [--out DIR]
    .venv/bin/python bench/mujoco_sb3.py report [--out DIR] [--png docs/mujoco_curves.png]

``run`` trains one (library, algorithm, task, seed) with the zoo's preset (rlgrad/presets: the
same hyperparameters for both libraries, one thread) for ``--steps`` steps and writes
``DIR/<lib>-<algo>-<env>-<seed>.json``: the training curve (every finished episode's return and
the step it ended at, written every 25 episodes so a stopped run keeps its curve), the wall and
CPU time of ``learn``, and the mean return of 10 deterministic evaluation episodes (each
library's own ``evaluate_policy``, observations normalised with the run's statistics where the
preset normalises). One run per process, so runs can go side by side.

``report`` reads every JSON in DIR, prints a markdown table (time, CPU, final returns, ratio of
CPU times per pair) and draws the curves (return of the last 10 episodes against steps).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import time
from typing import Any

import _timing  # noqa: F401  (first: one BLAS thread, this checkout's rlgrad)
import numpy as np  # noqa: E402

from rlgrad.rl import load_preset, split_preset  # noqa: E402


def _curve_callback(base: type, path: str, record: dict) -> Any:
    """A callback of the library's own ``BaseCallback`` class that appends each finished episode
    (``Monitor``'s ``info["episode"]`` in the step's ``infos``, as SB3 users read it) to
    ``record``."""

    class Curve(base):  # type: ignore[misc, valid-type]
        def _on_step(self) -> bool:
            for info in self.locals.get("infos", ()):
                if "episode" in info:
                    record["curve"].append([int(self.num_timesteps), float(info["episode"]["r"])])
                    if len(record["curve"]) % 25 == 0:
                        _write(path, record)
            return True

    return Curve()


def _write(path: str, record: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def _rlgrad_model(algo: str, env: str, seed: int) -> tuple[Any, Any, Any]:
    import rlgrad.rl as rl
    from rlgrad.rl import make_from_preset

    model, _ = make_from_preset(algo, env, seed=seed)

    def evaluate() -> tuple[float, float]:
        return rl.evaluate_policy(model, env, n_eval_episodes=10, warn=False)

    return model, rl.BaseCallback, evaluate


def _sb3_hyperparameters(algo: str, env: str) -> tuple[dict, dict]:
    import torch

    hp, env_cfg = split_preset(load_preset(algo, env))
    pk = dict(hp.pop("policy_kwargs", {}))
    if "activation_fn" in pk:
        pk["activation_fn"] = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh}[pk["activation_fn"]]
    if pk:
        hp["policy_kwargs"] = pk
    for k, v in list(hp.items()):
        if isinstance(v, str) and v.startswith("lin_"):
            hp[k] = lambda p, s=float(v[4:]): p * s
    return hp, env_cfg


def _sb3_model(algo: str, env: str, seed: int) -> tuple[Any, Any, Any]:
    import stable_baselines3 as sb3
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    hp, env_cfg = _sb3_hyperparameters(algo, env)
    venv = make_vec_env(env, n_envs=int(env_cfg.get("n_envs", 1)), seed=seed)
    if env_cfg.get("normalize"):
        venv = VecNormalize(venv)
    cls = {"sac": sb3.SAC, "ppo": sb3.PPO, "td3": sb3.TD3}[algo]
    model = cls("MlpPolicy", venv, seed=seed, device="cpu", **hp)

    def evaluate() -> tuple[float, float]:
        eval_env = make_vec_env(env, n_envs=1, seed=seed + 10_000)
        if isinstance(venv, VecNormalize):
            eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
            eval_env.obs_rms = venv.obs_rms
        mean, std = evaluate_policy(model, eval_env, n_eval_episodes=10, warn=False)
        return float(mean), float(std)

    return model, BaseCallback, evaluate


def run(lib: str, algo: str, env: str, seed: int, steps: int, out: str) -> dict:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"{lib}-{algo}-{env}-{seed}.json")
    record: dict[str, Any] = {"lib": lib, "algo": algo, "env": env, "seed": seed, "steps": steps,
                              "curve": [], "done": False, "load": os.getloadavg()[0]}
    model, base, evaluate = (_rlgrad_model if lib == "rlgrad" else _sb3_model)(algo, env, seed)
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(steps, callback=_curve_callback(base, path, record))
    record.update(wall=time.perf_counter() - wall, cpu=time.process_time() - cpu)
    record["eval_mean"], record["eval_std"] = evaluate()
    record["done"] = True
    record["load_end"] = os.getloadavg()[0]
    _write(path, record)
    return record


def _last10(curve: list) -> float:
    return float(np.mean([r for _, r in curve[-10:]])) if curve else float("nan")


def report(out: str, png: str | None) -> None:
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "*.json")))]
    print("| task | algo | library | steps | learn wall (s) | learn CPU (s) | CPU / SB3 "
          "| eval return (10, deterministic) | last 10 training episodes |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    cpu_of = {(r["env"], r["algo"], r["seed"], r["lib"]): r.get("cpu") for r in runs}
    for r in sorted(runs, key=lambda r: (r["env"], r["algo"], r["lib"] != "rlgrad")):
        sb3 = cpu_of.get((r["env"], r["algo"], r["seed"], "sb3"))
        ratio = f"{r['cpu'] / sb3:.2f}x" if r.get("done") and sb3 else "-"
        done = r.get("done")
        print(f"| {r['env']} | {r['algo'].upper()} | {r['lib']} | "
              f"{r['curve'][-1][0] if r['curve'] else 0:,}{'' if done else ' (stopped)'} | "
              f"{r.get('wall', float('nan')):.0f} | {r.get('cpu', float('nan')):.0f} | {ratio} | "
              f"{r.get('eval_mean', float('nan')):.1f} | {_last10(r['curve']):.1f} |")
    if png:
        _plot(runs, png)


def _plot(runs: list[dict], png: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["env"], r["algo"]) for r in runs})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (env, algo) in zip(axes[0], panels):
        for r in runs:
            if (r["env"], r["algo"]) == (env, algo) and r["curve"]:
                c = np.asarray(r["curve"], dtype=float)
                smooth = np.convolve(c[:, 1], np.ones(10) / 10, mode="valid") if len(c) >= 10 \
                    else c[:, 1]
                ax.plot(c[len(c) - len(smooth):, 0], smooth, label=f"{r['lib']} seed {r['seed']}")
        ax.set_title(f"{algo.upper()} {env}")
        ax.set_xlabel("steps")
        ax.set_ylabel("episode return (mean of 10)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    print(f"curves: {png}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--lib", choices=("rlgrad", "sb3"), required=True)
    r.add_argument("--algo", choices=("sac", "ppo", "td3"), required=True)
    r.add_argument("--env", default="HalfCheetah-v5")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--steps", type=int, default=200_000)
    r.add_argument("--out", default="bench_mujoco")
    p = sub.add_parser("report")
    p.add_argument("--out", default="bench_mujoco")
    p.add_argument("--png", default=None)
    args = ap.parse_args()
    if args.cmd == "run":
        rec = run(args.lib, args.algo, args.env, args.seed, args.steps, args.out)
        print(json.dumps({k: v for k, v in rec.items() if k != "curve"}))
    else:
        report(args.out, args.png)


if __name__ == "__main__":
    main()

"""Whole off-policy runs: SAC, TD3 and DDPG with the zoo's presets, rlgrad vs SB3.

    .venv/bin/python bench/offpolicy_sb3.py [--algos sac,td3,ddpg] [--env Pendulum-v1] [--seed 0]
                                            [--repeats 1] [--timesteps N] [--quick] [--no-sb3]

``--env`` takes any environment the zoo presets cover (Pendulum-v1, the MuJoCo v5 tasks such as
HalfCheetah-v5, LunarLanderContinuous-v3).

Issue 17's goal 2: each preset trained by rlgrad and, when ``stable-baselines3`` and ``torch`` are
installed, by Stable-Baselines3 with the same hyperparameters (one thread each, same process,
interleaved: rlgrad's run then SB3's, algorithm by algorithm, ``--repeats`` rounds). The table
gives the medians of the wall time of ``learn`` and of its CPU time (``process_time``: on a
loaded host the CPU time moves less than the wall time), the median of the per-round ratios,
and the mean return of 20 deterministic evaluation episodes (the same evaluation code for both;
seeded runs repeat their returns). A second table splits each library's CPU time between
``train`` (the updates) and ``collect_rollouts`` (acting, stepping, storing). ``--timesteps``
cuts the budget (a look at the speed; the returns then mean little); ``--quick`` runs each
preset 1,000 steps past its ``learning_starts``. SB3 takes the preset's ``noise_type: normal``
as its ``NormalActionNoise``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import _timing  # noqa: F401  (one BLAS thread, this checkout's rlgrad)
import numpy as np

from rlgrad.rl import evaluate, load_preset, make_from_preset, split_preset

ENV = "Pendulum-v1"  # --env sets it


def _instrument(model) -> dict:
    """CPU time spent in ``model.train`` (the updates) and ``model.collect_rollouts`` (acting,
    stepping, storing), accumulated by wrapping the two methods of this instance (both
    libraries have them)."""
    acc = {"train": 0.0, "collect": 0.0}
    for key, name in (("train", "train"), ("collect", "collect_rollouts")):
        inner = getattr(model, name)

        def timed(*a, _inner=inner, _key=key, **kw):
            c = time.process_time()
            try:
                return _inner(*a, **kw)
            finally:
                acc[_key] += time.process_time() - c

        setattr(model, name, timed)
    return acc


def _timed(model, budget: int) -> dict:
    acc = _instrument(model)
    w, c = time.perf_counter(), time.process_time()
    model.learn(budget)
    out = {"wall": time.perf_counter() - w, "cpu": time.process_time() - c, **acc}
    out["mean"], out["std"] = evaluate(model, ENV, n_episodes=20)
    return out


def budget_of(algo: str, timesteps: int | None, quick: bool) -> int:
    hp, env_cfg = split_preset(load_preset(algo, ENV))
    if quick:
        return int(hp.get("learning_starts", 100)) + 1000
    return timesteps or int(env_cfg["n_timesteps"])


def run_rlgrad(algo: str, seed: int, budget: int) -> dict:
    model, _ = make_from_preset(algo, ENV, seed=seed)
    return _timed(model, budget)


def run_sb3(algo: str, seed: int, budget: int) -> dict:
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    hp, env_cfg = split_preset(load_preset(algo, ENV))
    env = make_vec_env(ENV, n_envs=int(env_cfg.get("n_envs", 1)), seed=seed)
    noise_type, noise_std = hp.pop("noise_type", None), hp.pop("noise_std", 0.0)
    if noise_type == "normal":
        n = env.action_space.shape[0]
        hp["action_noise"] = NormalActionNoise(np.zeros(n), noise_std * np.ones(n))
    elif noise_type is not None:
        raise ValueError(f"noise_type {noise_type!r} is not translated for SB3 here")
    cls = {"sac": sb3.SAC, "td3": sb3.TD3, "ddpg": sb3.DDPG}[algo]
    model = cls("MlpPolicy", env, seed=seed, device="cpu", **hp)
    model.env_id = ENV
    return _timed(model, budget)


def _row(algo: str, rs: list[dict], ss: list[dict]) -> dict:
    med = statistics.median
    row = {"algo": algo, "rl_wall": med(r["wall"] for r in rs), "rl_cpu": med(r["cpu"] for r in rs),
           "rl_ret": rs[-1]["mean"], "rl_std": rs[-1]["std"],
           "rl_train": med(r["train"] for r in rs), "rl_collect": med(r["collect"] for r in rs)}
    if ss:
        row.update(sb_wall=med(s["wall"] for s in ss), sb_cpu=med(s["cpu"] for s in ss),
                   sb_train=med(s["train"] for s in ss), sb_collect=med(s["collect"] for s in ss),
                   sb_ret=ss[-1]["mean"], sb_std=ss[-1]["std"],
                   wall_ratio=med(r["wall"] / s["wall"] for r, s in zip(rs, ss)),
                   cpu_ratio=med(r["cpu"] / s["cpu"] for r, s in zip(rs, ss)))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", default="sac,td3,ddpg")
    ap.add_argument("--env", default="Pendulum-v1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--timesteps", type=int, default=None, help="override the presets' budgets")
    ap.add_argument("--quick", action="store_true", help="1,000 steps past learning_starts")
    ap.add_argument("--no-sb3", action="store_true")
    args = ap.parse_args()
    globals()["ENV"] = args.env  # the module's runners read it
    have_sb3 = _timing.comparators(("torch", "stable_baselines3"), skip=args.no_sb3)
    if have_sb3:
        _timing.torch_or_none()  # pins torch to one thread
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    runs: dict[str, tuple[list, list]] = {a: ([], []) for a in algos}
    budgets = {a: budget_of(a, args.timesteps, args.quick) for a in algos}
    for i in range(args.repeats):
        for algo in algos:
            r = run_rlgrad(algo, args.seed, budgets[algo])
            runs[algo][0].append(r)
            msg = f"round {i}: {algo} rlgrad {r['wall']:.1f}s (cpu {r['cpu']:.1f}) {r['mean']:.1f}"
            if have_sb3:
                s = run_sb3(algo, args.seed, budgets[algo])
                runs[algo][1].append(s)
                msg += f" | SB3 {s['wall']:.1f}s (cpu {s['cpu']:.1f}) {s['mean']:.1f}"
            print(msg, file=sys.stderr, flush=True)
    rows = [_row(a, *runs[a]) for a in algos]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{ENV} zoo presets, seed {args.seed}, {time.strftime('%Y-%m-%d')}, "
          f"{platform.processor() or platform.machine()}, NumPy {np.__version__}, one thread each; "
          f"medians of {args.repeats} interleaved rounds; load average at the end {load:.1f}"
          + ("; budgets cut: " + ", ".join(f"{a} {b}" for a, b in budgets.items())
             if args.timesteps or args.quick else "") + "\n")
    head = "| algo | rlgrad learn (s) | rlgrad CPU (s) | rlgrad return |"
    sep = "|---|---:|---:|---:|"
    if have_sb3:
        head += " SB3 learn (s) | SB3 CPU (s) | SB3 return | wall rlgrad/SB3 | CPU rlgrad/SB3 |"
        sep += "---:|---:|---:|---:|---:|"
    print(head)
    print(sep)
    for r in rows:
        line = (f"| {r['algo'].upper()} | {r['rl_wall']:.1f} | {r['rl_cpu']:.1f} | "
                f"{r['rl_ret']:.1f} ± {r['rl_std']:.1f} |")
        if have_sb3:
            line += (f" {r['sb_wall']:.1f} | {r['sb_cpu']:.1f} | {r['sb_ret']:.1f} ± "
                     f"{r['sb_std']:.1f} | {r['wall_ratio']:.2f} | {r['cpu_ratio']:.2f} |")
        print(line)
    print("\nWhere the CPU time goes (s, medians): `train` (the updates: sampling, losses, "
          "optimizers, target networks) and `collect_rollouts` (acting, stepping, storing)\n")
    head, sep = "| algo | rlgrad train | rlgrad collect |", "|---|---:|---:|"
    if have_sb3:
        head, sep = head + " SB3 train | SB3 collect |", sep + "---:|---:|"
    print(head)
    print(sep)
    for r in rows:
        line = f"| {r['algo'].upper()} | {r['rl_train']:.1f} | {r['rl_collect']:.1f} |"
        if have_sb3:
            line += f" {r['sb_train']:.1f} | {r['sb_collect']:.1f} |"
        print(line)


if __name__ == "__main__":
    main()

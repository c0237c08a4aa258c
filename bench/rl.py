"""RL benchmark: the CartPole-v1 presets of PPO, A2C and DQN, rlgrad vs Stable-Baselines3.

    .venv/bin/python bench/rl.py [--algos ppo,a2c,dqn] [--seeds 0] [--no-sb3] [--repeat 1]
                                 [--stepping same|native|both] [--no-floor]

Trains each preset with rlgrad and, when ``stable-baselines3`` and ``torch`` are installed, the
same hyperparameters with Stable-Baselines3 (one thread each, same process, interleaved), then
prints the wall time of ``learn`` (and its CPU time, ``time.process_time``, which the load of a
shared machine inflates less), steps per second and the mean return of 20 deterministic
evaluation episodes (the same evaluation code for both) as a markdown table. With
``--repeat N`` every pair of runs is repeated N times (interleaved, the returns are the same:
seeded runs are deterministic) and the table gives the median times and the median of the
per-repetition ratios; a shared machine's load drifts, and both libraries drift together.

Environment stepping: with ``--stepping same`` (the default) both libraries step Python CartPole
copies one after the other (rlgrad Gymnasium's ``SyncVectorEnv``, SB3 its ``DummyVecEnv``), so the
ratio compares the libraries, not the environments. ``native`` lets rlgrad use what it picks by
default (Gymnasium's NumPy-vectorised CartPole, which steps all copies in a few NumPy calls);
``both`` reports the two rows.

``--compiled`` adds a third rlgrad run to each pair (its own row, its ratio against the same SB3
runs): ``compile_loop=True`` on rlgrad's functional CartPole, the whole training loop as one
``rlgrad.jit`` program, compilation included; the row names the backend that ran it
(``RLGRAD_JIT_BACKEND=auto`` asks for the native one; "numpy" is the replay of NumPy calls).

For PPO, A2C and DQN, two more runs join each pair (``--no-floor`` leaves them out), stepping the
same vector env as rlgrad's row: the NumPy floor (``bench/_numpy_ppo.py``, DQN's
``bench/_numpy_dqn.py``: the same algorithm and preset written by hand in NumPy for this network,
forward, backward and optimizer included, with rlgrad's bookkeeping) and the environment alone
(the same env and number of steps with random actions and the floor's per-step bookkeeping); a
second table gives their CPU time against rlgrad's and SB3's. DQN's native stepping is the same
as its ``same`` (one env: ``SyncVectorEnv``). With ``--compiled``, DQN's floor runs also time the
network passes alone (``_numpy_dqn.gemm_floor``: the target network over the sampled rows and
each update's forward and backward, no env, replay, loss or optimizer), the compiled loop's floor.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from typing import Any

import _timing  # first: one BLAS thread, this checkout's rlgrad
import numpy as np  # noqa: E402

from rlgrad.rl import evaluate, load_preset, make_from_preset, split_preset  # noqa: E402
from rlgrad.rl.compiled_loop import clear_programs  # noqa: E402


def _sb3_schedule(v):
    if isinstance(v, str) and v.startswith("lin_"):
        start = float(v[4:])
        return lambda p: p * start
    return v


def run_rlgrad(algo: str, seed: int, stepping: str) -> dict:
    if stepping == "compiled":  # the whole loop as one program on the functional CartPole
        clear_programs()  # each run traces and compiles its program, as a new process would
        model, budget = make_from_preset(algo, "CartPole-v1", seed=seed, compile_loop=True)
    else:
        mode = {"same": "sync", "native": None}[stepping]
        model, budget = make_from_preset(algo, "CartPole-v1", seed=seed, vectorization_mode=mode)
    t, c = time.perf_counter(), time.process_time()
    model.learn(budget)
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    mean, std = evaluate(model, "CartPole-v1", n_episodes=20)
    return {"time": dt, "cpu": cpu, "steps": model.num_timesteps, "mean": mean, "std": std,
            "backend": getattr(model, "loop_backend", None)}


def run_sb3(algo: str, seed: int) -> dict:
    import stable_baselines3 as sb3
    import torch
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    hp, env_cfg = split_preset(load_preset(algo, "CartPole-v1"))
    budget = int(env_cfg["n_timesteps"])
    hp = {k: _sb3_schedule(v) for k, v in hp.items()}
    env = make_vec_env("CartPole-v1", n_envs=int(env_cfg.get("n_envs", 1)), seed=seed)
    cls = {"ppo": sb3.PPO, "a2c": sb3.A2C, "dqn": sb3.DQN}[algo]
    model = cls("MlpPolicy", env, seed=seed, device="cpu", **hp)
    t, c = time.perf_counter(), time.process_time()
    model.learn(budget)
    dt, cpu = time.perf_counter() - t, time.process_time() - c
    model.env_id = "CartPole-v1"
    mean, std = evaluate(model, "CartPole-v1", n_episodes=20)
    return {"time": dt, "cpu": cpu, "steps": model.num_timesteps, "mean": mean, "std": std}


FLOOR_ALGOS = ("ppo", "a2c", "dqn")


def run_floor(algo: str, seed: int, stepping: str, alone: bool = False) -> dict:
    """The NumPy floor of ``algo``'s preset (or, ``alone``, its environment steps alone)."""
    import _numpy_dqn
    import _numpy_ppo

    hp, env_cfg = split_preset(load_preset(algo, "CartPole-v1"))
    n_envs, total = int(env_cfg.get("n_envs", 1)), int(env_cfg["n_timesteps"])
    floor: Any = _numpy_dqn if algo == "dqn" else _numpy_ppo
    if algo == "dqn":
        cfg = floor.zoo_dqn(hp, total)
    else:
        cfg = (floor.zoo_ppo(hp, n_envs, total) if algo == "ppo"
               else floor.pg_config(algo, hp, n_envs, total))
    mode = "sync" if algo == "dqn" else {"same": "sync", "native": "vector_entry_point"}[stepping]
    if alone:
        res = floor.env_alone(cfg, seed, mode=mode)
        return {"time": res["train_s"], "cpu": res["cpu_s"], "steps": res["steps"],
                "mean": float("nan"), "std": float("nan")}
    res = floor.train(cfg, seed, mode=mode)
    net = res["net"]

    class Agent:  # deterministic evaluation through rlgrad.rl.evaluate, as for the others
        env_id = "CartPole-v1"

        def predict(self, o, deterministic=True):
            return floor.greedy(net, o), None

    mean, std = evaluate(Agent(), "CartPole-v1", n_episodes=20)
    return {"time": res["train_s"], "cpu": res["cpu_s"], "steps": res["steps"], "mean": mean,
            "std": std}


def run_gemm_floor(seed: int) -> dict:
    """DQN's network passes alone (``_numpy_dqn.gemm_floor``): what the compiled loop cannot
    go below through this BLAS."""
    import _numpy_dqn

    hp, env_cfg = split_preset(load_preset("dqn", "CartPole-v1"))
    res = _numpy_dqn.gemm_floor(_numpy_dqn.zoo_dqn(hp, int(env_cfg["n_timesteps"])), seed)
    print(f"dqn seed {seed}: network passes alone {res['train_s']:.1f}s (CPU "
          f"{res['cpu_s']:.1f}), {res['updates']} updates", file=sys.stderr, flush=True)
    return res


def _median_run(runs: list[dict]) -> dict:
    out = dict(runs[-1])
    for k in ("time", "cpu"):
        out[k] = statistics.median(r[k] for r in runs)
    return out


def _pair(algo: str, seed: int, stepping: str, repeat: int, have_sb3: bool,
          floor: bool = False, compiled: list | None = None) -> tuple:
    """``repeat`` interleaved runs of rlgrad and SB3 (and the floor, and the compiled loop into
    ``compiled``): the table row's medians."""
    rs, ss, fs, es = [], [], [], []
    for _ in range(max(repeat, 1)):
        if compiled is not None:
            compiled.append(run_rlgrad(algo, seed, "compiled"))
            print(f"{algo} seed {seed}: compiled loop ({compiled[-1]['backend']}) "
                  f"{compiled[-1]['time']:.1f}s (CPU {compiled[-1]['cpu']:.1f}) return "
                  f"{compiled[-1]['mean']:.1f}", file=sys.stderr, flush=True)
        r = run_rlgrad(algo, seed, stepping)
        s = run_sb3(algo, seed) if have_sb3 else None
        rs.append(r)
        if s:
            ss.append(s)
        if floor and compiled is not None and algo == "dqn":  # the compiled loop's floor
            compiled[-1]["gemm"] = run_gemm_floor(seed)
        if floor:
            fs.append(run_floor(algo, seed, stepping))
            es.append(run_floor(algo, seed, stepping, alone=True))
            print(f"{algo} seed {seed} ({stepping} stepping): NumPy floor {fs[-1]['time']:.1f}s "
                  f"(CPU {fs[-1]['cpu']:.1f}) return {fs[-1]['mean']:.1f} | env alone CPU "
                  f"{es[-1]['cpu']:.1f}", file=sys.stderr, flush=True)
        print(f"{algo} seed {seed} ({stepping} stepping): rlgrad {r['time']:.1f}s (CPU "
              f"{r['cpu']:.1f}) return {r['mean']:.1f}"
              + (f" | SB3 {s['time']:.1f}s (CPU {s['cpu']:.1f}) return {s['mean']:.1f} | ratio "
                 f"{r['time'] / s['time']:.2f}, CPU {r['cpu'] / s['cpu']:.2f}" if s else ""),
              file=sys.stderr, flush=True)
    ratio = None
    if ss:
        ratio = tuple(statistics.median(r[k] / s[k] for r, s in zip(rs, ss))
                      for k in ("time", "cpu"))
    rows = [(algo, seed, stepping, _median_run(rs), _median_run(ss) if ss else None, ratio,
             (rs, ss, fs, es))]
    if compiled:
        c_ratio = tuple(statistics.median(r[k] / s[k] for r, s in zip(compiled, ss))
                        for k in ("time", "cpu")) if ss else None
        rows.append((algo, seed, "compiled", _median_run(compiled),
                     _median_run(ss) if ss else None, c_ratio, (compiled, ss, [], [])))
    return rows


def _floor_table(rows: list[tuple]) -> None:
    """The NumPy floor and the environment alone against rlgrad and SB3 (CPU, medians)."""
    med = lambda xs: statistics.median(x["cpu"] for x in xs)  # noqa: E731
    pair = lambda a, b: statistics.median(x["cpu"] / y["cpu"] for x, y in zip(a, b))  # noqa: E731
    print("\n| algo | env stepping | rlgrad CPU (s) | NumPy floor CPU (s) | env alone CPU (s) | "
          "SB3 CPU (s) | rlgrad / floor | floor / SB3 | env alone / SB3 | floor return (eval) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for algo, _seed, stepping, _r, _s, _ratio, (rs, ss, fs, es) in rows:
        if not fs:
            continue
        f = fs[-1]
        sb = f"{med(ss):.1f}" if ss else "-"
        fsb = f"{pair(fs, ss):.2f}" if ss else "-"
        esb = f"{pair(es, ss):.2f}" if ss else "-"
        print(f"| {algo.upper()} | {stepping} | {med(rs):.1f} | {med(fs):.1f} | {med(es):.1f} | {sb} | "
              f"{pair(rs, fs):.2f} | {fsb} | {esb} | {f['mean']:.1f} ± {f['std']:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", default="ppo,a2c,dqn")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--no-sb3", action="store_true")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each (algo, seed) pair; the table gives medians")
    ap.add_argument("--stepping", choices=("same", "native", "both"), default="same",
                    help="rlgrad's env stepping: SB3's kind (same) or its own default (native)")
    ap.add_argument("--compiled", action="store_true",
                    help="also the compiled loop (compile_loop=True), interleaved, its own row")
    ap.add_argument("--no-floor", action="store_true",
                    help="leave out the NumPy floor and environment-alone runs (PPO, A2C)")
    args = ap.parse_args()
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    seeds = [int(s) for s in args.seeds.split(",")]
    have_sb3 = _timing.comparators(("stable_baselines3", "torch"), skip=args.no_sb3)
    steppings = ("same", "native") if args.stepping == "both" else (args.stepping,)
    rows = []
    for algo in algos:
        for seed in seeds:
            for stepping in steppings:
                first = stepping == steppings[0]
                rows += _pair(algo, seed, stepping, args.repeat, have_sb3,
                              floor=not args.no_floor and algo in FLOOR_ALGOS,
                              compiled=[] if args.compiled and first else None)
    cpu = platform.processor() or platform.machine()
    print(f"\nCartPole-v1 presets, {time.strftime('%Y-%m-%d')}, {cpu}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, NumPy {np.__version__}"
          + f", load {os.getloadavg()[0]:.1f}"
          + (f"; medians of {args.repeat} runs" if args.repeat > 1 else "") + "\n")
    head = "| algo | seed | rlgrad env stepping | steps | rlgrad learn (s) | rlgrad steps/s | rlgrad return |"
    sep = "|---|---|---|---|---|---|---|"
    if have_sb3:
        head += (" SB3 learn (s) | SB3 steps/s | SB3 return | time ratio rlgrad/SB3 | CPU "
                 "(s) rlgrad / SB3 | CPU ratio |")
        sep += "---|---|---|---|---|---|"
    print(head)
    print(sep)
    names = {"same": "SyncVectorEnv (as SB3's DummyVecEnv)", "native": "NumPy-vectorised CartPole",
             "compiled": "compiled loop, functional CartPole"}
    for algo, seed, stepping, r, s, ratio, _runs in rows:
        name = names[stepping] + (f" ({r['backend']} backend)" if r.get("backend") else "")
        line = (f"| {algo.upper()} | {seed} | {name} | {r['steps']} | {r['time']:.1f} | "
                f"{r['steps'] / r['time']:.0f} | {r['mean']:.1f} ± {r['std']:.1f} |")
        if s:
            line += (f" {s['time']:.1f} | {s['steps'] / s['time']:.0f} | "
                     f"{s['mean']:.1f} ± {s['std']:.1f} | {ratio[0]:.2f} | {r['cpu']:.1f} / "
                     f"{s['cpu']:.1f} | {ratio[1]:.2f} |")
        print(line)
    if any(x[-1][2] for x in rows):
        _floor_table(rows)
    for algo, _seed, stepping, _r, _s, _ratio, (cs, ss, _f, _e) in rows:
        if stepping == "compiled" and cs and "gemm" in cs[0] and ss:
            g = statistics.median(c["gemm"]["cpu_s"] for c in cs)
            print(f"\n{algo.upper()} compiled loop: CPU {statistics.median(c['cpu'] for c in cs):.1f}"
                  f" s; its network passes alone (bench/_numpy_dqn.py gemm_floor) {g:.1f} s, "
                  f"{statistics.median(c['gemm']['cpu_s'] / s['cpu'] for c, s in zip(cs, ss)):.2f}"
                  " x SB3's CPU")


if __name__ == "__main__":
    main()

"""Benchmark: DQN on Atari, rlgrad vs Stable-Baselines3 (PyTorch, one thread), in one run.

    .venv/bin/python bench/atari.py [--env BreakoutNoFrameskip-v4] [--steps 3000] [--repeat 1]
                                    [--quick] [--runs-only] [--no-sb3]

Three tables:

1. the Nature CNN alone (``bench/cnn.py``'s rows: forward at batch 1, forward at batch 32 without a
   graph, forward + backward at batch 32);
2. one whole DQN gradient step (``train(1, 32)``: sample 32 transitions, target network, Huber
   loss, backward, gradient clipping, Adam) on the same Atari replay contents for both, in CPU
   time (``process_time``), and beside it the step's GEMM floor: its matrix products alone
   (``gemm_floor``: the same shapes in NumPy float32 on one thread, each convolution as one im2col
   GEMM, each product whole or in cache-sized blocks, whichever is faster; no im2col copies, no
   elementwise work): what an im2col/GEMM implementation of this update cannot go below here;
3. a short DQN run from scratch, the same hyperparameters for both (buffer 10k, learning starts
   after 1/6 of the steps, an update every 4 steps on batches of 32, target copied every 1,000
   steps, Adam 1e-4, epsilon 1 -> 0.01 over 10%): wall time of ``learn``, and the environment
   alone (the same number of random steps through each library's Atari wrappers) to tell the
   libraries' own time from the emulator's;
4. the short run's bound at the GEMM floor, in CPU seconds against SB3's whole run: the run's
   updates times the update's GEMM floor (table 2's), plus its greedy forwards at batch 1 times
   their products alone, plus rlgrad's environment alone (table 3's), everything else free: the
   smallest rlgrad / SB3 an im2col/GEMM implementation could reach on this CPU; and the same bound
   with conv3 (3x3 stride 1) done by Winograd's F(2x2, 3x3) and F(4x4, 3x3), counted as their
   products alone (16 or 36 GEMMs of (tiles, 64) x (64, 64) for each of conv3's four products:
   online and target forwards, weight and input gradients; the tile transforms free).

rlgrad's envs are ``rlgrad.rl.atari`` (Gymnasium's AtariPreprocessing + FrameStackObservation);
SB3's are its ``make_atari_env`` (``AtariWrapper``) + ``VecFrameStack(4)``: the same DeepMind
preprocessing. Times are medians over ``--repeat`` interleaved pairs; the ratio is the median of
the per-pair ratios (a shared machine's load drifts, both libraries drift together). The runs are
also reported in CPU seconds of the process (``process_time``), the fairer number on a loaded
host; ``--runs-only`` skips the per-call tables.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import _timing  # first: pins BLAS to one thread before NumPy loads (the comparison is per core)
import numpy as np  # noqa: E402

import rlgrad  # noqa: E402
from rlgrad.rl import DQN  # noqa: E402

HP = dict(buffer_size=10_000, learning_rate=1e-4, batch_size=32, train_freq=4, gradient_steps=1,
          target_update_interval=1000, exploration_fraction=0.1, exploration_final_eps=0.01,
          max_grad_norm=10.0)


def _rlgrad_dqn(env_id: str, steps: int, seed: int) -> DQN:
    return DQN(env_id, seed=seed, learning_starts=steps // 6, **HP)


def _sb3_dqn(env_id: str, steps: int, seed: int) -> Any:
    import ale_py
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN as SB3DQN
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    torch.set_num_threads(1)
    gym.register_envs(ale_py)
    env = VecFrameStack(make_atari_env(env_id, n_envs=1, seed=seed), n_stack=4)
    return SB3DQN("CnnPolicy", env, seed=seed, device="cpu", learning_starts=steps // 6, **HP)


def _run(make: Any, env_id: str, steps: int, seed: int) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of this process, gradient steps taken) of ``learn(steps)``."""
    model = make(env_id, steps, seed)
    t, c = time.perf_counter(), time.process_time()
    model.learn(steps)
    return time.perf_counter() - t, time.process_time() - c, int(model._n_updates)


def _env_only(env_id: str, steps: int, sb3: bool) -> tuple[float, float]:
    """(wall, CPU) seconds for ``steps`` random steps through the library's Atari env stack."""
    if sb3:
        env = _sb3_dqn(env_id, 6 * steps, 0).env
    else:
        env = _rlgrad_dqn(env_id, 6 * steps, 0).env
    rng = np.random.default_rng(0)
    env.reset()
    n = int(env.action_space.nvec[0]) if hasattr(env.action_space, "nvec") else env.action_space.n
    t, c = time.perf_counter(), time.process_time()
    for _ in range(steps):
        env.step(rng.integers(0, n, 1))
    return time.perf_counter() - t, time.process_time() - c


def _filled(env_id: str, sb3: bool) -> Any:
    """A model whose replay buffer holds 2,000 random steps (warm-up only, no update)."""
    model = (_sb3_dqn if sb3 else _rlgrad_dqn)(env_id, 12_000, 0)
    model.learn(2_000)
    return model


def _gemm_shapes(batch: int = 32, actions: int = 4) -> list[tuple[int, int, int]]:
    """(M, K, N) of every matrix product of one DQN update on the Nature CNN: the online forward,
    the target network's forward, and the backward (weight gradients everywhere, input gradients
    below the first layer: the observations need none)."""
    convs = [(400, 4 * 8 * 8, 32), (81, 32 * 4 * 4, 64), (49, 64 * 3 * 3, 64)]  # (positions, K, out)
    fwd = [(batch * p, k, o) for p, k, o in convs] + [(batch, 3136, 512), (batch, 512, actions)]
    wgrad = [(k, batch * p, o) for p, k, o in convs] + [(3136, batch, 512), (512, batch, actions)]
    igrad = [(batch * p, o, k) for p, k, o in convs[1:]] + [(batch, 512, 3136),
                                                              (batch, actions, 512)]
    return fwd + fwd + wgrad + igrad


def _act_shapes(actions: int = 4) -> list[tuple[int, int, int]]:
    """(M, K, N) of the Nature CNN's forward at batch 1 (choosing one action)."""
    return [(400, 4 * 8 * 8, 32), (81, 32 * 4 * 4, 64), (49, 64 * 3 * 3, 64), (1, 3136, 512),
            (1, 512, actions)]


_CONV3 = (32 * 49, 64 * 3 * 3, 64)  # conv3's forward product at batch 32: (M, K, N)


def _conv3_products(batch: int = 32) -> list[tuple[int, int, int]]:
    """conv3's four products of an update (online and target forwards, weight and input
    gradients) as im2col GEMMs: the part of the floor a Winograd conv3 would replace."""
    m, k, n = batch * 49, 64 * 9, 64
    return [(m, k, n), (m, k, n), (k, m, n), (m, n, k)]


def _winograd_products(tile: int, batch: int = 32) -> list[tuple[int, int, int]]:
    """conv3's four products under Winograd F(tile x tile, 3x3): per product one GEMM for each of
    the (tile + 2)^2 transform points, (tiles, 64) x (64, 64) (the weight gradient's (64, tiles)
    x (tiles, 64)); the forwards and the weight gradient tile the 7x7 outputs, the input gradient
    (a full correlation) the 9x9 input."""
    fwd, full = batch * (-(-7 // tile)) ** 2, batch * (-(-9 // tile)) ** 2
    return (tile + 2) ** 2 * [(fwd, 64, 64), (fwd, 64, 64), (64, fwd, 64), (full, 64, 64)]


def _product(m: int, k: int, n: int, rng: np.random.Generator, blocked: bool) -> Any:
    """One (M, K) @ (K, N) float32 product as a call; ``blocked``: in blocks of ~1 MB of the
    larger of M and K (as rlgrad's convolutions run; partial products summed over K blocks)."""
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    out, part = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
    if not blocked:
        return lambda: np.matmul(a, b, out=out)
    if m >= k:
        step = max(1, (1 << 18) // k)
        blocks = [(a[i:i + step], out[i:i + step]) for i in range(0, m, step)]
        return lambda: [np.matmul(x, b, out=y) for x, y in blocks]
    step = max(1, (1 << 18) // m)
    blocks = [(a[:, i:i + step], b[i:i + step]) for i in range(0, k, step)]

    def summed() -> None:
        out.fill(0)
        for x, y in blocks:
            out.__iadd__(np.matmul(x, y, out=part))
    return summed


def gemm_floor(calls: int = 5, shapes: list[tuple[int, int, int]] | None = None
               ) -> tuple[Any, float]:
    """(a call running the update's matrix products alone (or those of ``shapes``), their GFLOP):
    each product whole or in cache-sized blocks, whichever ran faster here in ``calls`` CPU-timed
    calls."""
    rng = np.random.default_rng(0)
    shapes = _gemm_shapes() if shapes is None else shapes
    chosen = []
    for m, k, n in shapes:
        fns = [_product(m, k, n, rng, blocked) for blocked in (False, True)]
        cost = []
        for fn in fns:
            fn()
            c = time.process_time()
            for _ in range(calls):
                fn()
            cost.append(time.process_time() - c)
        chosen.append(fns[int(np.argmin(cost))])

    def products() -> None:
        for fn in chosen:
            fn()
    return products, sum(2 * m * k * n for m, k, n in shapes) / 1e9


def _cpu_interleaved(impls: dict[str, Any], repeats: int, calls: int = 5) -> dict[str, np.ndarray]:
    """CPU seconds per call (``process_time``) of every implementation, interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in impls}
    for fn in impls.values():
        fn()
    for _ in range(repeats):
        for name, fn in impls.items():
            c = time.process_time()
            for _ in range(calls):
                fn()
            times[name].append((time.process_time() - c) / calls)
    return {name: np.array(ts) for name, ts in times.items()}


def update_rows(env_id: str, repeats: int, have_sb3: bool) -> list[dict[str, Any]]:
    """The DQN gradient step of both libraries and the GEMM floor, CPU time, interleaved."""
    ours = _filled(env_id, False)
    products, gflop = gemm_floor()
    impls = {"rlgrad": lambda: ours.train(1, 32), "floor": products}
    if have_sb3:
        theirs = _filled(env_id, True)
        impls["torch"] = lambda: theirs.train(1, 32)
    times = _cpu_interleaved(impls, repeats)
    med = {k: float(np.median(v)) for k, v in times.items()}
    rows = []
    for case, key in (("DQN gradient step, batch 32, CPU time", "rlgrad"),
                      (f"its GEMM floor: the step's matrix products alone ({gflop:.2f} GFLOP, "
                       f"{gflop / med['floor']:.0f} GFLOPS), CPU time", "floor")):
        rows.append({"case": case, "rlgrad_us": med[key] * 1e6,
                     "torch_us": med["torch"] * 1e6 if have_sb3 else None,
                     "rlgrad/torch": (float(np.median(times[key] / times["torch"]))
                                      if have_sb3 else None)})
    return rows


def run_rows(env_id: str, steps: int, repeat: int, have_sb3: bool) -> list[dict[str, Any]]:
    """Wall and CPU seconds (``process_time``: on a loaded host, what the process itself used)."""
    rows = []
    for what, fn in (("learn", lambda sb3: _run(_sb3_dqn if sb3 else _rlgrad_dqn, env_id, steps, 0)),
                     ("environment only", lambda sb3: _env_only(env_id, steps, sb3))):
        ours, theirs = [], []
        for _ in range(max(repeat, 1)):
            ours.append(fn(False))
            if have_sb3:
                theirs.append(fn(True))
            print(f"{what}: rlgrad {ours[-1][0]:.1f}s (CPU {ours[-1][1]:.1f}s)" + (
                f", SB3 {theirs[-1][0]:.1f}s (CPU {theirs[-1][1]:.1f}s)" if theirs else ""),
                file=sys.stderr, flush=True)
        row: dict[str, Any] = {"case": what, "updates": ours[0][2] if what == "learn" else None}
        for i, kind in enumerate(("wall", "cpu")):
            row[f"rlgrad_{kind}"] = statistics.median(o[i] for o in ours)
            row[f"sb3_{kind}"] = statistics.median(t[i] for t in theirs) if theirs else None
            row[f"ratio_{kind}"] = (statistics.median(a[i] / b[i] for a, b in zip(ours, theirs))
                                    if theirs else None)
        rows.append(row)
    return rows


def greedy_forwards(steps: int) -> float:
    """Expected forwards at batch 1 of the short run: one per step past the learning start on
    which epsilon-greedy does not explore (the warm-up's actions are uniform, no forward)."""
    start, decay = steps // 6, HP["exploration_fraction"] * steps
    eps_end = HP["exploration_final_eps"]
    eps = [max(eps_end, 1.0 - (1.0 - eps_end) * t / decay) for t in range(start, steps)]
    return float(sum(1.0 - e for e in eps))


def floor_bound(steps: int, updates: int, env_cpu: float, sb3_cpu: float | None,
                repeats: int) -> list[tuple[str, float, float | None]]:
    """Rows (what, CPU seconds, / SB3's learn CPU seconds) of the short run at the GEMM floor."""
    parts = {"update": gemm_floor()[0], "act": gemm_floor(shapes=_act_shapes())[0],
             "conv3": gemm_floor(shapes=_conv3_products())[0]}
    for tile in (2, 4):
        parts[f"F({tile}x{tile}, 3x3)"] = gemm_floor(shapes=_winograd_products(tile))[0]
    med = {k: float(np.median(v)) for k, v in _cpu_interleaved(parts, repeats).items()}
    forwards = greedy_forwards(steps)
    upd, act = updates * med["update"], forwards * med["act"]
    bound = upd + act + env_cpu
    ratio = (lambda t: t / sb3_cpu if sb3_cpu else None)
    rows = [(f"{updates} updates x the update's GEMM floor ({1e3 * med['update']:.1f} ms)", upd, None),
            (f"{forwards:,.0f} greedy forwards x their products at batch 1 "
             f"({1e3 * med['act']:.2f} ms)", act, None),
            ("the environment alone (rlgrad's wrappers)", env_cpu, None),
            ("**the short run at the GEMM floor**", bound, ratio(bound))]
    for tile in (2, 4):
        w = med[f"F({tile}x{tile}, 3x3)"]
        saved = updates * (med["conv3"] - w)
        rows.append((f"same, conv3 by Winograd F({tile}x{tile}, 3x3) (its products "
                     f"{1e3 * w:.1f} ms vs im2col's {1e3 * med['conv3']:.1f} ms an update)",
                     bound - saved, ratio(bound - saved)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="BreakoutNoFrameskip-v4")
    ap.add_argument("--steps", type=int, default=3000, help="environment steps of the short run")
    ap.add_argument("--repeat", type=int, default=1, help="interleaved pairs of runs")
    ap.add_argument("--repeats", type=int, default=9, help="rounds of the per-call timings")
    ap.add_argument("--quick", action="store_true", help="CNN and update tables only, 3 rounds")
    ap.add_argument("--runs-only", action="store_true", help="the short DQN runs only")
    ap.add_argument("--no-sb3", action="store_true")
    args = ap.parse_args()
    import cnn

    have_sb3 = not args.no_sb3 and _timing.torch_or_none() is not None
    repeats, min_time = (3, 0.3) if args.quick else (args.repeats, 1.0)
    print(f"rlgrad {rlgrad.__version__}, NumPy {np.__version__}, one BLAS thread; {args.env}")
    if not args.runs_only:
        rows = cnn.run(repeats, min_time) + update_rows(args.env, repeats, have_sb3)
        print(cnn.table(rows).replace("NatureCNN, uint8 4x84x84", "Nature CNN / DQN, uint8 4x84x84"))
    if args.quick:
        return
    print(f"\n| DQN, {args.steps:,} steps of {args.env} | rlgrad | SB3 DQN(\"CnnPolicy\") | "
          "rlgrad / SB3 | rlgrad CPU | SB3 CPU | rlgrad / SB3, CPU |\n|---|---:|---:|---:|---:|---:|---:|")
    fmt = lambda v, unit: "-" if v is None else (f"{v:.1f} s" if unit else f"{v:.2f}x")
    rows = run_rows(args.env, args.steps, args.repeat, have_sb3)
    for r in rows:
        print(f"| {r['case']} | " + " | ".join(
            fmt(r[f"{who}_{kind}"], who != "ratio") for kind in ("wall", "cpu")
            for who in ("rlgrad", "sb3", "ratio")) + " |")
    learn, env = rows
    print(f"\n| the short run's bound, CPU time | seconds | / SB3's learn ({fmt(learn['sb3_cpu'], 1)} "
          "CPU) |\n|---|---:|---:|")
    for what, sec, ratio in floor_bound(args.steps, learn["updates"], env["rlgrad_cpu"],
                                        learn["sb3_cpu"], args.repeats):
        print(f"| {what} | {sec:.1f} s | {fmt(ratio, 0)} |")


if __name__ == "__main__":
    main()

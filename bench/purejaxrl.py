"""PPO on CartPole-v1 with PureJaxRL's configuration: rlgrad vs PureJaxRL, whole-process wall time.

    .venv/bin/python bench/purejaxrl.py [--repeat 3] [--seed 0] [--no-jax] [--no-floor]
                                        [--no-loop] [--no-vmap] [--learning 0-4]

PureJaxRL (Lu et al., 2022, "Discovered Policy Optimisation") compiles the whole PPO loop
(environment, rollout, update) into one XLA program. Its ``purejaxrl/ppo.py`` is a script, not a
package on a registry, so ``_jax_train`` below is a transcription of it written for this bench:
the same algorithm, network, initialisation, optimizer and configuration (its ``__main__``
config): CartPole-v1 from gymnax with PureJaxRL's ``LogWrapper`` statistics, 4 envs x 128 steps,
500k steps, 4 epochs x 4 minibatches, Adam(eps 1e-5) at 2.5e-4 annealed linearly per update,
gradient norm clipped at 0.5, entropy 0.01, value 0.5, clip 0.2 (ratio and value), GAE 0.95,
gamma 0.99, 64-64 tanh actor and critic with orthogonal initialisation. The one substitution:
``distrax.Categorical`` (not installed) is written out (sample by ``jax.random.categorical``,
``log_softmax`` log-probabilities, entropy), the same draws and values.

rlgrad runs its ``PPO`` with the same hyperparameters, its value weight written in SB3's
convention: PureJaxRL's value term is ``VF_COEF * 0.5 * mean(max(unclipped, clipped))`` of the
squared errors, SB3's ``vf_coef * mean(...)``, so rlgrad gets ``vf_coef = 0.25`` (with 0.5, twice
PureJaxRL's weight, the critic's gradient takes most of the shared 0.5 norm clip and seeds 0, 1, 2
stopped at 342, 301 and 223), and its value loss PureJaxRL's: ``clip_range_vf = CLIP_EPS`` with
``clip_vf_max=True``, the larger of the clipped and unclipped errors (without it the seeds 0-4 of
the compiled loop evaluated 414, 313, 500, 198, 335; with SB3's clipped term alone 492, 500, 500,
500, 500 but seed 6 382; docs/rl.md). What differs by design: rlgrad bootstraps time-limit
truncations (gymnax's 500-step end is a termination to PureJaxRL), its learning rate at update
i is PureJaxRL's at update i + 1 (the progress counted after the rollout, as SB3), and it drops
the transition Gymnasium's NEXT_STEP autoreset inserts after a done (gymnax resets within the
step), so its rollouts hold a few rows fewer.

Each side runs as its own Python process on one thread (XLA:
``--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``; NumPy: one BLAS thread),
and the time is that process's whole wall time (and its CPU time, user + system, which a loaded
machine inflates less): interpreter start, imports, compilation
(PureJaxRL's ``jax.jit`` of the whole training, rlgrad's tracing) and training. Runs are
interleaved, ``--repeat`` times; the table gives medians and the median of the per-pair ratios.
"Return" is the mean return of the training episodes that ended in the last 10 updates (PureJaxRL's
``returned_episode_returns`` metric; rlgrad's episode statistics), and for rlgrad also 20
deterministic evaluation episodes (run after training, their time not counted).
Without ``jax``, ``flax``, ``optax`` and ``gymnax`` (``pip install -e .[bench]``), rlgrad runs alone.

The compiled loop (issue 31; ``--no-loop`` leaves it out): rlgrad's PPO with
``compile_loop=True`` on the functional CartPole (``rlgrad.rl.compiled_loop``: rollout, GAE and
epochs of an update as one ``rlgrad.jit`` program run as native code, its tracing and C build
inside the time as XLA's compile is in PureJaxRL's: each run builds into an empty cache unless
``--warm-cache``), and 8 seeds as one such program (a seed axis on every array) beside PureJaxRL's
``jax.jit(jax.vmap(train))`` over 8 keys (``--no-vmap`` leaves both out); those two rows count
8 runs' steps and give the seeds' mean return. ``--learning 0-4`` does not time: it trains the
seeds with compile_loop as one program and evaluates each (the ">= 475 on seeds 0-4" check),
beside PureJaxRL's runs of the same seeds, their parameters evaluated the same way.

Two more rows (``--no-floor`` leaves them out), each its own process too: the NumPy floor
(``bench/_numpy_ppo.py``: the same PPO, PureJaxRL's loss and configuration, written by hand in
NumPy for this one network, stepping the same Gymnasium vector env as rlgrad with rlgrad's
bookkeeping; 976 updates as PureJaxRL), and the environment alone (the same vector env, the same
number of steps with random actions and the floor's per-step bookkeeping, no network).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CONFIG = {
    "LR": 2.5e-4, "NUM_ENVS": 4, "NUM_STEPS": 128, "TOTAL_TIMESTEPS": 500_000, "UPDATE_EPOCHS": 4,
    "NUM_MINIBATCHES": 4, "GAMMA": 0.99, "GAE_LAMBDA": 0.95, "CLIP_EPS": 0.2, "ENT_COEF": 0.01,
    "VF_COEF": 0.5, "MAX_GRAD_NORM": 0.5, "ACTIVATION": "tanh", "ENV_NAME": "CartPole-v1",
    "ANNEAL_LR": True,
}
# the same run as rlgrad keyword arguments (SB3's names)
RLGRAD_KWARGS = {
    "n_envs": CONFIG["NUM_ENVS"], "n_steps": CONFIG["NUM_STEPS"],
    "batch_size": CONFIG["NUM_ENVS"] * CONFIG["NUM_STEPS"] // CONFIG["NUM_MINIBATCHES"],
    "n_epochs": CONFIG["UPDATE_EPOCHS"], "learning_rate": f"lin_{CONFIG['LR']}",
    "gamma": CONFIG["GAMMA"], "gae_lambda": CONFIG["GAE_LAMBDA"], "clip_range": CONFIG["CLIP_EPS"],
    # PureJaxRL's value term is VF_COEF * 0.5 * mean(squared error): SB3's vf_coef * mean(...)
    "ent_coef": CONFIG["ENT_COEF"], "vf_coef": 0.5 * CONFIG["VF_COEF"],
    # PureJaxRL clips the value as the ratio, the larger of the clipped and unclipped errors
    "clip_range_vf": CONFIG["CLIP_EPS"], "clip_vf_max": True,
    "max_grad_norm": CONFIG["MAX_GRAD_NORM"],
    "policy_kwargs": {"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": "tanh"},
}
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


# ---- the PureJaxRL side: a transcription of purejaxrl/ppo.py ------------------------------------
def _jax_train(seed: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bench._purejaxrl_jax import make_train

    t0 = time.perf_counter()
    train = jax.jit(make_train(CONFIG))
    out = jax.block_until_ready(train(jax.random.PRNGKey(seed)))
    dt = time.perf_counter() - t0
    m = out["metrics"]
    done = np.asarray(m["returned_episode"])[-10:]
    rets = np.asarray(m["returned_episode_returns"])[-10:][done]
    return {"train_s": dt, "return": float(np.mean(rets)) if rets.size else float("nan"),
            "steps": int(np.asarray(m["timestep"])[-1, -1, 0]) * CONFIG["NUM_ENVS"],
            "jax": jax.__version__, "backend": jax.default_backend(),
            "x64": bool(jnp.zeros(()).dtype == jnp.float64)}


# ---- the rlgrad side --------------------------------------------------------------------------------
def _rlgrad_train(seed: int) -> dict:
    import numpy as np

    from rlgrad.rl import PPO, evaluate

    t0 = time.perf_counter()
    model = PPO(CONFIG["ENV_NAME"], seed=seed, **RLGRAD_KWARGS)
    returns, updates = [], []

    train = model.train

    def train_and_record() -> None:  # the returns of the episodes of each update
        train()
        q = model._ep_stats
        updates.append(int(q.episode_count))
        returns.append(list(q.return_queue))

    # read after each update by wrapping train, not by a callback: with a callback, the rollout
    # calls it at every step (SB3's on_step), ~1 s of CPU over 500k steps that a user's plain
    # learn() does not pay
    model.train = train_and_record
    model.learn(CONFIG["TOTAL_TIMESTEPS"])
    dt = time.perf_counter() - t0
    # episodes that ended in the last 10 updates: the newest entries of the statistics queue
    n_new = updates[-1] - updates[-11] if len(updates) > 10 else updates[-1]
    rets = returns[-1][-n_new:] if n_new else []
    t1, c1 = time.perf_counter(), time.process_time()
    mean, std = evaluate(model, CONFIG["ENV_NAME"], n_episodes=20)
    return {"train_s": dt, "return": float(np.mean(rets)) if rets else float("nan"),
            "eval_mean": mean, "eval_std": std, "eval_s": time.perf_counter() - t1,
            "eval_cpu_s": time.process_time() - c1, "steps": model.num_timesteps}


def _loop_returns(model: object, updates: int = 10, episodes: int = 10) -> float:
    """The mean return of the episodes that ended in the compiled loop's last ``updates``
    updates, the window widened until it holds ``episodes`` episodes (A2C's updates are short)."""
    ret_sum, n_done = model.loop_returns  # type: ignore[attr-defined]
    k = updates
    while k < len(n_done) and n_done[-k:].sum() < episodes:
        k += updates
    n = n_done[-k:].sum()
    return float(ret_sum[-k:].sum() / n) if n else float("nan")


def _loop_train(seed: int) -> dict:
    """rlgrad's PPO with ``compile_loop=True``: the whole training as one compiled program on the
    functional CartPole (tracing and compiling included in the time, as XLA's is for PureJaxRL)."""
    from rlgrad.rl import PPO, evaluate

    t0 = time.perf_counter()
    model = PPO(CONFIG["ENV_NAME"], seed=seed, compile_loop=True, **RLGRAD_KWARGS)
    model.learn(CONFIG["TOTAL_TIMESTEPS"])
    dt = time.perf_counter() - t0
    t1, c1 = time.perf_counter(), time.process_time()
    mean, std = evaluate(model, CONFIG["ENV_NAME"], n_episodes=20)
    return {"train_s": dt, "return": _loop_returns(model), "eval_mean": mean, "eval_std": std,
            "eval_s": time.perf_counter() - t1, "eval_cpu_s": time.process_time() - c1,
            "steps": model.num_timesteps}


def _loop_seeds_train(seed: int) -> dict:
    """``N_SEEDS`` seeds (seed, seed + 1, ...) as one compiled program (a seed axis on every
    array: PureJaxRL's vmap over seeds)."""
    from rlgrad.rl import PPO
    from rlgrad.rl.compiled_loop import train_seeds

    t0 = time.perf_counter()
    models = train_seeds(PPO, CONFIG["ENV_NAME"], range(seed, seed + N_SEEDS),
                         CONFIG["TOTAL_TIMESTEPS"], **RLGRAD_KWARGS)
    dt = time.perf_counter() - t0
    rets = [_loop_returns(m) for m in models]
    return {"train_s": dt, "return": float(sum(rets) / len(rets)), "returns": rets,
            "steps": sum(m.num_timesteps for m in models)}


def _jax_seeds_train(seed: int) -> dict:
    """PureJaxRL's ``jax.jit(jax.vmap(make_train(config)))`` over ``N_SEEDS`` keys."""
    import jax
    import numpy as np

    from bench._purejaxrl_jax import make_train

    t0 = time.perf_counter()
    train = jax.jit(jax.vmap(make_train(CONFIG)))
    out = jax.block_until_ready(train(jax.random.split(jax.random.PRNGKey(seed), N_SEEDS)))
    dt = time.perf_counter() - t0
    m = out["metrics"]
    done = np.asarray(m["returned_episode"])[:, -10:]
    rets = np.asarray(m["returned_episode_returns"])[:, -10:]
    per_seed = [float(np.mean(r[d])) if d.any() else float("nan") for r, d in zip(rets, done)]
    return {"train_s": dt, "return": float(np.mean(per_seed)), "returns": per_seed,
            "steps": int(np.asarray(m["timestep"])[:, -1, -1, 0].sum()) * CONFIG["NUM_ENVS"],
            "jax": jax.__version__, "backend": jax.default_backend()}


def _floor_train(seed: int) -> dict:
    from bench._numpy_ppo import PUREJAXRL, train

    res = train(PUREJAXRL, seed)
    return {k: res[k] for k in ("train_s", "return", "steps")}


def _env_train(seed: int) -> dict:
    from bench._numpy_ppo import PUREJAXRL, env_alone

    res = env_alone(PUREJAXRL, seed)
    return {k: res[k] for k in ("train_s", "steps")} | {"return": float("nan")}


N_SEEDS = 8  # the vectorised rows: seeds seed .. seed + 7 in one program
WARM = False  # --warm-cache: the loop's native module from the user's cache (built once)
SIDES = {"jax": _jax_train, "rlgrad": _rlgrad_train, "loop": _loop_train, "numpy": _floor_train,
         "env": _env_train, "loop8": _loop_seeds_train, "jax8": _jax_seeds_train}
NAMES = {"rlgrad": "rlgrad", "jax": "PureJaxRL", "numpy": "NumPy floor", "env": "env alone",
         "loop": "rlgrad compile_loop", "loop8": f"rlgrad compile_loop x{N_SEEDS}",
         "jax8": f"PureJaxRL vmap x{N_SEEDS}"}


def child(side: str, seed: int) -> None:
    res = SIDES[side](seed)
    print("RESULT " + json.dumps(res), flush=True)


# ---- the driver: each side as a subprocess, interleaved --------------------------------------------
def run_side(side: str, seed: int, timeout: float | None = None) -> dict:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + XLA_ONE_THREAD).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cold = tempfile.TemporaryDirectory(prefix="rlgrad-bench-cache-") if not WARM else None
    if cold is not None:  # the loop's C built in every run, as XLA compiles in every run
        env["RLGRAD_CACHE_DIR"] = cold.name
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        p = subprocess.run([sys.executable, "-m", "bench.purejaxrl", "--child", side, "--seed",
                            str(seed)], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{side} run did not finish in {timeout:.0f} s (--timeout)") from None
    finally:
        if cold is not None:
            cold.cleanup()
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        raise RuntimeError(f"{side} run failed:\n{p.stderr[-3000:]}")
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")][-1]
    res = json.loads(line[len("RESULT "):])
    res["wall_s"] = wall - res.get("eval_s", 0.0)  # the evaluation after training is not timed
    res["cpu_s"] = cpu - res.get("eval_cpu_s", 0.0)
    return res


def have_jax() -> bool:
    try:
        import importlib.util

        return all(importlib.util.find_spec(m) is not None
                   for m in ("jax", "flax", "optax", "gymnax"))
    except (ImportError, ValueError):
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-jax", action="store_true")
    ap.add_argument("--quick", action="store_true", help="one run of each side")
    ap.add_argument("--no-floor", action="store_true",
                    help="leave out the NumPy floor and environment-alone rows")
    ap.add_argument("--no-loop", action="store_true",
                    help="leave out the compile_loop rows (one seed, and N_SEEDS vectorised)")
    ap.add_argument("--no-vmap", action="store_true",
                    help=f"leave out the {N_SEEDS}-seed rows (compile_loop and PureJaxRL's vmap)")
    ap.add_argument("--learning", metavar="SEEDS", default=None,
                    help="instead of timing: train these seeds (e.g. 0-4) with compile_loop as "
                    "one program and evaluate each (20 deterministic episodes)")
    ap.add_argument("--config", choices=("purejaxrl", "preset"), default="purejaxrl",
                    help="--learning's configuration: PureJaxRL's (500k steps) or rlgrad's "
                    "CartPole-v1 preset for --algo (rlgrad/presets)")
    ap.add_argument("--algo", default="ppo", choices=("ppo", "a2c", "reinforce"),
                    help="--learning --config preset: the algorithm")
    ap.add_argument("--timeout", type=float, default=None, metavar="S",
                    help="stop a side's process after S seconds and leave the side out")
    ap.add_argument("--warm-cache", action="store_true",
                    help="the compiled loop's C module from the user's cache (built by an earlier "
                    "run); by default every run builds it into an empty cache, compile included")
    ap.add_argument("--sides", default=None, metavar="LIST",
                    help=f"only these rows, comma-separated, of: {', '.join(SIDES)} (e.g. "
                    "jax,loop,jax8,loop8: the compiled loop's goals without the eager row)")
    ap.add_argument("--child", choices=tuple(SIDES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    global WARM
    WARM = args.warm_cache
    if args.child:
        child(args.child, args.seed)
        return
    if args.learning:
        jax = args.config == "purejaxrl" and not args.no_jax and have_jax()
        learning(args.learning, args.config, args.algo, jax)
        return
    jax_ok = not args.no_jax and have_jax()
    if not jax_ok and not args.no_jax:
        print("jax / flax / optax / gymnax not installed (pip install -e .[bench]): rlgrad only",
              file=sys.stderr)
    repeat = 1 if args.quick else max(args.repeat, 1)
    sides = ["rlgrad"] + (["jax"] if jax_ok else []) + ([] if args.no_loop else ["loop"])
    if not args.no_vmap:
        sides += ([] if args.no_loop else ["loop8"]) + (["jax8"] if jax_ok else [])
    sides += [] if args.no_floor else ["numpy", "env"]
    if args.sides:
        unknown = sorted(set(args.sides.split(",")) - set(SIDES))
        if unknown:
            ap.error(f"--sides: unknown {unknown}; choose among {', '.join(SIDES)}")
        sides = [s for s in args.sides.split(",") if jax_ok or not s.startswith("jax")]
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    for i in range(repeat):
        msg = []
        for side in list(sides):
            try:
                r = run_side(side, args.seed, args.timeout)
            except RuntimeError as e:  # (one side's failure or hang leaves the others' rows)
                print(f"{NAMES[side]} left out: {str(e).splitlines()[0]}", file=sys.stderr)
                sides.remove(side)
                del runs[side]
                continue
            runs[side].append(r)
            ret = "" if side == "env" else f" return {r['return']:.1f}"
            msg.append(f"{NAMES[side]} {r['wall_s']:.1f} s (CPU {r['cpu_s']:.1f}, train "
                       f"{r['train_s']:.1f}){ret}")
        print(f"run {i + 1}: " + " | ".join(msg), file=sys.stderr, flush=True)
    _table(args, repeat, runs)


def _table(args: argparse.Namespace, repeat: int, runs: dict[str, list[dict]]) -> None:
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    print(f"\nPPO, PureJaxRL's CartPole-v1 configuration (500k steps, 4 envs x 128, 4 epochs x 4 "
          f"minibatches), seed {args.seed}, {time.strftime('%Y-%m-%d')}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one thread each, "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}; medians of {repeat} "
          "interleaved runs\n")
    ref = [s for s in ("jax", "rlgrad") if runs.get(s)]
    keys = [(s, k) for s in ref for k in ("wall_s", "cpu_s")]
    print("| implementation | whole process, wall (s) | whole process, CPU (s) | training (s) | steps "
          "| return (last 10 updates) | deterministic eval (20 ep.) | "
          + " | ".join(f"{'wall' if k == 'wall_s' else 'CPU'} / {NAMES[s]}" for s, k in keys) + " |")
    print("|---|---:|---:|---:|---:|---:|---|" + "---:|" * len(keys))
    label = {"rlgrad": "rlgrad PPO", "numpy": "NumPy floor PPO (bench/_numpy_ppo.py)",
             "env": "environment alone (same env and steps, random actions)",
             "loop": "rlgrad PPO, compile_loop=True (one program, compile included)",
             "loop8": f"rlgrad PPO, compile_loop, {N_SEEDS} seeds vectorised in one program"}
    for side, xs in runs.items():
        x = xs[-1]
        vmap = f", vmap over {N_SEEDS} seeds" if side == "jax8" else ""
        name = label.get(side) or f"PureJaxRL PPO (jax {x['jax']}, {x['backend']}{vmap})"
        ev = f"{x['eval_mean']:.1f} ± {x['eval_std']:.1f}" if "eval_mean" in x else "-"
        ret = "-" if side == "env" else f"{x['return']:.1f}"
        compiled = side in ("jax", "jax8", "loop", "loop8")
        train = f"{med(xs, 'train_s'):.1f}" + (" (compile + train)" if compiled else "")
        ratios = " | ".join(f"{statistics.median(a[k] / b[k] for a, b in zip(xs, runs[s])):.2f}"
                            for s, k in keys)
        print(f"| {name} | {med(xs, 'wall_s'):.1f} | {med(xs, 'cpu_s'):.1f} | {train} | "
              f"{x['steps']} | {ret} | {ev} | {ratios} |")
    pairs = [("rlgrad", s) for s in runs if "rlgrad" in runs and s not in ("rlgrad", "loop8", "jax8")]
    pairs += [(a, b) for a, b in (("loop", "jax"), ("loop", "rlgrad"), ("loop8", "jax8"))
              if a in runs and b in runs]
    for a, b in pairs:
        for k, name in (("wall_s", "wall"), ("cpu_s", "CPU")):
            ratio = statistics.median(x[k] / y[k] for x, y in zip(runs[a], runs[b]))
            print(f"\n{NAMES[a]} / {NAMES[b]} whole-process {name} time: {ratio:.2f}x (median of "
                  "the per-pair ratios)")
    print("\n(ratio columns: medians of the per-run ratios of the row's process to the column's)")


def learning(text: str, config: str = "purejaxrl", algo: str = "ppo", jax: bool = False) -> None:
    """The compile_loop learning check: the seeds as one program, each evaluated; PureJaxRL's
    configuration (PPO), or rlgrad's CartPole-v1 preset of ``algo``. ``jax``: PureJaxRL's own
    runs of the seeds beside them, their final parameters evaluated the same way."""
    from rlgrad.cli.build import resolve
    from rlgrad.cli.seeds import parse_seeds
    from rlgrad.rl import evaluate
    from rlgrad.rl.compiled_loop import train_seeds

    seeds = parse_seeds(text)
    spec = resolve(CONFIG["ENV_NAME"], algo, seeds[0], None, None, None, [])
    if config == "purejaxrl":
        kwargs, steps = RLGRAD_KWARGS, CONFIG["TOTAL_TIMESTEPS"]
    else:
        kwargs, steps = spec.hyperparams, spec.total_timesteps
    t0 = time.perf_counter()
    models = train_seeds(spec.cls, CONFIG["ENV_NAME"], seeds, steps, **kwargs)
    print(f"{spec.cls.__name__} compile_loop, {config} configuration ({steps} steps), seeds {text} "
          f"as one program: {time.perf_counter() - t0:.1f} s (compile included; load "
          f"{os.getloadavg()[0]:.1f})\n\n| seed | return (last 10 updates, >= 10 episodes) | "
          "deterministic eval (20 ep.) |" + (" PureJaxRL: return | eval |" if jax else "")
          + "\n|---:|---:|---|" + ("---:|---|" if jax else ""))
    for m in models:
        mean, std = evaluate(m, CONFIG["ENV_NAME"], n_episodes=20)
        row = f"| {m.seed} | {_loop_returns(m):.1f} | {mean:.1f} ± {std:.1f} |"
        if jax:
            ret, agent = _jax_agent(m.seed)
            jm, js = evaluate(agent, CONFIG["ENV_NAME"], n_episodes=20)
            row += f" {ret:.1f} | {jm:.1f} ± {js:.1f} |"
        print(row, flush=True)


def _jax_agent(seed: int) -> tuple[float, object]:
    """PureJaxRL trained on ``seed``: its return (last 10 updates) and an agent whose ``predict``
    is its actor's argmax (``rlgrad.rl.evaluate`` runs it as rlgrad's models)."""
    import jax
    import numpy as np

    from bench._purejaxrl_jax import make_train

    out = jax.block_until_ready(jax.jit(make_train(CONFIG))(jax.random.PRNGKey(seed)))
    m = out["metrics"]
    done = np.asarray(m["returned_episode"])[-10:]
    ret = float(np.mean(np.asarray(m["returned_episode_returns"])[-10:][done]))
    p = out["runner_state"][0].params["params"]
    actor = [(np.asarray(p[f"Dense_{i}"]["kernel"]), np.asarray(p[f"Dense_{i}"]["bias"]))
             for i in range(3)]  # Dense_0-2: the actor; 3-5: the critic

    class Agent:
        def predict(self, obs: np.ndarray, deterministic: bool = True) -> tuple:
            x = np.asarray(obs, np.float32)
            for i, (w, b) in enumerate(actor):
                x = x @ w + b
                x = np.tanh(x) if i < 2 else x
            return np.argmax(x, axis=-1), None

    return ret, Agent()


if __name__ == "__main__":
    main()

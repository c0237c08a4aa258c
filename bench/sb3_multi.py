"""Dict observations and HER beside Stable-Baselines3 (issue 28's speed goals).

    .venv/bin/python bench/sb3_multi.py [--rounds 3] [--ppo-steps 2048] [--her-steps 600]

Three runs, each on the same script for both libraries (imports changed, same seed, one thread
each, one after the other, rounds interleaved): PPO with ``MultiInputPolicy`` on SB3's
``SimpleMultiObsEnv`` (a Dict of a vector and a 64x64 image: ``CombinedExtractor``'s CNN) and on
``BitFlippingEnv`` (a Dict of vectors), and SAC with
``HerReplayBuffer`` on SB3's ``BitFlippingEnv`` (continuous, 10 bits, Dict goals). Prints the
median wall time of ``learn`` per library and the median of the per-round ratios (rlgrad / SB3;
the goal: at most 0.5). ``--cpu``: CPU seconds instead of wall (a host loaded by other work);
``--image``: the image run only; ``--split``: the image run's CPU seconds split into collecting
the rollouts and the updates, per library (where the time goes; ``bench/cnn.py --layers`` splits
the updates' convolutions further), with ``--reference`` also rlgrad with its conv fast paths off.
"""

from __future__ import annotations

import argparse
import time

import _timing  # first: one BLAS thread, this checkout's rlgrad
import numpy as np  # noqa: E402

#: the clock ``learn`` is timed with: wall (default) or the process's CPU time (``--cpu``: on a
#: host loaded by other work the wall clock measures the other work too)
_CLOCK = {"clock": time.perf_counter}


def _ppo(lib: object, steps: int, seed: int) -> float:
    model = lib.PPO("MultiInputPolicy", lib.envs.SimpleMultiObsEnv(random_start=False),
                    n_steps=256, batch_size=64, n_epochs=4, seed=seed)
    clock = _CLOCK["clock"]
    t = clock()
    model.learn(steps)
    return clock() - t


def _ppo_split(lib: object, steps: int, seed: int) -> dict[str, float]:
    """``_ppo``'s run, its CPU seconds split: collecting the rollouts (batch-1 forwards and the
    env) and the updates (128 minibatch forward + backward passes and Adam steps)."""
    model = lib.PPO("MultiInputPolicy", lib.envs.SimpleMultiObsEnv(random_start=False),
                    n_steps=256, batch_size=64, n_epochs=4, seed=seed)
    acc = {"collect": 0.0, "train": 0.0}
    inner = getattr(model, "model", model)  # (the reference paths' wrapper)
    collect = "_collect" if hasattr(inner, "_collect") else "collect_rollouts"
    _timing.add_cpu_time(inner, collect, acc, "collect")
    _timing.add_cpu_time(inner, "train", acc, "train")
    c = time.process_time()
    model.learn(steps)
    acc["learn"] = time.process_time() - c
    return acc


def _ppo_vectors(lib: object, steps: int, seed: int) -> float:
    """A Dict of vectors only (BitFlippingEnv's observation, achieved and desired goals)."""
    model = lib.PPO("MultiInputPolicy", lib.envs.BitFlippingEnv(n_bits=10, max_steps=10),
                    n_steps=256, batch_size=64, n_epochs=4, seed=seed)
    clock = _CLOCK["clock"]
    t = clock()
    model.learn(steps)
    return clock() - t


def _her_sac(lib: object, steps: int, seed: int) -> float:
    env = lib.envs.BitFlippingEnv(n_bits=10, continuous=True, max_steps=10)
    model = lib.SAC("MultiInputPolicy", env, replay_buffer_class=lib.HerReplayBuffer,
                    replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
                    learning_starts=100, batch_size=64, buffer_size=10_000, seed=seed,
                    policy_kwargs=dict(net_arch=[64, 64]))
    clock = _CLOCK["clock"]
    t = clock()
    model.learn(steps)
    return clock() - t


class _ReferencePaths:
    """rlgrad's model whose ``learn`` runs with the conv and acting fast paths switched off
    (im2col convolutions, not Winograd's; NumPy's column copies; no conv+ReLU pairs in compiled
    steps (forward; input gradient and ReLU's backward); acting through the recorded path; the
    conv shape work at every call; Dict observations flattened entry by entry; the weights'
    arrays made at every call; the towers apart; NumPy's Categorical sampling): the reference
    beside which ``--reference`` times the fast paths."""

    def __init__(self, model: object) -> None:
        self.model = model

    def __getattr__(self, name: str) -> object:
        return getattr(self.model, name)

    def learn(self, steps: int) -> object:
        from rlgrad.distributions import categorical
        from rlgrad.nn import functional as F
        from rlgrad.nn import winograd
        from rlgrad.rl import cnn, envs, policies
        from rlgrad.tracer import FUSED_PAIRS

        switches = [(F, "_C_COLUMNS"), (cnn, "PLAIN_ACTING"), (F, "CONV_PLANS"),
                    (envs, "FLAT_DICT_COLUMNS"), (F, "KEEP_WEIGHT_COLS"),
                    (policies, "STACKED_TOWERS"), (categorical, "C_DRAW"),
                    (winograd, "WINOGRAD")]
        saved = [getattr(m, k) for m, k in switches]
        pairs = [("conv2d", "relu"), ("conv2d_input_grad", "relu_grad")]
        fused = {k: FUSED_PAIRS.pop(k) for k in pairs if k in FUSED_PAIRS}
        for m, k in switches:
            setattr(m, k, False)
        try:
            return self.model.learn(steps)
        finally:
            for (m, k), v in zip(switches, saved):
                setattr(m, k, v)
            FUSED_PAIRS.update(fused)


def _libs(reference: bool = False) -> dict[str, object]:
    import types

    import rlgrad.rl as mine
    import rlgrad.rl.common.envs as mine_envs

    out = {"rlgrad": types.SimpleNamespace(PPO=mine.PPO, SAC=mine.SAC, envs=mine_envs,
                                           HerReplayBuffer=mine.HerReplayBuffer)}
    if reference:
        out["rlgrad, reference paths"] = types.SimpleNamespace(
            PPO=lambda *a, **k: _ReferencePaths(mine.PPO(*a, **k)), envs=mine_envs)
    if _timing.comparators(("torch", "stable_baselines3")):
        import stable_baselines3 as sb3
        import stable_baselines3.common.envs as sb3_envs
        import torch

        torch.set_num_threads(1)
        out["SB3"] = types.SimpleNamespace(PPO=sb3.PPO, SAC=sb3.SAC, envs=sb3_envs,
                                           HerReplayBuffer=sb3.HerReplayBuffer)
    return out


def split_table(libs: dict[str, object], rounds: int, steps: int) -> str:
    """The image run's CPU seconds per library, split into collecting and updating (medians of
    interleaved rounds)."""
    parts: dict[str, list[dict[str, float]]] = {k: [] for k in libs}
    for r in range(rounds):
        for name, lib in libs.items():
            parts[name].append(_ppo_split(lib, steps, seed=r))
    lines = ["| PPO, SimpleMultiObsEnv, CPU s | learn | collect (batch-1 forwards, env) | "
             "train (128 updates) |", "|---|---:|---:|---:|"]
    for name, rows in parts.items():
        med = {k: float(np.median([row[k] for row in rows])) for k in rows[0]}
        lines.append(f"| {name} | {med['learn']:.2f} | {med['collect']:.2f} | "
                     f"{med['train']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ppo-steps", type=int, default=2048)
    ap.add_argument("--her-steps", type=int, default=600)
    ap.add_argument("--cpu", action="store_true", help="time learn in CPU seconds, not wall")
    ap.add_argument("--image", action="store_true", help="the image run only")
    ap.add_argument("--split", action="store_true",
                    help="the image run's CPU time split into collecting and updating")
    ap.add_argument("--reference", action="store_true",
                    help="with --split: also rlgrad with the conv fast paths off")
    args = ap.parse_args()
    libs = _libs(args.reference and args.split)
    if args.split:
        print(split_table(libs, args.rounds, args.ppo_steps))
        return
    if args.cpu:
        _CLOCK["clock"] = time.process_time
    runs = {"PPO MultiInputPolicy, SimpleMultiObsEnv (image + vector)": (_ppo, args.ppo_steps),
            "PPO MultiInputPolicy, BitFlippingEnv(10) (vectors)": (_ppo_vectors, args.ppo_steps),
            "SAC + HerReplayBuffer, BitFlippingEnv(10)": (_her_sac, args.her_steps)}
    if args.image:
        runs = dict(list(runs.items())[:1])
    print("| run | steps | rlgrad (s) | SB3 (s) | rlgrad / SB3 |\n|---|---|---|---|---|")
    for name, (fn, steps) in runs.items():
        times: dict[str, list[float]] = {k: [] for k in libs}
        for r in range(args.rounds):
            for lib_name, lib in libs.items():
                times[lib_name].append(fn(lib, steps, seed=r))
        mine = float(np.median(times["rlgrad"]))
        if "SB3" in times:
            ratio = float(np.median(np.array(times["rlgrad"]) / np.array(times["SB3"])))
            print(f"| {name} | {steps} | {mine:.2f} | {np.median(times['SB3']):.2f} | "
                  f"{ratio:.2f}x |", flush=True)
        else:
            print(f"| {name} | {steps} | {mine:.2f} | - | - |", flush=True)


if __name__ == "__main__":
    main()

"""Dict observations and HER beside Stable-Baselines3 (issue 28's speed goals).

    .venv/bin/python bench/sb3_multi.py [--rounds 3] [--ppo-steps 2048] [--her-steps 600]

Three runs, each on the same script for both libraries (imports changed, same seed, one thread
each, one after the other, rounds interleaved): PPO with ``MultiInputPolicy`` on SB3's
``SimpleMultiObsEnv`` (a Dict of a vector and a 64x64 image: ``CombinedExtractor``'s CNN) and on
``BitFlippingEnv`` (a Dict of vectors), and SAC with
``HerReplayBuffer`` on SB3's ``BitFlippingEnv`` (continuous, 10 bits, Dict goals). Prints the
median wall time of ``learn`` per library and the median of the per-round ratios (rlgrad / SB3;
the goal: at most 0.5).
"""

from __future__ import annotations

import argparse
import time

import _timing  # noqa: F401  (first: one BLAS thread, this checkout's rlgrad)
import numpy as np  # noqa: E402


def _ppo(lib: object, steps: int, seed: int) -> float:
    model = lib.PPO("MultiInputPolicy", lib.envs.SimpleMultiObsEnv(random_start=False),
                    n_steps=256, batch_size=64, n_epochs=4, seed=seed)
    t = time.perf_counter()
    model.learn(steps)
    return time.perf_counter() - t


def _ppo_vectors(lib: object, steps: int, seed: int) -> float:
    """A Dict of vectors only (BitFlippingEnv's observation, achieved and desired goals)."""
    model = lib.PPO("MultiInputPolicy", lib.envs.BitFlippingEnv(n_bits=10, max_steps=10),
                    n_steps=256, batch_size=64, n_epochs=4, seed=seed)
    t = time.perf_counter()
    model.learn(steps)
    return time.perf_counter() - t


def _her_sac(lib: object, steps: int, seed: int) -> float:
    env = lib.envs.BitFlippingEnv(n_bits=10, continuous=True, max_steps=10)
    model = lib.SAC("MultiInputPolicy", env, replay_buffer_class=lib.HerReplayBuffer,
                    replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
                    learning_starts=100, batch_size=64, buffer_size=10_000, seed=seed,
                    policy_kwargs=dict(net_arch=[64, 64]))
    t = time.perf_counter()
    model.learn(steps)
    return time.perf_counter() - t


def _libs() -> dict[str, object]:
    import types

    import rlgrad.rl as mine
    import rlgrad.rl.common.envs as mine_envs

    out = {"rlgrad": types.SimpleNamespace(PPO=mine.PPO, SAC=mine.SAC, envs=mine_envs,
                                           HerReplayBuffer=mine.HerReplayBuffer)}
    if _timing.comparators(("torch", "stable_baselines3")):
        import stable_baselines3 as sb3
        import stable_baselines3.common.envs as sb3_envs
        import torch

        torch.set_num_threads(1)
        out["SB3"] = types.SimpleNamespace(PPO=sb3.PPO, SAC=sb3.SAC, envs=sb3_envs,
                                           HerReplayBuffer=sb3.HerReplayBuffer)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ppo-steps", type=int, default=2048)
    ap.add_argument("--her-steps", type=int, default=600)
    args = ap.parse_args()
    libs = _libs()
    runs = {"PPO MultiInputPolicy, SimpleMultiObsEnv (image + vector)": (_ppo, args.ppo_steps),
            "PPO MultiInputPolicy, BitFlippingEnv(10) (vectors)": (_ppo_vectors, args.ppo_steps),
            "SAC + HerReplayBuffer, BitFlippingEnv(10)": (_her_sac, args.her_steps)}
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

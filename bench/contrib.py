"""sb3-contrib's RecurrentPPO beside rlgrad's on CartPole with the velocities hidden.

    .venv/bin/python bench/contrib.py [--steps 100000] [--seeds 0] [--no-sb3] [--no-mlp]

Trains rl-baselines3-zoo's ``ppo_lstm`` preset for ``CartPoleNoVel-v1`` (rlgrad/presets/
ppo_lstm.yaml: 8 copies, observations normalised, LSTM of 64) with rlgrad's ``RecurrentPPO`` and,
when ``sb3-contrib`` and ``torch`` are installed, with sb3-contrib's on the same budget and seed
(one thread each, one after the other); and PPO with an MLP (the CartPole-v1 PPO preset, the
same hyperparameters but no memory) on the same task, which does not solve it. Prints a markdown
table: wall and CPU time of ``learn`` and the mean return of 20 deterministic episodes.
"""

from __future__ import annotations

import argparse
import time

import _timing  # noqa: F401  (first: one BLAS thread, this checkout's rlgrad)
import numpy as np  # noqa: E402

import rlgrad.rl.contrib.common.envs  # noqa: E402, F401  (registers CartPoleNoVel-v1)
from rlgrad.rl import evaluate_policy, load_preset, make_from_preset, split_preset  # noqa: E402

ENV = "CartPoleNoVel-v1"


def _timed(model, steps: int) -> tuple[float, float]:
    t, c = time.perf_counter(), time.process_time()
    model.learn(steps)
    return time.perf_counter() - t, time.process_time() - c


def run_rlgrad(algo: str, seed: int, steps: int) -> dict:
    if algo == "ppo":  # the MLP baseline: PPO's CartPole preset on the masked task
        hp, env = split_preset(load_preset("ppo", "CartPole-v1"))
        from rlgrad.rl import PPO

        model = PPO(ENV, seed=seed, n_envs=env["n_envs"], normalize={"norm_reward": False}, **hp)
    else:
        model, _ = make_from_preset(algo, ENV, seed=seed)
    dt, cpu = _timed(model, steps)
    mean, std = evaluate_policy(model, ENV, n_eval_episodes=20, warn=False)
    return {"time": dt, "cpu": cpu, "mean": mean, "std": std}


def run_sb3(seed: int, steps: int) -> dict:
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy as sb3_evaluate
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    hp, env = split_preset(load_preset("ppo_lstm", ENV))
    pk = dict(hp.pop("policy_kwargs"))
    pk["activation_fn"] = torch.nn.ReLU
    for k in ("learning_rate", "clip_range"):
        if isinstance(hp[k], str):
            start = float(hp[k][4:])
            hp[k] = lambda p, s=start: p * s
    venv = VecNormalize(make_vec_env(ENV, n_envs=env["n_envs"], seed=seed), norm_reward=False)
    model = RecurrentPPO("MlpLstmPolicy", venv, seed=seed, policy_kwargs=pk, **hp)
    dt, cpu = _timed(model, steps)
    venv.training = False
    mean, std = sb3_evaluate(model, venv, n_eval_episodes=20, warn=False)
    return {"time": dt, "cpu": cpu, "mean": float(mean), "std": float(std)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--no-sb3", action="store_true")
    ap.add_argument("--no-mlp", action="store_true")
    args = ap.parse_args()
    print(f"{ENV}, {args.steps} steps, zoo ppo_lstm preset\n")
    print("| run | seed | learn wall (s) | learn CPU (s) | return (20 ep.) |\n|---|---|---|---|---|")
    rows = [("rlgrad RecurrentPPO", lambda s: run_rlgrad("ppo_lstm", s, args.steps))]
    if not args.no_sb3:
        rows.append(("sb3-contrib RecurrentPPO", lambda s: run_sb3(s, args.steps)))
    if not args.no_mlp:
        rows.append(("rlgrad PPO, MLP", lambda s: run_rlgrad("ppo", s, args.steps)))
    times: dict[str, dict[str, list[float]]] = {}
    for seed in (int(s) for s in args.seeds.split(",")):
        for name, run in rows:  # the libraries alternate within each seed: the same load
            r = run(seed)
            for k in ("time", "cpu"):
                times.setdefault(name, {}).setdefault(k, []).append(r[k])
            print(f"| {name} | {seed} | {r['time']:.1f} | {r['cpu']:.1f} | {r['mean']:.1f} ± "
                  f"{r['std']:.1f} |", flush=True)
    if "sb3-contrib RecurrentPPO" in times:
        ours, theirs = times["rlgrad RecurrentPPO"], times["sb3-contrib RecurrentPPO"]
        for k, what in (("time", "wall"), ("cpu", "CPU")):
            ratio = np.median(ours[k]) / np.median(theirs[k])
            print(f"rlgrad / sb3-contrib {what} time (medians over the seeds): {ratio:.2f}x")


if __name__ == "__main__":
    main()

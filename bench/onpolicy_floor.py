"""Where rlgrad's on-policy runs stand against the hand-written NumPy floor, part by part.

    .venv/bin/python bench/onpolicy_floor.py [--config purejaxrl|zoo|reinforce|a2c] [--repeats 7] [--quick]

``bench/_numpy_ppo.py`` is PPO (and REINFORCE) written by hand in NumPy for one network: the
floor of what NumPy + Gymnasium can do. This bench times the parts of one run in this process,
rlgrad's and the floor's side by side (interleaved rounds, medians, one BLAS thread):

* acting: one vector step's actor-critic forward and Categorical sample (rlgrad's
  ``policy.act`` with its fused acting weights; the floor's ``Rollout.act``);
* the environment's ``step`` alone (the same Gymnasium vector env for both: a shared cost);
* rollout bookkeeping per vector step, the environment replaced by a stub that returns fixed
  arrays (rlgrad's ``StepAdapter.step`` with its checks and episode statistics, the observation's
  preprocessing and ``RolloutBuffer.add``; the floor's ``Rollout.record``);
* GAE per rollout (with the value of the last observation);
* one minibatch step (forward, loss, backward, norm clip, Adam; rlgrad's compiled step and
  ``_apply_grads``) on the same number of rows;
* update glue per update: the epochs' shuffled minibatch gathers and advantage normalisation;
* a whole rollout (``collect_rollouts`` without a callback, GAE included) and a whole update
  (``train``, logging included): with the parts, they show what lies between the parts.

Times are CPU time (``time.process_time``): a loaded machine inflates them less than wall time.
The last column multiplies each part by its number of calls in a whole run (the run's budget):
seconds of CPU each side spends there, an estimate that leaves out what lies between the parts.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Any

import _timing  # first: one BLAS thread, this checkout's rlgrad
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _numpy_ppo as floor  # noqa: E402

CONFIGS = ("purejaxrl", "zoo", "reinforce", "a2c")


def _configs(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the floor's configuration, rlgrad's constructor arguments) of ``name``."""
    from rlgrad.rl import load_preset, split_preset

    if name == "purejaxrl":
        from purejaxrl import RLGRAD_KWARGS

        return floor.PUREJAXRL, {"cls": "PPO", **RLGRAD_KWARGS}
    algo = "ppo" if name == "zoo" else name
    hp, env_cfg = split_preset(load_preset(algo, "CartPole-v1"))
    n_envs, total = int(env_cfg.get("n_envs", 8)), int(env_cfg["n_timesteps"])
    cfg = (floor.zoo_ppo(hp, n_envs, total) if algo == "ppo"
           else floor.pg_config(algo, hp, n_envs, total))
    return cfg, {"cls": algo.upper(), "n_envs": n_envs, **hp}


class _StubEnv:
    """A NEXT_STEP vector env whose ``step`` returns fixed arrays: the bookkeeping alone."""

    metadata: dict[str, Any] = {}

    def __init__(self, obs: np.ndarray) -> None:
        from gymnasium.vector import AutoresetMode

        self.metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}
        n = len(obs)
        self.num_envs = n
        self.out = (obs, np.ones(n, np.float32), np.zeros(n, bool), np.zeros(n, bool), {})

    def step(self, actions: np.ndarray) -> tuple:
        return self.out


def _rlgrad_parts(kw: dict[str, Any], seed: int) -> tuple[Any, dict[str, Any]]:
    import rlgrad.rl as rl
    from rlgrad.rl.envs import EpisodeStatistics, StepAdapter, preprocess_obs

    kw = dict(kw)
    model = getattr(rl, kw.pop("cls"))("CartPole-v1", seed=seed, **kw)
    model.learn(2 * model.n_steps * model.n_envs)  # buffers full, steps compiled
    policy, rng, buf = model.policy, model.rng, model.rollout_buffer
    obs = np.ascontiguousarray(buf.observations[0])
    fused = policy.fused_numpy()
    adapter = StepAdapter(_StubEnv(obs), check_finite=True, statistics=EpisodeStatistics(len(obs)))
    space = model.observation_space
    a, v, lp = policy.act(obs, rng, fused)
    T = buf.n_steps

    def bookkeeping() -> None:
        raw, rew, term, trunc, valid, _ = adapter.step(a)
        nxt = preprocess_obs(raw, space)
        buf.pos %= T
        buf.add(obs, a, rew, term, adapter.prev_done, v, lp, valid)
        del nxt

    last = policy.values_numpy(obs)

    def gae() -> None:
        buf.compute_returns_and_advantage(policy.values_numpy(obs))

    del last
    parts = {"acting": lambda: policy.act(obs, rng, fused), "bookkeeping": bookkeeping,
             "GAE": gae}
    if hasattr(model, "_minibatches"):
        full = model.batch_size >= len(buf.valid_indices())
        b = model._full_batch()[0] if full else next(model._minibatches())[0]
        b["clip"] = np.array(0.2, dtype=np.float32)
        step = model._loss_step(compiled=True)
        use_ent = model.ent_coef != 0

        def update_glue() -> None:  # as PPO.train gathers: the whole batch once, or per epoch
            if full:
                model._full_batch()
                return
            for _ in range(model.n_epochs):
                for _mb in model._minibatches():
                    pass
        parts["update glue"] = update_glue
    else:
        b = model._full_batch()[0]
        step, use_ent = model._loss_step(compiled=True), model.ent_coef != 0
        parts["update glue"] = model._full_batch

    def minibatch() -> None:
        loss, s, grads = step(b, use_ent)
        model._apply_grads(grads, loss, s)

    parts["minibatch step"] = minibatch
    # whole: what lies between the parts too (a rollout with GAE, an update with its logging)
    parts["whole rollout"] = lambda: model.collect_rollouts(None)
    parts["whole update"] = model.train
    return model, parts


def _floor_parts(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    """The floor's parts, on the state after a short run of its own."""
    import gymnasium as gym

    short = dict(cfg, total=2 * cfg["n_steps"] * cfg["n_envs"])
    run = floor.train(short, seed)
    net, ro = run["net"], run["rollout"]
    rng = np.random.default_rng(seed)
    net.refresh_acting()
    env = gym.make_vec("CartPole-v1", num_envs=cfg["n_envs"], vectorization_mode="vector_entry_point")
    env.reset(seed=seed)
    obs, r, term, trunc, _ = env.step(ro.actions[0])
    ends: list = []
    T = ro.T
    state = {"t": 0}

    def record() -> None:
        t = state["t"] = (state["t"] + 1) % T
        ro.record(t, obs, r, term, trunc, 0, ends)

    parts = {"acting": lambda: ro.act(0, net, rng), "bookkeeping": record,
             "GAE": lambda: ro.gae(net), "env": lambda: env.step(ro.actions[0])}
    update = run["update"]
    parts["update glue"] = update["glue"]
    parts["minibatch step"] = update["step"]
    env2 = floor.make_env("CartPole-v1", cfg["n_envs"])
    env2.reset(seed=seed)

    def whole_rollout() -> None:
        ro.collect(env2, net, rng, 0, ends, floor._Null())
        ro.gae(net)
        ends.clear()

    parts["whole rollout"] = whole_rollout
    parts["whole update"] = update["whole"]
    return parts


def _interleaved_cpu(impls: dict[str, Any], repeats: int, min_time: float) -> dict[str, np.ndarray]:
    """CPU seconds per call of every part: ``_timing.interleaved`` with ``process_time``."""
    counts = {k: _timing.calls_for(fn, min_time) for k, fn in impls.items()}
    times: dict[str, list[float]] = {k: [] for k in impls}
    for _ in range(repeats):
        for k, fn in impls.items():
            c = time.process_time()
            for _ in range(counts[k]):
                fn()
            times[k].append((time.process_time() - c) / counts[k])
    return {k: np.array(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=CONFIGS, default="purejaxrl")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="3 rounds of short loops")
    args = ap.parse_args()
    reps, min_time = (3, 0.005) if args.quick else (max(args.repeats, 1), 0.02)
    cfg, kw = _configs(args.config)
    _model, rparts = _rlgrad_parts(kw, args.seed)
    fparts = _floor_parts(cfg, args.seed)
    impls = {"env": fparts.pop("env")}
    for k in fparts:
        impls["rlgrad " + k] = rparts[k]
        impls["floor " + k] = fparts[k]
    times = _interleaved_cpu(impls, reps, min_time)
    N, T = cfg["n_envs"], cfg["n_steps"]
    n_updates = -(-cfg["total"] // (N * T))
    vec_steps = n_updates * T
    if cfg["algo"] == "ppo":
        per_epoch = 1 if cfg["batch_size"] >= N * T else -(-(N * T) // cfg["batch_size"])
        mb_steps = n_updates * cfg["n_epochs"] * per_epoch
    else:
        mb_steps = n_updates
    calls = {"env": vec_steps, "acting": vec_steps, "bookkeeping": vec_steps, "GAE": n_updates,
             "update glue": n_updates, "minibatch step": mb_steps, "whole rollout": n_updates,
             "whole update": n_updates}
    print(f"\nParts of one run, {args.config} configuration ({N} envs x {T} steps, {n_updates} "
          f"updates), {time.strftime('%Y-%m-%d %H:%M')}, load {os.getloadavg()[0]:.1f}, "
          f"{platform.processor() or platform.machine()}, NumPy {np.__version__}, one thread; "
          f"medians of {reps} interleaved rounds\n")
    print("| part | calls per run | rlgrad (CPU us per call) | floor (CPU us per call) | rlgrad / floor "
          "| rlgrad per run (s) | floor per run (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    tot_r = tot_f = 0.0
    env_us = float(np.median(times["env"])) * 1e6
    print(f"| environment step (shared) | {calls['env']} | {env_us:.1f} | {env_us:.1f} | 1.00 | "
          f"{env_us * calls['env'] / 1e6:.2f} | {env_us * calls['env'] / 1e6:.2f} |")
    env_s = env_us * calls["env"] / 1e6
    for k in fparts:
        r, f = times["rlgrad " + k], times["floor " + k]
        ru, fu = float(np.median(r)) * 1e6, float(np.median(f)) * 1e6
        tr, tf = ru * calls[k] / 1e6, fu * calls[k] / 1e6
        if k.startswith("whole"):
            if k == "whole rollout":
                print(f"| sum of the parts (with the environment) | | | | | {tot_r + env_s:.2f} | "
                      f"{tot_f + env_s:.2f} |")
                tot_r = tot_f = 0.0
        tot_r, tot_f = tot_r + tr, tot_f + tf
        print(f"| {k} | {calls[k]} | {ru:.1f} | {fu:.1f} | {float(np.median(r / f)):.2f} | "
              f"{tr:.2f} | {tf:.2f} |")
    print(f"| whole rollouts + whole updates | | | | | {tot_r:.2f} | {tot_f:.2f} |")


if __name__ == "__main__":
    main()

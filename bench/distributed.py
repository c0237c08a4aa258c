"""Rollouts on Ray env runners (issue 18): steps/s with 0, 1 and 2 runners, Ape-X's fragments,
and a run whose runner is killed.

    .venv/bin/python bench/distributed.py [--parts cartpole,slow,atari,apex,fault] [--quick]
                                           [--repeat 3] [--spin-ms 0.5]

``cartpole``, ``slow`` (``SlowCartPole``: CartPole whose every step spins the CPU for
``--spin-ms``, an expensive simulator) and ``atari`` (Breakout through rlgrad's Atari
preprocessing, CNN policy; sampling only, 8 copies x 32 steps): PPO with 0, 1 and 2 runners,
timed after a warm-up that starts Ray and the runners:

* ``train steps/s``: ``learn`` (sampling and PPO's updates), environment steps per second;
* ``sample steps/s``: ``collect_rollouts`` alone (what the runners parallelise);
* ``broadcast``: one weight broadcast (``ray.put`` of the policy's arrays + ``set_weights`` on
  every runner, waited for); ``round trip``: an empty call to every runner; ``overhead``: a
  rollout's round trip minus the time the runner spent sampling (transfer, copies, scheduling);

then the expected training throughput on ``k`` machines of the same speed, each running the
runners' share of the environment copies: ``steps / (t_update + t_broadcast + t_overhead +
t_sample(1 runner) / k)``.

``apex``: SAC's Pendulum-v1 preset (``train_freq`` 1, one gradient step per step) with 2 copies,
locally and on 2 runners (one copy each) with ``ApexSampler.rollout_fragment_length`` 1 (every
step a round trip) and longer fragments: steps/s (same-process medians of interleaved repeats)
and the policy lag. ``fault``: PPO's CartPole-v1 preset with 2 runners for its whole budget
(100k steps), runner 0's process SIGKILLed at iteration 30, then ``rlgrad eval``'s 20
deterministic episodes: the preset's score (500) must still be reached.
Medians of ``--repeat`` rounds; the tables are markdown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

if __name__ == "__main__":  # the rlgrad of this checkout; the runners import this module too
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import gymnasium as gym  # noqa: E402
from gymnasium.envs.classic_control.cartpole import CartPoleEnv  # noqa: E402

SLOW_ID = "bench.distributed:SlowCartPole-v0"


class SlowCartPole(CartPoleEnv):
    """CartPole whose step also keeps the CPU busy for ``spin_ms`` milliseconds."""

    def __init__(self, spin_ms: float = 0.5, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.spin_s = spin_ms / 1000.0

    def step(self, action: object) -> tuple:
        end = time.perf_counter() + self.spin_s
        while time.perf_counter() < end:
            pass
        return super().step(action)


if "SlowCartPole-v0" not in gym.registry:
    gym.register("SlowCartPole-v0", entry_point=SlowCartPole, max_episode_steps=500)

ATARI_ID = "ALE/Breakout-v5"
#: the zoo's Atari PPO preset with a shorter rollout (8 copies x 32 steps)
ATARI = dict(policy="CnnPolicy", n_envs=8, n_steps=32, n_epochs=4, batch_size=256,
             learning_rate=2.5e-4, clip_range=0.1, ent_coef=0.01)
PRESET = dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
              learning_rate="lin_1e-3", clip_range="lin_0.2")


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(env_id: str, runners: int, steps: int, repeat: int, env_kwargs: dict,
            hp: dict | None = None, train: bool = True) -> dict:
    import ray

    from rlgrad.rl import PPO

    hp = hp or PRESET
    model = PPO(env_id, seed=0, env_runners=runners, env_kwargs=env_kwargs, **hp)
    rows = hp["n_envs"] * hp["n_steps"]
    try:
        model.learn(rows)  # warm-up: Ray, the runners, the compiled step
        out = {"train": steps / _median_time(
            lambda: model.learn(steps, reset_num_timesteps=False), repeat)} if train else {}
        out["sample"] = rows / _median_time(lambda: model.collect_rollouts(None), 5 * repeat)
        if train:
            out["update"] = _median_time(model.train, 3 * repeat)
        s = model._sampler
        if s is not None:
            ref = lambda: ray.put(s.weights())
            out["broadcast"] = _median_time(
                lambda: ray.get([r.set_weights.remote(ref()) for r in s.runners]), 10 * repeat)
            out["round_trip"] = _median_time(
                lambda: ray.get([r.pid.remote() for r in s.runners]), 10 * repeat)
            trips = []
            for _ in range(5 * repeat):
                t = time.perf_counter()
                model.collect_rollouts(None)
                trips.append(time.perf_counter() - t - max(s.sample_times))
            out["overhead"] = statistics.median(trips)
            out["runner_sample"] = max(s.sample_times)
    finally:
        model.close_env_runners()
    return out


def ppo_rows(args: argparse.Namespace, steps: int, repeat: int, parts: list[str]) -> None:
    runners = [int(x) for x in args.runners.split(",")]
    print(f"\nPPO, CartPole-v1 preset (8 copies, 32 steps; Atari: the zoo's preset with 8 "
          f"copies x 32 steps); medians of {repeat}\n")
    print("| environment | runners | train steps/s | sample steps/s | update ms | broadcast ms "
          "| round trip ms | overhead ms |")
    print("|---|---|---|---|---|---|---|---|")
    cases = {"cartpole": ("CartPole-v1", "CartPole-v1", {}, PRESET, True),
             "slow": (SLOW_ID, f"SlowCartPole ({args.spin_ms} ms/step)",
                      {"spin_ms": args.spin_ms}, PRESET, True),
             "atari": (ATARI_ID, f"{ATARI_ID} (CNN, sampling only)", {}, ATARI, False)}
    slow = {}
    for part in parts:
        if part not in cases:
            continue
        env_id, name, kw, hp, train = cases[part]
        for r in runners:
            m = measure(env_id, r, steps, repeat, kw, hp, train)
            ms = lambda k, m=m: f"{1000 * m[k]:.2f}" if k in m else "-"
            tr = f"{m['train']:.0f}" if "train" in m else "-"
            print(f"| {name} | {r} | {tr} | {m['sample']:.0f} | {ms('update')} | "
                  f"{ms('broadcast')} | {ms('round_trip')} | {ms('overhead')} |", flush=True)
            if part == "slow" and r == 1:
                slow = m
            if part == "atari" and r == 1:  # sampling alone, its copies over k machines
                rows = hp["n_envs"] * hp["n_steps"]
                fixed = m["broadcast"] + m["overhead"]
                proj = ", ".join(f"k={k}: {rows / (fixed + m['runner_sample'] / k):.0f}"
                                 for k in (1, 2, 4, 8, 16))
                print(f"\nexpected sample steps/s of {ATARI_ID} on k machines: {proj}\n")
    if slow:
        rows = PRESET["n_envs"] * PRESET["n_steps"]
        fixed = slow["update"] + slow["broadcast"] + slow["overhead"]
        proj = ", ".join(f"k={k}: {rows / (fixed + slow['runner_sample'] / k):.0f}"
                         for k in (1, 2, 4, 8, 16))
        print(f"\nexpected train steps/s of SlowCartPole on k machines (one runner each): {proj}")


def apex_rows(steps: int, repeat: int, fragments: list[int]) -> None:
    """SAC on Pendulum, 2 copies: locally, and on 2 runners with each fragment length."""
    from rlgrad.rl import SAC
    from rlgrad.rl.distributed.apex import ApexSampler

    cases = [(0, 0)] + [(2, f) for f in fragments]
    models, times = {}, {c: [] for c in cases}
    lags: dict = {}
    try:
        for c in cases:
            models[c] = SAC("Pendulum-v1", seed=0, n_envs=2, learning_rate=1e-3, env_runners=c[0])
            ApexSampler.rollout_fragment_length = max(c[1], 1)
            models[c].learn(200)  # warm-up (learning_starts 100): Ray, the runners
        for _ in range(repeat):  # interleaved: the host's load falls on every case alike
            for c in cases:
                t = time.perf_counter()
                models[c].learn(steps, reset_num_timesteps=False)
                times[c].append(time.perf_counter() - t)
        for c in cases:
            h = models[c].logger.history[-1]
            lags[c] = (h.get("env_runners/policy_lag_mean"), h.get("env_runners/policy_lag_max"))
    finally:
        for m in models.values():
            m.close_env_runners()
    print(f"\nSAC, Pendulum-v1 preset, 2 copies, {steps} steps timed; medians of {repeat} "
          "interleaved repeats\n")
    print("| runners | fragment (env steps per call) | train steps/s | policy lag mean | max |")
    print("|---|---|---|---|---|")
    for c in cases:
        mean, mx = lags[c]
        frag = "-" if not c[0] else str(c[1])
        lag = "-" if mean is None else f"{mean:.1f} | {mx}"
        print(f"| {c[0]} | {frag} | {steps / statistics.median(times[c]):.0f} | "
              f"{lag if mean is not None else '- | -'} |", flush=True)


def fault_row(steps: int) -> None:
    """PPO's CartPole-v1 preset on 2 runners, runner 0 killed at iteration 30: the score."""
    import signal
    import threading

    import ray

    from rlgrad.rl import PPO
    from rlgrad.rl.callbacks import BaseCallback
    from rlgrad.rl.evaluation import evaluate_policy

    class Kill(BaseCallback):
        it = 0

        def on_iteration_end(self) -> bool:
            self.it += 1
            if self.it == 30:
                pid = ray.get(self.model._sampler.runners[0].pid.remote())
                threading.Timer(0.05, os.kill, (pid, signal.SIGKILL)).start()
            return True

    model = PPO("CartPole-v1", seed=0, env_runners=2, **PRESET)
    t = time.perf_counter()
    try:
        model.learn(steps, callback=Kill())
        events = list(model._sampler.events)
    finally:
        model.close_env_runners()
    took = time.perf_counter() - t
    mean, std = evaluate_policy(model, "CartPole-v1", n_eval_episodes=20, deterministic=True)
    print(f"\nPPO, CartPole-v1 preset, 2 runners, {steps} steps ({took:.0f} s), runner 0 killed "
          f"at iteration 30: evaluation over 20 episodes {mean:.1f} +/- {std:.1f}; "
          f"{len(events)} restart(s): {events[0] if events else 'none'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spin-ms", type=float, default=0.5)
    ap.add_argument("--runners", default="0,1,2")
    ap.add_argument("--parts", default="cartpole,slow,atari,apex,fault")
    ap.add_argument("--fragments", default="1,4,16,64",
                    help="Ape-X fragment lengths (environment steps per runner call)")
    args = ap.parse_args()
    steps, repeat = (4096, 1) if args.quick else (16_384, args.repeat)
    parts = args.parts.split(",")
    try:
        import ray
    except ImportError:
        print("Ray is not installed (pip install 'rlgrad[ray]'): nothing to measure")
        return

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="ERROR")
    print(f"{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, Ray {ray.__version__}, load "
          f"{os.getloadavg()[0]:.2f}")
    try:
        if {"cartpole", "slow", "atari"} & set(parts):
            ppo_rows(args, steps, repeat, parts)
        if "apex" in parts:
            apex_rows(500 if args.quick else 2000, repeat,
                      [int(x) for x in args.fragments.split(",")])
        if "fault" in parts:
            fault_row(20_000 if args.quick else 100_000)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()

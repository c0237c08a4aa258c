"""Rollouts on Ray env runners (issue 18): PPO's CartPole-v1 preset with 0, 1 and 2 runners.

    .venv/bin/python bench/distributed.py [--quick] [--repeat 3] [--spin-ms 0.5]

For each environment (CartPole-v1, Gymnasium's NumPy-vectorised copies; and ``SlowCartPole``,
CartPole whose every step spins the CPU for ``--spin-ms``, an expensive simulator) and each
number of runners it times, after a warm-up that starts Ray and the runners:

* ``train steps/s``: ``learn`` (sampling and PPO's updates), environment steps per second;
* ``sample steps/s``: ``collect_rollouts`` alone (what the runners parallelise);
* ``broadcast``: one weight broadcast (``ray.put`` of the policy's arrays + ``set_weights`` on
  every runner, waited for); ``round trip``: an empty call to every runner; ``overhead``: a
  rollout's round trip minus the time the runner spent sampling (transfer, copies, scheduling);

then the expected training throughput on ``k`` machines of the same speed, each running the
runners' share of the environment copies: ``steps / (t_update + t_broadcast + t_overhead +
t_sample(1 runner) / k)``. Medians of ``--repeat`` rounds; the table is markdown.
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

PRESET = dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
              learning_rate="lin_1e-3", clip_range="lin_0.2")


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(env_id: str, runners: int, steps: int, repeat: int, env_kwargs: dict) -> dict:
    import ray

    from rlgrad.rl import PPO

    model = PPO(env_id, seed=0, env_runners=runners, env_kwargs=env_kwargs, **PRESET)
    rows = PRESET["n_envs"] * PRESET["n_steps"]
    try:
        model.learn(rows)  # warm-up: Ray, the runners, the compiled step
        out = {"train": steps / _median_time(
            lambda: model.learn(steps, reset_num_timesteps=False), repeat)}
        out["sample"] = rows / _median_time(lambda: model.collect_rollouts(None), 5 * repeat)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--spin-ms", type=float, default=0.5)
    ap.add_argument("--runners", default="0,1,2")
    args = ap.parse_args()
    steps, repeat = (4096, 1) if args.quick else (16_384, args.repeat)
    try:
        import ray
    except ImportError:
        print("Ray is not installed (pip install 'rlgrad[ray]'): nothing to measure")
        return

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level="ERROR")
    runners = [int(x) for x in args.runners.split(",")]
    print(f"\nPPO, CartPole-v1 preset (8 copies, 32 steps), {time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} cores, Ray {ray.__version__}; medians of {repeat}\n")
    print("| environment | runners | train steps/s | sample steps/s | update ms | broadcast ms "
          "| round trip ms | overhead ms |")
    print("|---|---|---|---|---|---|---|---|")
    slow = {}
    for env_id, kw in (("CartPole-v1", {}), (SLOW_ID, {"spin_ms": args.spin_ms})):
        name = env_id if not kw else f"SlowCartPole ({args.spin_ms} ms/step)"
        for r in runners:
            m = measure(env_id, r, steps, repeat, kw)
            ms = lambda k, m=m: f"{1000 * m[k]:.2f}" if k in m else "-"
            print(f"| {name} | {r} | {m['train']:.0f} | {m['sample']:.0f} | {ms('update')} | "
                  f"{ms('broadcast')} | {ms('round_trip')} | {ms('overhead')} |", flush=True)
            if kw and r == 1:
                slow = m
    if slow:
        rows = PRESET["n_envs"] * PRESET["n_steps"]
        fixed = slow["update"] + slow["broadcast"] + slow["overhead"]
        proj = ", ".join(f"k={k}: {rows / (fixed + slow['runner_sample'] / k):.0f}"
                         for k in (1, 2, 4, 8, 16))
        print(f"\nexpected train steps/s of SlowCartPole on k machines (one runner each): {proj}")
    ray.shutdown()


if __name__ == "__main__":
    main()

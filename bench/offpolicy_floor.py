"""One off-policy update (SAC, TD3, DDPG with the zoo's Pendulum-v1 presets) vs its matmul floor.

    .venv/bin/python bench/offpolicy_floor.py [--algos sac,td3,ddpg,dqn] [--repeats 7] [--quick]

Issue 17's goal 2 measures each update against a floor: the same update's matrix products alone,
timed in NumPy (float32, one BLAS thread) in the same run, in the same layouts one would write by
hand (``x @ W``, ``x.T @ dy`` for a weight gradient, ``dy @ W.T`` for an input gradient). The
products are read off the algorithm's own networks (their layer shapes and the batch size):

* critic update: the target networks' forward passes (TD3/DDPG: the target actor; SAC: the actor
  on the next observations), every critic's forward pass, its weight gradients and input
  gradients (not into the observation-action input);
* actor update (TD3: every ``policy_delay``-th update, counted as its share): the actor's forward
  pass, the first critic's (SAC: every critic's) forward pass on the actor's actions, their input
  gradients down to the action, the actor's weight and input gradients;
* DQN (``--algos dqn``, the CartPole-v1 preset, its ``train()`` of 128 gradient steps): the
  target network's forward pass on each minibatch's next observations (rlgrad computes them for
  the whole stack at once, deduplicated), the Q-network's forward pass, weight gradients and
  input gradients (not into the observations).

rlgrad's time per update is ``train(gradient_steps, batch_size)`` over many gradient steps on a
filled replay buffer, divided by their number: sampling, targets, losses, backward passes (the
compiled updates of ``OffPolicyAlgorithm.gradient_step``), gradient installation, Adam steps,
target (Polyak) updates, logging, everything the loop does. Rounds alternate between rlgrad and
the floor; the table gives medians and the median ratio, of wall time and of CPU time
(``process_time``, steadier on a loaded host).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import _timing  # noqa: F401  (one BLAS thread, this checkout's rlgrad)
import numpy as np

from rlgrad.rl import make_from_preset


def _linear_dims(module) -> list[tuple[int, int]]:
    """(in, out) of every Linear of ``module`` in order."""
    from rlgrad import nn

    return [(m.weight.shape[1], m.weight.shape[0]) for m in module.modules()
            if isinstance(m, nn.Linear)]


def _mlp(dims: list[tuple[int, int]], B: int, fwd: bool = True, wgrad: bool = False,
         igrad: bool = False, igrad_first: bool = False) -> list[tuple[str, int, int, int]]:
    """The products of an MLP's pass: (kind, m, k, n) for an (m, k) @ (k, n) product."""
    out = []
    for i, (d_in, d_out) in enumerate(dims):
        if fwd:
            out.append(("fwd", B, d_in, d_out))
        if wgrad:
            out.append(("wgrad", d_in, B, d_out))
        if igrad and (i > 0 or igrad_first):
            out.append(("igrad", B, d_out, d_in))
    return out


def products(model, algo: str, B: int) -> list[tuple[str, int, int, int]]:
    """The matrix products of ``policy_delay`` updates of ``model`` (one update for SAC, DDPG,
    DQN)."""
    if algo == "dqn":  # the target network's forward on the next observations, then the update
        q = _linear_dims(model.q_net)
        return _mlp(q, B) + _mlp(q, B, wgrad=True, igrad=True)
    critics = [_linear_dims(q) for q in model.critic.q_networks]
    if algo == "sac":
        trunk = _linear_dims(model.actor.latent_pi)
        heads = _linear_dims(model.actor.mu) + _linear_dims(model.actor.log_std)
        actor_fwd = _mlp(trunk, B) + [("fwd", B, k, n) for k, n in heads]
        ps = list(actor_fwd)  # a_pi on the observations
        ps += actor_fwd  # the target's next actions
        for c in critics:
            ps += _mlp(c, B)  # target critics
            ps += _mlp(c, B, wgrad=True, igrad=True)  # critic loss
            ps += _mlp(c, B, igrad=True, igrad_first=True)  # actor loss through Q to the action
        ps += [("wgrad", k, B, n) for k, n in heads] + [("igrad", B, n, k) for k, n in heads]
        ps += _mlp(trunk, B, fwd=False, wgrad=True, igrad=True)
        return ps
    actor = _linear_dims(model.actor)
    ps = _mlp(actor, B)  # target actor on the next observations
    for c in critics:
        ps += _mlp(c, B)  # target critics
        ps += _mlp(c, B, wgrad=True, igrad=True)  # critic loss
    delay = getattr(model, "policy_delay", 1)
    share = _mlp(actor, B) + _mlp(critics[0], B, igrad=True, igrad_first=True)
    share += _mlp(actor, B, fwd=False, wgrad=True, igrad=True)
    return ps * delay + share  # ``delay`` critic updates and one actor update


def floor_fn(prods: list[tuple[str, int, int, int]], rng: np.random.Generator):
    """A function running exactly these products on float32 operands (allocated once)."""
    ops = []
    for kind, m, k, n in prods:
        if kind == "fwd":
            a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
            ops.append((a, b))
        elif kind == "wgrad":  # x.T @ dy: x (B, in), dy (B, out)
            x, g = rng.standard_normal((k, m), np.float32), rng.standard_normal((k, n), np.float32)
            ops.append((x.T, g))
        else:  # dy @ W.T: dy (B, out), W (in, out)
            g, w = rng.standard_normal((m, k), np.float32), rng.standard_normal((n, k), np.float32)
            ops.append((g, w.T))

    def run() -> None:
        for a, b in ops:
            a @ b

    return run


ENVS = {"dqn": "CartPole-v1"}  # the others: Pendulum-v1


def measure(algo: str, repeats: int, steps: int) -> dict:
    model, _ = make_from_preset(algo, ENVS.get(algo, "Pendulum-v1"), seed=0)
    if algo == "dqn":  # the preset's train(): 128 gradient steps on one stacked draw
        steps = model.gradient_steps
    model.learn(max(model.learning_starts, model.batch_size) + 200)  # a filled buffer
    B = model.batch_size
    prods = products(model, algo, B)
    delay = getattr(model, "policy_delay", 1) if algo != "sac" else 1
    floor = floor_fn(prods, np.random.default_rng(0))
    n_upd = steps - steps % delay or delay
    n_floor = max(n_upd // delay, 1)
    t_r, t_f, c_r, c_f = [], [], [], []  # wall and CPU (process_time) seconds per update
    model.train(n_upd, B)  # warm-up (and the compiled updates' first trace)
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        model.train(n_upd, B)
        t_r.append((time.perf_counter() - t0) / n_upd)
        c_r.append((time.process_time() - c0) / n_upd)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n_floor):
            floor()
        t_f.append((time.perf_counter() - t0) / (n_floor * delay))
        c_f.append((time.process_time() - c0) / (n_floor * delay))
    t_r, t_f, c_r, c_f = (np.array(x) for x in (t_r, t_f, c_r, c_f))
    flops = 2 * sum(m * k * n for _, m, k, n in prods) / delay
    return {"algo": algo, "batch": B, "n_products": len(prods) / delay, "gflop": flops / 1e9,
            "rlgrad": float(np.median(t_r)), "floor": float(np.median(t_f)),
            "ratio": float(np.median(t_r / t_f)), "cpu_ratio": float(np.median(c_r / c_f))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algos", default="sac,td3,ddpg")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--steps", type=int, default=100, help="gradient steps per timed round")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    repeats, steps = (3, 30) if args.quick else (args.repeats, args.steps)
    rows = [measure(a.strip(), repeats, steps) for a in args.algos.split(",") if a.strip()]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nOne off-policy update (zoo presets: Pendulum-v1; DQN: CartPole-v1), "
          f"{time.strftime('%Y-%m-%d')}, "
          f"{platform.processor() or platform.machine()}, NumPy {np.__version__}, one BLAS thread; "
          f"medians of {repeats} rounds of {steps} updates (DQN: its preset's train() of 128); "
          f"load average {load:.1f}\n")
    print("| algo | batch | products / update | GFLOP / update | floor (ms) | GFLOP/s at floor | "
          "rlgrad update (ms) | rlgrad / floor | same, CPU time |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['algo'].upper()} | {r['batch']} | {r['n_products']:.1f} | {r['gflop']:.3f} | "
              f"{r['floor'] * 1e3:.2f} | {r['gflop'] / r['floor']:.0f} | {r['rlgrad'] * 1e3:.2f} | "
              f"{r['ratio']:.2f} | {r['cpu_ratio']:.2f} |")


if __name__ == "__main__":
    main()

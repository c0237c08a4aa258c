"""REINFORCE on CartPole-v1 (rlgrad's preset): rlgrad vs the same loop written in PyTorch.

    .venv/bin/python bench/reinforce_torch.py [--repeat 3] [--seed 0] [--quick] [--no-torch] [--no-floor]

rlgrad trains its ``REINFORCE`` with the CartPole-v1 preset (``rlgrad/presets/reinforce.yaml``:
8 envs x 256 steps, 200k steps, Adam 2e-3, gamma 0.99, advantages normalised). The PyTorch side
is a CleanRL-style loop written for this bench with the same algorithm and numbers:

* the same network: separate actor and critic MLPs 4-64-64 (tanh), a 2-logit head and a value
  head, orthogonal initialisation with SB3's gains (sqrt 2 hidden, 0.01 policy, 1 value), zero
  biases; ``torch.distributions.Categorical`` for sampling and log-probabilities;
* the same environment: Gymnasium's NumPy-vectorised CartPole (``gym.make_vec(...,
  vectorization_mode="vector_entry_point")``, what rlgrad picks for 8 copies), NEXT_STEP autoreset;
  the reset step after a done is dropped from the batch, a truncated episode is bootstrapped
  with V(final observation) and a terminated one is not, the rollout's last step with V(next obs);
* the same update: one Adam step per rollout on ``-mean(log pi(a|s) A) + 0.5 mean((G - V)^2)``
  over the valid rows, ``G`` the discounted return (GAE with lambda 1), ``A = G - V`` normalised
  with the unbiased std; no gradient clipping, no entropy term.

Both run in this process on one thread (``torch.set_num_threads(1)``, one BLAS thread),
interleaved ``--repeat`` times; the table gives the median ``learn`` wall and CPU
(``time.process_time``) seconds, the median of the per-pair CPU ratios, the mean return of the
last 20 training episodes and 20 deterministic evaluation episodes (the same evaluation code,
``rlgrad.rl.evaluate``, for both; its time not counted). Without ``torch``, rlgrad runs alone.

A third rlgrad row (``--no-compiled`` leaves it out), interleaved: the same preset with
``compile_loop=True``, the whole loop (rollout on rlgrad's functional CartPole, GAE, the Adam
step) as one ``rlgrad.jit`` program, compilation included; the row names the backend that ran
it (``RLGRAD_JIT_BACKEND=auto`` asks for the native one; "numpy" is the replay).

Two more rows (``--no-floor`` leaves them out), interleaved with the others: the NumPy floor
(``bench/_numpy_ppo.py``: the same REINFORCE, network, environment and bookkeeping written by hand
in NumPy, forward, backward and Adam included) and the environment alone (the same vector env
and number of steps with random actions and the floor's per-step bookkeeping, no network).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections import deque

import _timing  # first: one BLAS thread, this checkout's rlgrad
import numpy as np  # noqa: E402

from rlgrad.rl import evaluate, load_preset, make_from_preset, split_preset  # noqa: E402
from rlgrad.rl.compiled_loop import clear_programs  # noqa: E402

ENV = "CartPole-v1"


def config() -> dict:
    """The preset's numbers with REINFORCE's defaults filled in (what both sides train with)."""
    hp, env_cfg = split_preset(load_preset("reinforce", ENV))
    return {"n_envs": int(env_cfg.get("n_envs", 8)), "budget": int(env_cfg["n_timesteps"]),
            "n_steps": int(hp.get("n_steps", 256)), "gamma": float(hp.get("gamma", 0.99)),
            "lr": float(hp.get("learning_rate", 1e-3)), "vf_coef": float(hp.get("vf_coef", 0.5)),
            "normalize_advantage": bool(hp.get("normalize_advantage", True))}


def run_rlgrad(seed: int, compiled: bool = False) -> dict:
    """The preset's ``learn``; ``compiled``: with ``compile_loop=True`` (rlgrad's functional
    CartPole, the whole loop one ``rlgrad.jit`` program, its compilation timed too)."""
    extra = {"compile_loop": True} if compiled else {}
    clear_programs()  # each run traces and compiles its program, as a new process would
    model, budget = make_from_preset("reinforce", ENV, seed=seed, **extra)
    t, c = time.perf_counter(), time.process_time()
    model.learn(budget)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    if compiled:  # episode sums and counts per update: the mean over the last updates' >= 20
        ret_sum, n_done = model.loop_returns
        k = int(np.argmax(np.cumsum(n_done[::-1]) >= 20)) + 1
        train_return = float(ret_sum[-k:].sum() / max(n_done[-k:].sum(), 1))
    else:
        train_return = float(np.mean(list(model._ep_stats.return_queue)[-20:]))
    mean, std = evaluate(model, ENV, n_episodes=20)
    return {"wall": wall, "cpu": cpu, "steps": model.num_timesteps, "train_return": train_return,
            "mean": mean, "std": std, "backend": getattr(model, "loop_backend", None)}


# ---- the PyTorch side ------------------------------------------------------------------------------
def _torch_nets(torch, obs_dim: int, n_actions: int):
    nn = torch.nn

    def tower(out: int, gain: float):
        layers = [nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                  nn.Linear(64, out)]
        for m, g in zip(layers[::2], (2 ** 0.5, 2 ** 0.5, gain)):
            nn.init.orthogonal_(m.weight, g)
            nn.init.zeros_(m.bias)
        return nn.Sequential(*layers)

    return tower(n_actions, 0.01), tower(1, 1.0)


def _returns(rew, val, next_val, term, done, gamma):
    """Discounted returns G (GAE with lambda 1), bootstrapped where an episode is cut."""
    adv = np.zeros_like(rew)
    last = np.zeros(rew.shape[1], dtype=rew.dtype)
    for t in range(len(rew) - 1, -1, -1):
        delta = rew[t] + gamma * next_val[t] * (1.0 - term[t]) - val[t]
        last = delta + gamma * (1.0 - done[t]) * last
        adv[t] = last
    return adv + val


def run_torch(seed: int) -> dict:
    import gymnasium as gym
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    cfg = config()
    n, T = cfg["n_envs"], cfg["n_steps"]
    env = gym.make_vec(ENV, num_envs=n, vectorization_mode="vector_entry_point")
    obs_dim, n_act = env.single_observation_space.shape[0], int(env.single_action_space.n)
    actor, critic = _torch_nets(torch, obs_dim, n_act)
    opt = torch.optim.Adam([*actor.parameters(), *critic.parameters()], lr=cfg["lr"])
    buf = {k: np.zeros((T, n), dtype=np.float32) for k in ("rew", "val", "term", "done")}
    obs_buf = np.zeros((T, n, obs_dim), dtype=np.float32)
    act_buf = np.zeros((T, n), dtype=np.int64)
    valid_buf = np.zeros((T, n), dtype=bool)
    ep_ret, returns = np.zeros(n), deque(maxlen=100)
    t0, c0 = time.perf_counter(), time.process_time()
    obs, _ = env.reset(seed=seed)
    prev_done = np.zeros(n, dtype=bool)
    steps = 0
    while steps < cfg["budget"]:
        for t in range(T):
            with torch.no_grad():
                x = torch.from_numpy(obs)
                a = torch.distributions.Categorical(logits=actor(x)).sample()
                v = critic(x).squeeze(-1)
            nxt, r, term, trunc, _ = env.step(a.numpy())
            valid = ~prev_done
            obs_buf[t], act_buf[t], valid_buf[t] = obs, a.numpy(), valid
            buf["rew"][t], buf["val"][t], buf["term"][t] = r, v.numpy(), term
            done = term | trunc
            buf["done"][t] = done
            ep_ret += np.where(valid, r, 0.0)
            for i in np.flatnonzero(done):
                returns.append(ep_ret[i])
                ep_ret[i] = 0.0
            prev_done, obs = done, nxt
            steps += n
        with torch.no_grad():
            last_v = critic(torch.from_numpy(obs)).squeeze(-1).numpy()
        next_val = np.concatenate([buf["val"][1:], last_v[None]])
        ret = _returns(buf["rew"], buf["val"], next_val, buf["term"], buf["done"], cfg["gamma"])
        keep = valid_buf.reshape(-1)
        b_obs = torch.from_numpy(obs_buf.reshape(-1, obs_dim)[keep])
        b_act = torch.from_numpy(act_buf.reshape(-1)[keep])
        b_ret = torch.from_numpy(ret.reshape(-1)[keep])
        adv = b_ret - torch.from_numpy(buf["val"].reshape(-1)[keep])
        if cfg["normalize_advantage"]:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)  # torch's std: unbiased
        logp = torch.distributions.Categorical(logits=actor(b_obs)).log_prob(b_act)
        v = critic(b_obs).squeeze(-1)
        loss = -(logp * adv).mean() + cfg["vf_coef"] * ((b_ret - v) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    env.close()

    class Agent:  # deterministic evaluation through rlgrad.rl.evaluate, as for rlgrad's model
        env_id = ENV

        def predict(self, o, deterministic=True):
            with torch.no_grad():
                return actor(torch.as_tensor(o, dtype=torch.float32)).argmax(-1).numpy(), None

    mean, std = evaluate(Agent(), ENV, n_episodes=20)
    return {"wall": wall, "cpu": cpu, "steps": steps,
            "train_return": float(np.mean(list(returns)[-20:])), "mean": mean, "std": std,
            "torch": torch.__version__}


def _floor_cfg() -> dict:
    import _numpy_ppo as floor

    hp, env_cfg = split_preset(load_preset("reinforce", ENV))
    return floor.pg_config("reinforce", hp, int(env_cfg.get("n_envs", 8)), int(env_cfg["n_timesteps"]))


def run_floor(seed: int) -> dict:
    import _numpy_ppo as floor

    res = floor.train(_floor_cfg(), seed)
    net = res["net"]

    class Agent:  # deterministic evaluation through rlgrad.rl.evaluate, as for the others
        env_id = ENV

        def predict(self, o, deterministic=True):
            return floor.greedy(net, o), None

    mean, std = evaluate(Agent(), ENV, n_episodes=20)
    return {"wall": res["train_s"], "cpu": res["cpu_s"], "steps": res["steps"],
            "train_return": res["last20"], "mean": mean, "std": std}


def run_env(seed: int) -> dict:
    import _numpy_ppo as floor

    res = floor.env_alone(_floor_cfg(), seed)
    return {"wall": res["train_s"], "cpu": res["cpu_s"], "steps": res["steps"],
            "train_return": float("nan"), "mean": float("nan"), "std": float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="one run of each side")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-compiled", action="store_true", help="leave out the compiled loop's row")
    ap.add_argument("--no-floor", action="store_true",
                    help="leave out the NumPy floor and environment-alone rows")
    args = ap.parse_args()
    have_torch = _timing.comparators(("torch",), skip=args.no_torch)
    repeat = 1 if args.quick else max(args.repeat, 1)
    rs, cs, ts, fs, es = [], [], [], [], []
    for i in range(repeat):
        r = run_rlgrad(args.seed)
        rs.append(r)
        msg = f"run {i + 1}: rlgrad {r['wall']:.1f} s (CPU {r['cpu']:.1f}) return {r['mean']:.1f}"
        if not args.no_compiled:
            cs.append(run_rlgrad(args.seed, compiled=True))
            msg += (f" | compiled loop ({cs[-1]['backend']}) {cs[-1]['wall']:.1f} s (CPU "
                    f"{cs[-1]['cpu']:.1f}) return {cs[-1]['mean']:.1f}")
        if have_torch:
            t = run_torch(args.seed)
            ts.append(t)
            msg += (f" | PyTorch {t['wall']:.1f} s (CPU {t['cpu']:.1f}) return {t['mean']:.1f}"
                    f" | CPU ratio {r['cpu'] / t['cpu']:.2f}")
        if not args.no_floor:
            f, e = run_floor(args.seed), run_env(args.seed)
            fs.append(f)
            es.append(e)
            msg += (f" | NumPy floor {f['wall']:.1f} s (CPU {f['cpu']:.1f}) return {f['mean']:.1f}"
                    f" | env alone CPU {e['cpu']:.1f}")
        print(msg, file=sys.stderr, flush=True)
    cfg = config()
    print(f"\nREINFORCE, CartPole-v1 preset ({cfg['budget']} steps, {cfg['n_envs']} envs x "
          f"{cfg['n_steps']}), seed {args.seed}, {time.strftime('%Y-%m-%d')}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one thread, "
          f"Python {platform.python_version()}, NumPy {np.__version__}, load "
          f"{os.getloadavg()[0]:.1f}; medians of {repeat} interleaved runs\n")
    print("| implementation | learn wall (s) | learn CPU (s) | steps | return, last 20 training "
          "episodes | deterministic eval (20 ep.) |")
    print("|---|---:|---:|---:|---:|---|")
    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    backend = cs[-1]["backend"] if cs else ""
    for name, xs in (("rlgrad REINFORCE", rs),
                     (f"rlgrad REINFORCE, compiled loop ({backend} backend)", cs),
                     (f"PyTorch loop (torch {ts[-1]['torch']})"
                                                 if ts else "", ts),
                     ("NumPy floor (bench/_numpy_ppo.py)", fs),
                     ("environment alone (same env and steps, random actions)", es)):
        if xs:
            x = xs[-1]
            ret = "-" if xs is es else f"{x['train_return']:.1f}"
            ev = "-" if xs is es else f"{x['mean']:.1f} ± {x['std']:.1f}"
            print(f"| {name} | {med(xs, 'wall'):.1f} | {med(xs, 'cpu'):.1f} | {x['steps']} | "
                  f"{ret} | {ev} |")
    for mine, who in ((rs, "rlgrad"), (cs, "rlgrad compiled loop")):
        for other, label in ((ts, "PyTorch"), (fs, "NumPy floor"), (es, "env alone")):
            if other and mine:
                for k, name in (("wall", "wall"), ("cpu", "CPU")):
                    ratio = statistics.median(a[k] / b[k] for a, b in zip(mine, other))
                    print(f"\n{who} / {label} {name} time: {ratio:.2f}x (median of the per-pair "
                          "ratios)")
    if ts and fs:
        for xs, label in ((fs, "NumPy floor"), (es, "env alone")):
            ratio = statistics.median(a["cpu"] / b["cpu"] for a, b in zip(xs, ts))
            print(f"\n{label} / PyTorch CPU time: {ratio:.2f}x (median of the per-pair ratios)")


if __name__ == "__main__":
    main()

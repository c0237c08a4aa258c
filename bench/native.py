"""Native backend benchmark (issue 31 item 3): the NumPy replay against native code, PyTorch
eager and JAX jit, side by side in one process, one thread, on three programs:

* ``tanh``: ``tanh(x @ W + b).sum()``, (4, 64) x (64, 64) float32 (with the numba prototype of
  the same line, and the line in plain NumPy);
* ``mlp_adam``: a 64-64-64 ReLU MLP, MSE loss, its gradient and an Adam step, batch 32, float32,
  written JAX-style (parameters and Adam's moments in, new ones out; PyTorch: nn + optim.Adam);
* ``ppo``: PPO's compiled minibatch step on CartPole (SB3's MlpPolicy, 64-64 tanh, batch 64):
  the loss and its gradients, as ``PPO.train`` calls it (PyTorch: SB3's policy, the same loss,
  ``backward()``);
* ``loop``, ``loop8``: the program ``PPO(compile_loop=True)`` calls once per update (rollout of
  4 x 128 steps on the functional CartPole, GAE, 4 epochs x 4 minibatches; bench/purejaxrl.py's
  configuration), for 1 seed and for 8 seeds in one program (rlgrad only: bench/purejaxrl.py
  compares whole trainings with PureJaxRL).

Per-call times are the process's CPU time (all threads), medians of interleaved rounds, with the
best round beside them: on a host shared with other work, wall time measures the queue for the
cores as much as the program (whole-process wall times are bench/purejaxrl.py's); the compile time (first
call: trace, code generation, C build into an empty cache; JAX: trace and XLA) is reported
apart, and so is a second compile of the same program (the module found in the cache). The
"no BLAS" row runs the native GEMMs as the generated module's own loops.

    python bench/native.py [--repeats 15] [--only tanh,mlp_adam,ppo,loop,loop8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import _timing  # first: pins BLAS to one thread before NumPy loads
import numpy as np

import rlgrad
import rlgrad.nn.functional as F
import rlgrad.numpy as rnp

os.environ["RLGRAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="rlgrad-native-bench-")  # cold builds


def cpu_interleaved(impls: dict[str, Callable[[], Any]], repeats: int) -> dict[str, np.ndarray]:
    """CPU seconds per call, interleaved rounds (``_timing.interleaved`` on the process's clock)."""
    return _timing.interleaved(impls, repeats, clock=time.process_time)


def timed_first(make: Callable[[], Callable[[], Any]]) -> tuple[Callable[[], Any], float]:
    """(the callable, seconds of its first call: the compile)."""
    fn = make()
    t0 = time.perf_counter()
    fn()
    return fn, time.perf_counter() - t0


def rlgrad_pair(step: Callable, args: tuple) -> dict[str, tuple[Callable[[], Any], float]]:
    """The NumPy replay and native code of ``step`` on ``args``, with their compile times, and
    the native program compiled again (its module from the cache)."""
    out = {}
    for backend in ("numpy", "native"):
        def make(backend: str = backend) -> Callable[[], Any]:
            j = rlgrad.jit(step, backend=backend)
            fn = lambda: j(*args)  # noqa: E731
            fn.jit = j  # type: ignore[attr-defined]
            return fn
        fn, dt = timed_first(make)
        assert fn.jit.backend == backend, f"{backend} did not run: {fn.jit.backend}"
        out[f"rlgrad jit, {backend}"] = (fn, dt)
    _, again = timed_first(lambda: (lambda j: (lambda: j(*args)))(rlgrad.jit(step, backend="native")))
    out["rlgrad jit, native (module cached)"] = (out["rlgrad jit, native"][0], again)
    return out


# ---- tanh(x @ W + b).sum() ---------------------------------------------------------------------
def tanh_case() -> dict[str, tuple[Callable[[], Any], float]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    impls = rlgrad_pair(lambda x, w, b: rnp.tanh(x @ w + b).sum(), (x, w, b))
    impls["NumPy, the line itself"] = (lambda: np.tanh(x @ w + b).sum(), 0.0)
    try:
        import numba

        nb = numba.njit(lambda x, w, b: np.tanh(x @ w + b).sum())
        impls["numba njit (prototype)"] = timed_first(lambda: lambda: nb(x, w, b))
    except ImportError:
        pass
    torch = _timing.torch_or_none()
    if torch is not None:
        tx, tw, tb = (torch.from_numpy(a) for a in (x, w, b))
        impls["PyTorch eager"] = (lambda: torch.tanh(tx @ tw + tb).sum(), 0.0)
    jax = _jax()
    if jax is not None:
        jf = jax.jit(lambda x, w, b: jax.numpy.tanh(x @ w + b).sum())
        impls["JAX jit"] = timed_first(lambda: lambda: jf(x, w, b).block_until_ready())
    return impls


def _jax() -> Any:
    try:
        import jax

        jax.config.update("jax_platforms", "cpu")
        return jax
    except ImportError:
        return None


# ---- MLP + Adam, JAX-style -----------------------------------------------------------------------
def mlp_loss(params: list, x: Any, y: Any) -> Any:
    w1, b1, w2, b2 = params
    return F.mse_loss(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)


def mlp_adam_step(params: list, m: list, v: list, t: Any, x: Any, y: Any, xp: Any = rnp,
                  vg: Callable = rlgrad.value_and_grad, loss: Callable = mlp_loss) -> Any:
    """One Adam step (lr 1e-3, betas (0.9, 0.999), eps 1e-8): (loss, params, m, v)."""
    value, grads = vg(loss)(params, x, y)
    bc1, bc2 = 1 - 0.9 ** t, 1 - 0.999 ** t
    new_m = [0.9 * a + 0.1 * g for a, g in zip(m, grads)]
    new_v = [0.999 * a + 0.001 * g * g for a, g in zip(v, grads)]
    new_p = [p - 1e-3 * (a / bc1) / (xp.sqrt(b / bc2) + 1e-8) for p, a, b in zip(params, new_m, new_v)]
    return value, new_p, new_m, new_v


def mlp_case() -> dict[str, tuple[Callable[[], Any], float]]:
    rng = np.random.default_rng(1)
    shapes = [(64, 64), (64,), (64, 64), (64,)]
    params = [(rng.standard_normal(s) / 8).astype(np.float32) for s in shapes]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    t = np.array(3.0, np.float32)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    y = rng.standard_normal((32, 64)).astype(np.float32)
    impls = rlgrad_pair(mlp_adam_step, (params, m, v, t, x, y))
    torch = _timing.torch_or_none()
    if torch is not None:
        impls["PyTorch eager (nn + optim.Adam)"] = (_torch_mlp(torch, params, x, y), 0.0)
    jax = _jax()
    if jax is not None:
        jnp = jax.numpy

        def jloss(ps: list, x: Any, y: Any) -> Any:
            h = jax.nn.relu(x @ ps[0].T + ps[1])
            return jnp.mean((h @ ps[2].T + ps[3] - y) ** 2)

        jstep = jax.jit(lambda *a: mlp_adam_step(*a, xp=jnp, vg=jax.value_and_grad, loss=jloss))
        impls["JAX jit"] = timed_first(lambda: lambda: jax.block_until_ready(
            jstep(params, m, v, t, x, y)))
    return impls


def _torch_mlp(torch: Any, params: list, x: np.ndarray, y: np.ndarray) -> Callable[[], Any]:
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    with torch.no_grad():
        for p, w in zip(model.parameters(), params):
            p.copy_(torch.from_numpy(w))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def step() -> Any:
        loss = torch.nn.functional.mse_loss(model(tx), ty)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


# ---- PPO's minibatch step ------------------------------------------------------------------------
def ppo_case() -> dict[str, tuple[Callable[[], Any], float]]:
    from rlgrad.rl import PPO

    model = PPO("MlpPolicy", "CartPole-v1", n_steps=256, batch_size=64, n_epochs=1, seed=0, verbose=0)
    model.learn(256)
    b, _valid = next(iter(model._minibatches()))
    b["clip"] = np.array(0.2, np.float32)
    params = model._params

    def step(b: dict) -> Any:  # PPO.train's compiled step (rl.steps.grad_step), entropy on
        loss, stats = model.loss(b, True)
        return loss, stats, rlgrad.autograd.grad(loss, params)

    impls = rlgrad_pair(step, (b,))
    torch = _timing.torch_or_none()
    if torch is not None and _timing.comparators(("stable_baselines3",)):
        impls["PyTorch eager (SB3's policy)"] = (_torch_ppo(torch, b), 0.0)
    jax = _jax()
    if jax is not None:
        impls["JAX jit"] = timed_first(lambda: _jax_ppo(jax, b))
    return impls


def _torch_ppo(torch: Any, b: dict) -> Callable[[], Any]:
    from stable_baselines3 import PPO as SB3PPO

    policy = SB3PPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu").policy
    obs, act = torch.from_numpy(b["obs"]), torch.from_numpy(b["actions"])
    old, adv, ret = (torch.from_numpy(b[k]) for k in ("old_log_prob", "advantages", "returns"))

    def step() -> Any:  # SB3's PPO.train, up to backward()
        values, log_prob, entropy = policy.evaluate_actions(obs, act)
        ratio = torch.exp(log_prob - old)
        pl = -torch.min(adv * ratio, adv * torch.clamp(ratio, 0.8, 1.2)).mean()
        loss = pl + 0.0 * -torch.mean(entropy) + 0.5 * torch.nn.functional.mse_loss(ret, values.flatten())
        policy.optimizer.zero_grad()
        loss.backward()
        return loss

    return step


def _jax_ppo(jax: Any, b: dict) -> Callable[[], Any]:
    jnp = jax.numpy
    rng = np.random.default_rng(2)
    sizes = [(4, 64), (64, 64), (64, 2), (4, 64), (64, 64), (64, 1)]
    params = [(rng.standard_normal(s) / 8).astype(np.float32) for s in sizes]
    params += [np.zeros(s[1], np.float32) for s in sizes]

    def loss(ps: list, obs: Any, act: Any, old: Any, adv: Any, ret: Any) -> Any:
        w, bias = ps[:6], ps[6:]
        h = jnp.tanh(jnp.tanh(obs @ w[0] + bias[0]) @ w[1] + bias[1])
        logp = jax.nn.log_softmax(h @ w[2] + bias[2])
        v = (jnp.tanh(jnp.tanh(obs @ w[3] + bias[3]) @ w[4] + bias[4]) @ w[5] + bias[5])[:, 0]
        lp = jnp.take_along_axis(logp, act[:, None], 1)[:, 0]
        ratio = jnp.exp(lp - old)
        pl = -jnp.mean(jnp.minimum(adv * ratio, adv * jnp.clip(ratio, 0.8, 1.2)))
        ent = -jnp.mean(jnp.sum(jnp.exp(logp) * logp, axis=-1))
        return pl - 0.0 * ent + 0.5 * jnp.mean((ret - v) ** 2)

    g = jax.jit(jax.value_and_grad(loss))
    args = [b[k] for k in ("obs", "actions", "old_log_prob", "advantages", "returns")]
    args[1] = args[1].astype(np.int32)
    return lambda: jax.block_until_ready(g(params, *args))


# ---- one update of the compiled training loop ------------------------------------------------------
def loop_case(seeds: int = 1) -> dict[str, tuple[Callable[[], Any], float]]:
    """The program ``PPO(compile_loop=True)`` calls once per update, PureJaxRL's configuration
    (bench/purejaxrl.py): 4 envs x 128 steps of rollout, GAE, 4 epochs x 4 minibatches of 128,
    for ``seeds`` seeds at once (train_seeds' seed axis)."""
    from purejaxrl import RLGRAD_KWARGS

    from rlgrad.rl import PPO
    from rlgrad.rl.compiled_loop import initial_state, loop_spec, schedule
    from rlgrad.rl.compiled_loop.program import make_program

    models = [PPO("CartPole-v1", seed=s, compile_loop=True, **RLGRAD_KWARGS) for s in range(seeds)]
    spec = loop_spec(models[0])
    sched = schedule(models[0], 100 * 512)
    row = {k: np.array(v[0]) for k, v in sched.items()}
    return rlgrad_pair(make_program(spec), (initial_state(models, spec), row))


# ---- the table -----------------------------------------------------------------------------------
CASES = {"tanh": ("tanh(x @ W + b).sum(), (4, 64) x (64, 64) float32", tanh_case),
         "mlp_adam": ("64-64-64 ReLU MLP: loss, gradient and Adam step, batch 32, float32", mlp_case),
         "ppo": ("PPO's minibatch step (loss and gradients), CartPole, batch 64, float32", ppo_case),
         "loop": ("one update of PPO(compile_loop=True), PureJaxRL's configuration, 1 seed", loop_case),
         "loop8": ("the same update for 8 seeds in one program (train_seeds)",
                   lambda: loop_case(8))}


def no_blas_row(fn: Callable[[], Any], repeats: int) -> float:
    """Seconds per call of the native program with its GEMMs as the module's own loops."""
    from rlgrad.native import build

    modules = [m for n, m in sys.modules.items() if n.startswith("rlgrad_native_")]
    for m in modules:
        m.setup(0, 0)
    try:
        return float(np.median(cpu_interleaved({"x": fn}, repeats)["x"]))
    finally:
        for m in modules:
            m.setup(*build.blas_pointers())


def run(case: str, repeats: int) -> None:
    title, make = CASES[case]
    impls = make()
    times = cpu_interleaved({k: f for k, (f, _c) in impls.items() if "cached" not in k}, repeats)
    times["rlgrad jit, native, GEMMs without BLAS"] = np.array(
        [no_blas_row(impls["rlgrad jit, native"][0], repeats)] * repeats)
    times["rlgrad jit, native (module cached)"] = times["rlgrad jit, native"]
    res = _timing.paired(times, "rlgrad jit, numpy")
    print(f"\n### {case}: {title}\n")
    print("| implementation | CPU us per call (median) | best round | x NumPy replay | "
          "first call (compile, wall), s |")
    print("|---|---:|---:|---:|---:|")
    for name, (sec, ratio) in res.items():
        compile_s = impls[name][1] if name in impls else 0.0
        shown = "" if not compile_s else f"{compile_s:.2f}"
        print(f"| {name} | {sec * 1e6:.1f} | {times[name].min() * 1e6:.1f} | {ratio:.2f} | {shown} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--only", default=",".join(CASES))
    args = ap.parse_args()
    print(f"numpy {np.__version__}, one thread; compile times with an empty cache "
          f"({os.environ['RLGRAD_CACHE_DIR']})")
    for case in args.only.split(","):
        run(case, args.repeats)


if __name__ == "__main__":
    main()

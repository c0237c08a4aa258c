"""Engine benchmark: forward + backward of a 4-64-64-2 tanh MLP policy-gradient loss.

loss = mean(-log_softmax(logits)[i, a_i] * adv_i), float32, batch 1, 32 and 256, one thread.
Compared in the same process with the same computation written by hand in NumPy (the floor), and
with PyTorch eager, HIPS autograd and JAX when they are installed. Reports medians of repeats.
The "unfused" rows write the same loss with elementary ``rlgrad.numpy`` functions (max, exp, sum,
log, take_along_axis, mean: 18 recorded ops instead of log_softmax and an index): the per-op cost
of recording and of the backward pass, as user code ported from NumPy/autograd pays it.

    python bench/engine.py [--repeats 15] [--quick] [--cpu]   # --cpu: CPU time (a loaded host)
    python bench/engine.py --only unfused --batches 1,32,256   # issue 15 part 4's rows
    RLGRAD_ENGINE=0 python bench/engine.py ...                 # the engine without its C module

The full run also prints bench/nn.py's table (nn.MLP + Adam steps, Conv2d), as issue 4 asks.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import _timing  # first: pins BLAS to one thread before NumPy loads
import numpy as np

import rlgrad
import rlgrad.numpy as rnp

SIZES = (4, 64, 64, 2)
BATCHES = (1, 32, 256)


def make_problem(batch: int, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    params = []
    for m, n in zip(SIZES[:-1], SIZES[1:]):
        params.append((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32))
        params.append(np.zeros(n, np.float32))
    return {
        "params": params,
        "x": rng.standard_normal((batch, SIZES[0])).astype(np.float32),
        "a": rng.integers(0, SIZES[-1], size=batch),
        "adv": rng.standard_normal(batch).astype(np.float32),
    }


# ---- the floor: written by hand in NumPy -----------------------------------------------------
def numpy_step(p: dict[str, Any]) -> list[np.ndarray]:
    w1, b1, w2, b2, w3, b3 = p["params"]
    x, a, adv = p["x"], p["a"], p["adv"]
    n = x.shape[0]
    rows = np.arange(n)
    h1 = np.tanh(x @ w1 + b1)
    h2 = np.tanh(h1 @ w2 + b2)
    logits = h2 @ w3 + b3
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    _loss = -(logp[rows, a] * adv).mean()
    dlogp = np.zeros_like(logp)
    dlogp[rows, a] = -adv / n
    dlogits = dlogp - np.exp(logp) * dlogp.sum(axis=1, keepdims=True)
    dz2 = (dlogits @ w3.T) * (1 - h2 * h2)
    dz1 = (dz2 @ w2.T) * (1 - h1 * h1)
    return [x.T @ dz1, dz1.sum(0), h1.T @ dz2, dz2.sum(0), h2.T @ dlogits, dlogits.sum(0)]


# ---- rlgrad ------------------------------------------------------------------------------------
def rlgrad_setup(p: dict[str, Any]) -> Callable[[], Any]:
    params = [rlgrad.tensor(w, requires_grad=True) for w in p["params"]]
    x = rlgrad.tensor(p["x"])
    a, adv = p["a"], p["adv"]
    rows = np.arange(x.shape[0])
    w1, b1, w2, b2, w3, b3 = params

    def step() -> Any:
        for q in params:
            q.grad = None
        h1 = rnp.tanh(x @ w1 + b1)
        h2 = rnp.tanh(h1 @ w2 + b2)
        logp = rnp.log_softmax(h2 @ w3 + b3, axis=1)
        loss = -(logp[rows, a] * adv).mean()
        loss.backward()
        return [q.grad for q in params]

    return step


def unfused_loss(params: list[Any], x: Any, a: Any, adv: Any, xp: Any = rnp) -> Any:
    """The loss from elementary functions, 18 recorded ops (``a`` and ``adv`` of shape (n, 1))."""
    w1, b1, w2, b2, w3, b3 = params
    h1 = xp.tanh(x @ w1 + b1)
    h2 = xp.tanh(h1 @ w2 + b2)
    logits = h2 @ w3 + b3
    z = logits - xp.max(logits, axis=1, keepdims=True)
    logp = z - xp.log(xp.sum(xp.exp(z), axis=1, keepdims=True))
    return -xp.mean(xp.take_along_axis(logp, a, axis=1) * adv)


def rlgrad_unfused_setup(p: dict[str, Any]) -> Callable[[], Any]:
    params = [rlgrad.tensor(w, requires_grad=True) for w in p["params"]]
    x = rlgrad.tensor(p["x"])
    a, adv = p["a"][:, None], p["adv"][:, None]

    def step() -> Any:
        for q in params:
            q.grad = None
        unfused_loss(params, x, a, adv).backward()
        return [q.grad for q in params]

    return step


def policy_loss(params: list[Any], x: Any, a: Any, adv: Any) -> Any:
    w1, b1, w2, b2, w3, b3 = params
    h1 = rnp.tanh(x @ w1 + b1)
    h2 = rnp.tanh(h1 @ w2 + b2)
    logp = rnp.log_softmax(h2 @ w3 + b3, axis=1)
    return -rnp.mean(logp[np.arange(x.shape[0]), a] * adv)


def rlgrad_functional_setup(p: dict[str, Any]) -> Callable[[], Any]:
    g = rlgrad.grad(policy_loss)
    params = list(p["params"])
    return lambda: g(params, p["x"], p["a"], p["adv"])


def rlgrad_jit_setup(p: dict[str, Any]) -> Callable[[], Any]:
    """Trace once, replay: rlgrad.jit over value_and_grad (fixed shapes, as in an RL update)."""
    step = rlgrad.jit(rlgrad.value_and_grad(policy_loss))
    params = list(p["params"])
    return lambda: step(params, p["x"], p["a"], p["adv"])


# ---- peers (optional) ------------------------------------------------------------------------
def torch_setup(p: dict[str, Any]) -> Callable[[], Any] | None:
    torch = _timing.torch_or_none()
    if torch is None:
        return None
    params = [torch.tensor(w, requires_grad=True) for w in p["params"]]
    x = torch.tensor(p["x"])
    a = torch.tensor(p["a"])
    adv = torch.tensor(p["adv"])
    rows = torch.arange(x.shape[0])
    w1, b1, w2, b2, w3, b3 = params

    def step() -> Any:
        for q in params:
            q.grad = None
        h1 = torch.tanh(x @ w1 + b1)
        h2 = torch.tanh(h1 @ w2 + b2)
        logp = torch.log_softmax(h2 @ w3 + b3, dim=1)
        loss = -(logp[rows, a] * adv).mean()
        loss.backward()
        return [q.grad for q in params]

    return step


def torch_unfused_setup(p: dict[str, Any]) -> Callable[[], Any] | None:
    torch = _timing.torch_or_none()
    if torch is None:
        return None
    params = [torch.tensor(w, requires_grad=True) for w in p["params"]]
    x = torch.tensor(p["x"])
    a, adv = torch.tensor(p["a"][:, None]), torch.tensor(p["adv"][:, None])

    class _Xp:  # torch's functions under NumPy's names, for unfused_loss
        tanh, exp, log, take_along_axis = torch.tanh, torch.exp, torch.log, torch.take_along_dim

        @staticmethod
        def max(t: Any, axis: int, keepdims: bool) -> Any:
            return torch.amax(t, dim=axis, keepdim=keepdims)

        @staticmethod
        def sum(t: Any, axis: int, keepdims: bool) -> Any:
            return torch.sum(t, dim=axis, keepdim=keepdims)

        mean = staticmethod(torch.mean)

    def step() -> Any:
        for q in params:
            q.grad = None
        unfused_loss(params, x, a, adv, _Xp).backward()
        return [q.grad for q in params]

    return step


def autograd_setup(p: dict[str, Any]) -> Callable[[], Any] | None:
    try:
        import autograd
        import autograd.numpy as anp
    except Exception:  # absent, or a broken install: skip the comparison
        return None
    x, a, adv = p["x"], p["a"], p["adv"]
    rows = np.arange(x.shape[0])

    def loss_fn(params: list[Any]) -> Any:
        w1, b1, w2, b2, w3, b3 = params
        h1 = anp.tanh(anp.dot(x, w1) + b1)
        h2 = anp.tanh(anp.dot(h1, w2) + b2)
        logits = anp.dot(h2, w3) + b3
        z = logits - anp.max(logits, axis=1, keepdims=True)
        logp = z - anp.log(anp.sum(anp.exp(z), axis=1, keepdims=True))
        return -anp.mean(logp[rows, a] * adv)

    g = autograd.grad(loss_fn)
    params = list(p["params"])
    return lambda: g(params)


def jax_setup(p: dict[str, Any]) -> Callable[[], Any] | None:
    try:
        import jax
        import jax.numpy as jnp
    except Exception:  # absent, or a broken install: skip the comparison
        return None
    x, a, adv = jnp.asarray(p["x"]), jnp.asarray(p["a"]), jnp.asarray(p["adv"])
    rows = jnp.arange(x.shape[0])

    def loss_fn(params: list[Any]) -> Any:
        w1, b1, w2, b2, w3, b3 = params
        h1 = jnp.tanh(x @ w1 + b1)
        h2 = jnp.tanh(h1 @ w2 + b2)
        logp = jax.nn.log_softmax(h2 @ w3 + b3, axis=1)
        return -jnp.mean(logp[rows, a] * adv)

    g = jax.jit(jax.grad(loss_fn))
    params = [jnp.asarray(w) for w in p["params"]]

    def step() -> Any:
        return jax.block_until_ready(g(params))

    return step


# ---- timing ------------------------------------------------------------------------------------
def check_same(p: dict[str, Any]) -> None:
    """Guard: rlgrad's gradients equal the hand-written ones (a benchmark of a wrong answer is void)."""
    ref = numpy_step(p)
    for got in ([g._value for g in rlgrad_setup(p)()], [g._value for g in rlgrad_unfused_setup(p)()],
                rlgrad_functional_setup(p)(), rlgrad_jit_setup(p)()[1]):
        for r, g in zip(ref, got):
            assert g.dtype == np.float32, g.dtype
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)
    torch_step = torch_unfused_setup(p)
    if torch_step is not None:
        for r, g in zip(ref, torch_step()):
            np.testing.assert_allclose(g.numpy(), r, rtol=1e-4, atol=1e-6)


def run(repeats: int = 15, batches: tuple[int, ...] = BATCHES, only: tuple[str, ...] = (),
        clock: Callable[[], float] = time.perf_counter) -> list[dict[str, Any]]:
    """Rows of the table; ``only``: keep the floor and the implementations whose name contains
    one of these words; ``clock``: ``time.process_time`` for CPU time."""
    rows = []
    for batch in batches:
        p = make_problem(batch)
        check_same(p)
        impls = {
            "numpy (hand-written)": lambda p=p: numpy_step(p),
            "rlgrad (Tensor.backward)": rlgrad_setup(p),
            "rlgrad unfused (Tensor.backward, 18 ops)": rlgrad_unfused_setup(p),
            "rlgrad (functional grad)": rlgrad_functional_setup(p),
            "rlgrad (jit: trace once, replay)": rlgrad_jit_setup(p),
            "PyTorch eager": torch_setup(p),
            "PyTorch eager unfused (18 ops)": torch_unfused_setup(p),
            "HIPS autograd": autograd_setup(p),
            "JAX (jit)": jax_setup(p),
        }
        present = {k: v for i, (k, v) in enumerate(impls.items()) if v is not None
                   and (i == 0 or not only or any(w in k for w in only))}
        timed = _timing.paired(_timing.interleaved(present, repeats, clock=clock),
                               next(iter(present)))
        for name, (t, ratio) in timed.items():
            rows.append({"batch": batch, "impl": name, "us": t * 1e6, "ratio": ratio})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| batch | implementation | µs / step (median) | x NumPy floor (median of paired rounds) |",
        "|---:|---|---:|---:|",
    ]
    for r in rows:
        out.append(f"| {r['batch']} | {r['impl']} | {r['us']:.1f} | {r['ratio']:.2f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="batch 32 only, 7 repeats, no nn section")
    ap.add_argument("--only", default="", help="comma-separated words: time only the floor and "
                    "the implementations whose name contains one (e.g. --only unfused,Tensor)")
    ap.add_argument("--batches", default="", help="comma-separated batch sizes (default 1,32,256)")
    ap.add_argument("--cpu", action="store_true", help="CPU time, not the wall clock (a loaded host)")
    args = ap.parse_args()
    batches = (32,) if args.quick else BATCHES
    if args.batches:
        batches = tuple(int(b) for b in args.batches.split(","))
    only = tuple(w for w in args.only.split(",") if w)
    repeats = 7 if args.quick else args.repeats
    print("Engine: forward + backward, MLP 4-64-64-2 tanh, policy-gradient loss, float32, 1 thread\n")
    print(table(run(repeats, batches, only, time.process_time if args.cpu else time.perf_counter)))
    if not args.quick and not only:
        import nn as nn_bench  # bench/nn.py: the nn.MLP + Adam steps and Conv2d (issue 4)

        print("\nnn + optim: forward, backward and Adam step; Conv2d forward + backward\n")
        print(nn_bench.table(nn_bench.run()))


if __name__ == "__main__":
    main()

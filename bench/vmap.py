"""vmap benchmark: per-sample gradients of a 64-64 tanh MLP's squared error at batch 256, and
an ensemble of Nature-CNN Q-networks as one vmapped call.

Three ways to get the 256 gradients (one per sample, of every parameter), float32:
``rlgrad.func.vmap(rlgrad.func.grad(loss))`` (one forward and one backward pass over the batch,
through the batching rules), the Python loop of ``rlgrad.func.grad`` over the samples (the plain
reference), and ``torch.func.vmap(torch.func.grad(loss))`` when PyTorch is installed. The goal
is vmap at most 0.5x torch.func's time. One thread; medians of interleaved rounds, and the
median of the per-round ratios to torch.func.

The ensemble (issue 29: conv2d with a batched weight at least as fast as the loop): 5 Nature
CNNs (4x84x84 frames, 6 actions) stacked with ``stack_module_state``, forward and backward of the
summed Q-values of a shared batch, ``vmap(functional_call)`` against the Python loop over the
members.

    python bench/vmap.py [--repeats 15] [--batch 256] [--ensemble-batch 32] [--quick]
"""

from __future__ import annotations

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import _timing  # first: pins BLAS to one thread before NumPy loads
import numpy as np  # noqa: E402

import rlgrad  # noqa: E402
import rlgrad.func as rf  # noqa: E402
from rlgrad import nn  # noqa: E402

SIZES = (8, 64, 64, 1)
TORCH = "torch.func vmap(grad)"


def _rlgrad_net() -> Any:
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Linear(SIZES[0], SIZES[1]), nn.Tanh(), nn.Linear(SIZES[1], SIZES[2]),
                         nn.Tanh(), nn.Linear(SIZES[2], SIZES[3]))


def rlgrad_impls(x: np.ndarray, y: np.ndarray) -> tuple[dict[str, Callable[[], Any]], Any]:
    net = _rlgrad_net()
    params = {k: v.detach() for k, v in net.named_parameters()}
    X, Y = rlgrad.tensor(x), rlgrad.tensor(y)

    def loss(p: Any, xb: Any, yb: Any) -> Any:
        return ((rf.functional_call(net, p, (xb[None],)) - yb[None]) ** 2).mean()

    per_sample = rf.vmap(rf.grad(loss), in_dims=(None, 0, 0))
    one = rf.grad(loss)

    def loop() -> Any:
        grads = [one(params, X[i], Y[i]) for i in range(len(x))]
        return {k: rlgrad.stack([g[k] for g in grads]) for k in params}

    impls = {"rlgrad.func vmap(grad)": lambda: per_sample(params, X, Y),
             "rlgrad Python loop of grad": loop}
    return impls, net


def torch_impl(net: Any, x: np.ndarray, y: np.ndarray) -> Callable[[], Any] | None:
    torch = _timing.torch_or_none()
    if torch is None:
        return None
    tnet = torch.nn.Sequential(torch.nn.Linear(SIZES[0], SIZES[1]), torch.nn.Tanh(),
                               torch.nn.Linear(SIZES[1], SIZES[2]), torch.nn.Tanh(),
                               torch.nn.Linear(SIZES[2], SIZES[3]))
    tnet.load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in net.state_dict().items()})
    params = {k: v.detach() for k, v in tnet.named_parameters()}
    X, Y = torch.tensor(x), torch.tensor(y)

    def loss(p: Any, xb: Any, yb: Any) -> Any:
        return ((torch.func.functional_call(tnet, p, (xb[None],)) - yb[None]) ** 2).mean()

    per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))
    return lambda: per_sample(params, X, Y)


def check(impls: dict[str, Callable[[], Any]], torch_fn: Callable[[], Any] | None) -> None:
    """Every implementation gives the same gradients (float32 rounding apart)."""
    results = {name: fn() for name, fn in impls.items()}
    if torch_fn is not None:
        results[TORCH] = {k: v.numpy() for k, v in torch_fn().items()}
    ref = results["rlgrad Python loop of grad"]
    for name, res in results.items():
        for k in ref:
            got = res[k].numpy() if hasattr(res[k], "numpy") else np.asarray(res[k])
            np.testing.assert_allclose(got, ref[k].numpy(), rtol=2e-4, atol=2e-6, err_msg=f"{name} {k}")


def cpu_times(impls: dict[str, Callable[[], Any]], repeats: int) -> dict[str, np.ndarray]:
    """CPU seconds per call, interleaved rounds (``_timing.interleaved`` on the process's clock)."""
    return _timing.interleaved(impls, repeats, clock=time.process_time)


def _nature_cnn() -> Any:
    return nn.Sequential(nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2),
                         nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.Flatten(),
                         nn.Linear(3136, 6))


def ensemble_impls(members: int, batch: int) -> dict[str, Callable[[], Any]]:
    """Forward + backward of an ensemble's summed Q-values: vmap, and the loop (checked equal)."""
    nn.init.manual_seed(0)
    mods = [_nature_cnn() for _ in range(members)]
    params, buffers = rf.stack_module_state(mods)
    obs = rlgrad.tensor(np.random.default_rng(1).random((batch, 4, 84, 84), dtype=np.float32))

    def q(p: Any, b: Any, x: Any) -> Any:
        return rf.functional_call(mods[0], (p, b), (x,))

    batched = rf.vmap(q, in_dims=(0, 0, None))

    def step(loop: bool) -> Callable[[], Any]:
        def run() -> Any:
            for p in params.values():
                p.grad = None
            out = (rlgrad.stack([q({k: v[e] for k, v in params.items()}, {}, obs)
                                 for e in range(members)]) if loop else batched(params, buffers, obs))
            out.sum().backward()
            return out.detach().numpy(), {k: v.grad.numpy().copy() for k, v in params.items()}
        return run

    impls = {"vmap(functional_call)": step(False), "Python loop over members": step(True)}
    (a, ga), (b, gb) = (fn() for fn in impls.values())
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    for k in ga:
        np.testing.assert_allclose(ga[k], gb[k], rtol=1e-3, atol=1e-4, err_msg=k)
    return impls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--ensemble-batch", type=int, default=32)
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="3 rounds: a smoke run")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, SIZES[0])).astype(np.float32)
    y = rng.standard_normal((args.batch, SIZES[-1])).astype(np.float32)
    impls, net = rlgrad_impls(x, y)
    torch_fn = torch_impl(net, x, y)
    check(impls, torch_fn)
    if torch_fn is not None:
        impls[TORCH] = torch_fn
    repeats = 3 if args.quick else args.repeats
    floor = TORCH if torch_fn is not None else "rlgrad Python loop of grad"
    print(f"per-sample gradients, {SIZES[0]}-64-64-{SIZES[-1]} tanh MLP, batch {args.batch}, float32, "
          "one thread")
    for clock, times in (("wall", _timing.interleaved(impls, repeats)), ("CPU", cpu_times(impls, repeats))):
        for name, (sec, ratio) in _timing.paired(times, floor).items():
            print(f"  {clock:4s} {name:30s} {sec * 1e3:9.3f} ms   {ratio:6.2f}x {floor}")
    ens = ensemble_impls(args.members, args.ensemble_batch)
    loop = "Python loop over members"
    print(f"ensemble of {args.members} Nature CNNs, batch {args.ensemble_batch} shared, float32, "
          "forward + backward")
    for name, (sec, ratio) in _timing.paired(cpu_times(ens, repeats), loop).items():
        print(f"  CPU  {name:30s} {sec * 1e3:9.3f} ms   {ratio:6.2f}x the loop")


if __name__ == "__main__":
    main()

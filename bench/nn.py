"""Benchmark: an ``nn.MLP`` + ``Adam`` training step, a DQN ``Conv2d`` layer, and the optimizer
step alone.

Rows compare rlgrad with the same computation written by hand in NumPy (the floor: no graph, no
Tensors) and with PyTorch on one thread when it is installed. The optimizer rows also time
rlgrad's NumPy path (``RLGRAD_FUSED=0``'s) beside its fused C update, and PyTorch's default
(foreach) and ``fused=True`` Adam. Run ``python bench/nn.py``; other scripts can call ``run()``
and ``optim_rows()`` for the rows.
"""

from __future__ import annotations

from collections.abc import Callable  # noqa: E402
from functools import partial  # noqa: E402
from typing import Any  # noqa: E402

import _timing  # first: pins BLAS to one thread before NumPy loads (the comparison is per core)
import numpy as np  # noqa: E402

import rlgrad  # noqa: E402
import rlgrad.nn.functional as F  # noqa: E402
from rlgrad import nn, optim  # noqa: E402

MLP_CASES = [((4, 64, 64, 2), 32), ((84, 256, 256, 18), 32)]


def _time(fns: dict[str, Callable[[], Any]], min_time: float = 0.3,
          repeats: int = 9) -> dict[str, np.ndarray]:
    """Seconds per call of each function in every interleaved round (bench/_timing.py)."""
    return _timing.interleaved(fns, repeats, min_time / repeats)


def _us(times: dict[str, np.ndarray], name: str) -> float | None:
    """Median microseconds per call, None for an implementation that did not run."""
    return float(np.median(times[name])) * 1e6 if name in times else None


def _round_ratio(times: dict[str, np.ndarray], name: str, base: str) -> float | None:
    """The median of the per-round ratios (a round times every implementation back to back, so
    load that comes and goes on a shared machine cancels out of each ratio)."""
    if name not in times or base not in times:
        return None
    return float(np.median(times[name] / times[base]))


# ---- hand-written NumPy: forward, backward and Adam with no framework at all ------------------
class _NumpyMLPAdam:
    """``flat=False``: Adam written per parameter, as one usually writes it. ``flat=True``: the
    strict floor, every parameter a view into one flat array so that Adam is a dozen ufunc calls
    in total and the update one subtraction."""

    def __init__(self, weights: list[np.ndarray], lr: float = 1e-3, flat: bool = False) -> None:
        self.params = [w.copy() for w in weights]  # (W1, b1, W2, b2, ...), PyTorch's layout
        self.flat = flat
        if flat:
            self.P = np.concatenate([p.ravel() for p in self.params])
            views, i = [], 0
            for p in self.params:
                views.append(self.P[i:i + p.size].reshape(p.shape))
                i += p.size
            self.params = views
            self.G = np.empty_like(self.P)
            self.fm, self.fv, self.fbuf = (np.zeros_like(self.P) for _ in range(3))
        self.m = [np.zeros_like(p) for p in self.params]
        self.v = [np.zeros_like(p) for p in self.params]
        self.buf = [np.empty_like(p) for p in self.params]
        self.t = 0
        self.lr, self.b1, self.b2, self.eps = lr, 0.9, 0.999, 1e-8

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        ps = self.params
        n_layers = len(ps) // 2
        acts, pre = [x], []
        h = x
        for i in range(n_layers):
            z = h @ ps[2 * i].T + ps[2 * i + 1]
            if i < n_layers - 1:
                pre.append(z)
                h = np.maximum(z, 0)
                acts.append(h)
            else:
                h = z
        d = h - y
        loss = float(np.mean(d * d))
        g = d * (2.0 / d.size)
        grads: list[Any] = [None] * len(ps)
        for i in reversed(range(n_layers)):
            grads[2 * i] = g.T @ acts[i]
            grads[2 * i + 1] = g.sum(axis=0)
            if i > 0:
                g = (g @ ps[2 * i]) * (pre[i - 1] > 0)
        self.t += 1
        b1, b2, eps, lr, t = self.b1, self.b2, self.eps, self.lr, self.t
        if self.flat:
            np.concatenate(grads, axis=None, out=self.G)
            triples = [(self.P, self.G, self.fm, self.fv, self.fbuf)]
        else:
            triples = list(zip(ps, grads, self.m, self.v, self.buf))
        for p, gr, m, v, buf in triples:
            _hand_adam(p, gr, m, v, buf, t, lr, b1, b2, eps)
        return loss


def _hand_adam(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, buf: np.ndarray,
               t: int, lr: float, b1: float, b2: float, eps: float) -> None:
    """Adam written by hand, one ufunc per operation."""
    bc1, bc2s = 1 - b1**t, np.sqrt(1 - b2**t)
    np.subtract(g, m, out=buf)
    buf *= 1 - b1
    m += buf
    v *= b2
    np.multiply(g, g, out=buf)
    buf *= 1 - b2
    v += buf
    np.sqrt(v, out=buf)
    buf += eps * bc2s
    np.divide(m, buf, out=buf)
    buf *= lr * bc2s / bc1
    p -= buf


def _rlgrad_step(weights: list[np.ndarray]) -> Callable[[np.ndarray, np.ndarray], float]:
    sizes = [weights[0].shape[1]] + [w.shape[0] for w in weights[::2]]
    model = nn.MLP(sizes)
    for p, w in zip(model.parameters(), weights):
        p._value[...] = w
    opt = optim.Adam(model.parameters(), lr=1e-3)

    def step(x: np.ndarray, y: np.ndarray) -> float:
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def _torch_step(weights: list[np.ndarray]) -> Callable[[np.ndarray, np.ndarray], float] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    layers: list[Any] = []
    for i, w in enumerate(weights[::2]):
        layers.append(torch.nn.Linear(w.shape[1], w.shape[0]))
        if i < len(weights) // 2 - 1:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(torch.from_numpy(w))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(x: np.ndarray, y: np.ndarray) -> float:
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        loss = torch.nn.functional.mse_loss(model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def _mlp_steps(weights: list[np.ndarray]) -> dict[str, Callable[[np.ndarray, np.ndarray], float]]:
    """Every implementation's training step, all starting from the same weights."""
    steps = {"numpy": _NumpyMLPAdam(weights).step,
             "numpy_flat": _NumpyMLPAdam(weights, flat=True).step,
             "rlgrad": _rlgrad_step(weights)}
    tstep = _torch_step(weights)
    if tstep is not None:
        steps["torch"] = tstep
    return steps


def _check_same_losses(steps: dict[str, Callable[[np.ndarray, np.ndarray], float]],
                       x: np.ndarray, y: np.ndarray, n: int = 5) -> None:
    """The implementations compute the same thing: the same losses over ``n`` Adam steps from the
    same weights (each loss is taken before its update, so the updates are compared too)."""
    losses = {name: [step(x, y) for _ in range(n)] for name, step in steps.items()}
    ref = losses["numpy"]
    for name, ls in losses.items():
        if not np.allclose(ls, ref, rtol=1e-4, atol=1e-6):
            raise AssertionError(f"bench/nn.py: {name} computes another thing than NumPy by hand: "
                                 f"losses {ls} vs {ref}")


def mlp_rows() -> list[dict[str, Any]]:
    rows = []
    rng = np.random.default_rng(0)
    for sizes, batch in MLP_CASES:
        x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
        y = rng.standard_normal((batch, sizes[-1])).astype(np.float32)
        weights = [p._value.copy() for p in nn.MLP(sizes).parameters()]
        _check_same_losses(_mlp_steps(weights), x, y)
        fns = {name: partial(step, x, y) for name, step in _mlp_steps(weights).items()}
        times = _time(fns)
        rows.append({
            "case": f"MLP {'-'.join(map(str, sizes))} + Adam, batch {batch}",
            "numpy_us": _us(times, "numpy"), "numpy_flat_us": _us(times, "numpy_flat"),
            "rlgrad_us": _us(times, "rlgrad"), "torch_us": _us(times, "torch"),
            "rlgrad/numpy": _round_ratio(times, "rlgrad", "numpy"),
            "rlgrad/numpy_flat": _round_ratio(times, "rlgrad", "numpy_flat"),
            "rlgrad/torch": _round_ratio(times, "rlgrad", "torch"),
        })
    return rows


def conv_rows() -> list[dict[str, Any]]:
    """DQN's first layer (32 filters 8x8 stride 4 on 4x84x84), forward + backward, batch 32."""
    rng = np.random.default_rng(0)
    x = rng.random((32, 4, 84, 84), dtype=np.float32)
    conv = nn.Conv2d(4, 32, 8, stride=4)
    g_out = rng.standard_normal((32, 32, 20, 20)).astype(np.float32)

    def ours() -> Any:
        conv.zero_grad()
        y = conv(x)
        y.backward(g_out)
        return y._value, conv.weight.grad._value

    fns: dict[str, Callable[[], Any]] = {"rlgrad": ours}
    try:
        import torch

        torch.set_num_threads(1)
        tconv = torch.nn.Conv2d(4, 32, 8, stride=4)
        with torch.no_grad():  # the same weights: the outputs and gradients are compared below
            tconv.weight.copy_(torch.from_numpy(conv.weight._value))
            tconv.bias.copy_(torch.from_numpy(conv.bias._value))
        xt, gt = torch.from_numpy(x), torch.from_numpy(g_out)

        def theirs() -> Any:
            tconv.zero_grad()
            y = tconv(xt)
            y.backward(gt)
            return y.detach().numpy(), tconv.weight.grad.numpy()

        fns["torch"] = theirs
        for a, b in zip(ours(), theirs()):
            if not np.allclose(a, b, rtol=1e-3, atol=1e-3):
                raise AssertionError("bench/nn.py: rlgrad's and PyTorch's Conv2d disagree")
    except ImportError:
        pass
    times = _time(fns, min_time=1.0, repeats=7)
    return [{
        "case": "Conv2d 4->32 k8 s4 on 32x4x84x84, fwd+bwd",
        "numpy_us": None, "numpy_flat_us": None, "rlgrad_us": _us(times, "rlgrad"),
        "torch_us": _us(times, "torch"), "rlgrad/numpy": None, "rlgrad/numpy_flat": None,
        "rlgrad/torch": _round_ratio(times, "rlgrad", "torch"),
    }]


# ---- the optimizer step alone: a DQN's Q-network (4-256-256-2, 67,586 parameters) ---------------
OPTIM_SIZES = (4, 256, 256, 2)


def _hand_flat_update(kind: str, P: np.ndarray, G: np.ndarray, m: np.ndarray, v: np.ndarray,
                      buf: np.ndarray, t: int) -> None:
    """The floor: the update written by hand on flat arrays, one ufunc per operation."""
    if kind == "adam":
        _hand_adam(P, G, m, v, buf, t, 1e-3, 0.9, 0.999, 1e-8)
        return
    alpha, eps, lr = 0.99, 1e-5, 7e-4  # RMSprop, TensorFlow's epsilon (Stable-Baselines3's A2C)
    v *= alpha
    np.multiply(G, G, out=buf)
    buf *= 1 - alpha
    v += buf
    np.add(v, eps, out=buf)
    np.sqrt(buf, out=buf)
    np.divide(G, buf, out=buf)
    buf *= lr
    P -= buf


def _rlgrad_params(weights: list[np.ndarray], grads: list[np.ndarray]) -> list[Any]:
    params = [nn.Parameter(w.copy()) for w in weights]
    for p, g in zip(params, grads):
        p.grad = rlgrad.tensor(g)
    return params


def _optim_impls(kind: str, weights: list[np.ndarray], grads: list[np.ndarray]
                 ) -> dict[str, tuple[Callable[[], Any], Callable[[], np.ndarray]]]:
    """name -> (one optimizer step, the flat parameters now) for each implementation, each on its
    own copy of the same parameters with the same gradients in place."""
    from rlgrad.optim import algorithms

    make = ((lambda ps: optim.Adam(ps, lr=1e-3)) if kind == "adam"
            else (lambda ps: optim.RMSpropTFLike(ps, lr=7e-4, eps=1e-5)))
    fused_mod = algorithms._fused
    fused_ps, numpy_ps = _rlgrad_params(weights, grads), _rlgrad_params(weights, grads)
    fused_opt, numpy_opt = make(fused_ps), make(numpy_ps)

    def numpy_path() -> None:
        algorithms._fused = None  # the NumPy flat path, as with RLGRAD_FUSED=0
        try:
            numpy_opt.step()
        finally:
            algorithms._fused = fused_mod

    def flat_of(ps: list[Any]) -> Callable[[], np.ndarray]:
        return lambda: np.concatenate([np.asarray(p._value).ravel() for p in ps])

    P = np.concatenate([w.ravel() for w in weights])
    G = np.concatenate([g.ravel() for g in grads])
    m, buf = np.zeros_like(P), np.empty_like(P)
    v = np.zeros_like(P) if kind == "adam" else np.ones_like(P)  # RMSpropTFLike starts at 1
    t = [0]

    def hand() -> None:
        t[0] += 1
        _hand_flat_update(kind, P, G, m, v, buf, t[0])

    impls = {"numpy": (hand, lambda: P.copy()), "rlgrad_numpy": (numpy_path, flat_of(numpy_ps))}
    if fused_mod is not None:
        impls["rlgrad"] = (fused_opt.step, flat_of(fused_ps))
    try:
        import torch
    except ImportError:
        return impls
    torch.set_num_threads(1)
    torch_opts = {"torch": {}} if kind != "adam" else {"torch": {}, "torch_fused": {"fused": True}}
    for name, extra in torch_opts.items():
        tparams = [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in weights]
        for tp, g in zip(tparams, grads):
            tp.grad = torch.from_numpy(g)
        if kind == "adam":
            opt = torch.optim.Adam(tparams, lr=1e-3, **extra)
        else:  # torch's RMSprop (epsilon outside the root, v from 0): the same passes, not values
            opt = torch.optim.RMSprop(tparams, lr=7e-4, eps=1e-5)
        impls[name] = (opt.step, flat_of([tp.detach() for tp in tparams]) if kind == "adam"
                       else (lambda: None))
    return impls


def _check_same_updates(impls: dict[str, tuple[Callable[[], Any], Callable[[], Any]]]) -> None:
    """Three steps of each implementation land on the same parameters as the NumPy floor's."""
    for step, _ in impls.values():
        for _ in range(3):
            step()
    ref = impls["numpy"][1]()
    for name, (_, now) in impls.items():
        got = now()
        if got is not None and not np.allclose(got, ref, rtol=1e-5, atol=1e-7):
            raise AssertionError(f"bench/nn.py: {name}'s update differs from the NumPy floor's")


def optim_rows() -> list[dict[str, Any]]:
    """One optimizer step over a DQN's parameters, gradients given (microseconds, medians)."""
    rng = np.random.default_rng(0)
    weights = [p._value.copy() for p in nn.MLP(OPTIM_SIZES).parameters()]
    grads = [rng.standard_normal(w.shape).astype(np.float32) * 1e-2 for w in weights]
    n = sum(w.size for w in weights)
    rows = []
    for kind, name in (("adam", "Adam"), ("rmsprop", "RMSprop")):
        with np.errstate(all="ignore"):
            impls = _optim_impls(kind, weights, grads)
            _check_same_updates(impls)
            times = _time({impl: step for impl, (step, _) in impls.items()})
        row: dict[str, Any] = {"case": f"{name} step, {n:,} parameters"}
        for impl in ("numpy", "rlgrad", "rlgrad_numpy", "torch", "torch_fused"):
            row[f"{impl}_us"] = _us(times, impl)
        row["rlgrad/numpy"] = _round_ratio(times, "rlgrad", "numpy")
        row["rlgrad/torch"] = _round_ratio(times, "rlgrad", "torch")
        rows.append(row)
    return rows


def optim_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | NumPy by hand (flat) | rlgrad (fused) | rlgrad, NumPy path | PyTorch "
             "| PyTorch fused=True | rlgrad / NumPy | rlgrad / PyTorch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ours, floor, th = r["rlgrad_us"], r["numpy_us"], r["torch_us"]
        lines.append(
            f"| {r['case']} | {_fmt(floor, ' µs')} | {_fmt(ours, ' µs')} | "
            f"{_fmt(r['rlgrad_numpy_us'], ' µs')} | {_fmt(th, ' µs')} | "
            f"{_fmt(r['torch_fused_us'], ' µs')} | "
            f"{_fmt(r['rlgrad/numpy'])} | {_fmt(r['rlgrad/torch'])} |")
    return "\n".join(lines)


def run() -> list[dict[str, Any]]:
    """Every row of this benchmark (times in microseconds, medians)."""
    return mlp_rows() + conv_rows()


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    return f"{v:,.1f}{unit}" if unit else f"{v:.2f}x"


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | NumPy by hand | NumPy by hand, flat Adam | rlgrad | PyTorch (1 thread) "
             "| rlgrad / NumPy | rlgrad / NumPy flat | rlgrad / PyTorch |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r['case']} | {_fmt(r['numpy_us'], ' µs')} | {_fmt(r['numpy_flat_us'], ' µs')} | "
            f"{_fmt(r['rlgrad_us'], ' µs')} | {_fmt(r['torch_us'], ' µs')} | "
            f"{_fmt(r['rlgrad/numpy'])} | {_fmt(r['rlgrad/numpy_flat'])} | {_fmt(r['rlgrad/torch'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    print(f"rlgrad {rlgrad.__version__}, NumPy {np.__version__}, one BLAS thread")
    print(table(run()))
    print()
    print(optim_table(optim_rows()))


if __name__ == "__main__":
    main()

"""Benchmark: choosing actions with rlgrad.distributions.

* ``act``: one observation in, a Python int out: a 4-64-64-2 tanh policy's forward under
  ``no_grad`` and a ``Categorical(logits=...)`` sample (issue #5's target: at most 15 us).
* ``sample``: ``Categorical(logits=...)`` construction + one ``sample()`` alone, for one row of
  2 logits and for a batch of 256 rows of 18 (vectorised environments).

Each case is compared with the same computation written by hand in NumPy (the floor: inverse-CDF
sampling with one uniform draw) and with PyTorch on one thread when it is installed. Timings are
medians over interleaved rounds (robust to load on a shared machine); the ratio column is the
median of per-round ratios to the NumPy floor.

    python bench/distributions.py [--repeats 15] [--quick]
"""

from __future__ import annotations

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import _timing  # first: pins BLAS to one thread before NumPy loads
import numpy as np  # noqa: E402

import rlgrad  # noqa: E402
import rlgrad.random as rrandom  # noqa: E402
from rlgrad.distributions import Categorical  # noqa: E402

SIZES = (4, 64, 64, 2)


def _torch() -> Any:
    try:
        import torch
    except Exception:  # absent, or a broken install: skip the comparison
        return None
    torch.set_num_threads(1)
    return torch


# ---- the policy --------------------------------------------------------------------------------
def make_policy(seed: int = 0) -> tuple[Callable[[Any], Any], list[tuple[np.ndarray, np.ndarray]]]:
    """rlgrad's 4-64-64-2 tanh MLP (rlgrad.nn when present, else the same layers as tensor ops)
    and its weights as (W (out, in), b) float32 arrays."""
    rng = np.random.default_rng(seed)
    try:
        from rlgrad import nn

        np.random.seed(seed)
        net = nn.MLP(list(SIZES), activation=nn.Tanh)
        weights = [(m.weight._value, m.bias._value) for m in net if isinstance(m, nn.Linear)]
        return net, weights
    except ImportError:
        weights = []
        for n_in, n_out in zip(SIZES[:-1], SIZES[1:]):
            bound = 1 / np.sqrt(n_in)
            weights.append((rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32),
                            rng.uniform(-bound, bound, n_out).astype(np.float32)))
        return ops_policy(weights), weights


def ops_policy(weights: list[tuple[np.ndarray, np.ndarray]]) -> Callable[[Any], Any]:
    """The same network written with rlgrad tensor operators (no rlgrad.nn)."""
    (w1, b1), (w2, b2), (w3, b3) = [(rlgrad.tensor(w.T.copy(), requires_grad=True),
                                     rlgrad.tensor(b, requires_grad=True)) for w, b in weights]
    tanh = rlgrad.numpy.tanh

    def forward(x: Any) -> Any:
        return tanh(tanh(x @ w1 + b1) @ w2 + b2) @ w3 + b3

    return forward


# ---- the cases ---------------------------------------------------------------------------------
def act_impls(obs: np.ndarray) -> dict[str, Callable[[], int]]:
    net, weights = make_policy()
    ops_net = ops_policy(weights)
    (w1, b1), (w2, b2), (w3, b3) = [(w.T.copy(), b) for w, b in weights]
    rng = np.random.default_rng(0)
    no_grad = rlgrad.no_grad

    def numpy_act() -> int:
        logits = np.tanh(np.tanh(obs @ w1 + b1) @ w2 + b2) @ w3 + b3
        cdf = np.cumsum(np.exp(logits - logits.max()))
        return int(np.searchsorted(cdf[:-1], rng.random() * cdf[-1], side="right"))

    def rlgrad_act() -> int:
        with no_grad():
            logits = net(obs)
        return int(Categorical(logits=logits).sample())

    def rlgrad_ops_act() -> int:
        with no_grad():
            logits = ops_net(obs)
        return int(Categorical(logits=logits).sample())

    def rlgrad_novalidate_act() -> int:
        with no_grad():
            logits = net(obs)
        return int(Categorical(logits=logits, validate_args=False).sample())

    impls = {
        "numpy (hand-written)": numpy_act,
        "rlgrad (nn.MLP + Categorical)" if _has_nn() else "rlgrad (ops + Categorical)": rlgrad_act,
        "rlgrad (validate_args=False)": rlgrad_novalidate_act,
    }
    if _has_nn():
        impls["rlgrad (tensor ops + Categorical)"] = rlgrad_ops_act
    torch = _torch()
    if torch is not None:
        tnet = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(),
                                   torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
        with torch.no_grad():
            for layer, (w, b) in zip([tnet[0], tnet[2], tnet[4]], weights):
                layer.weight.copy_(torch.from_numpy(w))
                layer.bias.copy_(torch.from_numpy(b))
        tobs = torch.from_numpy(obs)
        TCat = torch.distributions.Categorical

        def torch_act() -> int:
            with torch.no_grad():
                return int(TCat(logits=tnet(tobs)).sample())

        def torch_act_novalidate() -> int:
            with torch.no_grad():
                return int(TCat(logits=tnet(tobs), validate_args=False).sample())

        impls["PyTorch (nn.Sequential + Categorical)"] = torch_act
        impls["PyTorch (validate_args=False)"] = torch_act_novalidate
    return impls


def sample_impls(batch: int, k: int) -> dict[str, Callable[[], Any]]:
    logits_np = np.random.default_rng(1).standard_normal((batch, k) if batch else (k,))
    logits_np = logits_np.astype(np.float32)
    logits = rlgrad.tensor(logits_np)
    rng = np.random.default_rng(0)

    def numpy_sample() -> Any:
        x = logits_np
        cdf = np.cumsum(np.exp(x - x.max(axis=-1, keepdims=True)), axis=-1)
        if x.ndim == 1:
            return int(np.searchsorted(cdf[:-1], rng.random() * cdf[-1], side="right"))
        u = rng.random(x.shape[:-1]) * cdf[..., -1]
        return np.count_nonzero(cdf[..., :-1] <= u[..., None], axis=-1)

    def rlgrad_sample() -> Any:
        s = Categorical(logits=logits).sample()
        return int(s) if not batch else s._value

    impls = {"numpy (hand-written)": numpy_sample, "rlgrad Categorical": rlgrad_sample}
    torch = _torch()
    if torch is not None:
        tl = torch.from_numpy(logits_np)
        TCat = torch.distributions.Categorical

        def torch_sample() -> Any:
            s = TCat(logits=tl).sample()
            return int(s) if not batch else s.numpy()

        impls["PyTorch Categorical"] = torch_sample
    return impls


def _has_nn() -> bool:
    try:
        import rlgrad.nn  # noqa: F401
    except ImportError:
        return False
    return True


# ---- timing ------------------------------------------------------------------------------------
def interleaved(impls: dict[str, Callable[[], Any]], repeats: int) -> dict[str, tuple[float, float]]:
    """name -> (median seconds per call, median per-round ratio to the first implementation)."""
    return _timing.paired(_timing.interleaved(impls, repeats), next(iter(impls)))


def check(obs: np.ndarray) -> None:
    """Guards: the policies agree, and the sampled actions follow softmax(logits)."""
    net, weights = make_policy()
    with rlgrad.no_grad():
        logits = net(obs)
        b = ops_policy(weights)(obs)._value
    (w1, b1), (w2, b2), (w3, b3) = weights
    ref = np.tanh(np.tanh(obs @ w1.T + b1) @ w2.T + b2) @ w3.T + b3
    np.testing.assert_allclose(logits._value, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b, ref, rtol=1e-5, atol=1e-6)
    p = np.exp(ref - ref.max())
    p /= p.sum()
    rrandom.seed(0)
    draws = np.array([int(Categorical(logits=logits).sample()) for _ in range(4000)])
    freq = np.bincount(draws, minlength=len(p)) / draws.size
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / draws.size) + 1e-3), (freq, p)
    for fn in act_impls(obs).values():
        assert fn() in range(len(p))


def run(repeats: int = 15) -> list[dict[str, Any]]:
    obs = np.random.default_rng(2).standard_normal(SIZES[0]).astype(np.float32)
    check(obs)
    rows = []
    cases = [("act: 4-64-64-2 policy + Categorical, 1 obs -> int", act_impls(obs)),
             ("sample: Categorical(logits (2,)) + sample()", sample_impls(0, 2)),
             ("sample: Categorical(logits (256, 18)) + sample()", sample_impls(256, 18))]
    for case, impls in cases:
        for name, (t, ratio) in interleaved(impls, repeats).items():
            rows.append({"case": case, "impl": name, "us": t * 1e6, "ratio": ratio})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| case | implementation | time (us, median) | x NumPy floor |",
             "|---|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['impl']} | {r['us']:.1f} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="5 rounds instead of --repeats")
    args = parser.parse_args()
    print(table(run(5 if args.quick else args.repeats)))


if __name__ == "__main__":
    main()

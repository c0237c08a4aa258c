"""Forward mode against reverse mode: ``jacfwd`` vs ``jacrev`` on a tall Jacobian (few inputs,
many outputs: one forward sweep per input against one backward pass per output, so forward mode
must win) and on a wide one (the other way round), plus a Hessian both ways.

f(x) = V tanh(W x + b), float64, one BLAS thread. Reports medians of interleaved repeats and the
median of the per-round ratios to jacrev.

    python bench/forward.py [--repeats 15] [--quick]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import _timing  # first: pins BLAS to one thread before NumPy loads
import numpy as np

import rlgrad
import rlgrad.numpy as rnp

HIDDEN = 32


def problem(n_in: int, n_out: int, seed: int = 0) -> tuple[Callable, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((HIDDEN, n_in)) / np.sqrt(n_in)
    b = rng.standard_normal(HIDDEN)
    v = rng.standard_normal((n_out, HIDDEN)) / np.sqrt(HIDDEN)

    def f(x: Any) -> Any:
        return v @ rnp.tanh(w @ x + b)

    return f, rng.standard_normal(n_in)


def scalar_problem(n: int, seed: int = 0) -> tuple[Callable, np.ndarray]:
    g, x = problem(n, 8, seed)
    return (lambda x: rnp.sum(g(x) ** 2)), x


def compare(label: str, impls: dict[str, Callable], x: np.ndarray,
            repeats: int) -> list[tuple[str, str, float, float]]:
    """Time ``impls`` (the last one is the reference) on ``x`` after checking they agree."""
    names = list(impls)
    ref = impls[names[-1]](x)
    for name in names[:-1]:
        np.testing.assert_allclose(impls[name](x), ref, rtol=1e-9, atol=1e-12)
    times = _timing.interleaved({n: (lambda fn=fn: fn(x)) for n, fn in impls.items()}, repeats)
    res = _timing.paired(times, names[-1])
    return [(label, name, *res[name]) for name in names]


def rows(repeats: int, shapes: list[tuple[int, int]], hessian_n: int) -> list[tuple[str, str, float, float]]:
    out = []
    for n_in, n_out in shapes:
        f, x = problem(n_in, n_out)
        label = f"{n_out} x {n_in} ({'tall' if n_out > n_in else 'wide' if n_in > n_out else 'square'})"
        out += compare(label, {"jacfwd": rlgrad.jacfwd(f), "jacrev": rlgrad.jacrev(f)}, x, repeats)
    f, x = scalar_problem(hessian_n)
    out += compare(f"Hessian {hessian_n} x {hessian_n}",
                   {"jacfwd(jacrev)": rlgrad.jacfwd(rlgrad.jacrev(f)),
                    "jacrev(jacrev)": rlgrad.jacrev(rlgrad.jacrev(f))}, x, repeats)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="smaller shapes, 5 repeats")
    args = ap.parse_args()
    if args.quick:
        shapes, repeats, hn = [(4, 64), (64, 4)], 5, 8
    else:
        shapes, repeats, hn = [(4, 256), (256, 4), (16, 16)], args.repeats, 16
    print(f"f(x) = V tanh(W x + b), hidden {HIDDEN}, float64, 1 thread; medians of {repeats} rounds\n")
    print("| Jacobian (outputs x inputs) | transform | ms / call (median) | x the reverse-mode row "
          "(median of paired rounds) |")
    print("|---|---|---:|---:|")
    for label, name, sec, ratio in rows(repeats, shapes, hn):
        print(f"| {label} | {name} | {sec * 1e3:.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()

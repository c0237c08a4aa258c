"""``LBFGS``: limited-memory BFGS with PyTorch's arguments and iteration (the two-loop recursion
over the last ``history_size`` curvature pairs, a first step scaled to the gradient's L1 norm,
optionally a strong-Wolfe line search by cubic interpolation, the line search of Mark Schmidt's
minFunc that torch uses). ``step(closure)`` runs up to ``max_iter`` iterations; ``closure``
re-evaluates the loss and its gradients (``zero_grad(); loss = f(); loss.backward()``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.optim.optimizer import Optimizer
from rlgrad.tensor import mark_written
from rlgrad.tracer import enable_grad
from rlgrad.typing import Params

__all__ = ["LBFGS"]

Objective = Callable[[float, np.ndarray], tuple[float, np.ndarray]]


class LBFGS(Optimizer):
    def __init__(self, params: Params, lr: float = 1.0, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None) -> None:
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(f"LBFGS: line_search_fn must be None or 'strong_wolfe', got {line_search_fn!r}")
        max_eval = max_iter * 5 // 4 if max_eval is None else max_eval
        super().__init__(params, dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                                      tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                                      history_size=history_size, line_search_fn=line_search_fn))
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]

    # ---- the parameters as one flat vector ---------------------------------------------------
    def _flat_grad(self) -> np.ndarray:
        return np.concatenate([np.zeros(p._value.size, p._value.dtype) if p.grad is None
                               else np.ravel(p.grad._value) for p in self._params])

    def _add_grad(self, t: float, d: np.ndarray) -> None:
        at = 0
        for p in self._params:
            n = p._value.size
            p._value += (t * d[at:at + n]).reshape(p._value.shape).astype(p._value.dtype, copy=False)
            at += n
        mark_written(*self._params)

    def _set_params(self, values: list[np.ndarray]) -> None:
        for p, v in zip(self._params, values):
            p._value[...] = v
        mark_written(*self._params)

    def _evaluate(self, closure: Callable[[], Any]) -> float:
        with enable_grad():
            return float(closure())

    def _directional(self, closure: Callable[[], Any], x: list[np.ndarray], t: float,
                     d: np.ndarray) -> tuple[float, np.ndarray]:
        """The loss and flat gradient at ``x + t d``; the parameters are put back to ``x``."""
        self._add_grad(t, d)
        loss = self._evaluate(closure)
        g = self._flat_grad()
        self._set_params(x)
        return loss, g

    def _update_group(self, group: dict[str, Any]) -> None:
        raise RuntimeError("LBFGS.step needs a closure that re-evaluates the loss: "
                           "opt.step(lambda: (opt.zero_grad(), (loss := f()).backward(), loss)[2])")

    def step(self, closure: Callable[[], Any] | None = None) -> object:
        """Up to ``max_iter`` L-BFGS iterations; returns the loss ``closure()`` gave first."""
        if closure is None:
            self._update_group(self.param_groups[0])
        assert closure is not None
        group, state = self.param_groups[0], self.state.setdefault(self._params[0], {})
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)
        with enable_grad():
            orig_loss = closure()
        loss = float(orig_loss)
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        if np.abs(flat_grad).max() <= group["tolerance_grad"]:
            return orig_loss
        self._iterate(closure, group, state, loss, flat_grad)
        return orig_loss

    def _iterate(self, closure: Callable[[], Any], group: dict[str, Any], state: dict[str, Any],
                 loss: float, flat_grad: np.ndarray) -> None:
        lr, evals = group["lr"], 1
        n_iter = 0
        while n_iter < group["max_iter"]:
            n_iter += 1
            state["n_iter"] += 1
            d = self._direction(state, flat_grad, group["history_size"])
            state["prev_flat_grad"], state["prev_loss"] = flat_grad.copy(), loss
            prev_loss = loss
            t = min(1.0, 1.0 / float(np.abs(flat_grad).sum())) * lr if state["n_iter"] == 1 else lr
            state["d"], state["t"] = d, t
            gtd = float(flat_grad @ d)
            if gtd > -group["tolerance_change"]:
                break
            if group["line_search_fn"] == "strong_wolfe":
                x0 = [p._value.copy() for p in self._params]
                obj: Objective = functools.partial(self._directional, closure, x0)
                loss, flat_grad, t, ls_evals = strong_wolfe(obj, t, d, loss, flat_grad, gtd,
                                                            max_ls=group["max_eval"] - evals)
                state["t"] = t
                self._add_grad(t, d)
            else:
                self._add_grad(t, d)
                ls_evals = 0
                if n_iter != group["max_iter"]:
                    loss, flat_grad, ls_evals = self._evaluate(closure), self._flat_grad(), 1
            evals += ls_evals
            state["func_evals"] += ls_evals
            if (n_iter == group["max_iter"] or evals >= group["max_eval"]
                    or np.abs(flat_grad).max() <= group["tolerance_grad"]
                    or np.abs(d * t).max() <= group["tolerance_change"]
                    or abs(loss - prev_loss) < group["tolerance_change"]):
                break

    @staticmethod
    def _direction(state: dict[str, Any], g: np.ndarray, history_size: int) -> np.ndarray:
        """-H g by the two-loop recursion, after storing the newest curvature pair if ys > 1e-10."""
        if state["n_iter"] == 1:
            state.update(old_dirs=[], old_stps=[], ro=[], H_diag=1.0)
            return -g
        y, s = g - state["prev_flat_grad"], state["d"] * state["t"]
        ys = float(y @ s)
        dirs, stps, ro = state["old_dirs"], state["old_stps"], state["ro"]
        if ys > 1e-10:
            if len(dirs) == history_size:
                del dirs[0], stps[0], ro[0]
            dirs.append(y)
            stps.append(s)
            ro.append(1.0 / ys)
            state["H_diag"] = ys / float(y @ y)
        al = [0.0] * len(dirs)
        q = -g
        for i in range(len(dirs) - 1, -1, -1):
            al[i] = float(stps[i] @ q) * ro[i]
            q = q - al[i] * dirs[i]
        r = q * state["H_diag"]
        for i in range(len(dirs)):
            r = r + (al[i] - float(dirs[i] @ r) * ro[i]) * stps[i]
        return r


def cubic_minimum(x1: float, f1: float, g1: float, x2: float, f2: float, g2: float,
                  bounds: tuple[float, float] | None = None) -> float:
    """The minimizer of the cubic through (x1, f1, slope g1) and (x2, f2, slope g2), clamped to
    ``bounds`` (default: between x1 and x2); their midpoint if the cubic has no minimum."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    disc = d1 * d1 - g1 * g2
    if disc < 0:
        return (lo + hi) / 2.0
    d2 = math.sqrt(disc)
    if x1 <= x2:
        m = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        m = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(m, lo), hi)


class _Point:
    """A trial step ``t`` with its loss, flat gradient and slope along the direction."""

    def __init__(self, t: float, f: float, g: np.ndarray, gtd: float) -> None:
        self.t, self.f, self.g, self.gtd = t, f, g, gtd


def strong_wolfe(obj: Objective, t: float, d: np.ndarray, f: float, g: np.ndarray, gtd: float,
                 c1: float = 1e-4, c2: float = 0.9, tolerance_change: float = 1e-9,
                 max_ls: int = 25) -> tuple[float, np.ndarray, float, int]:
    """A step satisfying the strong Wolfe conditions along ``d`` from loss ``f``, gradient
    ``g``, slope ``gtd``: bracketing by extrapolation, then zoom. Returns (loss, gradient, t,
    evaluations)."""
    start = _Point(0.0, f, g, gtd)
    new = _Point(t, *_probe(obj, t, d))
    prev, evals, it = start, 1, 0
    bracket: list[_Point] | None = None
    while it < max_ls:
        if new.f > f + c1 * new.t * gtd or (it > 1 and new.f >= prev.f):
            bracket = [prev, new]
            break
        if abs(new.gtd) <= -c2 * gtd:  # (checked before the slope's sign, as torch)
            return new.f, new.g, new.t, evals
        if new.gtd >= 0:
            bracket = [prev, new]
            break
        nt = cubic_minimum(prev.t, prev.f, prev.gtd, new.t, new.f, new.gtd,
                           bounds=(new.t + 0.01 * (new.t - prev.t), new.t * 10))
        prev, new = new, _Point(nt, *_probe(obj, nt, d))
        evals, it = evals + 1, it + 1
    if bracket is None:  # out of evaluations while extrapolating
        bracket = [_Point(0.0, f, g, gtd), new]
    best, extra = _zoom(obj, d, bracket, f, gtd, c1, c2, tolerance_change, max_ls - it)
    return best.f, best.g, best.t, evals + extra


def _probe(obj: Objective, t: float, d: np.ndarray) -> tuple[float, np.ndarray, float]:
    f, g = obj(t, d)
    return f, g, float(g @ d)


def _zoom(obj: Objective, d: np.ndarray, b: list[_Point], f: float, gtd: float, c1: float,
          c2: float, tolerance_change: float, budget: int) -> tuple[_Point, int]:
    """Shrink the bracket ``b`` (a low and a high point) to a strong-Wolfe step."""
    d_norm = float(np.abs(d).max())
    lo = 0 if b[0].f <= b[-1].f else 1
    evals, stuck = 0, False
    while evals < budget:
        ts = (b[0].t, b[1].t)
        if abs(ts[1] - ts[0]) * d_norm < tolerance_change:
            break
        t = cubic_minimum(b[0].t, b[0].f, b[0].gtd, b[1].t, b[1].f, b[1].gtd)
        width = 0.1 * (max(ts) - min(ts))
        if min(max(ts) - t, t - min(ts)) < width:  # too close to an end: move inside
            if stuck or t >= max(ts) or t <= min(ts):
                t = max(ts) - width if abs(t - max(ts)) < abs(t - min(ts)) else min(ts) + width
                stuck = False
            else:
                stuck = True
        else:
            stuck = False
        p = _Point(t, *_probe(obj, t, d))
        evals += 1
        if p.f > f + c1 * t * gtd or p.f >= b[lo].f:
            b[1 - lo] = p
            lo = 0 if b[0].f <= b[1].f else 1
            continue
        if abs(p.gtd) <= -c2 * gtd:
            b[lo] = p
            break
        if p.gtd * (b[1 - lo].t - b[lo].t) >= 0:
            b[1 - lo] = b[lo]
        b[lo] = p
    return b[lo], evals

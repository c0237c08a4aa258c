"""``Adafactor`` (torch 2.13's ``torch.optim.Adafactor``: Shazeer and Stern's factored second
moment, with torch's choices: no first moment, ``beta2_t = 1 - t^beta2_decay``, relative step
``min(lr, 1/sqrt(t))`` scaled by the parameter's RMS, update clipping ``d``, decoupled weight
decay) and ``SparseAdam`` (torch's arguments; rlgrad has no sparse gradients, so a step given a
dense one raises torch's error, as torch's does).

One plain loop per parameter in the parameter's dtype, as torch's single-tensor path: there is
no fast path to hold to a reference here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlgrad.optim.optimizer import Optimizer
from rlgrad.serialization import StateDictError
from rlgrad.tensor import Tensor
from rlgrad.typing import Params

__all__ = ["Adafactor", "SparseAdam"]


def _rms(x: np.ndarray) -> float:
    return float(np.linalg.norm(x.ravel())) / math.sqrt(max(x.size, 1))


class Adafactor(Optimizer):
    """torch's ``Adafactor(params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0,
    weight_decay=0.0, *, foreach=None, maximize=False)``: matrices (and stacks of them) keep a
    row and a column mean of the squared gradient (state ``row_var``, ``col_var``), vectors and
    scalars a full ``variance``; ``eps[0]`` None is the dtype's machine epsilon."""

    def __init__(self, params: Params, lr: float = 1e-2, beta2_decay: float = -0.8,
                 eps: tuple[float | None, float] = (None, 1e-3), d: float = 1.0,
                 weight_decay: float = 0.0, *, foreach: bool | None = None,
                 maximize: bool = False) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Learning rate should be >= 0 but is: {lr}")
        if not 0.0 >= beta2_decay:
            raise ValueError(f"beta2_decay should be <= 0 but is: {beta2_decay}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= d:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {d}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"weight_decay should be >= 0 but is: {weight_decay}")
        super().__init__(params, dict(lr=lr, beta2_decay=beta2_decay, eps=tuple(eps), d=d,
                                      weight_decay=weight_decay, foreach=foreach, maximize=maximize))

    def _new_state(self, g: np.ndarray) -> dict[str, Any]:
        if g.ndim > 1:
            return {"step": 0.0, "row_var": np.zeros(g.shape[:-1] + (1,), g.dtype),
                    "col_var": np.zeros(g.shape[:-2] + (1, g.shape[-1]), g.dtype)}
        return {"step": 0.0, "variance": np.zeros_like(g)}

    def _update_group(self, group: dict[str, Any]) -> None:
        lr, wd, d = group["lr"], group["weight_decay"], group["d"]
        eps1, eps2 = group["eps"]
        for p in group["params"]:
            if p.grad is None:
                continue
            x = p._value
            g = -p.grad._value if group["maximize"] else p.grad._value
            st = self.state.get(p)
            if st is None:
                st = self.state[p] = self._new_state(g)
            e1 = float(np.finfo(x.dtype).eps) if eps1 is None else eps1
            st["step"] += 1.0
            t = st["step"]
            w = t ** group["beta2_decay"]  # 1 - beta2_t
            alpha = max(eps2, _rms(x)) * min(lr, 1.0 / math.sqrt(t))
            if wd != 0:
                x *= 1 - lr * wd
            var = self._second_moment(g, st, w, e1)
            update = g / np.sqrt(np.maximum(var, e1 * e1))
            denom = max(1.0, _rms(update) / d)
            x -= (alpha / denom) * update

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """The base class's checks, and the factored moments' own shapes: ``row_var`` is the
        parameter's shape with one column, ``col_var`` with one row."""
        factored: dict[Any, dict[str, Any]] = {}
        plain: dict[Any, dict[str, Any]] = {}
        for key, s in dict(state_dict.get("state", {})).items():
            s = dict(s)
            factored[key] = {k: s.pop(k) for k in ("row_var", "col_var") if k in s}
            plain[key] = s
        params = {int(i): p for saved, mine in zip(state_dict.get("param_groups", ()), self.param_groups)
                  for i, p in zip(saved.get("params", ()), mine["params"])}
        problems = []
        for key, f in factored.items():
            p = params.get(int(key))
            for k, v in f.items():
                arr = np.asarray(v._value if isinstance(v, Tensor) else v)
                if p is None or p.ndim < 2 or arr.shape != _factored_shape(p._value.shape, k):
                    problems.append(f"size mismatch for state.{key}.{k}: shape {arr.shape} in the state "
                                    f"dict, for a parameter of shape {None if p is None else p.shape}")
                f[k] = arr
        if problems:
            raise StateDictError("Error(s) in loading state_dict for Adafactor:\n\t" + "\n\t".join(problems))
        super().load_state_dict({**state_dict, "state": plain})
        for key, f in factored.items():
            p = params[int(key)]
            self.state[p].update({k: v.astype(p._value.dtype, copy=True) for k, v in f.items()})

    @staticmethod
    def _second_moment(g: np.ndarray, st: dict[str, Any], w: float, e1: float) -> np.ndarray:
        """The estimate of E[g^2]: the outer product of the row and column means over the mean
        row mean (matrices), or the elementwise average (vectors)."""
        sq = g * g
        if g.ndim > 1:
            row, col = st["row_var"], st["col_var"]
            row += w * (sq.mean(-1, keepdims=True) - row)
            col += w * (sq.mean(-2, keepdims=True) - col)
            return (row @ col) / np.maximum(row.mean(-2, keepdims=True), e1)
        v = st["variance"]
        v += w * (sq - v)
        return v.copy()


def _factored_shape(shape: tuple[int, ...], key: str) -> tuple[int, ...]:
    return shape[:-1] + (1,) if key == "row_var" else shape[:-2] + (1, shape[-1])


class SparseAdam(Optimizer):
    """torch's ``SparseAdam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False)``:
    Adam for sparse gradients only. rlgrad's gradients are dense (``nn.Embedding(sparse=True)``
    is refused), so ``step`` raises torch's error for any gradient, as torch's does for a dense
    one: use ``Adam``."""

    def __init__(self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, maximize: bool = False) -> None:
        if not 0.0 < lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 < eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, maximize=maximize))

    def _update_group(self, group: dict[str, Any]) -> None:
        if any(p.grad is not None for p in group["params"]):
            raise RuntimeError("SparseAdam does not support dense gradients, please consider Adam instead")

"""The optimizers' updates in their plainest form: PyTorch's formulas (``torch.optim``'s
single-tensor loops), one parameter array at a time, with every option the classes of
``algorithms.py`` take. Read these to learn what an optimizer computes.

The classes run optimized forms of the same updates, which a contributor may delete and lose
only speed: the per-parameter NumPy loop (``out=`` ufuncs into a scratch buffer), the flat path
(a group's state in one array per key, the update as one set of ufuncs over all parameters), the
C loop (``_fused.c``: the flat update in one pass) and ``step_arrays`` (gradients handed over as
arrays, a clip factor folded in). The last three give the per-parameter loop's bits; the loop
differs from these references by rounding only (it folds scalars differently, e.g. Adam's
``sqrt(1 - b2**t)`` moves into ``eps`` and the step size), and in one deliberate deviation:

* Adam's flush: every 50 steps, first and second moments below ``tiny * 1e13`` of their dtype
  become exactly 0. Moments of parameters whose gradient stays 0 (dead ReLU units) otherwise decay
  into subnormal numbers, where arithmetic is ~10x slower. PyTorch does not do this; it changes a
  result only where a moment is that small.

tests/engine/test_reference_paths.py runs every path against these over many steps with every option.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

State = dict[str, Any]


def sgd(p: np.ndarray, g: np.ndarray, state: State, *, lr: float, momentum: float = 0.0,
        dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
        maximize: bool = False) -> None:
    """One SGD step of ``p`` (in place) from its gradient ``g``; ``state``: this parameter's."""
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    if momentum:
        buf = state.get("momentum_buffer")
        buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
        state["momentum_buffer"] = buf
        g = g + momentum * buf if nesterov else buf
    p -= lr * g


def adam(p: np.ndarray, g: np.ndarray, state: State, *, lr: float,
         betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
         amsgrad: bool = False, maximize: bool = False, decoupled: bool = False) -> None:
    """One Adam step (``decoupled``: AdamW's weight decay) of ``p`` in place."""
    b1, b2 = betas
    if not state:
        state.update(step=0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
        if amsgrad:
            state["max_exp_avg_sq"] = np.zeros_like(p)
    g = -g if maximize else g
    if weight_decay and decoupled:
        p *= 1 - lr * weight_decay
    elif weight_decay:
        g = g + weight_decay * p
    t = state["step"] = state["step"] + 1
    m = state["exp_avg"] = state["exp_avg"] + (1 - b1) * (g - state["exp_avg"])  # lerp to g
    v = state["exp_avg_sq"] = b2 * state["exp_avg_sq"] + (1 - b2) * g * g
    if amsgrad:
        v = state["max_exp_avg_sq"] = np.maximum(state["max_exp_avg_sq"], v)
    denom = np.sqrt(v) / math.sqrt(1 - b2**t) + eps
    p -= lr / (1 - b1**t) * (m / denom)


def rmsprop(p: np.ndarray, g: np.ndarray, state: State, *, lr: float, alpha: float = 0.99,
            eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0,
            centered: bool = False, maximize: bool = False, tf_style: bool = False) -> None:
    """One RMSprop step of ``p`` in place; ``tf_style``: TensorFlow's (Stable-Baselines3's
    ``RMSpropTFLike``): the average of squares starts at 1 and ``eps`` goes inside the root."""
    if not state:
        state.update(step=0, square_avg=np.ones_like(p) if tf_style else np.zeros_like(p))
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    state["step"] += 1
    sq = state["square_avg"] = alpha * state["square_avg"] + (1 - alpha) * g * g
    if centered:  # the variance instead of the second moment
        ga = state.get("grad_avg", 0.0)
        ga = state["grad_avg"] = ga + (1 - alpha) * (g - ga)  # lerp to g
        sq = sq - ga * ga
    avg = np.sqrt(sq + eps) if tf_style else np.sqrt(sq) + eps
    if momentum > 0:
        buf = state["momentum_buffer"] = momentum * state.get("momentum_buffer", 0.0) + g / avg
        p -= lr * buf
    else:
        p -= lr * (g / avg)


def adagrad(p: np.ndarray, g: np.ndarray, state: State, *, lr: float, lr_decay: float = 0.0,
            weight_decay: float = 0.0, initial_accumulator_value: float = 0.0, eps: float = 1e-10,
            maximize: bool = False) -> None:
    """One Adagrad step of ``p`` in place: the step size shrinks with the sum of squared gradients."""
    if not state:
        state.update(step=0, sum=np.full_like(p, initial_accumulator_value))
    t = state["step"] = state["step"] + 1
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    clr = lr / (1 + (t - 1) * lr_decay)
    s = state["sum"] = state["sum"] + g * g
    p -= clr * (g / (np.sqrt(s) + eps))


def adamax(p: np.ndarray, g: np.ndarray, state: State, *, lr: float,
           betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
           maximize: bool = False) -> None:
    """One Adamax step: Adam's first moment over the running infinity norm of the gradients."""
    if not state:
        state.update(step=0, exp_avg=np.zeros_like(p), exp_inf=np.zeros_like(p))
    t = state["step"] = state["step"] + 1
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    b1, b2 = betas
    m = state["exp_avg"] = b1 * state["exp_avg"] + (1 - b1) * g
    u = state["exp_inf"] = np.maximum(b2 * state["exp_inf"], np.abs(g) + eps)
    p -= lr / (1 - b1**t) * m / u


def adadelta(p: np.ndarray, g: np.ndarray, state: State, *, lr: float, rho: float = 0.9,
             eps: float = 1e-6, weight_decay: float = 0.0, maximize: bool = False) -> None:
    """One Adadelta step: the update's scale is the running RMS of past updates over that of
    the gradients."""
    if not state:
        state.update(step=0, square_avg=np.zeros_like(p), acc_delta=np.zeros_like(p))
    state["step"] += 1
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    sq = state["square_avg"] = rho * state["square_avg"] + (1 - rho) * g * g
    delta = np.sqrt(state["acc_delta"] + eps) / np.sqrt(sq + eps) * g
    state["acc_delta"] = rho * state["acc_delta"] + (1 - rho) * delta * delta
    p -= lr * delta


def radam(p: np.ndarray, g: np.ndarray, state: State, *, lr: float,
          betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
          decoupled_weight_decay: bool = False, maximize: bool = False) -> None:
    """One RAdam step (Liu et al.): Adam with its adaptive term rectified by the variance of its
    estimate, plain momentum SGD while that variance is intractable (``rho_t <= 5``)."""
    b1, b2 = betas
    if not state:
        state.update(step=0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
    g = -g if maximize else g
    t = state["step"] = state["step"] + 1
    if weight_decay and decoupled_weight_decay:
        p *= 1 - lr * weight_decay
    elif weight_decay:
        g = g + weight_decay * p
    m = state["exp_avg"] = state["exp_avg"] + (1 - b1) * (g - state["exp_avg"])
    v = state["exp_avg_sq"] = b2 * state["exp_avg_sq"] + (1 - b2) * g * g
    bc1, bc2 = 1 - b1**t, 1 - b2**t
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * t * b2**t / bc2
    if rho_t > 5.0:
        rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        p -= (m / bc1) * lr * (math.sqrt(bc2) / (np.sqrt(v) + eps)) * rect
    else:
        p -= (m / bc1) * lr


def nadam(p: np.ndarray, g: np.ndarray, state: State, *, lr: float,
          betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
          momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False,
          maximize: bool = False) -> None:
    """One NAdam step (Dozat): Adam with Nesterov momentum and PyTorch's momentum schedule
    ``mu_t = b1 (1 - 0.5 * 0.96 ** (t * momentum_decay))``."""
    b1, b2 = betas
    if not state:
        state.update(step=0, mu_product=1.0, exp_avg=np.zeros_like(p), exp_avg_sq=np.zeros_like(p))
    g = -g if maximize else g
    t = state["step"] = state["step"] + 1
    if weight_decay and decoupled_weight_decay:
        p *= 1 - lr * weight_decay
    elif weight_decay:
        g = g + weight_decay * p
    mu = b1 * (1.0 - 0.5 * 0.96 ** (t * momentum_decay))
    mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * momentum_decay))
    mu_product = state["mu_product"] = state["mu_product"] * mu
    m = state["exp_avg"] = state["exp_avg"] + (1 - b1) * (g - state["exp_avg"])
    v = state["exp_avg_sq"] = b2 * state["exp_avg_sq"] + (1 - b2) * g * g
    denom = np.sqrt(v / (1 - b2**t)) + eps
    p -= lr * (1 - mu) / (1 - mu_product) * (g / denom)
    p -= lr * mu_next / (1 - mu_product * mu_next) * (m / denom)


def rprop(p: np.ndarray, g: np.ndarray, state: State, *, lr: float = 1e-2,
          etas: tuple[float, float] = (0.5, 1.2), step_sizes: tuple[float, float] = (1e-6, 50.0),
          maximize: bool = False) -> None:
    """One Rprop step: each coordinate moves by its own step size against the gradient's sign;
    the size grows by ``etas[1]`` while the sign holds and shrinks by ``etas[0]`` when it flips
    (and that coordinate then skips the move and forgets its gradient)."""
    if not state:
        state.update(step=0, prev=np.zeros_like(p), step_size=np.full_like(p, lr))
    state["step"] += 1
    g = -g if maximize else g
    agree = np.sign(g * state["prev"])
    factor = np.where(agree > 0, etas[1], np.where(agree < 0, etas[0], 1.0)).astype(p.dtype)
    size = state["step_size"] = np.clip(state["step_size"] * factor, *step_sizes)
    g = np.where(factor == etas[0], 0.0, g).astype(p.dtype)
    p -= np.sign(g) * size
    state["prev"] = g


def asgd(p: np.ndarray, g: np.ndarray, state: State, *, lr: float = 1e-2, lambd: float = 1e-4,
         alpha: float = 0.75, t0: float = 1e6, weight_decay: float = 0.0,
         maximize: bool = False) -> None:
    """One averaged-SGD step: SGD with a decaying rate ``eta`` and a shrink of ``p``; ``ax``
    is the running average of the iterates from step ``t0`` on (``mu = 1 / max(1, t - t0)``)."""
    if not state:
        state.update(step=0, eta=float(lr), mu=1.0, ax=np.zeros_like(p))
    t = state["step"] = state["step"] + 1
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    eta = state["eta"]
    p *= 1 - lambd * eta
    p -= eta * g
    if state["mu"] != 1:
        state["ax"] = state["ax"] + (p - state["ax"]) * state["mu"]
    else:
        state["ax"] = p.copy()
    state["eta"] = lr / ((1 + lambd * lr * t) ** alpha)
    state["mu"] = 1 / max(1, t - t0)

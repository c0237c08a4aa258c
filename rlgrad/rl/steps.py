"""The one builder of gradient steps: an algorithm writes its loss once, this runs it.

``grad_step(loss_fn, params)`` wraps ``loss_fn(*args) -> (loss, stats)`` into
``step(*args) -> (loss, stats, grads)``, the gradient of ``loss`` w.r.t. ``params`` taken by
``autograd.grad``. With ``compiled=True`` (the default) the step is ``rlgrad.jit`` of exactly that
function: traced once per input shape, replayed as straight-line NumPy. With ``compiled=False`` the
same function runs eagerly (for batches whose shapes change from call to call). Either way the
results are NumPy arrays, ready for ``apply_grads``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import rlgrad
from rlgrad import autograd
from rlgrad.rl.finite import NonFiniteError
from rlgrad.tensor import Tensor, constant


def _arrays(tree: Any) -> Any:
    if isinstance(tree, Tensor):
        return tree._value
    if isinstance(tree, dict):
        return {k: _arrays(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_arrays(v) for v in tree)
    return tree


def optimized_params(optimizers: Sequence[Any]) -> list[Tensor]:
    """The parameters of ``optimizers``, in their order: what a gradient step must differentiate,
    so that its gradients line up with ``Optimizer.step_arrays`` (also after a user replaced an
    optimizer, as SB3 allows, e.g. one over a part of the network)."""
    return [p for opt in optimizers for g in opt.param_groups for p in g["params"]]


def same_params(a: Sequence[Tensor], b: Sequence[Tensor]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def grad_step(loss_fn: Callable[..., tuple[Any, Any]], params: Sequence[Tensor],
              compiled: bool = True, static_argnums: tuple[int, ...] = ()) -> Callable:
    """``step(*args) -> (loss, stats, grads)`` for ``loss_fn(*args) -> (loss, stats)``.

    ``args`` are arrays or dicts/lists of arrays (a batch); ``static_argnums`` names Python values
    that select the computation (e.g. whether an entropy term enters the loss): one compiled
    program per distinct value. ``stats`` is a pytree of values to log.
    """
    params = list(params)

    def step(*args: Any) -> tuple[Any, Any, Any]:
        loss, stats = loss_fn(*args)
        return loss, stats, autograd.grad(loss, params)

    if compiled:
        if not static_argnums:
            return rlgrad.jit(step)
        return _per_static(step, static_argnums)

    def eager(*args: Any) -> tuple[Any, Any, Any]:
        return _arrays(step(*args))

    return eager


def _per_static(step: Callable, static_argnums: tuple[int, ...]) -> Callable:
    """``rlgrad.jit(step, static_argnums=...)`` as one jit per value of the static arguments,
    each without static arguments: a call then finds its program by the arrays' shapes alone
    (jit's fast path for arrays and dicts of arrays), not by a walk of the whole argument tree."""
    jits: dict[tuple, Any] = {}
    static = tuple(sorted(static_argnums))

    def call(*args: Any) -> Any:
        key = tuple(args[i] for i in static)
        fn = jits.get(key)
        if fn is None:
            def fixed(*dyn: Any, _key: tuple = key) -> Any:
                full, it = [], iter(dyn)
                for i in range(len(dyn) + len(static)):
                    full.append(_key[static.index(i)] if i in static else next(it))
                return step(*full)

            fn = jits[key] = rlgrad.jit(fixed)
        return fn(*(a for i, a in enumerate(args) if i not in static))

    return call


def _clip_coef(grads: Any, max_norm: float | None) -> tuple[float, float]:
    """(global 2-norm of ``grads``, the factor ``clip_grad_norm_`` scales them by: 1 if within);
    (0, 1) when no clip is asked."""
    if max_norm is None:
        return 0.0, 1.0
    sq = 0.0
    for d in map(np.vdot, grads, grads):  # each dot in the arrays' dtype, summed in float64
        sq += float(d)
    total = math.sqrt(sq)
    if not math.isfinite(total):
        raise NonFiniteError(f"the gradient of an update is not finite (its norm is {total}): "
                             "training stops before the weights take it")
    coef = float(max_norm) / (total + 1e-6)
    return total, min(coef, 1.0)


def _install_grads(params: list[Any], grads: Any, coef: float) -> None:
    """``p.grad`` = the gradient scaled by the clip's ``coef`` (the arrays themselves, no copy,
    when it does not act)."""
    if coef < 1.0:
        grads = [g * g.dtype.type(coef) for g in grads]
    for p, g in zip(params, grads):
        p.grad = constant(g)


def set_grads(params: list[Any], grads: Any, max_norm: float | None) -> float:
    """Install gradients computed as arrays (by a step above) as ``.grad``, scaled down
    together when their global 2-norm exceeds ``max_norm`` (``clip_grad_norm_``'s rule, done on
    the arrays before they become Tensors). Returns the norm before clipping (0 if not asked)."""
    total, coef = _clip_coef(grads, max_norm)
    _install_grads(params, grads, coef)
    return total


def _step_arrays(optimizers: Any, grads: Any, coef: float) -> None:
    """Each optimizer (one, or a sequence taking ``grads`` in turn) steps on its arrays."""
    if not isinstance(optimizers, Sequence):
        optimizers.step_arrays(grads, coef)
        return
    i = 0
    for opt in optimizers:
        n = sum(len(g["params"]) for g in opt.param_groups)
        opt.step_arrays(grads[i:i + n], coef)
        i += n


def apply_grads(optimizers: Any, grads: Any, max_norm: float | None) -> float:
    """``set_grads`` then each optimizer's ``step()``, the same numbers without installing
    ``.grad``: the optimizers (one, or a sequence; one norm clip over all) read the arrays and
    apply the clip's factor inside their update (``Optimizer.step_arrays``). Returns the norm
    before clipping (0 if not asked)."""
    total, coef = _clip_coef(grads, max_norm)
    _step_arrays(optimizers, grads, coef)
    return total


def step_with_grads(optimizers: Sequence[Any], params: list[Any], grads: Any,
                    max_norm: float | None = None) -> float:
    """``apply_grads``, then each parameter's ``.grad`` is the gradient its optimizer applied,
    as after ``clip_grad_norm_`` and ``step()`` in PyTorch (``grads``: one per parameter, in
    the order of ``params``): the same arrays without a copy, scaled (a copy) only when the clip
    acts. Returns the norm before clipping (0 if not asked)."""
    if len(grads) != len(params):  # checked before any optimizer moves
        raise ValueError(f"step_with_grads: {len(grads)} gradients for {len(params)} parameters")
    total, coef = _clip_coef(grads, max_norm)
    _step_arrays(optimizers, grads, coef)
    _install_grads(params, grads, coef)
    return total

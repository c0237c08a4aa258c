"""Gradient checkers: finite differences against the engine's VJPs, at every order up to ``order``.

``check_grads`` follows HIPS autograd's (random directions, central differences); ``gradcheck``
follows PyTorch's (element by element, returns True or raises).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlgrad.autograd import grad
from rlgrad.tensor import Tensor
from rlgrad.transforms import make_jvp, make_vjp, tree_flatten, tree_unflatten

EPS = 1e-6


def _scalar_dot(a: Any, b: Any) -> float:
    return float(np.sum(np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)))


def _check_vjp(fun: Callable, x: np.ndarray, rng: np.random.Generator, eps: float,
               rtol: float, atol: float) -> None:
    vjp_fn, y = make_vjp(fun)(x)
    y = np.asarray(y)
    u = rng.standard_normal(np.shape(x))  # direction in input space
    v = rng.standard_normal(np.shape(y))  # cotangent in output space
    vjp_u = _scalar_dot(vjp_fn(v.astype(y.dtype)), u)
    y_plus = np.asarray(fun(x + eps * u))
    y_minus = np.asarray(fun(x - eps * u))
    numeric = _scalar_dot((y_plus - y_minus) / (2 * eps), v)
    if not np.isclose(vjp_u, numeric, rtol=rtol, atol=atol):
        raise AssertionError(
            f"VJP check failed for {getattr(fun, '__name__', fun)}: analytic {vjp_u!r} vs "
            f"finite difference {numeric!r} (along a random direction)"
        )


def check_grads(fun: Callable, modes: Sequence[str] = ("rev",), order: int = 2, eps: float = EPS,
                rtol: float = 1e-5, atol: float = 1e-6, seed: int = 0) -> Callable:
    """``check_grads(fun, order=2)(*args)``: checks every order of derivative up to ``order``.

    Use float64 inputs. Raises AssertionError with both numbers when a derivative is wrong.
    """
    if isinstance(modes, str) or not modes or any(m not in ("fwd", "rev") for m in modes):
        raise ValueError(f"modes is a list of 'fwd' and 'rev' (as HIPS autograd's), got {modes!r}")

    def checker(*args: Any) -> None:
        rng = np.random.default_rng(seed)
        for argnum in range(len(args)):
            leaves, treedef = tree_flatten(args[argnum])
            for k, leaf in enumerate(leaves):
                if np.asarray(leaf).dtype.kind not in "fc":
                    continue

                def f_one(x: Any, argnum: int = argnum, k: int = k, leaves: list = leaves,
                          treedef: Any = treedef) -> Any:
                    new_leaves = list(leaves)
                    new_leaves[k] = x
                    new_args = list(args)
                    new_args[argnum] = tree_unflatten(treedef, new_leaves)
                    return fun(*new_args)

                _check_order(f_one, np.asarray(leaf, dtype=np.float64), order, rng, eps, rtol, atol,
                             tuple(modes))

    return checker


def _check_jvp(f: Callable, x: np.ndarray, rng: np.random.Generator, eps: float,
               rtol: float, atol: float) -> None:
    u = rng.standard_normal(np.shape(x))  # tangent in input space
    y, jvp_u = make_jvp(f)(x)(u)
    v = rng.standard_normal(np.shape(y))
    analytic = _scalar_dot(jvp_u, v)
    numeric = _scalar_dot((np.asarray(f(x + eps * u)) - np.asarray(f(x - eps * u))) / (2 * eps), v)
    if not np.isclose(analytic, numeric, rtol=rtol, atol=atol):
        raise AssertionError(
            f"JVP check failed for {getattr(f, '__name__', f)}: analytic {analytic!r} vs "
            f"finite difference {numeric!r} (along a random direction)"
        )


def _check_order(f: Callable, x: np.ndarray, order: int, rng: np.random.Generator, eps: float,
                 rtol: float, atol: float, modes: tuple[str, ...] = ("rev",)) -> None:
    if "fwd" in modes:
        _check_jvp(f, x, rng, eps, rtol, atol)
        if order > 1:  # the next order: differentiate the JVP along a fixed random tangent
            u = rng.standard_normal(np.shape(x))

            def f_jvp(x_: Any) -> Any:
                return make_jvp(f)(x_)(u)[1]

            _check_order(f_jvp, x, order - 1, rng, eps, rtol, atol, modes)
    if "rev" in modes:
        _check_vjp(f, x, rng, eps, rtol, atol)
        if order > 1:
            # The next order: differentiate the VJP itself, with a fixed random cotangent.
            v = rng.standard_normal(np.shape(np.asarray(f(x))))

            def f_vjp(x_: Any) -> Any:
                return make_vjp(f)(x_)[0](v)

            _check_order(f_vjp, x, order - 1, rng, eps, rtol, atol, modes)


def gradcheck(func: Callable, inputs: Any, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True) -> bool:
    """PyTorch-style: compare every analytic Jacobian entry with central differences.

    ``inputs`` is a Tensor or a tuple of Tensors; those with ``requires_grad`` are checked. As
    PyTorch's, it raises when no input requires grad, and an output that does not require grad
    must have a zero numerical Jacobian (else the graph lost a dependence: a mismatch).
    """
    ins = (inputs,) if isinstance(inputs, Tensor) else tuple(inputs)
    checked = [i for i, t in enumerate(ins) if isinstance(t, Tensor) and t.requires_grad]
    if not checked:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but "
                         "none of them has requires_grad=True")
    outs = _outputs(func(*ins))
    for oi, out in enumerate(outs):
        for j in range(out._value.size):
            out_now = _outputs(func(*ins))[oi]
            analytic: list[Any] = [None] * len(checked)
            if out_now.requires_grad:
                seed = np.zeros(out.shape, dtype=out.dtype)
                seed.reshape(-1)[j] = 1
                analytic = grad(out_now, [ins[i] for i in checked], seed, allow_unused=True)
            for i, ga in zip(checked, analytic):
                x = ins[i]
                ga = np.zeros_like(x._value) if ga is None else ga._value
                flat = x._value.reshape(-1)
                for k in range(flat.size):
                    orig = flat[k]
                    flat[k] = orig + eps
                    plus = _outputs(func(*ins))[oi]._value.reshape(-1)[j]
                    flat[k] = orig - eps
                    minus = _outputs(func(*ins))[oi]._value.reshape(-1)[j]
                    flat[k] = orig
                    numeric = (plus - minus) / (2 * eps)
                    a = ga.reshape(-1)[k]
                    if np.isclose(a, numeric, rtol=rtol, atol=atol):
                        continue
                    if not raise_exception:
                        return False
                    why = "" if out_now.requires_grad else " (the output does not require grad)"
                    raise AssertionError(
                        f"gradcheck: Jacobian mismatch for output {oi} element {j}, input {i} "
                        f"element {k}: analytic {a!r}, numerical {numeric!r}{why}")
    return True


def _outputs(out: Any) -> tuple[Any, ...]:
    return (out,) if isinstance(out, Tensor) else tuple(out)

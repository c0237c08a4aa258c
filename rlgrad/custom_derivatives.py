"""``rlgrad.custom_vjp`` and ``rlgrad.custom_jvp``: custom gradients written JAX's way.

Both record the node ``autograd.Function`` records (``autograd_function.connect``): one primitive
per decorated function, whose rules call the user's.

* ``custom_vjp``: ``f.defvjp(fwd, bwd)``; ``fwd(*args) -> (out, residuals)`` runs recorded, so
  the residuals stay functions of the inputs and a second derivative goes through ``bwd``'s ops
  and them, as in JAX. Forward mode refuses it in one line (JAX's rule: a custom_vjp function
  has no JVP).
* ``custom_jvp``: ``f.defjvp(jvp)``, ``jvp(primals, tangents) -> (out, tangent_out)``. Forward
  mode calls it. Reverse mode transposes it, as JAX does, by linearity: the tangent output is
  linear in the tangents, so its VJP w.r.t. them, which the engine computes by running reverse
  mode through ``jvp`` at zero tangents, is the transpose. This needs ``jvp`` to be written with
  rlgrad's differentiable functions and linear in the tangents (JAX requires the same).

With no input that needs a gradient, both call the plain function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.autograd import grad as _autograd_grad
from rlgrad.autograd_function import _Ctx, connect, new_primitive
from rlgrad.ops import concatenate, ravel
from rlgrad.tensor import Tensor, constant
from rlgrad.tracer import enable_grad, is_grad_enabled, no_grad

__all__ = ["custom_vjp", "custom_jvp"]


def _needs_grad(args: tuple, nondiff: tuple[int, ...]) -> bool:
    return is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad
                                     for i, a in enumerate(args) if i not in nondiff)


def _as_tensors(out: Any) -> Any:
    """The function's output with arrays as (constant) Tensors, so it can be a node's argument."""
    if isinstance(out, tuple):
        return tuple(_as_tensors(o) for o in out)
    if isinstance(out, Tensor):
        return out
    if isinstance(out, np.ndarray | float | np.floating):
        return constant(np.asarray(out))
    raise TypeError(f"a custom_vjp/custom_jvp function must return an array or a tuple of arrays, "
                    f"got a {type(out).__name__}")


def _nondiff(nondiff_argnums: Any) -> tuple[int, ...]:
    return (nondiff_argnums,) if isinstance(nondiff_argnums, int) else tuple(nondiff_argnums)


class _Custom:
    """What both decorators share: the function, its static arguments and its primitive."""

    kind = "custom"

    def __init__(self, fun: Callable, nondiff_argnums: Any = ()) -> None:
        functools.update_wrapper(self, fun)
        self.fun = fun
        self.nondiff_argnums = _nondiff(nondiff_argnums)
        self._prim: Callable | None = None
        self.name = f"{self.kind} function {getattr(fun, '__name__', 'f')}"
        self._inside = 0  # >0 while its own rules run: a call of it there is the plain function

    def _run(self, rule: Callable, *args: Any) -> Any:
        """Call one of the user's rules (fwd, bwd, jvp), which may call the function itself
        (JAX's idiom ``return f(x), res``): that inner call is the plain function."""
        self._inside += 1
        try:
            return rule(*args)
        finally:
            self._inside -= 1

    def _plain(self, args: tuple) -> bool:
        return self._inside > 0 or not _needs_grad(args, self.nondiff_argnums)

    def _prim_call(self) -> Callable:
        if self._prim is None:
            self._prim = new_primitive(getattr(self.fun, "__name__", self.kind), *self._jvp_rule())
        return self._prim

    def _jvp_rule(self) -> tuple:
        return ()

    def _split_args(self, args: tuple) -> tuple[list[Any], list[int]]:
        """The static arguments' values, and the positions of the differentiable ones."""
        static = [args[i] for i in self.nondiff_argnums]
        diff = [i for i in range(len(args)) if i not in self.nondiff_argnums]
        return static, diff


# ---- custom_vjp ------------------------------------------------------------------------------
class _VjpCtx(_Ctx):
    def __init__(self, f: custom_vjp, args: tuple, res: Any, tuple_out: bool) -> None:
        self._f, self._args, self._res, self._tuple_out = f, args, res, tuple_out
        self._name = f.name

    def _backward(self, grads: list[Any], argv: tuple) -> tuple:
        f = self._f
        full = self._all_grads(grads)
        ct = tuple(full) if self._tuple_out else full[0]
        static, diff = f._split_args(self._args)
        r = f._run(f.bwd, *static, self._res, ct)
        if not isinstance(r, tuple | list) or len(r) != len(diff):
            got = f"a tuple of {len(r)}" if isinstance(r, tuple | list) else f"a {type(r).__name__}"
            raise TypeError(f"{f.name}: its bwd rule must return a tuple with one cotangent per "
                            f"differentiable argument ({len(diff)}), got {got}")
        out: list[Any] = [None] * len(self._args)
        for i, ri in zip(diff, r):
            out[i] = ri
        return tuple(out)


class custom_vjp(_Custom):
    """JAX's ``jax.custom_vjp``: decorate ``f``, then ``f.defvjp(fwd, bwd)`` with
    ``fwd(*args) -> (out, residuals)`` and ``bwd(*static_args, residuals, g) -> tuple`` (one
    cotangent per argument not in ``nondiff_argnums``; None for none)."""

    kind = "custom_vjp"

    def __init__(self, fun: Callable, nondiff_argnums: Any = ()) -> None:
        super().__init__(fun, nondiff_argnums)
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any) -> Any:
        if self.fwd is None:
            raise AttributeError(f"No VJP defined for {self.name}: call {self.fun.__name__}"
                                 ".defvjp(fwd, bwd) first")
        if self._plain(args):
            return self.fun(*args)
        res = self._run(self.fwd, *args)
        if not isinstance(res, tuple) or len(res) != 2:
            raise TypeError(f"{self.name}: its fwd rule must return a pair (output, residuals)")
        out, residuals = _as_tensors(res[0]), res[1]
        ctx = _VjpCtx(self, args, residuals, isinstance(out, tuple))
        return connect(self._prim_call(), ctx, args, out, set())


# ---- custom_jvp ------------------------------------------------------------------------------
class _JvpCtx(_Ctx):
    def __init__(self, f: custom_jvp, args: tuple, tuple_out: bool) -> None:
        self._f, self._args, self._tuple_out = f, args, tuple_out
        self._name = f.name

    def _tangent_out(self, primals: list[Any], tangents: list[Any]) -> Any:
        static, _ = self._f._split_args(self._args)
        res = self._f._run(self._f.jvp, *static, tuple(primals), tuple(tangents))
        if not isinstance(res, tuple) or len(res) != 2:
            raise TypeError(f"{self._name}: its jvp rule must return a pair (output, tangent)")
        return res[1]

    def _backward(self, grads: list[Any], argv: tuple) -> tuple:
        """The transpose of the JVP: reverse mode through it at zero tangents (it is linear in
        them), recorded when this pass is (so higher orders go through the primals)."""
        recorded = is_grad_enabled()
        _, diff = self._f._split_args(self._args)
        primals = [argv[i] if recorded and isinstance(argv[i], Tensor)
                   else constant(np.asarray(getattr(argv[i], "_value", argv[i]))) for i in diff]
        with enable_grad():
            ts = [_zero_leaf(p) for p in primals]
            tan = self._tangent_out(primals, ts)
            tans = list(tan) if self._tuple_out else [tan]
            full = self._all_grads(grads)
            pairs = [(t, g) for t, g in zip(tans, full)
                     if isinstance(t, Tensor) and t.requires_grad and g is not None]
            if not pairs:
                return (None,) * len(self._args)
            gs = _autograd_grad([t for t, _ in pairs], ts, [g for _, g in pairs],
                                create_graph=recorded, allow_unused=True)
        out: list[Any] = [None] * len(self._args)
        for i, gi in zip(diff, gs):
            out[i] = gi
        return tuple(out)


def _zero_leaf(p: Tensor) -> Tensor:
    """A zero tangent to differentiate the JVP by (its dtype, unlike a new Tensor's default)."""
    t = constant(np.zeros_like(p._value))
    t.requires_grad = True
    return t


def _custom_jvp_rule(i: int, t: Any, ans: Any, *vals: Any, ctx: _JvpCtx) -> Any:
    """Forward mode: the user's jvp with tangent ``t`` for argument ``i``, zeros for the others
    (the rule is linear in them, so the engine's sum over arguments is the whole tangent)."""
    k = i - ctx._n_out
    _, diff = ctx._f._split_args(ctx._args)
    if k < 0 or k not in diff:
        return None
    args = vals[ctx._n_out:]
    primals = [args[j] for j in diff]
    tangents = [t if j == k else np.zeros_like(np.asarray(getattr(args[j], "_value", args[j])))
                for j in diff]
    tan = ctx._tangent_out(primals, tangents)
    if ctx._n_out == 1:
        return tan[0] if isinstance(tan, tuple) else tan
    return concatenate([ravel(x) for x in tan])


class custom_jvp(_Custom):
    """JAX's ``jax.custom_jvp``: decorate ``f``, then ``f.defjvp(jvp)`` with
    ``jvp(*static_args, primals, tangents) -> (out, tangent_out)``. Forward mode calls it;
    reverse mode transposes it (module docstring)."""

    kind = "custom_jvp"

    def __init__(self, fun: Callable, nondiff_argnums: Any = ()) -> None:
        super().__init__(fun, nondiff_argnums)
        self.jvp: Callable | None = None

    def defjvp(self, jvp: Callable) -> Callable:
        self.jvp = jvp
        return jvp

    def _jvp_rule(self) -> tuple:
        return (_custom_jvp_rule,)

    def __call__(self, *args: Any) -> Any:
        if self.jvp is None:
            raise AttributeError(f"No JVP defined for {self.name}: call {self.fun.__name__}"
                                 ".defjvp(jvp) first")
        if self._plain(args):
            return self.fun(*args)
        with no_grad():  # the derivatives come from the jvp rule, not from fun's ops
            out = _as_tensors(self.fun(*args))
        ctx = _JvpCtx(self, args, isinstance(out, tuple))
        return connect(self._prim_call(), ctx, args, out, set())

"""Module hooks, as torch's: forward pre-hooks, forward hooks, full backward pre-hooks and full
backward hooks, each registration returning a ``RemovableHandle``.

A module without hooks is called with nothing in between (``Module.__call__`` is its
``forward``). Registering a hook moves that one instance to a subclass made here whose
``__call__`` runs them (``hooked_class``); other instances keep the bare call.

The backward hooks follow torch's ``BackwardHook``: the module's tensor inputs and outputs go
through identity nodes whose tensor hooks (run by ``core.reference_backward``) see their
gradients. The first output node reached in a pass reads every output's gradient from the pass
(``core.PASSES``: the outputs' nodes are the newest, so all are final by then) and runs the
pre-hooks; the first input node reached does the same for ``grad_input`` and runs the hooks,
whose replacements are written back for the other inputs.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from rlgrad import core
from rlgrad.ops import identity
from rlgrad.tensor import Tensor, constant
from rlgrad.tracer import _GradMode

KINDS = ("_forward_pre_hooks", "_forward_hooks", "_backward_pre_hooks", "_backward_hooks")
_classes: dict[type, type] = {}


def hooks_of(module: Any, kind: str) -> OrderedDict:
    """``module``'s ordered dict of hooks of ``kind`` (made on first use, outside the
    attribute registry), and the instance switched to its hooked class."""
    d = module.__dict__
    if kind not in d:
        d[kind] = OrderedDict()
    cls = type(module)
    if not getattr(cls, "_runs_hooks", False):
        module.__class__ = hooked_class(cls)
    return d[kind]


def hooked_class(cls: type) -> type:
    """``cls`` with a ``__call__`` that runs the instance's hooks (one subclass per class)."""
    made = _classes.get(cls)
    if made is None:
        namespace: dict[str, Any] = {
            "__call__": call_with_hooks, "_runs_hooks": True, "__module__": cls.__module__,
            "__qualname__": cls.__qualname__, "__reduce_ex__": _reduce_ex}
        made = _classes[cls] = type(cls.__name__, (cls,), namespace)
    return made


def _reduce_ex(self: Any, protocol: Any) -> Any:
    """Pickled (or deep-copied) as the plain class: hooks are not part of a module's state, as in
    torch, where ``copy.deepcopy`` keeps them but pickling a module with hooks warns."""
    state = {k: v for k, v in self.__dict__.items() if k not in KINDS}
    base = type(self).__mro__[1]
    return (_rebuild, (base, state))


def _rebuild(cls: type[object], state: dict) -> object:
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


def call_with_hooks(self: Any, *args: Any, **kwargs: Any) -> Any:
    """torch's ``Module._call_impl``: pre-hooks (may replace the arguments), the backward hooks'
    input nodes, ``forward``, forward hooks (may replace the output), the output nodes."""
    d = self.__dict__
    for hook, with_kwargs in list(d.get("_forward_pre_hooks", {}).values()):
        if with_kwargs:
            res = hook(self, args, kwargs)
            if res is not None:
                if not (isinstance(res, tuple) and len(res) == 2):
                    raise RuntimeError("forward pre-hook must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {res!r}")
                args, kwargs = res
        else:
            res = hook(self, args)
            if res is not None:
                args = res if isinstance(res, tuple) else (res,)
    bw = None
    if (d.get("_backward_hooks") or d.get("_backward_pre_hooks")) and _GradMode.enabled:
        bw = _BackwardHook(self)
        args = bw.wrap_inputs(args)
    out = self.forward(*args, **kwargs)
    for hook, with_kwargs in list(d.get("_forward_hooks", {}).values()):
        res = hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
        if res is not None:
            out = res
    return out if bw is None else bw.wrap_outputs(out)


class _BackwardHook:
    """One call's identity nodes on the module's inputs and outputs, and what the pass found."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.n_args = 0
        # the identity nodes by id (no reference: their hooks refer to this object, and a cycle
        # would keep them, hooked, alive until the garbage collector runs)
        self.inputs: list[tuple[int, int]] = []  # (position, id of its identity node)
        self.constants: list[tuple[int, Any]] = []  # (position, zeros) for inputs needing none
        self.outputs: list[int] = []
        self.grad_output: tuple = ()
        self.done_out: int | None = None  # id of the pass's gradients that ran the hooks
        self.done_in: int | None = None

    def wrap_inputs(self, args: tuple) -> tuple:
        self.n_args = len(args)
        new = list(args)
        for i, a in enumerate(args):
            if isinstance(a, Tensor) and not a.requires_grad:
                self.constants.append((i, np.zeros_like(a._value)))
            elif isinstance(a, Tensor):
                new[i] = identity(a)
                j = len(self.inputs)
                self.inputs.append((i, id(new[i])))
                new[i].register_hook(lambda g, j=j: self._input_grad(j, g))
        return tuple(new)

    def wrap_outputs(self, out: Any) -> Any:
        single = isinstance(out, Tensor)
        outs = [out] if single else list(out) if isinstance(out, tuple | list) else None
        if outs is None:
            return out
        for k, o in enumerate(outs):
            if isinstance(o, Tensor) and o.requires_grad:
                outs[k] = identity(o)
                n = len(self.outputs)
                self.outputs.append(id(outs[k]))
                outs[k].register_hook(lambda g, n=n: self._output_grad(n, g))
        return outs[0] if single else type(out)(outs)

    def _output_grad(self, k: int, g: Any) -> Any:
        grads = core.PASSES[-1]
        if self.done_out == id(grads):
            return None
        self.done_out = id(grads)
        got = _gathered(self.outputs, k, g, grads)
        for hook in list(self.module.__dict__.get("_backward_pre_hooks", {}).values()):
            res = hook(self.module, got)
            if res is not None:
                got = tuple(res)
        self.grad_output = got
        _write_back(self.outputs, k, got, grads)
        if not self.inputs:  # no input needs a gradient: the hooks run now, grad_input all None
            self._run_hooks((None,) * self.n_args)
        return got[k]

    def _input_grad(self, j: int, g: Any) -> Any:
        grads = core.PASSES[-1]
        if self.done_in == id(grads):
            return None
        self.done_in = id(grads)
        got = _gathered([t for _, t in self.inputs], j, g, grads)  # (ids)
        full: list[Any] = [None] * self.n_args  # torch: zeros for a tensor needing none
        for pos, zeros in self.constants:
            full[pos] = constant(zeros.copy())
        for (pos, _), v in zip(self.inputs, got):
            full[pos] = v
        full_t = self._run_hooks(tuple(full))
        new = tuple(full_t[pos] for pos, _ in self.inputs)
        _write_back([t for _, t in self.inputs], j, new, grads)
        return new[j]

    def _run_hooks(self, grad_input: tuple) -> tuple:
        for hook in list(self.module.__dict__.get("_backward_hooks", {}).values()):
            res = hook(self.module, grad_input, self.grad_output)
            if res is not None:
                res = tuple(res)
                if len(res) != len(grad_input):
                    raise RuntimeError(f"backward hook returned {len(res)} gradients for "
                                       f"{len(grad_input)} inputs: return one per input "
                                       "(None where there is none)")
                grad_input = res
        return grad_input


def _gathered(nodes: list[int], k: int, g: Any, grads: dict) -> tuple:
    """The gradients of the nodes with ids ``nodes`` in this pass as Tensors (``g`` for node
    ``k``; None for a node no gradient reached)."""
    out = []
    for i, key in enumerate(nodes):
        v = g if i == k else grads.get(key)
        out.append(None if v is None else v if isinstance(v, Tensor) else constant(v))
    return tuple(out)


def _write_back(nodes: list[int], k: int, new: tuple, grads: dict) -> None:
    """The hooks' gradients for the nodes (by id) other than ``k`` into the pass (arrays in a
    first-order pass, Tensors under create_graph, as the pass holds them)."""
    for i, (key, v) in enumerate(zip(nodes, new)):
        if i == k or v is None or key not in grads:
            continue
        old = grads[key]
        grads[key] = v if isinstance(old, Tensor) else v._value

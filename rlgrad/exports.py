"""Where each primitive is reachable: one declaration beside its rules.

``export(fn, torch="cumsum(dim, *, dtype=None)", top=True)`` written under a primitive's
``defvjp``/``defjvp`` makes it

* ``rlgrad.numpy.<name>`` (NumPy's arguments: ``axis``, ``keepdims``), under ``fn``'s name or the
  names given as ``numpy=``;
* the Tensor method of torch's spec, with torch's argument names (``t.cumsum(dim=1)``), built by
  ``tensor_methods.declared_method`` (NumPy's names are accepted too where they do not clash);
* with ``top=True``, ``rlgrad.<method>`` (``torch.cumsum(x, dim=1)``), or ``rlgrad.<numpy name>``
  for a function that is no method.

This module only records the declarations (it sits below ``ops``: it imports nothing of rlgrad).
``rlgrad.numpy``, ``tensor_methods``, ``toplevel`` and ``rlgrad`` subscribe with ``on_export`` and
install each declaration's names as it comes, so no name is listed by hand anywhere, and a
primitive declared in a module imported later is reachable as well.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass

#: torch's argument names and NumPy's for the same thing (the rest are spelled alike)
TORCH_TO_NUMPY = {"dim": "axis", "dims": "axis", "keepdim": "keepdims"}
REQUIRED = object()  # the default of an argument the caller must give


@dataclass(frozen=True)
class Param:
    torch: str  # the name a Tensor method takes
    numpy: str  # the keyword the NumPy-style function takes
    default: object  # REQUIRED, or torch's default (shown in the signature)
    kwonly: bool
    positional: bool  # before ``/``: handed to the function by position (a ufunc's operand)


@dataclass(frozen=True)
class Method:
    """A Tensor method: torch's name and parameters (after ``self``), from a spec such as
    ``"tril(diagonal: k = 0)"`` (``torch_name: numpy_name`` where the names differ otherwise
    than ``TORCH_TO_NUMPY`` says)."""

    name: str
    params: tuple[Param, ...]

    @classmethod
    def parse(cls, spec: str) -> Method:
        try:
            node = ast.parse(f"def {spec}: pass").body[0]
        except SyntaxError:
            raise ValueError(f"export: {spec!r} is not a method signature such as "
                             "'cumsum(dim, *, dtype=None)'") from None
        assert isinstance(node, ast.FunctionDef)
        a = node.args
        pos = a.posonlyargs + a.args
        pos_defaults = [REQUIRED] * (len(pos) - len(a.defaults)) + a.defaults
        params = [_param(arg, d, False, i < len(a.posonlyargs))
                  for i, (arg, d) in enumerate(zip(pos, pos_defaults))]
        params += [_param(arg, d or REQUIRED, True, False)
                   for arg, d in zip(a.kwonlyargs, a.kw_defaults)]
        return cls(node.name, tuple(params))

    def signature(self) -> str:
        """torch's signature, as its docs write it: ``cumsum(dim, *, dtype=None)``."""
        out: list[str] = []
        for p in self.params:
            if p.kwonly and "*" not in out:
                out.append("*")
            out.append(p.torch if p.default is REQUIRED else f"{p.torch}={p.default!r}")
        return f"{self.name}({', '.join(out)})"


def _param(arg: ast.arg, default: object, kwonly: bool, positional: bool) -> Param:
    numpy = arg.annotation.id if isinstance(arg.annotation, ast.Name) else \
        TORCH_TO_NUMPY.get(arg.arg, arg.arg)
    value = default if default is REQUIRED else ast.literal_eval(default)  # type: ignore[arg-type]
    return Param(arg.arg, numpy, value, kwonly, positional)


@dataclass(frozen=True)
class Export:
    fn: Callable
    numpy: tuple[str, ...]  # names in rlgrad.numpy
    methods: tuple[Method, ...]  # Tensor methods
    top: tuple[str, ...]  # names at rlgrad's top level
    floats_only: bool  # the method refuses integer tensors, as torch's mean does


EXPORTS: list[Export] = []
_TAKEN: dict[tuple[str, str], Callable] = {}  # (namespace, name) -> fn: each name declared once


def export(fn: Callable, *, numpy: bool | str | tuple[str, ...] = True,
           torch: str | tuple[str, ...] = (), top: bool = False,
           floats_only: bool = False) -> Callable:
    """Declare where ``fn`` is reachable (see the module's docstring); returns ``fn``.

    ``numpy``: True for ``fn.__name__``, a name or names, False for none; ``torch``: Tensor method
    specs; ``top``: also ``rlgrad.<name>`` for each method (or each NumPy name if no method)."""
    names = (fn.__name__,) if numpy is True else () if numpy is False else \
        (numpy,) if isinstance(numpy, str) else tuple(numpy)
    methods = tuple(Method.parse(s) for s in ((torch,) if isinstance(torch, str) else torch))
    tops = (tuple(m.name for m in methods) or names) if top else ()
    keys = [(space, name) for space, taken in (("numpy", names), ("method", [m.name for m in methods]),
                                               ("top", tops)) for name in taken]
    for key in keys:
        if _TAKEN.get(key, fn) is not fn:
            raise ValueError(f"export: {key[0]} name {key[1]!r} is declared twice (for "
                             f"{_TAKEN[key].__name__} and {fn.__name__})")
    _TAKEN.update(dict.fromkeys(keys, fn))
    e = Export(fn, names, methods, tops, floats_only)
    EXPORTS.append(e)
    for install in _INSTALLERS:
        install(e)
    return fn


_INSTALLERS: list[Callable[[Export], None]] = []


def on_export(install: Callable[[Export], None]) -> None:
    """Call ``install(e)`` for every declaration made so far and every later one: how
    ``rlgrad.numpy``, the Tensor and rlgrad's top level get their names, from ops.py or from a
    module imported later (a user's own primitive included)."""
    _INSTALLERS.append(install)
    for e in list(EXPORTS):
        install(e)


def numpy_names() -> dict[str, Callable]:
    """``{name: function}`` of every declared ``rlgrad.numpy`` name."""
    return {name: e.fn for e in EXPORTS for name in e.numpy}


def add_names(namespace: dict, names: tuple[str, ...], fn: Callable, where: str) -> None:
    """Put ``fn`` into a module's namespace under ``names``, refusing to replace a name the
    module defines itself (one declaration per name)."""
    for name in names:
        if namespace.get(name, fn) is not fn:
            raise ValueError(f"export({getattr(fn, '__name__', fn)!r}): {where} already has "
                             f"{name!r}; declare another name or remove that one")
        namespace[name] = fn

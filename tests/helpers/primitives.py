"""The library's primitives, as the structure test and the forward-mode test walk them."""

from __future__ import annotations

import importlib
import pkgutil

#: where primitives may be defined (docs/engine.md, "Where primitives live")
PRIMITIVE_MODULES = {
    "rlgrad.ops", "rlgrad.nn.functional", "rlgrad.special", "rlgrad.estimators", "rlgrad.rl.ppo",
    "rlgrad.numpy.linalg", "rlgrad.distributions.categorical", "rlgrad.numpy",
    "rlgrad.autograd_function", "rlgrad.lax", "rlgrad.inplace", "rlgrad.batching",
    "rlgrad.nn.cells", "rlgrad.rl.compiled_loop.dqn",
}


def library_primitives() -> list:
    """Every primitive of the library: the module-level names of the modules that make them
    (docs/engine.md) and of rlgrad.numpy's, public or not."""
    import rlgrad.numpy
    from rlgrad.tracer import Primitive

    names = sorted(PRIMITIVE_MODULES) + ["rlgrad.numpy"] + [
        info.name for info in pkgutil.walk_packages(rlgrad.numpy.__path__, "rlgrad.numpy.")]
    found = {}
    for name in names:
        for value in vars(importlib.import_module(name)).values():
            p = getattr(value, "primitive", None)
            if isinstance(p, Primitive):
                found[id(p)] = p
    return list(found.values())

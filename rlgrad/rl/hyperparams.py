"""An algorithm's hyperparameters: which constructor arguments a person may set, and the values
an instance was built with (what ``save`` stores and ``load`` passes back).

Both follow the class chain, so a subclass types only its own new arguments and forwards the
rest with ``**kwargs``: ``QRDQN(env, n_quantiles=200, **kwargs)`` takes every argument of
``DQN`` too (``hyperparameters(QRDQN)``, the CLI's ``--set``), and its instances record both.
The values are captured by ``BaseAlgorithm.__new__`` from the call itself, before any
``__init__`` runs: no class has to record its ``locals()``, and none can overwrite another's.
"""

from __future__ import annotations

import inspect
from typing import Any

#: arguments of a constructor that are not hyperparameters
_NOT_HYPER = ("self", "env", "seed")


def _own_init(klass: type) -> Any:
    return klass.__dict__.get("__init__")


def hyperparameters(cls: type) -> dict[str, inspect.Parameter]:
    """{name: parameter} of every constructor argument of ``cls`` a person may set.

    The class's own arguments; then, while the constructor forwards ``**kwargs``, those of the
    next class up that are not already named. Abstract classes (``_abstract = True`` in their
    class body: ``OnPolicyAlgorithm``, ``OffPolicyAlgorithm``) receive their arguments
    explicitly from the algorithm and are skipped, except the last of the chain
    (``BaseAlgorithm``, whose environment options ``env_kwargs``, ``vectorization_mode``,
    ``blas_threads`` are reachable through ``**kwargs``). Names in a
    class's ``fixed_hyperparams`` (pinned by a subclass, e.g. DDPG's ``n_critics=1``) are left out.
    """
    out: dict[str, inspect.Parameter] = {}
    seen: set[str] = set()
    fixed: set[str] = set()
    defaults = default_overrides(cls)
    for klass in cls.__mro__:
        init = _own_init(klass)
        if init is None or klass is object:
            continue
        fixed |= set(klass.__dict__.get("fixed_hyperparams", {}))
        params = inspect.signature(init).parameters
        last = not any(p.kind is p.VAR_KEYWORD for p in params.values())
        if last or not klass.__dict__.get("_abstract", False):
            for name, p in params.items():
                if (name not in _NOT_HYPER and name not in seen and name not in fixed
                        and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)):
                    out[name] = p.replace(default=defaults[name]) if name in defaults else p
        seen |= set(params)
        if last:
            break
    if "policy_aliases" in dir(cls):  # SB3's policy name, which the algorithms' metaclass takes
        out.setdefault("policy", inspect.Parameter("policy", inspect.Parameter.KEYWORD_ONLY,
                                                   default=None))
    return out


def default_overrides(cls: type) -> dict[str, Any]:
    """The parent's defaults a subclass changes (``default_hyperparams`` in its class body, e.g.
    QR-DQN's learning rate), merged down the class chain: the subclass's win."""
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        out.update(klass.__dict__.get("default_hyperparams", {}))
    return out


def apply_defaults(cls: type, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with ``cls``'s ``default_hyperparams`` filled in where not given: what a
    subclass's ``__init__`` passes to its parent's."""
    return {**default_overrides(cls), **kwargs}


def capture(cls: type, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The hyperparameters of ``cls(*args, **kwargs)``: the defaults of the algorithm classes in
    the chain, overridden by what the call passed (None if the call does not fit the signature:
    the constructor then raises its own error)."""
    init = _own_init(next(k for k in cls.__mro__ if _own_init(k) is not None))
    try:
        bound = inspect.signature(init).bind(None, *args, **kwargs)
    except TypeError:
        return None
    params = hyperparameters(cls)
    hp = {name: p.default for name, p in params.items()
          if p.default is not p.empty and _defined_by_algorithm(cls, name)}
    hp.update(default_overrides(cls))
    for name, value in bound.arguments.items():
        p = inspect.signature(init).parameters[name]
        if p.kind is p.VAR_KEYWORD:
            hp.update({k: v for k, v in value.items() if k not in _NOT_HYPER})
        elif name not in _NOT_HYPER:
            hp[name] = value
    return hp


def _defined_by_algorithm(cls: type, name: str) -> bool:
    """Whether ``name`` is an argument of a concrete algorithm class in ``cls``'s chain (not only
    of ``BaseAlgorithm``, whose environment options are recorded only when passed)."""
    for klass in cls.__mro__:
        init = _own_init(klass)
        if init is None or klass.__dict__.get("_abstract", False):
            continue
        if name in inspect.signature(init).parameters:
            return True
    return False


def constructor_hyperparams(arguments: dict[str, Any]) -> dict[str, Any]:
    """An algorithm constructor's ``locals()`` that are hyperparameters, with the environment
    options merged in (kept for code written before ``capture``)."""
    skip = ("self", "env", "seed", "__class__", "env_options")
    hyper = {k: v for k, v in arguments.items() if k not in skip}
    hyper.update(arguments.get("env_options", {}))
    return hyper

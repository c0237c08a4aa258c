"""torch's own layers assigned into an rlgrad network become rlgrad's layer of the same name.

A user's SB3 extractor reads ``self.batch_norm = th.nn.BatchNorm1d(n)``: rlgrad cannot train a
torch module, so the assignment builds rlgrad's ``nn.BatchNorm1d`` from the torch module's
constructor arguments and copies its parameters, buffers and train/eval mode. Only layers whose
behaviour is fixed by those arguments are converted (a torch module subclass with its own
``forward`` is code rlgrad cannot run, and is refused in one line). torch is never imported:
the module is read through its attributes and ``state_dict()``.
"""

from __future__ import annotations

import inspect
from typing import Any, cast

from rlgrad.nn import layers, layers_extra, module, normalization

# torch.nn classes rebuilt from their attributes: rlgrad's class of the same name
_SOURCES = (layers, layers_extra, normalization)
_STATELESS_CONTAINERS = ("Sequential", "ModuleList")


def _rlgrad_class(name: str) -> type[module.Module] | None:
    for src in _SOURCES:
        cls = getattr(src, name, None)
        if isinstance(cls, type) and issubclass(cls, module.Module):
            return cls
    return None


def _constructor_args(torch_module: Any, cls: type[module.Module]) -> dict[str, Any]:
    """The keyword arguments of ``cls`` that the torch module keeps as attributes of the same
    name (torch stores them so); ``bias`` is a tensor or None there, a flag here."""
    args: dict[str, Any] = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in ("device", "dtype") or not hasattr(torch_module, name):
            continue
        value = getattr(torch_module, name)
        if name == "bias" and not isinstance(value, bool):
            value = value is not None
        args[name] = value
    return args


def from_torch(value: object) -> module.Module:
    """rlgrad's module equal to the torch module ``value`` (same arguments, weights, buffers and mode)."""
    torch_module = cast(Any, value)  # a torch.nn.Module, read by its attributes
    name = type(torch_module).__name__
    if type(torch_module).__module__.split(".")[:2] != ["torch", "nn"]:
        raise TypeError(f"{type(torch_module).__module__}.{name} is a torch module with its own "
                        "code, which an rlgrad network cannot run; write it with rlgrad.nn "
                        "(import rlgrad.nn as nn: the layers take torch's arguments)")
    if name in _STATELESS_CONTAINERS:
        children = [from_torch(child) for child in torch_module.children()]
        built: module.Module = getattr(layers, name)(*children) if name == "Sequential" \
            else layers.ModuleList(children)
    else:
        cls = _rlgrad_class(name)
        if cls is None:
            raise TypeError(f"torch.nn.{name} has no rlgrad counterpart to convert it to; "
                            "use an rlgrad.nn layer in this network")
        built = cls(**_constructor_args(torch_module, cls))
        state = torch_module.state_dict()
        if any(str(v.dtype) == "torch.float64" for v in state.values()):
            built.double()  # torch's .double() before the assignment: the same precision
        if state:
            built.load_state_dict(state)
    built.train(bool(torch_module.training))
    return built


module.convert_torch_module = from_torch

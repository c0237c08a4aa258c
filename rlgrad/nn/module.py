"""``Module`` and ``Parameter``: PyTorch's container semantics on rlgrad Tensors.

Parameters and sub-modules assigned as attributes are registered in ordered dicts (so
``named_parameters`` and ``state_dict`` use PyTorch's dotted names, e.g. ``0.weight``) *and*
stored as ordinary attributes, so ``self.weight`` in ``forward`` is a plain attribute read.
``__call__`` is ``forward`` with nothing in between: no hook machinery on the hot path (a module
given a hook moves to a subclass whose ``__call__`` runs them: rlgrad/nn/hooks.py).
"""

from __future__ import annotations

import copy
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, NamedTuple

import numpy as np

from rlgrad.device import check_device, is_device
from rlgrad.nn.hooks import hooks_of
from rlgrad.serialization import CheckpointDict, StateDictError, _source_of
from rlgrad.tensor import (
    RemovableHandle,
    Tensor,
    TraceError,
    _as_array,
    _init_leaf,
    _Trace,
    constant,
    get_default_dtype,
    mark_written,
    user_line,
)
from rlgrad.tracer import replayed
from rlgrad.typing import DeviceLike, DTypeLike

__all__ = ["Module", "Parameter", "IncompatibleKeys", "StateDictError"]


def _state_value(v: Any) -> Any:
    """A state-dict value's array: a Tensor's; a torch tensor's values (a script that builds a
    state dict with torch, ``th.rand_like`` of ours), read through ``detach().cpu().numpy()``
    so torch is the caller's, never imported here."""
    if isinstance(v, Tensor):
        return v._value
    if type(v).__module__.startswith("torch") and hasattr(v, "detach"):
        return np.asarray(v.detach().cpu().numpy())
    return v


def _is_torch_module(value: object) -> bool:
    """Whether ``value`` is a ``torch.nn.Module`` (found by name: torch is never imported)."""
    if "torch" not in sys.modules or isinstance(value, np.ndarray | Tensor | int | float | str):
        return False
    return any(c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module"
               for c in type(value).__mro__)


def convert_torch_module(value: object) -> Module:
    """Replaced by ``rlgrad.nn.torch_modules.from_torch`` when ``rlgrad.nn`` is imported (it
    needs the layers, which import this module)."""
    raise TypeError(f"{type(value).__name__} is a torch module; import rlgrad.nn to convert it")


class Parameter(Tensor):
    """A leaf Tensor that a Module registers as trainable (``requires_grad=True`` by default).

    It shares the array of the data it is given (no copy), as ``torch.nn.Parameter`` does.
    """

    __slots__ = ()

    def __init__(self, data: Any = None, requires_grad: bool = True) -> None:
        if data is None:
            data = np.empty(0, dtype=get_default_dtype())
        _init_leaf(self, _as_array(data), requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo: dict) -> Parameter:
        new = Parameter(self._value.copy(), requires_grad=self.requires_grad)
        if self.grad is not None:
            new.grad = constant(np.array(self.grad._value, copy=True))
        memo[id(self)] = new
        return new


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict(strict=False)`` skipped (PyTorch's return value)."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def _refuse_copy_under_jit(what: str) -> None:
    """A state dict copies arrays outside rlgrad's operations: inside rlgrad.jit the copy would
    be made once, while tracing, and never again."""
    raise TraceError(f"rlgrad.jit: {what} at {user_line()} copies the parameters once, while "
                     "tracing, and the compiled step would not repeat it: copy a network with "
                     "rlgrad.optim.hard_update(target, source) (repeated at every call), or call "
                     "it outside the jitted function")


def _add_hook(module: Module, kind: str, entry: Any, prepend: bool) -> RemovableHandle:
    hooks = hooks_of(module, kind)
    handle = RemovableHandle(hooks)
    hooks[handle.id] = entry
    if prepend:
        hooks.move_to_end(handle.id, last=False)
    return handle


def fill_shared_names(module: Module, state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """``state_dict`` with every name of a shared child (or parameter) that it lacks filled in
    from a name of the same tensor that it has: what loads a state dict rlgrad wrote before
    ``state_dict`` listed each shared tensor under all of its names (once, under the first)
    with ``strict=True``. Not PyTorch's (its ``load_state_dict`` wants every name): the
    checkpoint readers of ``rlgrad.rl`` call it for files of that older layout."""
    out = CheckpointDict(module._renamed_keys(state_dict),
                         source=getattr(state_dict, "source", None))  # (for error messages)
    names: dict[int, list[str]] = {}
    for key, v in module.state_dict(keep_vars=True).items():
        names.setdefault(id(v), []).append(key)
    for group in names.values():
        have = next((k for k in group if k in out), None)
        if have is not None:
            out.update((k, out[have]) for k in group if k not in out)
    return out


class Module:
    """Base class of every layer and model; subclass it and define ``forward``."""

    training: bool
    _parameters: OrderedDict[str, Parameter | None]
    _buffers: OrderedDict[str, Tensor | np.ndarray | None]
    _non_persistent: set[str]
    _modules: OrderedDict[str, Module | None]

    def __init__(self) -> None:
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent"] = set()
        d["_modules"] = OrderedDict()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__} has no forward(); define forward(self, ...) in the subclass"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Calling a module *is* calling its forward (hooks: nn/hooks.py): binding __call__ to the
        # subclass's forward saves a Python frame per layer on the acting hot path.
        super().__init_subclass__(**kwargs)
        if "forward" in cls.__dict__ and "__call__" not in cls.__dict__:
            setattr(cls, "__call__", cls.__dict__["forward"])  # noqa: B010 - (mypy: no method assignment)

    # ---- registration ---------------------------------------------------------------------
    def _registry(self, name: str) -> OrderedDict:
        reg = self.__dict__.get(name)
        if reg is None:
            raise AttributeError(
                f"cannot assign to {type(self).__name__} before Module.__init__() is called: "
                "call super().__init__() first in your __init__"
            )
        return reg

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        # (as PyTorch's: a name assigned again keeps its place in the order of state_dict)
        if isinstance(value, Parameter):
            params = self._registry("_parameters")
            self._forget(name, keep="_parameters")
            params[name] = value
        elif isinstance(value, Module):
            modules = self._registry("_modules")
            self._forget(name, keep="_modules")
            modules[name] = value
        elif _is_torch_module(value):  # torch's layer: rlgrad's of the same name (torch_modules)
            try:
                converted = convert_torch_module(value)
            except TypeError as err:
                raise TypeError(f"{type(self).__name__}.{name}: {err}") from None
            self.__setattr__(name, converted)
            return
        else:
            known = d.get("_parameters")
            if known is not None and name in known:
                if value is not None:
                    raise TypeError(
                        f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                        "(Parameter or None expected); wrap it: nn.Parameter(value)"
                    )
                known[name] = None
            elif d.get("_modules") is not None and name in d["_modules"]:
                if value is not None:
                    raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                    f"'{name}' (Module or None expected)")
                d["_modules"][name] = None
            elif d.get("_buffers") is not None and name in d["_buffers"]:
                if value is not None and not isinstance(value, Tensor | np.ndarray):
                    raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                    "(array, Tensor or None expected)")
                d["_buffers"][name] = value
        object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: str = "") -> None:
        for reg in ("_parameters", "_modules", "_buffers"):
            if reg != keep:
                self.__dict__[reg].pop(name, None)
        self.__dict__["_non_persistent"].discard(name)

    def __delattr__(self, name: str) -> None:
        if name in self.__dict__.get("_parameters", ()) or name in self.__dict__.get(
                "_modules", ()) or name in self.__dict__.get("_buffers", ()):
            self._forget(name)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter({name!r}) needs a Parameter or None, got "
                            f"{type(param).__name__}")
        self._registry("_parameters")
        self._forget(name)
        self._parameters[name] = param
        object.__setattr__(self, name, param)

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        """A non-trainable array saved in ``state_dict`` (e.g. running statistics)."""
        if tensor is not None and not isinstance(tensor, Tensor | np.ndarray):
            raise TypeError(f"register_buffer({name!r}) needs an array, a Tensor or None")
        self._registry("_buffers")
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)
        object.__setattr__(self, name, tensor)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module({name!r}) needs a Module, got {type(module).__name__}")
        if "." in name or name == "":
            raise KeyError(f"module name can't contain '.' or be empty, got {name!r}")
        self._registry("_modules")
        self._forget(name)
        self._modules[name] = module
        object.__setattr__(self, name, module)

    register_module = add_module

    # ---- traversal ------------------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, attr: str, prefix: str, recurse: bool,
                       remove_duplicate: bool = True) -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for mod_prefix, mod in mods:
            for name, v in getattr(mod, attr).items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), v

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """``(name, parameter)`` pairs in registration order, shared parameters once."""
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Any]]:
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Any]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> Module:
        mod = self
        for part in target.split(".") if target else []:
            nxt = mod._modules.get(part)
            if nxt is None:
                raise AttributeError(f"{type(mod).__name__} has no submodule {part!r} (in {target!r})")
            mod = nxt
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        param = mod._parameters.get(name)
        if param is None:  # absent, or registered as None (torch: "is not an nn.Parameter")
            raise AttributeError(f"{type(mod).__name__} has no parameter {name!r}")
        return param

    # ---- hooks (rlgrad/nn/hooks.py runs them) --------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` (``with_kwargs``: ``hook(module, args, kwargs)``) before
        ``forward``; what it returns (not None) replaces the arguments."""
        return _add_hook(self, "_forward_pre_hooks", (hook, with_kwargs), prepend)

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False,
                              with_kwargs: bool = False, always_call: bool = False
                              ) -> RemovableHandle:
        """``hook(module, args, output)`` (``with_kwargs``: ``hook(module, args, kwargs,
        output)``) after ``forward``; what it returns (not None) replaces the output."""
        return _add_hook(self, "_forward_hooks", (hook, with_kwargs), prepend)

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False
                                        ) -> RemovableHandle:
        """``hook(module, grad_output)`` when the gradients of the outputs are known; a tuple it
        returns replaces them."""
        return _add_hook(self, "_backward_pre_hooks", hook, prepend)

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False
                                    ) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` when the gradients of the module's
        positional tensor inputs are known (None for one that needs none); a tuple it returns
        replaces ``grad_input``."""
        return _add_hook(self, "_backward_hooks", hook, prepend)

    # ---- modes and flags --------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Set training mode on this module and every submodule (returns self)."""
        if not isinstance(mode, bool):
            raise ValueError("train(mode) takes a bool; use eval() for evaluation mode")
        for m in self.modules():
            m.__dict__["training"] = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Freeze (``False``) or unfreeze every parameter (returns self)."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    @replayed  # under rlgrad.jit: made again by the compiled step, at its place
    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = constant(np.zeros_like(p._value))

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        """Call ``fn`` on every submodule (children first) then on self, e.g. for init."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args: Any, dtype: DTypeLike = None, device: DeviceLike = None,
           non_blocking: bool = False) -> Module:
        """``to(device)`` (CPU devices only: rlgrad computes on the CPU), ``to(dtype)``: cast
        floating parameters and buffers in place (e.g. float64 for gradcheck), as PyTorch's."""
        for a in args:
            if is_device(a):
                device = a
            else:
                dtype = a.dtype if isinstance(a, Tensor) else a
        check_device(device)
        return self if dtype is None else self._cast(np.dtype(dtype))

    def cpu(self) -> Module:
        return self

    def cuda(self, device: DeviceLike = None) -> Module:
        check_device("cuda")
        return self

    def _cast(self, dt: np.dtype) -> Module:
        if dt.kind != "f":
            raise TypeError(f"Module.to takes a floating dtype, got {dt}")
        for p in self.parameters():
            if p._value.dtype != dt:
                p._value = p._value.astype(dt)
                if p.grad is not None:
                    p.grad = constant(p.grad._value.astype(dt))
        for m in self.modules():
            for name, b in m._buffers.items():
                arr = b._value if isinstance(b, Tensor) else b
                if arr is not None and arr.dtype.kind == "f" and arr.dtype != dt:
                    if isinstance(b, Tensor):
                        b._value = arr.astype(dt)
                    else:
                        m.__dict__[name] = m._buffers[name] = arr.astype(dt)
        return self

    def float(self) -> Module:
        return self.to(np.float32)

    def double(self) -> Module:
        return self.to(np.float64)

    # ---- state --------------------------------------------------------------------------------
    def state_dict(self, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> dict[str, Tensor]:
        """Parameters and persistent buffers by dotted name, as PyTorch's: detached Tensors that
        share the parameters' memory (writing into ``sd['w']`` changes the parameter; a state
        dict kept as "best model so far" needs a copy: ``copy.deepcopy(sd)`` or
        ``{k: v.clone() ...}``). ``keep_vars=True`` gives the Parameters themselves.

        As PyTorch's, a child registered under several names (or reached by several paths) is
        listed under each of them; ``named_parameters`` lists its parameters once.
        """
        if _Trace.compiling and not keep_vars:
            _refuse_copy_under_jit("state_dict()")
        out: dict = OrderedDict() if destination is None else destination
        for mod_prefix, mod in self.named_modules(prefix=prefix.rstrip("."),
                                                  remove_duplicate=False):
            base = f"{mod_prefix}." if mod_prefix else ""
            for name, p in mod._parameters.items():
                if p is not None:
                    out[base + name] = p if keep_vars else constant(p._value)
            for name, b in mod._buffers.items():
                if b is not None and name not in mod._non_persistent:
                    arr = b._value if isinstance(b, Tensor) else np.asarray(b)
                    out[base + name] = b if keep_vars else constant(arr)
        return out

    def _state_slots(self) -> dict[str, tuple[Module, str, str]]:
        """Every name ``state_dict`` lists -> (the module holding it, its local name, kind)."""
        slots: dict[str, tuple[Module, str, str]] = {}
        for mod_prefix, mod in self.named_modules(remove_duplicate=False):
            base = f"{mod_prefix}." if mod_prefix else ""
            for name, p in mod._parameters.items():
                if p is not None:
                    slots[base + name] = (mod, name, "param")
            for name, b in mod._buffers.items():
                if b is not None and name not in mod._non_persistent:
                    slots[base + name] = (mod, name, "buffer")
        return slots

    #: ``{old: new}`` local key prefixes of state dicts an older layout of the class wrote
    #: (``"7."``: ``"linear.0."``): ``load_state_dict`` reads them under the new names
    _renamed_state_keys: ClassVar[dict[str, str]] = {}

    def _renamed_keys(self, state_dict: Mapping[str, Any]) -> Mapping[str, Any]:
        """``state_dict`` with the keys of every submodule's older layout renamed (itself when
        no submodule has one: the usual case costs one walk)."""
        renames = [(prefix, mod._renamed_state_keys)
                   for prefix, mod in self.named_modules(remove_duplicate=False)
                   if mod._renamed_state_keys]
        if not renames:
            return state_dict
        out = dict(state_dict)
        for prefix, table in renames:
            base = f"{prefix}." if prefix else ""
            for key in [k for k in out if k.startswith(base)]:
                local = key[len(base):]
                for old, new in table.items():
                    if local.startswith(old) and base + new + local[len(old):] not in out:
                        out[base + new + local[len(old):]] = out.pop(key)
                        break
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy ``state_dict`` into this module's parameters and buffers, in place.

        Every key is checked before anything is written: with ``strict`` missing and unexpected
        keys are an error, and a shape mismatch always is. The error (``StateDictError``, a
        ``RuntimeError`` and a ``ValueError``) lists every problem at once. As PyTorch's, every
        name ``state_dict`` lists is expected, a shared child's under each of its names (each
        is written in turn: the last one's values stay). A module class may name keys it
        wrote under older names (``_renamed_state_keys``): those are read under the new ones.
        """
        if _Trace.compiling:
            _refuse_copy_under_jit("load_state_dict()")
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"load_state_dict expects a mapping of names to arrays, got "
                            f"{type(state_dict).__name__}")
        source = _source_of(state_dict)
        state_dict = self._renamed_keys(state_dict)
        slots = self._state_slots()
        missing = [k for k in slots if k not in state_dict]
        unexpected = [k for k in state_dict if k not in slots]
        problems: list[str] = []
        values: list[tuple[Module, str, str, np.ndarray]] = []
        for key, (mod, name, kind) in slots.items():
            if key not in state_dict:
                continue
            v = state_dict[key]
            arr = _state_value(v)
            if not isinstance(arr, np.ndarray | np.generic | int | float | list):
                problems.append(f"value for {key} is a {type(v).__name__}, not an array")
                continue
            arr = np.asarray(arr)
            current = getattr(mod, name)
            cur = current._value if isinstance(current, Tensor) else current
            if arr.dtype.kind not in "biuf":
                problems.append(f"value for {key} has dtype {arr.dtype}, not a number type")
            elif arr.shape != cur.shape:
                problems.append(
                    f"size mismatch for {key}: copying a param with shape {arr.shape} from "
                    f"checkpoint, the shape in current model is {cur.shape}."
                )
            else:
                values.append((mod, name, kind, arr))
        if strict and (missing or unexpected):
            if unexpected:
                problems.insert(0, "Unexpected key(s) in state_dict: "
                                + ", ".join(f'"{k}"' for k in unexpected) + ".")
            if missing:
                problems.insert(0, "Missing key(s) in state_dict: "
                                + ", ".join(f'"{k}"' for k in missing) + ".")
        if problems:
            hint = ("\n\t(strict=False skips missing and unexpected keys; shapes must always match)"
                    if strict and (missing or unexpected) else "")
            raise StateDictError(
                f"Error(s) in loading state_dict for {type(self).__name__}{source}:"
                "\n\t" + "\n\t".join(problems) + hint
            )
        for mod, name, _kind, arr in values:
            current = getattr(mod, name)
            mark_written(current)
            cur = current._value if isinstance(current, Tensor) else current
            if cur.flags.writeable:
                np.copyto(cur, arr, casting="unsafe")
            elif isinstance(current, Tensor):
                current._value = arr.astype(cur.dtype, copy=True)
            else:
                mod.__dict__[name] = mod._buffers[name] = arr.astype(cur.dtype, copy=True)
        return IncompatibleKeys(missing, unexpected)

    # ---- copies and printing ----------------------------------------------------------------
    def __deepcopy__(self, memo: dict) -> Module:
        # The generic deepcopy, with a fast path for arrays and Parameters (target networks are
        # copied often).
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        nd = new.__dict__
        for k, v in self.__dict__.items():
            if isinstance(v, np.ndarray):
                nd[k] = memo.get(id(v)) if id(v) in memo else v.copy()
                memo[id(v)] = nd[k]
            else:
                nd[k] = copy.deepcopy(v, memo)
        return new

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        for name, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        inner = "\n  ".join(([extra] if extra else []) + lines)
        return f"{type(self).__name__}(\n  {inner}\n)"

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()))

"""``Optimizer``: parameter groups, ``zero_grad``, ``step`` and ``state_dict`` as in PyTorch.

Updates are vectorised NumPy applied in place to ``p._value`` with ``out=`` ufuncs and per-parameter
scratch buffers: a step records nothing and allocates nothing it can avoid. Gradients are only
read, never written: the backward pass may hand one array to several parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rlgrad.serialization import StateDictError, _source_of
from rlgrad.tensor import Tensor, constant, mark_written
from rlgrad.threads import apply_training_default
from rlgrad.tracer import enable_grad, replayed
from rlgrad.typing import Params

__all__ = ["Optimizer", "required"]


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


class Optimizer:
    """Base class: subclasses set ``defaults`` and implement ``_update_group(group)``."""

    def __init__(self, params: Params, defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.state: dict[Tensor, dict[str, Any]] = {}  # keyed by the tensor (hash = identity)
        self.param_groups: list[dict[str, Any]] = []
        self._version = 0  # bumped when the state is replaced (caches built on it are stale)
        apply_training_default()  # one BLAS thread for training, unless the user chose (threads.py)
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or "
                "dicts, but got a single Tensor: wrap it in a list, e.g. Adam([x], lr=...)"
            )
        if hasattr(params, "parameters") and callable(params.parameters):
            raise TypeError("pass model.parameters() to the optimizer, not the model itself")
        groups: list[Any] = list(params)  # Tensors, or groups (dicts)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], Mapping):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, param_group: Mapping[str, Any]) -> None:
        """Add a group of parameters with its own hyperparameters (missing ones take defaults)."""
        if not isinstance(param_group, Mapping) or "params" not in param_group:
            raise TypeError("a param group is a dict with a 'params' entry")
        group = dict(param_group)
        ps = group["params"]
        ps = [ps] if isinstance(ps, Tensor) else list(ps)
        for i, p in enumerate(ps):
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"optimizer can only optimize Tensors, but parameter {i} of the group is a "
                    f"{type(p).__name__}"
                )
            if p._op is not None:
                raise ValueError(
                    f"can't optimize a non-leaf Tensor (parameter {i}, shape {p.shape}, computed by "
                    f"{p._op.name}): optimize the leaf it was computed from, or .detach() it and "
                    "call .requires_grad_()"
                )
            if p._value.dtype.kind != "f":
                raise TypeError(f"can't optimize parameter {i} of dtype {p.dtype}: optimizers "
                                "update real floating-point tensors")
        if len({id(p) for p in ps}) != len(ps):
            raise ValueError("a parameter appears twice in one parameter group")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in ps):
            raise ValueError("some parameters appear in more than one parameter group")
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization "
                                 f"parameter {k}")
            group.setdefault(k, v)
        group["params"] = ps
        self.param_groups.append(group)

    @replayed  # under rlgrad.jit: made again by the compiled step, at its place
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients (``set_to_none=False`` gives zero arrays instead of None)."""
        for g in self.param_groups:
            for p in g["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad = constant(np.zeros_like(p._value))

    @replayed  # under rlgrad.jit: made again by the compiled step, at its place
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient; returns ``closure()`` if given."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._update_group(group)
            # updated in place: a graph recorded before the step must not backprop through them
            mark_written(*(p for p in group["params"] if p.grad is not None))
        return loss

    @replayed  # under rlgrad.jit: made again by the compiled step, at its place
    def step_arrays(self, grads: Any, scale: float = 1.0) -> None:
        """One step as ``p.grad = grads[i] * scale`` then ``step()`` would take it, for
        gradients computed as arrays (one per parameter, in ``param_groups`` order; ``scale``: a
        norm clip's coefficient). Not PyTorch's: for trainers (``rlgrad.rl``) that never read
        ``.grad``, so optimizers with a flat path skip a Tensor per parameter and the scaling
        pass; whether ``.grad`` is set afterwards is then unspecified."""
        params = [p for g in self.param_groups for p in g["params"]]
        if len(grads) != len(params):
            raise ValueError(f"step_arrays: {len(grads)} gradients for {len(params)} parameters")
        for p, g in zip(params, grads):
            p.grad = constant(g * g.dtype.type(scale) if scale != 1.0 else g)
        self.step()

    def _update_group(self, group: dict[str, Any]) -> None:
        raise NotImplementedError

    # ---- state ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}``.

        Parameters are numbered across groups in order, as PyTorch does; arrays are copies.
        """
        index: dict[int, int] = {}
        groups = []
        for g in self.param_groups:
            ids = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": ids})
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                s = self.state.get(p)
                if s:
                    state[index[id(p)]] = {
                        k: (v.copy() if isinstance(v, np.ndarray) else v)
                        for k, v in s.items() if not k.startswith("_")  # "_..." is scratch space
                    }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore hyperparameters and per-parameter state; everything is checked first."""
        where = f"{type(self).__name__}{_source_of(state_dict)}"
        if not isinstance(state_dict, Mapping) or "state" not in state_dict \
                or "param_groups" not in state_dict:
            raise StateDictError(
                f"Error(s) in loading state_dict for {where}: expected a dict with 'state' and "
                "'param_groups' (what optimizer.state_dict() returns)"
            )
        saved_groups = list(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise StateDictError(
                f"Error(s) in loading state_dict for {where}: it has {len(saved_groups)} "
                f"parameter groups, this optimizer has {len(self.param_groups)}"
            )
        params: dict[int, Tensor] = {}
        problems = []
        for gi, (mine, saved) in enumerate(zip(self.param_groups, saved_groups)):
            ids = list(saved.get("params", ()))
            if len(ids) != len(mine["params"]):
                problems.append(f"param_groups.{gi} has {len(ids)} parameters, this optimizer's "
                                f"group {gi} has {len(mine['params'])}")
                continue
            for i, p in zip(ids, mine["params"]):
                params[int(i)] = p
        new_state: dict[Tensor, dict[str, Any]] = {}
        for key, s in dict(state_dict["state"]).items():
            try:
                p = params[int(key)]
            except (KeyError, ValueError):
                problems.append(f"state.{key} belongs to no parameter of this optimizer")
                continue
            entry = {}
            for k, v in dict(s).items():
                arr = v._value if isinstance(v, Tensor) else v
                if isinstance(arr, np.ndarray) and arr.ndim > 0:
                    if arr.shape != p._value.shape:
                        problems.append(
                            f"size mismatch for state.{key}.{k}: shape {arr.shape} in the state "
                            f"dict, but the parameter has shape {p._value.shape}"
                        )
                        continue
                    arr = arr.astype(p._value.dtype, copy=True)
                elif isinstance(arr, np.ndarray | np.generic):
                    arr = arr.item()
                entry[k] = arr
            new_state[p] = entry
        if problems:
            raise StateDictError(f"Error(s) in loading state_dict for {where}:\n\t" + "\n\t".join(problems))
        for mine, saved in zip(self.param_groups, saved_groups):
            for k, v in saved.items():
                if k != "params":
                    mine[k] = tuple(v) if isinstance(mine.get(k), tuple) and isinstance(v, list) else v
        self.state = new_state
        self._version += 1

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)


# torch's wording ("Invalid learning rate: -1.0"): code and SB3's tests match on it
_HPARAM_LABELS = {"lr": "learning rate", "eps": "epsilon value"}


def _check_hparams(**kw: Any) -> None:
    for name, v in kw.items():
        if not v >= 0.0:  # also catches nan
            label = _HPARAM_LABELS.get(name, f"{name} value")
            raise ValueError(f"Invalid {label}: {v} (must be non-negative)")

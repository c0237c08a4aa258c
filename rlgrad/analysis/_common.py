"""Helpers shared by the analysis tools: naming parameters, fresh input leaves, output targets."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rlgrad.indexing import take_along_axis
from rlgrad.tensor import Tensor, _leaf, get_default_dtype

__all__ = ["named_params", "fresh_input", "select_target"]


def named_params(params: Any) -> list[tuple[str, Tensor]]:
    """``(name, tensor)`` pairs from a Module (its ``named_parameters()``), a dict name -> tensor,
    an iterable of ``(name, tensor)`` pairs, an iterable of tensors (named p0, p1, ...) or one
    tensor."""
    if params is None:
        return []
    if isinstance(params, Tensor):
        return [("p0", params)]
    if hasattr(params, "named_parameters") and callable(params.named_parameters):
        return [(str(n), p) for n, p in params.named_parameters()]
    if isinstance(params, Mapping):
        items = [(str(n), p) for n, p in params.items()]
    else:
        seq = list(params) if isinstance(params, Iterable) else [params]
        if seq and all(isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], str) for s in seq):
            items = [(n, p) for n, p in seq]
        else:
            items = [(f"p{i}", p) for i, p in enumerate(seq)]
    for n, p in items:
        if not isinstance(p, Tensor):
            raise TypeError(f"parameter {n!r} is a {type(p).__name__}, not a Tensor")
    return items


def param_list(params: Any) -> list[Tensor]:
    return [p for _, p in named_params(params)]


def fresh_input(x: Any) -> Tensor:
    """A new float leaf with ``requires_grad=True`` holding a copy of ``x``'s values (integer
    inputs, e.g. raw observations, get the default float dtype)."""
    data = x._value if isinstance(x, Tensor) else np.asarray(x)
    if data.dtype.kind not in "fc":
        data = data.astype(get_default_dtype())
    return _leaf(np.array(data, copy=True), requires_grad=True)


def select_target(out: Any, target: Any) -> Tensor:
    """The scalar to differentiate, picked from a model output ``out``.

    ``target`` may be None (``out`` must already hold one element), an int (that output unit, on
    the last axis, summed over the batch), a sequence/array of ints (one unit per row, e.g. the
    actions taken), ``"max"`` (each row's largest output: the predicted class or greedy action)
    or a callable ``target(out) -> Tensor`` such as a loss. Non-scalar results are summed: for a
    model that treats rows independently that gives every row its own gradient.
    """
    if not isinstance(out, Tensor):
        raise TypeError(f"the model returned a {type(out).__name__}, not a Tensor")
    if callable(target):
        val = target(out)
        if not isinstance(val, Tensor):
            raise TypeError(f"target(output) returned a {type(val).__name__}, not a Tensor")
    elif target is None:
        if out._value.size != 1:
            raise ValueError(
                f"the model output has shape {out.shape}: pass target= (an output index, one "
                "index per row, 'max', or a callable such as a loss) to say which value to "
                "differentiate"
            )
        val = out
    elif isinstance(target, str):
        if target not in ("max", "argmax"):
            raise ValueError(f"unknown target {target!r}: use 'max', an index or a callable")
        idx = np.argmax(out._value, axis=-1)
        val = take_along_axis(out, np.expand_dims(idx, -1), axis=-1)
    else:
        idx = np.asarray(target._value if isinstance(target, Tensor) else target)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"target indices must be integers, got {idx.dtype}")
        if idx.ndim == 0:
            val = out[..., int(idx)]
        else:
            if out.ndim < 1 or idx.shape != out.shape[:-1]:
                raise ValueError(
                    f"one target index per row: got indices of shape {idx.shape} for an output "
                    f"of shape {out.shape} (expected {out.shape[:-1]})"
                )
            val = take_along_axis(out, np.expand_dims(idx, -1), axis=-1)
    return val if val._value.size == 1 and val.ndim == 0 else val.sum()

"""Arrays built from Tensors: ``rlgrad.numpy.array([x, y])`` and nested lists mixing Tensors,
arrays and scalars, differentiable as in autograd and JAX (one ``stack`` per level of nesting,
so the gradient of each element goes back to it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad.ops import astype, clone, reshape, stack
from rlgrad.tensor import Tensor


def holds_tensor(obj: Any) -> bool:
    if isinstance(obj, Tensor):
        return True
    if type(obj) in (list, tuple):
        for o in obj:  # (no generator: this is on the call path of rnp.array)
            if holds_tensor(o):
                return True
    return False


def _values(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.data
    if type(obj) in (list, tuple):
        return [_values(o) for o in obj]
    return obj


def _assemble(obj: Any, dtype: np.dtype) -> Any:
    if type(obj) in (list, tuple):
        return stack([_assemble(o, dtype) for o in obj])
    if isinstance(obj, Tensor):
        return obj if obj.dtype == dtype else astype(obj, dtype)
    return np.asarray(obj, dtype=dtype)


def array_from(obj: Any, copy: bool, *args: Any, **kwargs: Any) -> Any:
    """NumPy's array/asarray of ``obj``, which holds Tensors: NumPy's dtype and shape (found by
    NumPy on the values, so its errors too), the values differentiable in every Tensor."""
    ref = np.array(_values(obj), *args, **kwargs)
    if isinstance(obj, Tensor):
        out = obj if obj.dtype == ref.dtype else astype(obj, ref.dtype)
        out = clone(out) if copy and out is obj else out
    else:
        out = _assemble(obj, ref.dtype)
    return out if out.shape == ref.shape else reshape(out, ref.shape)  # ndmin

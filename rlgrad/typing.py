"""The types rlgrad's signatures use (as ``numpy.typing`` and ``jax.typing`` name theirs).

``ArrayLike`` is what a function converts to an array: a Tensor, a NumPy array or scalar, a
Python number or a nested sequence of them. ``Array`` is what an ``rlgrad.numpy`` function
returns: NumPy's own result for NumPy input, a Tensor for Tensor input.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # rlgrad.tensor imports this module's names for its annotations only
    from rlgrad.device import device
    from rlgrad.random import Generator
    from rlgrad.tensor import Tensor

ArrayLike: TypeAlias = "Tensor | npt.ArrayLike"
Array: TypeAlias = "Tensor | np.ndarray"
#: real numbers as NumPy takes them: a scalar, a sequence or an array (npt.ArrayLike without
#: strings, bytes and complex)
FloatArrayLike: TypeAlias = "float | Sequence[float] | Sequence[Sequence[float]] | np.ndarray"
#: a dtype, its name or type, or None for the default (NumPy 2's DTypeLike leaves None out)
DTypeLike: TypeAlias = npt.DTypeLike | None
#: a shape: one length, or one per dimension
ShapeLike: TypeAlias = int | Sequence[int]
#: the dimensions a reduction runs over: one, several, or None for all
Axis: TypeAlias = int | Sequence[int] | None
#: ``"cpu"``, ``rlgrad.device("cpu")`` or None (rlgrad computes on the CPU only)
DeviceLike: TypeAlias = "str | device | None"
#: how much ``pad`` adds: one width for every side, a (before, after) pair, or one pair per axis
PadWidth: TypeAlias = int | Sequence[int] | Sequence[Sequence[int]]
#: a norm's order (``linalg.norm``): a number (p, 0, +-inf), "fro" or "nuc" for matrices, or
#: None for the 2-norm / Frobenius norm
NormOrd: TypeAlias = float | Literal["fro", "nuc"] | None
#: which dimension vmap maps over: an int, None (not mapped), or a tuple/list/dict with one
#: entry per argument (per output), as deep as the arguments' trees (torch's in_dims/out_dims)
MapDims: TypeAlias = "int | None | tuple[Any, ...] | list[Any] | dict[str, Any]"
#: NumPy's ``pad`` modes (``rlgrad.numpy.pad``)
PadMode: TypeAlias = Literal["constant", "edge", "linear_ramp", "maximum", "mean", "median", "minimum",
                             "reflect", "symmetric", "wrap", "empty"]
#: the random stream a sampler draws from: rlgrad's ``Generator``, NumPy's, or None for the
#: global one (``rlgrad.manual_seed``)
GeneratorLike: TypeAlias = "Generator | np.random.Generator | None"
#: what an optimizer takes: the parameters, or groups of them (dicts with ``"params"`` and
#: per-group settings such as ``"lr"``), as torch's ``ParamsT``
Params: TypeAlias = "Iterable[Tensor] | Iterable[dict[str, Any]]"

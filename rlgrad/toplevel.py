"""PyTorch's top-level functions (``torch.clamp``, ``torch.max``, ``torch.randn_like``, dtypes
...), exported as ``rlgrad.<name>`` so that a script written for PyTorch runs with
``import rlgrad as torch``. Each is the Tensor method of the same name or a primitive of
``rlgrad/ops.py``: no gradient rule lives here. Those that are one primitive (``rlgrad.cumsum``,
``rlgrad.clamp``, ``rlgrad.where`` ...) are not written here: their ``export(..., top=True)``
beside the primitive's rules puts them in. ``rlgrad.numpy`` keeps NumPy's semantics."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.creation import _make
from rlgrad.exports import Export, add_names, on_export
from rlgrad.indexing import gather  # noqa: F401 - torch.gather, in __all__ below
from rlgrad.tensor import Size, Tensor, _leaf, get_default_dtype  # noqa: F401 - torch.Size
from rlgrad.tensor_methods import DECLARED


def _install_declared(e: Export) -> None:
    """torch.exp, torch.cumsum, torch.where ...: an ``export(..., top=True)``'s names, each the
    Tensor method (called with the tensor first) or, for a function that is no method, itself."""
    for name in e.top:
        fn = DECLARED[name] if builtins.any(m.name == name for m in e.methods) else e.fn
        add_names(globals(), (name,), fn, "rlgrad.toplevel")
        if "__all__" in globals() and name not in __all__:  # a declaration after this module
            __all__.append(name)


on_export(_install_declared)


# dtypes under PyTorch's names (NumPy dtypes: ``t.dtype == rlgrad.float32`` holds)
float32 = float = np.dtype(np.float32)  # noqa: A001
float64 = double = np.dtype(np.float64)
float16 = half = np.dtype(np.float16)
int64 = long = np.dtype(np.int64)
int32 = int = np.dtype(np.int32)  # noqa: A001
int16 = np.dtype(np.int16)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
bool = np.dtype(np.bool_)  # noqa: A001


def _t(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x
    raise TypeError(f"expected a Tensor, got {type(x).__name__}; wrap data with rlgrad.tensor() "
                    "(or use rlgrad.numpy for NumPy arrays)")


def _extremum(name: str, elementwise: Any) -> Any:
    def fn(input: Any, dim: Any = None, keepdim: builtins.bool = False, *, other: Any = None) -> Any:
        x = _t(input)
        if other is not None or isinstance(dim, Tensor | np.ndarray):
            return elementwise(x, dim if other is None else other)  # torch.max(a, b)
        return getattr(x, name)(dim, keepdim) if dim is not None else getattr(x, name)()

    fn.__name__ = name
    fn.__doc__ = (f"``torch.{name}``: of all elements; ``{name}(x, dim)`` is (values, indices); "
                  f"``{name}(a, b)`` is elementwise (``{elementwise.__name__}``).")
    return fn


max = _extremum("max", ops.maximum)  # noqa: A001
min = _extremum("min", ops.minimum)  # noqa: A001


def _method(name: str) -> Any:
    def fn(input: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(_t(input), name)(*args, **kwargs)

    fn.__name__ = name
    fn.__doc__ = f"``torch.{name}(x, ...)``: ``x.{name}(...)``."
    return fn


# the Tensor methods written by hand in tensor_methods.py (torch semantics beyond one primitive)
std, var = _method("std"), _method("var")
flatten, squeeze, unsqueeze = _method("flatten"), _method("squeeze"), _method("unsqueeze")
reshape = _method("reshape")
all, any = _method("all"), _method("any")  # noqa: A001


def numel(input: Any) -> builtins.int:
    return _t(input).numel()


def is_tensor(obj: Any) -> builtins.bool:
    return isinstance(obj, Tensor)


def is_floating_point(input: Any) -> builtins.bool:
    return _t(input).dtype.kind == "f"


def allclose(input: Any, other: Any, rtol: builtins.float = 1e-5, atol: builtins.float = 1e-8,
             equal_nan: builtins.bool = False) -> builtins.bool:
    return builtins.bool(np.allclose(np.asarray(_t(input).detach()), np.asarray(_t(other).detach()),
                                     rtol=rtol, atol=atol, equal_nan=equal_nan))


def equal(input: Any, other: Any) -> builtins.bool:
    """``torch.equal``: same shape and values."""
    a, b = np.asarray(_t(input).detach()), np.asarray(_t(other).detach())
    return a.shape == b.shape and builtins.bool((a == b).all())


# ---- random draws from rlgrad.random's global generator (seeded by manual_seed) --------------
def _rng(generator: Any) -> np.random.Generator:
    from rlgrad.random import numpy_generator

    return numpy_generator(generator)


def _shape_args(size: tuple) -> tuple:
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], tuple | list) else tuple(size)


def randn(*size: Any, generator: Any = None, dtype: Any = None, device: Any = None,
          requires_grad: builtins.bool = False) -> Tensor:
    dt = dtype or get_default_dtype()
    arr = _rng(generator).standard_normal(_shape_args(size), dtype=np.float64).astype(dt)
    return _make(arr, requires_grad, device)


def rand(*size: Any, generator: Any = None, dtype: Any = None, device: Any = None,
         requires_grad: builtins.bool = False) -> Tensor:
    dt = dtype or get_default_dtype()
    return _make(_rng(generator).random(_shape_args(size)).astype(dt), requires_grad, device)


def randint(low: builtins.int, high: Any = None, size: Any = None, *, generator: Any = None,
            dtype: Any = None, device: Any = None) -> Tensor:
    """``torch.randint(high, size)`` or ``torch.randint(low, high, size)``: int64 in [low, high)."""
    if size is None:
        low, high, size = 0, low, high
    arr = _rng(generator).integers(low, high, size=tuple(size), dtype=np.int64)
    return _make(arr.astype(dtype or np.int64, copy=False), False, device)


def randn_like(input: Any, *, dtype: Any = None, device: Any = None,
               requires_grad: builtins.bool = False) -> Tensor:
    x = _t(input)
    return randn(x.shape, dtype=dtype or x.dtype, device=device, requires_grad=requires_grad)


def rand_like(input: Any, *, dtype: Any = None, device: Any = None,
              requires_grad: builtins.bool = False) -> Tensor:
    x = _t(input)
    return rand(x.shape, dtype=dtype or x.dtype, device=device, requires_grad=requires_grad)


def normal(mean: Any, std: Any = 1.0, size: Any = None, *, generator: Any = None) -> Tensor:
    """``torch.normal``: ``mean + std * N(0, 1)`` with the broadcast shape of ``mean`` and ``std``
    (Tensors or numbers; ``size=`` when both are numbers). The draw is a constant, as PyTorch's."""
    m = mean.detach()._value if isinstance(mean, Tensor) else np.asarray(mean)
    s = std.detach()._value if isinstance(std, Tensor) else np.asarray(std)
    shape = tuple(size) if size is not None else np.broadcast_shapes(m.shape, s.shape)
    dts = [a.dtype for a in (m, s) if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.ndim]
    dt = dts[0] if dts else get_default_dtype()
    z = _rng(generator).standard_normal(shape)
    return _leaf(np.asarray(m + s * z, dtype=dt))


def manual_seed(seed: builtins.int) -> Any:
    """``torch.manual_seed``: reseed rlgrad's global generator (sampling, noise) and the one the
    layers initialize from, so a run is reproducible. NumPy's ``np.random`` is not touched (as
    PyTorch leaves it alone)."""
    from rlgrad import random
    from rlgrad.nn import init

    init.manual_seed(builtins.int(seed))
    return random.seed(builtins.int(seed))


def initial_seed() -> Any:
    from rlgrad import random

    return random.default_generator.initial_seed()


def seed() -> builtins.int:
    """``torch.seed``: reseed from the OS and return the new seed."""
    s = builtins.int(np.random.SeedSequence().entropy % (2 ** 63))
    manual_seed(s)
    return s


# Every public name above: the declared functions and the ones written here (not the imports).
__all__ = [name for name, value in globals().items() if not name.startswith("_")
           and name not in ("annotations", "builtins", "Any", "np", "ops", "Tensor",
                            "get_default_dtype", "Export", "add_names", "on_export", "DECLARED")]

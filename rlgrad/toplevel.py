"""PyTorch's top-level functions (``torch.clamp``, ``torch.max``, ``torch.randn_like``, dtypes
...), exported as ``rlgrad.<name>`` so that a script written for PyTorch runs with
``import rlgrad as torch``. Each is the Tensor method of the same name or a primitive of
``rlgrad/ops.py``: no gradient rule lives here. Those that are one primitive (``rlgrad.cumsum``,
``rlgrad.clamp``, ``rlgrad.where`` ...) are not written here: their ``export(..., top=True)``
beside the primitive's rules puts them in. ``rlgrad.numpy`` keeps NumPy's semantics."""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rlgrad import linalg as _linalg  # rlgrad.linalg, torch.linalg's names
from rlgrad import special as _special  # noqa: F401 - its export()s: torch.erf, Tensor.erfinv
from rlgrad import tensor_methods as _tm
from rlgrad.creation import _make
from rlgrad.exports import Export, add_names, on_export
from rlgrad.indexing import gather  # noqa: F401 - torch.gather, in __all__ below
from rlgrad.promotion import promote_types, result_type  # noqa: F401 - torch's, in __all__
from rlgrad.promotion import rule as _rule
from rlgrad.tensor import Size, Tensor, _leaf, get_default_dtype  # noqa: F401 - torch.Size
from rlgrad.tensor_methods import DECLARED
from rlgrad.tracer import replayed as _replayed

if TYPE_CHECKING:  # the declared functions as the checker sees them (generated: rlgrad/_stubs.py)
    from rlgrad._toplevel_api import *  # noqa: F403
    from rlgrad.typing import DeviceLike, DTypeLike, GeneratorLike

#: the declared top-level functions that are no Tensor method (``rlgrad.where``), each under its
#: declaration's promotion rule
_FUNCTIONS: dict[str, Any] = {}


def _install_declared(e: Export) -> None:
    """torch.exp, torch.cumsum, torch.where ...: an ``export(..., top=True)``'s names, each the
    Tensor method (called with the tensor first) or, for a function that is no method, itself
    under its promotion rule (``where``'s input and other promoted, as torch's)."""
    for name in e.top:
        if builtins.any(m.name == name for m in e.methods):
            fn = DECLARED[name]
        else:
            fn = _FUNCTIONS[name] = _rule(e.promote, e.fn)
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


max = _extremum("max", DECLARED["maximum"])  # noqa: A001 - torch.max(a, b) promotes
min = _extremum("min", DECLARED["minimum"])  # noqa: A001


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
# compositions of primitives (tensor_methods.py): torch.sort(x, dim), torch.split(x, 2) ...
sort, argsort, topk, median = _method("sort"), _method("argsort"), _method("topk"), _method("median")
split, chunk, unbind, narrow = _method("split"), _method("chunk"), _method("unbind"), _method("narrow")
index_select, index_add = _method("index_select"), _method("index_add")
scatter, repeat_interleave = _method("scatter"), _method("repeat_interleave")
norm, mm, bmm, masked_fill = _method("norm"), _method("mm"), _method("bmm"), _method("masked_fill")
addcmul, addcdiv, lerp = _method("addcmul"), _method("addcdiv"), _method("lerp")
matrix_exp = _linalg.matrix_exp
kthvalue, msort, masked_select = _method("kthvalue"), _method("msort"), _method("masked_select")
nonzero, tile, isclose, rsqrt = _method("nonzero"), _method("tile"), _method("isclose"), _method("rsqrt")
frac, logdet = _method("frac"), _method("logdet")
fliplr, flipud, swapdims = _method("fliplr"), _method("flipud"), _method("swapdims")
# torch's legacy types: FloatTensor(3, 4), LongTensor([1, 2]), isinstance(t, FloatTensor)
globals().update(_tm.LEGACY_TYPES)


def einsum(equation: str, *operands: Any) -> Tensor:
    """``torch.einsum(equation, *operands)`` (or one list of operands); the operands must share
    a dtype, as torch's (``rlgrad.numpy.einsum`` is NumPy's, which promotes)."""
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    dtypes = {np.result_type(_t(o).dtype) for o in operands}
    if len(dtypes) > 1:
        raise RuntimeError(f"einsum(): expected operands of one dtype, got {sorted(map(str, dtypes))}; "
                           "cast them with .to(dtype)")
    from rlgrad.numpy import einsum as _einsum

    return _einsum(equation, *operands)


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


def randn(*size: Any, generator: GeneratorLike = None, dtype: DTypeLike = None,
          device: DeviceLike = None,
          requires_grad: builtins.bool = False) -> Tensor:
    dt = dtype or get_default_dtype()
    arr = _rng(generator).standard_normal(_shape_args(size), dtype=np.float64).astype(dt)
    return _make(arr, requires_grad, device)


def rand(*size: Any, generator: GeneratorLike = None, dtype: DTypeLike = None,
         device: DeviceLike = None,
         requires_grad: builtins.bool = False) -> Tensor:
    dt = dtype or get_default_dtype()
    return _make(_rng(generator).random(_shape_args(size)).astype(dt), requires_grad, device)


def randint(low: builtins.int, high: Any = None, size: Any = None, *, generator: GeneratorLike = None,
            dtype: DTypeLike = None, device: DeviceLike = None) -> Tensor:
    """``torch.randint(high, size)`` or ``torch.randint(low, high, size)``: int64 in [low, high)."""
    if size is None:
        low, high, size = 0, low, high
    arr = _rng(generator).integers(low, high, size=tuple(size), dtype=np.int64)
    return _make(arr.astype(dtype or np.int64, copy=False), False, device)


def randn_like(input: Any, *, dtype: DTypeLike = None, device: DeviceLike = None,
               requires_grad: builtins.bool = False) -> Tensor:
    x = _t(input)
    return randn(x.shape, dtype=dtype or x.dtype, device=device, requires_grad=requires_grad)


def rand_like(input: Any, *, dtype: DTypeLike = None, device: DeviceLike = None,
              requires_grad: builtins.bool = False) -> Tensor:
    x = _t(input)
    return rand(x.shape, dtype=dtype or x.dtype, device=device, requires_grad=requires_grad)


def normal(mean: Any, std: Any = 1.0, size: Any = None, *, generator: GeneratorLike = None) -> Tensor:
    """``torch.normal``: ``mean + std * N(0, 1)`` with the broadcast shape of ``mean`` and ``std``
    (Tensors or numbers; ``size=`` when both are numbers). The draw is a constant, as PyTorch's."""
    m = mean.detach()._value if isinstance(mean, Tensor) else np.asarray(mean)
    s = std.detach()._value if isinstance(std, Tensor) else np.asarray(std)
    shape = tuple(size) if size is not None else np.broadcast_shapes(m.shape, s.shape)
    dts = [a.dtype for a in (m, s) if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.ndim]
    dt = dts[0] if dts else get_default_dtype()
    z = _rng(generator).standard_normal(shape)
    return _leaf(np.asarray(m + s * z, dtype=dt))


# ---- Tensor.uniform_ / normal_: draws written in place, from the generator above
def _draw_into(self: Tensor, name: str, draw: Callable, generator: Any) -> Tensor:
    if self.dtype.kind != "f":
        raise RuntimeError(f"{name} is only implemented for floating point tensors, got "
                           f"{self.dtype}")
    dst = _tm._writable(self, name)
    dst[...] = draw(_rng(generator), dst.shape)
    return self


def _uniform_(self: Tensor, *args: Any, generator: Any = None, **kwargs: Any) -> Tensor:
    """torch's ``uniform_(from=0, to=1, *, generator=None)`` (``from`` is a Python keyword:
    given by position or as ``**{'from': a}``); a compiled step draws again at every call."""
    low, high = _bounds(args, kwargs, ("from", "to"), (0.0, 1.0), "uniform_")
    if low > high:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={low} "
                           f"> to={high}")
    return _draw_into(self, "uniform_", lambda rng, shape: rng.uniform(low, high, shape),
                      generator)


def _normal_(self: Tensor, *args: Any, generator: Any = None, **kwargs: Any) -> Tensor:
    """torch's ``normal_(mean=0, std=1, *, generator=None)``."""
    mean, std = _bounds(args, kwargs, ("mean", "std"), (0.0, 1.0), "normal_")
    if std < 0:
        raise RuntimeError(f"normal_ expects std >= 0.0, but found std {std}")
    return _draw_into(self, "normal_", lambda rng, shape: rng.normal(mean, std, shape),
                      generator)


def _bounds(args: tuple, kwargs: dict, names: tuple[str, str], defaults: tuple,
            where: str) -> tuple[builtins.float, builtins.float]:
    if len(args) > 2 or set(kwargs) - set(names):
        raise TypeError(f"{where}() takes ({names[0]}={defaults[0]}, {names[1]}={defaults[1]}, *, "
                        f"generator=None), got {len(args)} positional and {sorted(kwargs)}")
    vals = list(args) + [kwargs.get(n, d) for n, d in zip(names[len(args):], defaults[len(args):])]
    return builtins.float(_tm._value(vals[0])), builtins.float(_tm._value(vals[1]))


setattr(Tensor, "uniform_", _replayed(_uniform_))  # noqa: B010 - typed in rlgrad/_tensor_api.pyi
setattr(Tensor, "normal_", _replayed(_normal_))  # noqa: B010


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
    entropy = np.random.SeedSequence().entropy  # an int when drawn from the OS
    assert isinstance(entropy, builtins.int)
    s = entropy % (2 ** 63)
    manual_seed(s)
    return s


# Every public name above: the declared functions and the ones written here (not the imports).
__all__ = [name for name, value in globals().items() if not name.startswith("_")
           and name not in ("annotations", "builtins", "Any", "np", "ops", "Tensor",
                            "get_default_dtype", "Export", "add_names", "on_export", "DECLARED")]

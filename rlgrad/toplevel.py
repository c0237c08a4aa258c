"""PyTorch's top-level functions (``torch.clamp``, ``torch.max``, ``torch.randn_like``, dtypes
...), exported as ``rlgrad.<name>`` so that a script written for PyTorch runs with
``import rlgrad as torch``. Each is the Tensor method of the same name or a primitive of
``rlgrad/ops.py``: no gradient rule lives here. Those that are one primitive (``rlgrad.cumsum``,
``rlgrad.clamp``, ``rlgrad.where`` ...) are not written here: their ``export(..., top=True)``
beside the primitive's rules puts them in. ``rlgrad.numpy`` keeps NumPy's semantics."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rlgrad import linalg as _linalg  # rlgrad.linalg, torch.linalg's names
from rlgrad import ops as _ops
from rlgrad import special as _special  # noqa: F401 - its export()s: torch.erf, Tensor.erfinv
from rlgrad import tensor_methods as _tm
from rlgrad.batching import BatchedTensor as _BatchedTensor
from rlgrad.creation import _make
from rlgrad.creation import cat as _cat
from rlgrad.device import check_device as _check_device
from rlgrad.exports import Export, add_names, on_export
from rlgrad.indexing import gather  # noqa: F401 - torch.gather, in __all__ below
from rlgrad.promotion import promote_types, result_type  # noqa: F401 - torch's, in __all__
from rlgrad.promotion import rule as _rule
from rlgrad.tensor import Size, Tensor, _leaf, get_default_dtype  # noqa: F401 - torch.Size
from rlgrad.tensor_methods import DECLARED
from rlgrad.tracer import replayed as _replayed

if TYPE_CHECKING:  # the declared functions as the checker sees them (generated: rlgrad/_stubs.py)
    from rlgrad._toplevel_api import *  # noqa: F403
    from rlgrad.typing import ArrayLike, DeviceLike, DTypeLike, GeneratorLike

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
index_put, take_along_dim = _method("index_put"), _method("take_along_dim")
cummax, cummin, aminmax, index_fill = _method("cummax"), _method("cummin"), _method("aminmax"), \
    _method("index_fill")
take, renorm, count_nonzero = _method("take"), _method("renorm"), _method("count_nonzero")
as_strided, unique, unique_consecutive = _method("as_strided"), _method("unique"), \
    _method("unique_consecutive")
bincount, histc = _method("bincount"), _method("histc")
clamp_min, clamp_max = _method("clamp_min"), _method("clamp_max")
searchsorted, bucketize = _tm._searchsorted, _tm._bucketize
logit, float_power, copysign = _method("logit"), _method("float_power"), _method("copysign")
nansum, nanmean, quantile = _method("nansum"), _method("nanmean"), _method("quantile")
nanquantile, unflatten, addmm = _method("nanquantile"), _method("unflatten"), _method("addmm")
masked_scatter, index_copy = _method("masked_scatter"), _method("index_copy")
scatter_reduce, sgn, fix, signbit = _method("scatter_reduce"), _method("sgn"), _method("fix"), \
    _method("signbit")
lgamma: Callable[..., Any] = vars(_special)["lgamma"]  # (primitives: no type the checker sees)
digamma: Callable[..., Any] = vars(_special)["digamma"]
xlogy: Callable[..., Any] = _special.xlogy
setattr(Tensor, "lgamma", lgamma)  # noqa: B010 - special.py's primitives, as methods
setattr(Tensor, "digamma", digamma)  # noqa: B010
setattr(Tensor, "xlogy", lambda self, other: _special.xlogy(self, other))  # noqa: B010
for _name in ("lgamma", "digamma", "xlogy"):
    setattr(Tensor, _name + "_", _tm._inplace_of(getattr(Tensor, _name), _name + "_"))
finfo, iinfo = np.finfo, np.iinfo  # on rlgrad's dtypes (NumPy's): .eps, .tiny, .max, .min, .bits
scatter, repeat_interleave = _method("scatter"), _method("repeat_interleave")
norm, mm, bmm, masked_fill = _method("norm"), _method("mm"), _method("bmm"), _method("masked_fill")
addcmul, addcdiv, lerp = _method("addcmul"), _method("addcdiv"), _method("lerp")
matrix_exp = _linalg.matrix_exp
kthvalue, msort, masked_select = _method("kthvalue"), _method("msort"), _method("masked_select")
nonzero, tile, isclose, rsqrt = _method("nonzero"), _method("tile"), _method("isclose"), _method("rsqrt")
frac, logdet = _method("frac"), _method("logdet")
fliplr, flipud, swapdims = _method("fliplr"), _method("flipud"), _method("swapdims")
mode, nanmedian = _method("mode"), _method("nanmedian")
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


def numel(input: ArrayLike) -> builtins.int:
    return _t(input).numel()


def is_tensor(obj: Any) -> builtins.bool:
    return isinstance(obj, Tensor)


def is_floating_point(input: ArrayLike) -> builtins.bool:
    return _t(input).dtype.kind == "f"


def allclose(input: ArrayLike, other: ArrayLike, rtol: builtins.float = 1e-5, atol: builtins.float = 1e-8,
             equal_nan: builtins.bool = False) -> builtins.bool:
    return builtins.bool(np.allclose(np.asarray(_t(input).detach()), np.asarray(_t(other).detach()),
                                     rtol=rtol, atol=atol, equal_nan=equal_nan))


def equal(input: ArrayLike, other: ArrayLike) -> builtins.bool:
    """``torch.equal``: same shape and values."""
    a, b = np.asarray(_t(input).detach()), np.asarray(_t(other).detach())
    return a.shape == b.shape and builtins.bool((a == b).all())


# ---- random draws from rlgrad.random's global generator (seeded by manual_seed) --------------
def _drawn(fn: Any, shape: tuple, generator: Any) -> Any:
    """``fn(rng, shape)`` under vmap's randomness (``rlgrad.random.draw``: an array, or under
    randomness='different' a tensor batched at those levels)."""
    from rlgrad.random import draw

    return draw(fn, shape, generator)


def _shape_args(size: tuple) -> tuple:
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], tuple | list) else tuple(size)


def randn(*size: Any, generator: GeneratorLike = None, dtype: DTypeLike = None,
          device: DeviceLike = None,
          requires_grad: builtins.bool = False) -> Tensor:
    dt = dtype or get_default_dtype()
    arr = _drawn(lambda rng, s: rng.standard_normal(s, dtype=np.float64), _shape_args(size), generator)
    return arr.to(dt) if isinstance(arr, Tensor) else _make(arr.astype(dt), requires_grad, device)


def rand(*size: Any, generator: GeneratorLike = None, dtype: DTypeLike = None,
         device: DeviceLike = None,
         requires_grad: builtins.bool = False) -> Tensor:
    dt = dtype or get_default_dtype()
    arr = _drawn(lambda rng, s: rng.random(s), _shape_args(size), generator)
    return arr.to(dt) if isinstance(arr, Tensor) else _make(arr.astype(dt), requires_grad, device)


def randint(low: builtins.int, high: Any = None, size: Any = None, *, generator: GeneratorLike = None,
            dtype: DTypeLike = None, device: DeviceLike = None) -> Tensor:
    """``torch.randint(high, size)`` or ``torch.randint(low, high, size)``: int64 in [low, high)."""
    if size is None:
        low, high, size = 0, low, high
    arr = _drawn(lambda rng, s: rng.integers(low, high, size=s, dtype=np.int64), tuple(size), generator)
    if isinstance(arr, Tensor):
        return arr.to(dtype or np.int64)
    return _make(arr.astype(dtype or np.int64, copy=False), False, device)


def randn_like(input: ArrayLike, *, dtype: DTypeLike = None, device: DeviceLike = None,
               requires_grad: builtins.bool = False) -> Tensor:
    x = _t(input)
    return randn(x.shape, dtype=dtype or x.dtype, device=device, requires_grad=requires_grad)


def rand_like(input: ArrayLike, *, dtype: DTypeLike = None, device: DeviceLike = None,
              requires_grad: builtins.bool = False) -> Tensor:
    x = _t(input)
    return rand(x.shape, dtype=dtype or x.dtype, device=device, requires_grad=requires_grad)


def normal(mean: Any, std: Any = 1.0, size: Any = None, *, generator: GeneratorLike = None) -> Tensor:
    """``torch.normal``: ``mean + std * N(0, 1)`` with the broadcast shape of ``mean`` and ``std``
    (Tensors or numbers; ``size=`` when both are numbers). The draw is a constant, as PyTorch's."""
    m = mean.detach() if isinstance(mean, Tensor) else np.asarray(mean)
    s = std.detach() if isinstance(std, Tensor) else np.asarray(std)
    shape = tuple(size) if size is not None else np.broadcast_shapes(tuple(m.shape), tuple(s.shape))
    dts = [a.dtype for a in (m, s) if a.dtype.kind == "f" and len(a.shape)]
    dt = dts[0] if dts else get_default_dtype()
    z = _drawn(lambda rng, sh: rng.standard_normal(sh), shape, generator)
    if isinstance(z, Tensor) or isinstance(m, _BatchedTensor) or isinstance(s, _BatchedTensor):
        return (z * s + m).to(dt)  # vmap: batched operands or draws, as tensors
    m, s = (a._value if isinstance(a, Tensor) else a for a in (m, s))
    return _leaf(np.asarray(m + s * z, dtype=dt))


# ---- Tensor.uniform_ / normal_: draws written in place, from the generator above
def _draw_into(self: Tensor, name: str, draw: Callable, generator: Any) -> Tensor:
    if self.dtype.kind != "f":
        raise RuntimeError(f"{name} is only implemented for floating point tensors, got "
                           f"{self.dtype}")
    if isinstance(self, _BatchedTensor):  # vmap: the draw (per slice or shared) replaces it
        return self._assign(_drawn(draw, tuple(self.shape), generator))
    dst = _tm._writable(self, name)
    drawn = _drawn(draw, dst.shape, generator)
    if isinstance(drawn, Tensor):
        raise RuntimeError(f"vmap: {name} with randomness='different' on a tensor that is not "
                           "batched would write a different draw per slice into one tensor; "
                           "make it batched first (x = x + 0 * batched) or use 'same'")
    dst[...] = drawn
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


def _fill_draw(name: str, draw: Callable, defaults: tuple, check: Any = None) -> Callable:
    """torch's in-place draws beyond uniform_/normal_ (``bernoulli_(p)``, ``exponential_(lambd)``
    ...): ``draw(rng, shape, *params)`` written in, as ``_draw_into``."""
    def method(self: Tensor, *args: Any, generator: Any = None, **kwargs: Any) -> Tensor:
        names = [n for n, _ in defaults]
        vals = [*args, *[kwargs.get(n, d) for n, d in defaults[len(args):]]]
        if set(kwargs) - set(names):
            raise TypeError(f"{name}() takes ({', '.join(names)}, *, generator=None), got {sorted(kwargs)}")
        if check is not None:
            check(*vals)
        return _draw_into(self, name, lambda rng, shape: draw(rng, shape, *vals), generator)

    method.__name__ = method.__qualname__ = name
    return _replayed(method)


def _positive(name: str) -> Callable:
    def check(v: Any, *rest: Any) -> None:
        if not builtins.float(v) > 0:
            raise RuntimeError(f"{name} expects a positive parameter, got {v}")
    return check


def _random_ints(rng: Any, shape: tuple, low: Any, high: Any) -> Any:
    if high is None:  # random_(to) or random_(): [0, to) or [0, 2**24] as torch's float default
        low, high = (0, low) if low is not None else (0, 2 ** 24 + 1)
    return rng.integers(builtins.int(low), builtins.int(high), size=shape)


_FILL_DRAWS: dict[str, tuple[Callable, tuple, Any]] = {
    "bernoulli_": (lambda rng, s, p: rng.random(s) < _tm._value(p), (("p", 0.5),), None),
    "exponential_": (lambda rng, s, lambd: rng.exponential(1 / lambd, s), (("lambd", 1.0),),
                     _positive("exponential_")),
    "geometric_": (lambda rng, s, p: rng.geometric(p, s), (("p", 0.5),), None),
    "log_normal_": (lambda rng, s, mean, std: rng.lognormal(mean, std, s), (("mean", 1.0), ("std", 2.0)),
                    None),
    "cauchy_": (lambda rng, s, median, sigma: median + sigma * rng.standard_cauchy(s),
                (("median", 0.0), ("sigma", 1.0)), None),
    "random_": (_random_ints, (("from", None), ("to", None)), None),
}
for _name, (_draw, _defaults, _check) in _FILL_DRAWS.items():
    setattr(Tensor, _name, _fill_draw(_name, _draw, _defaults, _check))


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
# ---- index and block constructions (issue 29)
def tril_indices(row: builtins.int, col: builtins.int, offset: builtins.int = 0, *,
                 dtype: DTypeLike = None, device: DeviceLike = None) -> Tensor:
    """torch's: the (2, N) row and column indices of the lower triangle, row by row."""
    _check_device(device)
    return _leaf(np.stack(np.tril_indices(row, offset, col)).astype(dtype or np.int64))


def triu_indices(row: builtins.int, col: builtins.int, offset: builtins.int = 0, *,
                 dtype: DTypeLike = None, device: DeviceLike = None) -> Tensor:
    """torch's: the (2, N) row and column indices of the upper triangle, row by row."""
    _check_device(device)
    return _leaf(np.stack(np.triu_indices(row, offset, col)).astype(dtype or np.int64))


def cartesian_prod(*tensors: Any) -> Tensor:
    """torch's: every combination of the 1-D tensors' elements, one per row (one tensor: itself);
    each column an index read, so the gradient reaches every input."""
    if builtins.any(_t(x).ndim != 1 for x in tensors):
        raise RuntimeError("cartesian_prod expects 1-D tensors")
    if len(tensors) == 1:
        return tensors[0]
    dt = result_type(*tensors)
    grid = np.indices(tuple(_t(x).shape[0] for x in tensors)).reshape(len(tensors), -1)
    return _ops.stack([_ops.getitem(x.to(dt), g) for x, g in zip(tensors, grid)], axis=1)


def block_diag(*tensors: Any) -> Tensor:
    """torch's: the tensors (0-d, 1-D as one row, 2-D) on the diagonal of one matrix, zeros
    elsewhere; each block padded into place, so the gradient reaches every block."""
    blocks = [_ops.reshape(x, (1, -1) if x.ndim < 2 else tuple(x.shape)) for x in map(_t, tensors)]
    if builtins.any(len(b.shape) != 2 for b in blocks):
        raise RuntimeError("block_diag: input tensors must have 2 or fewer dimensions")
    dt = result_type(*tensors) if tensors else get_default_dtype()
    width = builtins.sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        rows.append(_ops.pad(b.to(dt), ((0, 0), (left, width - left - b.shape[1]))))
        left += b.shape[1]
    return _ops.concatenate(rows, axis=0) if rows else _leaf(np.zeros((0, 0), dt))


# ---- more top-level functions RL code calls (issue 29's survey)
def argwhere(input: ArrayLike) -> Tensor:  # noqa: A002
    return _tm._method_nonzero(_t(input))  # (the method says it may be a tuple)


def std_mean(input: ArrayLike, dim: builtins.int | None = None,  # noqa: A002
             unbiased: builtins.bool | None = None, keepdim: builtins.bool = False, *,
             correction: builtins.int | None = None) -> tuple[Tensor, Tensor]:
    """``(std, mean)``, torch's order."""
    x = _t(input)
    m = x.mean(dim, keepdim) if dim is not None else x.mean()
    return x.std(dim, unbiased, keepdim, correction=correction), m


def var_mean(input: ArrayLike, dim: builtins.int | None = None,  # noqa: A002
             unbiased: builtins.bool | None = None, keepdim: builtins.bool = False, *,
             correction: builtins.int | None = None) -> tuple[Tensor, Tensor]:
    """``(var, mean)``, torch's order."""
    x = _t(input)
    m = x.mean(dim, keepdim) if dim is not None else x.mean()
    return x.var(dim, unbiased, keepdim, correction=correction), m


def broadcast_tensors(*tensors: Any) -> tuple[Tensor, ...]:
    shape = np.broadcast_shapes(*(tuple(_t(x).shape) for x in tensors))
    return tuple(_ops.broadcast_to(x, shape) for x in tensors)


def broadcast_shapes(*shapes: Any) -> Size:
    return Size(np.broadcast_shapes(*(tuple(s) if isinstance(s, tuple | list) else (s,) for s in shapes)))


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """torch's (``indexing='ij'`` by default, NumPy's is 'xy'): each 1-D tensor broadcast
    along the others' dimensions."""
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    n = len(tensors)
    sizes = [_t(x).numel() for x in tensors]
    if indexing == "xy" and n >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for k, x in enumerate(tensors):
        at = (1 - k if k < 2 else k) if indexing == "xy" and n >= 2 else k
        shape = [1] * n
        shape[at] = -1
        out.append(_ops.broadcast_to(_ops.reshape(x, tuple(shape)), tuple(sizes)))
    return tuple(out)


def combinations(input: ArrayLike, r: builtins.int = 2, with_replacement: builtins.bool = False) -> Tensor:  # noqa: A002
    """torch's: every length-``r`` combination of the 1-D tensor's elements, one per row."""
    import itertools

    x = _t(input)
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    rows = np.array(list(pick(range(x.shape[0]), r)), np.int64).reshape(-1, r)
    return _ops.getitem(x, rows)


def tensor_split(input: ArrayLike, indices_or_sections: builtins.int | Sequence[builtins.int],  # noqa: A002
                 dim: builtins.int = 0) -> tuple[Tensor, ...]:
    """torch's: ``n`` near-equal parts (the first ones one longer), or the parts between the
    given indices, along ``dim``."""
    x = _t(input)
    d = dim % builtins.max(x.ndim, 1)
    n = x.shape[d]
    cuts = _value_of(indices_or_sections)
    if np.ndim(cuts) == 0:
        k = builtins.int(cuts)
        if k < 1:
            raise RuntimeError(f"tensor_split: number of sections must be at least 1, got {k}")
        sizes = [n // k + (i < n % k) for i in range(k)]
        cuts = list(np.cumsum(sizes)[:-1])
    bounds = [0] + [builtins.min(builtins.max(builtins.int(c), 0), n) for c in cuts] + [n]
    return tuple(_ops.getitem(x, (slice(None),) * d + (slice(a, builtins.max(a, b)),))
                 for a, b in zip(bounds[:-1], bounds[1:]))


def _value_of(v: Any) -> Any:
    return v._value.tolist() if isinstance(v, Tensor) else v


def hsplit(input: ArrayLike, sections: builtins.int | Sequence[builtins.int]) -> tuple[Tensor, ...]:  # noqa: A002
    return tensor_split(input, sections, 1 if _t(input).ndim > 1 else 0)


def vsplit(input: ArrayLike, sections: builtins.int | Sequence[builtins.int]) -> tuple[Tensor, ...]:  # noqa: A002
    return tensor_split(input, sections, 0)


def _stacker(name: str, fn: Callable) -> Callable:
    def stacker(tensors: Any) -> Tensor:
        ts = [_t(x) for x in tensors]
        dt = result_type(*ts)
        return fn([x.to(dt) for x in ts])

    stacker.__name__ = stacker.__qualname__ = name
    stacker.__doc__ = f"``torch.{name}`` (rlgrad.numpy's, the tensors promoted as torch's)."
    return stacker


def _numpy_fn(name: str) -> Any:
    from rlgrad import numpy as rnp

    return getattr(rnp, name)


hstack, vstack = _stacker("hstack", _numpy_fn("hstack")), _stacker("vstack", _numpy_fn("vstack"))
column_stack = _stacker("column_stack", _numpy_fn("column_stack"))
row_stack = _stacker("row_stack", _numpy_fn("vstack"))
dstack = _stacker("dstack", lambda ts: _ops.concatenate(
    [_ops.reshape(x, (1, -1, 1) if x.ndim < 2 else tuple(x.shape) + (1,)) if x.ndim < 3 else x
     for x in ts], axis=2))
concat = concatenate = _cat  # torch.cat under its other names


def atleast_1d(*tensors: Any) -> Tensor | tuple[Tensor, ...]:
    out = tuple(_ops.reshape(x, (1,)) if _t(x).ndim == 0 else x for x in tensors)
    return out[0] if len(out) == 1 else out


def atleast_2d(*tensors: Any) -> Tensor | tuple[Tensor, ...]:
    out = tuple(_ops.reshape(x, (1,) * (2 - _t(x).ndim) + tuple(x.shape)) if _t(x).ndim < 2 else x
                for x in tensors)
    return out[0] if len(out) == 1 else out


def rot90(input: ArrayLike, k: builtins.int = 1, dims: Sequence[builtins.int] = (0, 1)) -> Tensor:  # noqa: A002
    return _numpy_fn("rot90")(_t(input), k, tuple(dims))


def addmv(input: ArrayLike, mat: ArrayLike, vec: ArrayLike, *, beta: builtins.float = 1,  # noqa: A002
          alpha: builtins.float = 1) -> Tensor:
    return _t(input).addmm(mat, vec, beta=beta, alpha=alpha)


def baddbmm(input: ArrayLike, batch1: ArrayLike, batch2: ArrayLike, *, beta: builtins.float = 1,  # noqa: A002
            alpha: builtins.float = 1) -> Tensor:
    return _t(input).addmm(batch1, batch2, beta=beta, alpha=alpha)


def vdot(input: ArrayLike, other: ArrayLike) -> Tensor:  # noqa: A002
    return (_t(input) * _t(other)).sum()


def cross(input: ArrayLike, other: ArrayLike, dim: builtins.int | None = None) -> Tensor:  # noqa: A002
    """torch's (``linalg.cross``'s default ``dim=-1`` when None; the first size-3 dim in torch
    is deprecated)."""
    x, y = _t(input), _t(other)
    d = -1 if dim is None else dim
    a = [_ops.getitem(x, (Ellipsis, k)) for k in range(3)] if d in (-1, x.ndim - 1) else \
        [_ops.getitem(x, (slice(None),) * (d % x.ndim) + (k,)) for k in range(3)]
    b = [_ops.getitem(y, (Ellipsis, k)) for k in range(3)] if d in (-1, y.ndim - 1) else \
        [_ops.getitem(y, (slice(None),) * (d % y.ndim) + (k,)) for k in range(3)]
    parts = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    return _ops.stack(parts, axis=d)


def cdist(x1: ArrayLike, x2: ArrayLike, p: builtins.float = 2.0) -> Tensor:
    """torch's: the ``p``-norm distance of every row of ``x1`` to every row of ``x2`` (batched
    over leading dimensions)."""
    diff = _ops.expand_dims(_t(x1), -2) - _ops.expand_dims(_t(x2), -3)
    if p == 2:
        return _ops.sqrt((diff * diff).sum(-1))
    if p == builtins.float("inf"):
        return _ops.absolute(diff).amax(-1)
    return _ops.power(_ops.power(_ops.absolute(diff), p).sum(-1), 1.0 / p)


def tensordot(a: ArrayLike, b: ArrayLike,
              dims: builtins.int | Sequence[builtins.int] | Sequence[Sequence[builtins.int]] = 2) -> Tensor:
    """torch's (``dims`` an int or a pair of dimension lists)."""
    return _numpy_fn("tensordot")(_t(a), _t(b), axes=_value_of(dims))


def cov(input: ArrayLike, *, correction: builtins.int = 1, fweights: ArrayLike | None = None,  # noqa: A002
        aweights: ArrayLike | None = None) -> Tensor:
    """torch's: the covariance of the rows (variables) over the columns (observations)."""
    if fweights is not None or aweights is not None:
        raise NotImplementedError("cov: fweights/aweights are not supported by rlgrad; weight "
                                  "the observations yourself")
    x = _t(input)
    x = _ops.reshape(x, (1, -1)) if x.ndim < 2 else x
    c = x - x.mean(1, keepdim=True)
    return _ops.squeeze(_ops.matmul(c, c.mT) / builtins.max(x.shape[1] - correction, 0)) if \
        _t(input).ndim < 2 else _ops.matmul(c, c.mT) / builtins.max(x.shape[1] - correction, 0)


def corrcoef(input: ArrayLike) -> Tensor:  # noqa: A002
    c = cov(input)
    if c.ndim == 0:
        return c / c
    n = np.arange(c.shape[0])
    d = _ops.sqrt(_ops.getitem(c, (n, n)))
    return c / _ops.expand_dims(d, 1) / _ops.expand_dims(d, 0)


def logspace(start: builtins.float, end: builtins.float, steps: builtins.int, base: builtins.float = 10.0, *,
             dtype: DTypeLike = None, device: DeviceLike = None,
             requires_grad: builtins.bool = False) -> Tensor:
    _check_device(device)
    dt = dtype or get_default_dtype()
    return _make(np.logspace(builtins.float(start), builtins.float(end), steps, base=base).astype(dt),
                 requires_grad, device)


def randint_like(input: ArrayLike, low: builtins.int = 0, high: builtins.int | None = None, *,  # noqa: A002
                 dtype: DTypeLike = None, generator: GeneratorLike = None) -> Tensor:
    if high is None:
        low, high = 0, low
    return randint(low, high, tuple(_t(input).shape), dtype=dtype or _t(input).dtype, generator=generator)


def poisson(input: ArrayLike, generator: GeneratorLike = None) -> Tensor:  # noqa: A002
    """torch's: a Poisson draw with each rate of ``input`` (its dtype; no gradient)."""
    x = _t(input)
    rates = x.detach()._value
    return _leaf(_drawn(lambda rng, s: rng.poisson(rates), tuple(x.shape), generator).astype(x.dtype))


def floor_divide(input: ArrayLike, other: ArrayLike) -> Tensor:  # noqa: A002
    return _t(input).div(other, rounding_mode="floor")


def _bitwise(name: str, fn: Any) -> Callable:
    def op(input: Any, other: Any) -> Tensor:  # noqa: A002
        a = input._value if isinstance(input, Tensor) else input
        b = other._value if isinstance(other, Tensor) else other
        if np.result_type(a, b).kind not in "biu":
            raise RuntimeError(f"{name}: only integer and bool tensors, got {np.result_type(a, b)}")
        return _leaf(np.asarray(fn(a, b)))

    op.__name__ = op.__qualname__ = name
    return op


bitwise_and, bitwise_or = _bitwise("bitwise_and", np.bitwise_and), _bitwise("bitwise_or", np.bitwise_or)
bitwise_xor = _bitwise("bitwise_xor", np.bitwise_xor)
logical_xor = _bitwise("logical_xor", np.logical_xor)


def bitwise_not(input: ArrayLike) -> Tensor:  # noqa: A002
    a = _t(input)._value
    if a.dtype.kind not in "biu":
        raise RuntimeError(f"bitwise_not: only integer and bool tensors, got {a.dtype}")
    return _leaf(np.invert(a))


_DETERMINISTIC = [False]


def use_deterministic_algorithms(mode: builtins.bool, *, warn_only: builtins.bool = False) -> None:
    """Accepted: rlgrad's CPU kernels are deterministic already (recorded for the query)."""
    _DETERMINISTIC[0] = builtins.bool(mode)


def are_deterministic_algorithms_enabled() -> builtins.bool:
    return _DETERMINISTIC[0]


def set_printoptions(precision: builtins.int | None = None, threshold: builtins.float | None = None,
                     edgeitems: builtins.int | None = None, linewidth: builtins.int | None = None,
                     profile: str | None = None, sci_mode: builtins.bool | None = None) -> None:
    """torch's: how tensors print (NumPy's print options, which rlgrad's repr uses)."""
    presets: dict[str, tuple[Any, ...]] = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80),
                                            "full": (4, np.inf, 3, 80)}
    given: tuple[Any, ...] = (precision, threshold, edgeitems, linewidth)
    if profile is not None:
        given = tuple(v if v is not None else p for v, p in zip(given, presets[profile]))
    opts: dict[str, Any] = {k: v for k, v in zip(("precision", "threshold", "edgeitems", "linewidth"), given)
                            if v is not None}
    if sci_mode is not None:
        opts["suppress"] = not sci_mode
    np.set_printoptions(**opts)


__all__ = [name for name, value in globals().items() if not name.startswith("_")
           and name not in ("annotations", "builtins", "Any", "np", "ops", "Tensor",
                            "get_default_dtype", "Export", "add_names", "on_export", "DECLARED")]


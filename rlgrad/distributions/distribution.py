"""The ``Distribution`` base class and the helpers every distribution shares.

Gradient semantics (the point of this package):

* ``sample()`` returns a constant Tensor: no graph, whatever the parameters.  A gradient reaches
  the parameters through ``log_prob(sample)`` (the score-function / REINFORCE estimator).
* ``rsample()`` returns ``f(parameters, noise)`` with the noise drawn outside the graph: the
  pathwise (reparameterization) estimator.  Distributions without one raise and say what to use.

Shapes follow ``torch.distributions``: a draw has shape ``sample_shape + batch_shape +
event_shape``; ``log_prob`` and ``entropy`` have shape ``sample_shape + batch_shape`` (events are
summed over).  Validation of arguments and values is on by default; turn it off globally with
``Distribution.set_default_validate_args(False)`` or per instance with ``validate_args=False``.
While ``rlgrad.jit`` traces a function the checks are skipped (they read values, which a compiled
step must not bake in); the same function run eagerly checks them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.random import numpy_generator
from rlgrad.tensor import Tensor, _const, _Trace, get_default_dtype
from rlgrad.tracer import VMAP_LEVELS, mark_cut
from rlgrad.typing import GeneratorLike, ShapeLike

__all__ = ["Distribution"]

_OFF_HINT = ("(checks can be switched off with validate_args=False or "
             "Distribution.set_default_validate_args(False))")


class Distribution:
    """Base class: shapes, validation, and the sample / rsample contract."""

    has_rsample = False
    has_enumerate_support = False
    arg_constraints: dict[str, constraints.Constraint] = {}
    support: constraints.Constraint | None = None
    _validate_default = True

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn argument/value validation on or off for distributions created afterwards."""
        if value not in (True, False):
            raise ValueError(f"set_default_validate_args takes True or False, got {value!r}")
        Distribution._validate_default = bool(value)

    def __init__(self, batch_shape: tuple[int, ...] = (), event_shape: tuple[int, ...] = (),
                 validate_args: bool | None = None) -> None:
        self._batch_shape = tuple(batch_shape)
        self._event_shape = tuple(event_shape)
        self._validate_args = _validating(validate_args)

    # ---- shapes --------------------------------------------------------------------------
    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self._batch_shape

    @property
    def event_shape(self) -> tuple[int, ...]:
        return self._event_shape

    def _extended_shape(self, sample_shape: Any = ()) -> tuple[int, ...]:
        return _shape_tuple(sample_shape) + self._batch_shape + self._event_shape

    # ---- sampling ------------------------------------------------------------------------
    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        """A draw of shape ``sample_shape + batch_shape + event_shape``, outside every graph."""
        if not self.has_rsample:
            raise NotImplementedError(f"{type(self).__name__} does not implement sample()")
        from rlgrad.tracer import no_grad

        with no_grad():
            x = self.rsample(sample_shape, generator=generator)
        # mark_cut: rlgrad.explain names sample() as the op that cut the parameters' gradient
        return mark_cut(_const(x._value), "sample",
                        tuple(v for v in vars(self).values() if isinstance(v, Tensor)))

    def rsample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        """A reparameterized draw: differentiable w.r.t. the parameters."""
        raise NotImplementedError(
            f"{type(self).__name__} has no reparameterized sampler (has_rsample is False), so "
            "rsample() cannot carry a gradient to its parameters. Use sample() together with "
            "log_prob(sample) (the score-function / REINFORCE estimator, e.g. "
            "rlgrad.estimators.score_function_surrogate), or, for discrete choices, a relaxed "
            "distribution with rsample() (RelaxedOneHotCategorical, Gumbel-softmax)."
        )

    def sample_n(self, n: int, generator: GeneratorLike = None) -> Tensor:
        return self.sample((n,), generator=generator)

    # ---- densities and moments (overridden where defined) ---------------------------------
    def log_prob(self, value: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement log_prob()")

    def entropy(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement entropy()")

    def cdf(self, value: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement cdf()")

    def icdf(self, value: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement icdf()")

    def enumerate_support(self, expand: bool = True) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no finite support to enumerate")

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement mean")

    @property
    def mode(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement mode")

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement variance")

    @property
    def stddev(self) -> Tensor:
        return ops.sqrt(self.variance)

    def perplexity(self) -> Tensor:
        return ops.exp(self.entropy())

    # ---- validation ----------------------------------------------------------------------
    def _check_arg(self, name: str, value: Tensor, constraint: constraints.Constraint,
                   hint: str = "") -> None:
        data = value._value
        ok = constraint.check(data)
        if not np.all(ok):
            raise ValueError(_violation(f"{type(self).__name__}", f"argument '{name}'",
                                        constraint, data, ok, hint))

    def _validate_probability(self, value: Any, where: str) -> None:
        """An ``icdf`` argument must lie in [0, 1]: one line naming ``where`` otherwise."""
        data = _data(value)
        ok = constraints.unit_interval.check(data)
        if not np.all(ok):
            raise ValueError(_violation(f"{type(self).__name__}.{where}", "value",
                                        constraints.unit_interval, data, ok))

    def _validate_sample(self, value: Any) -> np.ndarray:
        """Check ``value``'s shape and support; returns its data."""
        data = value._value if isinstance(value, Tensor) else np.asarray(value)
        ev = self._event_shape
        if ev and data.shape[data.ndim - len(ev):] != ev:
            raise ValueError(
                f"{type(self).__name__}.log_prob: value has shape {data.shape}, whose trailing "
                f"dimensions should be the event shape {ev}"
            )
        try:
            np.broadcast_shapes(data.shape, self._batch_shape + ev)
        except ValueError:
            raise ValueError(
                f"{type(self).__name__}.log_prob: value of shape {data.shape} does not broadcast "
                f"with the batch and event shape {self._batch_shape + ev}"
            ) from None
        if self.support is not None:
            ok = self.support.check(data)
            if not np.all(ok):
                raise ValueError(_violation(f"{type(self).__name__}.log_prob", "value",
                                            self.support, data, ok))
        return data

    def __repr__(self) -> str:
        names = [n for n in self.arg_constraints if n in self.__dict__ or
                 f"_{n}" in self.__dict__]
        parts = []
        for n in names:
            v = getattr(self, n, None)
            if isinstance(v, Tensor):
                parts.append(f"{n}: {v.shape}" if v._value.size > 1 else f"{n}: {v._value!s}")
        return f"{type(self).__name__}({', '.join(parts)})"


# ---- helpers shared by the distributions -------------------------------------------------------
def tracing() -> bool:
    """True while ``rlgrad.jit`` traces (or a vmap runs): value checks are skipped and index/mask
    computations stay engine operations (a value read then would be frozen into the compiled
    step, or would see one vmapped slice)."""
    return _Trace.compiling or bool(VMAP_LEVELS)


def _validating(validate_args: bool | None) -> bool:
    """Whether a new distribution checks its arguments and values (never while tracing, nor
    inside vmap: the checks read values, which a batched argument does not give)."""
    on = Distribution._validate_default if validate_args is None else bool(validate_args)
    return on and not _Trace.compiling and not VMAP_LEVELS


def _shape_tuple(sample_shape: Any) -> tuple[int, ...]:
    if isinstance(sample_shape, tuple):
        return sample_shape
    if isinstance(sample_shape, int | np.integer):
        return (int(sample_shape),)
    return tuple(int(s) for s in sample_shape)


def _float_dtype(*values: Any) -> np.dtype:
    """The floating dtype for the parameters: that of the Tensors/arrays given, else the default."""
    dtype = None
    for v in values:
        if isinstance(v, Tensor):
            d = v._value.dtype
        elif isinstance(v, np.ndarray | np.generic):
            d = v.dtype
        else:
            continue
        if d.kind == "f":
            dtype = d if dtype is None else np.promote_types(dtype, d)
    return get_default_dtype() if dtype is None else dtype


def _as_param(v: Any, dtype: np.dtype) -> Tensor:
    """A parameter as a Tensor; Tensors (and their graphs) are kept, numbers get ``dtype``."""
    if isinstance(v, Tensor):
        if v._value.dtype.kind == "f":
            return v
        return _const(v._value.astype(dtype))  # integer tensors: never differentiable anyway
    return _const(np.asarray(v, dtype=dtype))


def _params(*values: Any) -> tuple[list[Tensor], tuple[int, ...]]:
    """Parameters as Tensors broadcast to one shape (torch's ``broadcast_all``)."""
    dtype = _float_dtype(*values)
    ts = [_as_param(v, dtype) for v in values]
    shape = ts[0]._value.shape
    if any(t._value.shape != shape for t in ts[1:]):
        try:
            shape = np.broadcast_shapes(*(t._value.shape for t in ts))
        except ValueError:
            raise ValueError(
                "distribution parameters do not broadcast together: shapes "
                + ", ".join(str(t._value.shape) for t in ts)
            ) from None
        ts = [t if t._value.shape == shape else ops.broadcast_to(t, shape) for t in ts]
    return ts, shape


def _violation(where: str, what: str, constraint: constraints.Constraint, data: np.ndarray,
               ok: Any, hint: str = "") -> str:
    ok = np.asarray(ok)
    bad = ~ok
    n_bad = int(bad.sum())
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if ok.ndim else ()
    example = np.asarray(data)[first] if first else np.asarray(data)
    where_ = f"first at {'batch ' if constraint.event_dim else ''}index {first}: " if first else "got "
    if constraint.event_dim and data.ndim:
        detail = f"{where_}{_fmt(example)}, sum {float(np.sum(example)):.6g}"
    else:
        detail = f"{where_}{_fmt(example)}"
    msg = (f"{where}: {what} {constraint.description}, but {n_bad} of {max(ok.size, 1)} "
           f"{'rows' if constraint.event_dim else 'entries'} do not ({detail}).")
    if hint:
        msg += f" {hint}"
    return f"{msg} {_OFF_HINT}"


def _fmt(x: Any) -> str:
    return np.array2string(np.asarray(x), precision=6, threshold=8, separator=", ")


def _rng(generator: Any) -> np.random.Generator:
    return numpy_generator(generator)


def _standard_normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    if dtype == np.float32 or dtype == np.float64:
        return rng.standard_normal(shape, dtype=dtype)
    return rng.standard_normal(shape).astype(dtype)


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    if dtype == np.float32 or dtype == np.float64:
        return rng.random(shape, dtype=dtype)
    return rng.random(shape).astype(dtype)


def _sum_rightmost(x: Any, n: int) -> Any:
    if n == 0:
        return x
    return ops.sum(x, axis=tuple(range(-n, 0)))


def _data(x: Any) -> np.ndarray:
    return x._value if isinstance(x, Tensor) else np.asarray(x)

"""Categorical and Bernoulli: the discrete action distributions.

Both are built for the acting loop: construction stores the given parameter and checks it
cheaply; the normalised ``logits`` / ``probs`` are computed only when asked; ``sample()`` draws
one uniform per sample and inverts the (unnormalised) CDF, so a single action costs a few
NumPy calls.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgrad import ops
from rlgrad.distributions import constraints
from rlgrad.distributions.distribution import (
    _OFF_HINT,
    Distribution,
    _as_param,
    _data,
    _float_dtype,
    _noise,
    _params,
    _shape_tuple,
    _validating,
    tracing,
)
from rlgrad.random import default_generator, draw, numpy_generator
from rlgrad.special import xlogy
from rlgrad.tensor import Tensor, _const, _Trace
from rlgrad.tracer import VMAP_LEVELS, defbatch, defjvp_is_linear, defvjp, mark_cut, primitive
from rlgrad.typing import ArrayLike, GeneratorLike, ShapeLike

__all__ = ["Categorical", "Bernoulli"]

_INF = math.inf
_SMALL_K = 32  # up to this many categories a single row is sampled with Python scalars
_FEW = 8  # up to this many categories batched sampling works column by column
_exp = math.exp
_NON_NEGATIVE = constraints.interval(0.0, math.inf)
_NON_NEGATIVE.description = "must be non-negative (>= 0)"
_POSITIVE_FINITE = constraints._Interval(0.0, math.inf, closed=False)
_POSITIVE_FINITE.description = "must have a positive, finite sum along the last dimension"


def _one_of(name: str, probs: Any, logits: Any) -> None:
    if (probs is None) == (logits is None):
        raise ValueError(
            f"{name} takes exactly one of probs= or logits=, got "
            f"{'both' if probs is not None else 'neither'}"
        )


def inverse_cdf(cdf: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Category indices for uniforms ``u`` in [0, 1) on unnormalised cumulative masses ``cdf``
    (last axis): the first category whose mass exceeds ``u * total``, so zero-mass (masked)
    categories are never drawn. ``Categorical.sample``'s rule; the policies' NumPy acting path
    calls it too, so acting samples exactly as the distribution does."""
    t = u * cdf[..., -1]
    k = cdf.shape[-1]
    if 1 < k <= _FEW:  # a few categories: one comparison per column, not a reduction's setup
        idx = np.less_equal(cdf[..., 0], t).astype(np.int64)
        for i in range(1, k - 1):
            idx += cdf[..., i] <= t
        return idx
    return np.add.reduce(cdf[..., :-1] <= t[..., None], axis=-1, dtype=np.int64)  # bool sum


def row_max(x: np.ndarray) -> np.ndarray:
    """``np.maximum.reduce(x, axis=-1, keepdims=True)``, column by column for a few categories
    (ops' short-last-axis reduction: the same comparisons in the same order, NaN included)."""
    if x.ndim >= 2 and 1 < x.shape[-1] <= _FEW:
        return ops._reduce_short_last(np.maximum, x, True)
    return np.maximum.reduce(x, axis=-1, keepdims=True)


# Sampling rows of logits (the policies' acting: rlgrad.rl.policies' sample_numpy): the row shift
# and the running sum with inverse_cdf's pick each in one C loop (rlgrad._kernels' row_shift and
# cdf_pick) around NumPy's exp and log, instead of ~12 small ufunc calls (~8 us of a batch-1
# step); the same operations in the same order, so the same bits. Off, or without the kernels:
# NumPy's lines (the reference: tests/distributions/test_categorical_draw.py compares the two).
C_DRAW = True


def logits_draw(logits: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(category indices, their log-probabilities) of the rows of ``logits`` (n, K) for the
    uniforms ``u`` (n,) in [0, 1): ``inverse_cdf`` on the unnormalised probabilities
    exp(logits - max), and log p(a) = z_a - log(sum), z = logits - max."""
    k = ops._kernels
    if C_DRAW and k is not None and logits.ndim == 2 and logits.dtype.kind == "f":
        x = logits if logits.flags.c_contiguous else np.ascontiguousarray(logits)
        z = np.empty_like(x)
        if k.row_shift(x, z):
            cdf = np.exp(z)
            n = len(x)
            idx, log_prob = np.empty(n, np.int64), np.empty(n, x.dtype)
            if k.cdf_pick(cdf, u, z, idx, log_prob):
                log_prob -= np.log(cdf[:, -1])
                return idx, log_prob
    # (ufunc methods: the same operations as .max / np.cumsum without their wrappers; in place
    # where the array is this call's own)
    z = logits - row_max(logits)
    cdf = np.exp(z)
    np.add.accumulate(cdf, axis=-1, out=cdf)
    idx = inverse_cdf(cdf, u)
    log_prob = z[row_indices(len(z)), idx]
    log_prob -= np.log(cdf[:, -1])
    return idx, log_prob


# ---- the taken action's entry of each row, as one op each way ---------------------------------
_ROWS: dict[int, np.ndarray] = {}


def row_indices(n: int) -> np.ndarray:
    """``np.arange(n)``, made once per batch size and read-only (the row half of an index that
    picks one entry per row; acting in rlgrad.rl.policies uses it too)."""
    r = _ROWS.get(n)
    if r is None:
        r = _ROWS[n] = np.arange(n)
        r.flags.writeable = False
    return r


def _pick(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``table[i, idx[i]]`` for an (n, K) table and n category indices."""
    return table[row_indices(len(idx)), idx]


def _unpick(g: np.ndarray, idx: np.ndarray, k: int) -> np.ndarray:
    """The transpose of ``_pick``: (n, k) zeros holding ``g[i]`` at ``[i, idx[i]]`` (one index
    per row, so no two entries meet: an assignment, not a scatter-add)."""
    out = np.zeros((len(idx), k), dtype=g.dtype)
    out[row_indices(len(idx)), idx] = g
    return out


# ``log_prob``'s selection in a traced (compiled) step: the index is an argument, read at every
# call. One gather forward and one assignment backward, where selecting by a one-hot mask took
# four ops forward and three backward. Both are linear in their first argument and each other's
# transpose, so every order of derivative is these two again.
pick = primitive(_pick, "categorical_pick")
defbatch(pick, "categorical_pick")
unpick = primitive(_unpick, "categorical_unpick")
defbatch(unpick, "categorical_unpick")
defvjp(pick, lambda g, ans, table, idx: unpick(g, idx, table.shape[-1]), None)
defvjp(unpick, lambda g, ans, gv, idx, k: pick(g, idx), None, None)
defjvp_is_linear(pick)
defjvp_is_linear(unpick)


class Categorical(Distribution):
    """A distribution over ``{0, ..., K-1}``, K = the size of the last dimension of the parameter.

    ``Categorical(logits=scores)`` takes unnormalised log-probabilities (any real, ``-inf`` masks
    an action); ``Categorical(probs=p)`` takes probabilities that sum to 1 along the last axis.
    ``sample()`` returns int64 indices of shape ``sample_shape + batch_shape``.
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True
    _logits_in: Tensor | None  # the parameter as given: one of the two
    _probs_in: Tensor | None
    _logits: Tensor | None  # computed on demand
    _probs: Tensor | None
    _cdf: np.ndarray | None
    _row: list[float] | None
    _row_max: np.ndarray | None

    def __init__(self, probs: ArrayLike | None = None, logits: ArrayLike | None = None,
                 validate_args: bool | None = None) -> None:
        if probs is None and isinstance(logits, Tensor):  # the acting loop's path: keep it short
            t = logits
            if t._value.dtype.kind != "f":
                t = _as_param(t, _float_dtype())
        else:
            _one_of("Categorical", probs, logits)
            raw = logits if probs is None else probs
            t = _as_param(raw, _float_dtype(raw))
        data = t._value
        if data.ndim == 0:
            raise ValueError(
                f"Categorical: {'logits' if probs is None else 'probs'} must have at least one "
                "dimension (the last one indexes the categories), got a scalar"
            )
        self._batch_shape = data.shape[:-1]
        self._event_shape = ()
        self._num_events = data.shape[-1]
        self._validate_args = _validating(validate_args)
        self._logits = self._probs = self._cdf = None  # computed on demand
        # One row of a few actions (the acting loop): the row as Python floats, where a handful
        # of scalar operations beat NumPy's per-call overhead for checking and sampling.
        self._row = self._row_max = None
        if probs is None:
            self._logits_in, self._probs_in = t, None
            if self._validate_args:
                if data.ndim == 1 and data.shape[0] <= _SMALL_K:
                    row = self._row = data.tolist()
                    # the sum is finite iff no entry is NaN or +-inf (-inf masks go the long way)
                    if not -_INF < sum(row) < _INF:
                        self._check_logits(data)
                else:
                    self._check_logits(data)
        else:
            self._logits_in, self._probs_in = None, t
            if self._validate_args:
                self._check_probs(t)

    def _check_logits(self, data: np.ndarray) -> None:
        # One reduction checks everything: the row maximum is NaN if any entry is NaN, +inf if
        # an entry is +inf, -inf if every action is masked.
        if data.ndim == 1:
            m = data.max()
            if -_INF < m < _INF:
                return
        else:
            m = data.max(axis=-1, keepdims=True)
            if np.isfinite(m).all():
                self._row_max = m  # reused by the sampler
                return
        m = np.asarray(m)[..., 0] if data.ndim > 1 else np.asarray(m)
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(m))[0]) if m.ndim else ()
        row = data[bad]
        if np.isnan(row).any():
            why = "contains NaN"
        elif np.isposinf(row).any():
            why = "contains +inf (softmax of +inf is undefined)"
        else:
            why = "is -inf everywhere (every action masked: no valid category)"
        raise ValueError(
            f"Categorical: argument 'logits' must be real numbers below +inf with at least one "
            f"finite entry per row, but the row at batch index {bad} {why}: "
            f"{np.array2string(row, threshold=8)}. {_OFF_HINT}"
        )

    def _check_probs(self, t: Tensor) -> None:
        data = t._value
        neg = data < 0
        if neg.any() or np.isnan(data).any():
            self._check_arg("probs", t, _NON_NEGATIVE,
                            "Probabilities cannot be negative: pass softmax(scores) or logits=.")
        # torch normalises probs by their sum: only a row with no mass at all is invalid
        total = data.sum(axis=-1)
        ok = np.isfinite(total) & (total > 0)
        if not np.all(ok):
            self._check_arg("probs", _const(total), _POSITIVE_FINITE,
                            "Each row needs some mass: pass softmax(scores) or logits=.")

    # ---- parameters (lazy) -----------------------------------------------------------------
    @property
    def logits(self) -> Tensor:
        """Normalised log-probabilities (``logsumexp(logits, -1) == 0``), as torch's."""
        if self._logits is None:
            if self._logits_in is not None:
                self._logits = ops.log_softmax(self._logits_in, axis=-1)
            else:
                # log of a zero probability: the smallest normal number keeps it finite and its
                # gradient NaN-free (torch clamps to eps instead)
                p = self.probs
                self._logits = ops.log(ops.clip(p, np.finfo(p._value.dtype).tiny, None))
        return self._logits

    @property
    def probs(self) -> Tensor:
        if self._probs is None:
            if self._probs_in is not None:
                p = self._probs_in
                self._probs = p / ops.sum(p, axis=-1, keepdims=True)
            else:  # exp of the normalised log-probabilities: softmax without a second pass
                self._probs = ops.exp(self.logits)
        return self._probs

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self._batch_shape + (self._num_events,)

    # ---- sampling --------------------------------------------------------------------------
    def _unnormalised_cdf(self) -> np.ndarray:
        cdf = self._cdf
        if cdf is None:
            if self._probs_in is not None:
                cdf = np.cumsum(self._probs_in._value, axis=-1)
            else:
                assert self._logits_in is not None  # (one of the two is given)
                x = self._logits_in._value
                if x.ndim == 1:
                    cdf = np.cumsum(np.exp(x - x.max()))
                else:
                    m = self._row_max
                    if m is None:
                        m = x.max(axis=-1, keepdims=True)
                    cdf = np.cumsum(np.exp(x - m), axis=-1)
            self._cdf = cdf
        return cdf

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        """int64 indices of shape ``sample_shape + batch_shape``, outside every graph.

        Inverse-CDF sampling: one uniform u per draw, the index is the first category whose
        cumulative (unnormalised) mass exceeds ``u * total``, so zero-probability (masked)
        categories are never drawn.
        """
        if VMAP_LEVELS:
            return self._sample_batched(sample_shape, generator)
        rng = default_generator._rng if generator is None else numpy_generator(generator)
        if sample_shape == () and not self._batch_shape and self._num_events <= _SMALL_K:
            return mark_cut(_const(np.int64(self._sample_row(rng.random()))), "sample",
                            (self._probs_in if self._logits_in is None else self._logits_in,))
        cdf = self._unnormalised_cdf()
        idx = inverse_cdf(cdf, rng.random(_shape_tuple(sample_shape) + self._batch_shape))
        src = self._probs_in if self._logits_in is None else self._logits_in
        return mark_cut(_const(np.asarray(idx, dtype=np.int64)), "sample", (src,))

    def _sample_batched(self, sample_shape: Any, generator: Any) -> Tensor:
        """``sample`` inside vmap: ``inverse_cdf``'s rule with tensors (the parameters may be
        batched), the uniforms drawn as the vmap's ``randomness`` says (one per slice with
        'different': the same draws as the unbatched call with the same seed)."""
        src = self._probs_in if self._logits_in is None else self._logits_in
        x = ops.stop_gradient(src)
        if self._logits_in is not None:
            x = ops.exp(x - ops.max(x, axis=-1, keepdims=True))
        cdf = ops.cumsum(x, axis=-1)
        u = draw(lambda rng, s: rng.random(s), _shape_tuple(sample_shape) + self._batch_shape, generator)
        t = ops.multiply(u, cdf[..., -1])
        below = ops.astype(ops.less_equal(cdf[..., :-1], ops.expand_dims(t, -1)), np.int64)
        idx = ops.sum(below, axis=-1)
        return mark_cut(idx, "sample", (src,))

    def _sample_row(self, u: float) -> int:
        row = self._row
        if row is None:
            row = self._row = self._param_data().tolist()
        cum = []
        acc = 0.0
        if self._probs_in is None:
            m = max(row)
            for v in row:
                acc += _exp(v - m)
                cum.append(acc)
        else:
            for v in row:
                acc += v
                cum.append(acc)
        t = u * acc
        for i, c in enumerate(cum):
            if t < c:
                return i
        # u * total rounded up to total: the last category with mass
        i = len(cum) - 1
        while i > 0 and cum[i] == cum[i - 1]:
            i -= 1
        return i

    # ---- densities -------------------------------------------------------------------------
    def _index(self, value: Any) -> np.ndarray:
        v = _data(value)
        if self._validate_args:
            if v.dtype.kind not in "iub" and v.dtype.kind != "f":
                raise ValueError(f"Categorical.log_prob: value must hold integers, got {v.dtype}")
            ok = (v >= 0) & (v < self._num_events)
            if v.dtype.kind == "f":
                ok &= v == np.floor(v)
            if not np.all(ok):
                first = tuple(int(i) for i in np.argwhere(~np.asarray(ok))[0]) if v.ndim else ()
                raise ValueError(
                    f"Categorical.log_prob: value must be an integer in [0, {self._num_events - 1}]"
                    f" (the support: K = {self._num_events} categories), but "
                    f"{int(np.size(ok) - np.count_nonzero(ok))} of {max(v.size, 1)} entries are "
                    f"not ({f'first at index {first}: ' if first else 'got '}{v[first]}). "
                    f"{_OFF_HINT}"
                )
        return v if v.dtype.kind in "iu" else v.astype(np.int64)

    def log_prob(self, value: Tensor) -> Tensor:
        """log p(value); differentiable w.r.t. the parameters (value is an index, never)."""
        if isinstance(value, Tensor) and tracing():
            return self._log_prob_traced(value)
        idx: np.ndarray | Tensor = self._index(value)
        if _Trace.compiling and isinstance(value, Tensor):  # rlgrad.jit: read at every call
            idx = value if value.dtype.kind in "iu" else ops.astype(value, np.int64)
        if self._probs_in is not None:
            # gather first, then log: a zero probability elsewhere never meets a log
            table = self.probs
        else:
            table = self.logits
        shape = idx.shape
        if shape != self._batch_shape:
            try:
                shape = np.broadcast_shapes(shape, self._batch_shape)
            except ValueError:
                raise ValueError(
                    f"Categorical.log_prob: value of shape {idx.shape} does not broadcast with "
                    f"the batch shape {self._batch_shape}"
                ) from None
            idx = ops.broadcast_to(idx, shape) if isinstance(idx, Tensor) else np.broadcast_to(
                idx, shape)
            if shape != self._batch_shape:
                table = ops.broadcast_to(table, shape + (self._num_events,))
        if not shape:
            out = table[idx if isinstance(idx, Tensor) else int(idx)]
        else:
            out = ops.reshape(ops.take_along_axis(table, idx[..., None], -1), shape)
        return ops.log(out) if self._probs_in is not None else out

    def _log_prob_traced(self, value: Tensor) -> Tensor:
        # The index is a traced input: select with engine operations, so that the compiled step
        # reads each call's actions (broadcast against the batch as eagerly). A one-hot select
        # and sum: for a few categories cheaper than a gather and its scatter-add backward.
        table = self.probs if self._probs_in is not None else self.logits
        if table.ndim == 2 and value.shape == self._batch_shape and value.dtype.kind in "iu":
            out = pick(table, value)  # a row of actions for a batch of rows: the common case
        else:  # broadcast against the batch as eagerly
            categories = np.arange(self._num_events)
            hit = ops.expand_dims(value, -1) == categories
            out = ops.sum(ops.where(hit, table, 0.0), axis=-1)
        return ops.log(out) if self._probs_in is not None else out

    def entropy(self) -> Tensor:
        p = self.probs
        if self._probs_in is not None:
            mask = (p > 0) if tracing() else p._value > 0  # traced: recomputed at every replay
            plogp = p * ops.log(ops.where(mask, p, 1.0))
        else:  # a masked (-inf) logit has p = 0: clamped as torch does, its term is 0, not NaN
            logits = self.logits
            plogp = p * ops.clip(logits, float(np.finfo(logits._value.dtype).min), None)
        return -ops.sum(plogp, axis=-1)

    def enumerate_support(self, expand: bool = True) -> Tensor:
        k = self._num_events
        values = np.arange(k, dtype=np.int64).reshape((k,) + (1,) * len(self._batch_shape))
        if expand:
            values = np.broadcast_to(values, (k,) + self._batch_shape).copy()
        return _const(values)

    @property
    def mean(self) -> Tensor:
        """Undefined for categories (NaN), as in torch."""
        return _const(np.full(self._batch_shape, np.nan, dtype=self._param_data().dtype))

    @property
    def variance(self) -> Tensor:
        return self.mean

    @property
    def mode(self) -> Tensor:
        if _Trace.compiling:  # recorded, so that rlgrad.jit recomputes it at every call
            return ops.astype(ops.argmax(self._logits_in if self._probs_in is None
                                         else self._probs_in, axis=-1), np.int64)
        return _const(np.asarray(np.argmax(self._param_data(), axis=-1), dtype=np.int64))

    def _param_data(self) -> np.ndarray:
        t = self._logits_in if self._probs_in is None else self._probs_in
        assert t is not None  # (one of the two is given)
        return t._value

    @property
    def support(self) -> constraints.Constraint:  # type: ignore[override]  # a property here, a class attribute on Distribution (torch's layout)
        return constraints.integer_interval(0, self._num_events - 1)

    def __repr__(self) -> str:
        which = "logits" if self._probs_in is None else "probs"
        return f"Categorical({which}: shape {self.param_shape})"


class Bernoulli(Distribution):
    """A 0/1 variable with ``P(1) = probs = sigmoid(logits)``; samples are floats (0. or 1.)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True
    _logits_in: Tensor | None  # the parameter as given: one of the two
    _probs_in: Tensor | None
    _logits: Tensor | None  # computed on demand
    _probs: Tensor | None

    def __init__(self, probs: ArrayLike | None = None, logits: ArrayLike | None = None,
                 validate_args: bool | None = None) -> None:
        _one_of("Bernoulli", probs, logits)
        (t,), shape = _params(logits if probs is None else probs)
        super().__init__(shape, (), validate_args)
        self._logits_in = t if probs is None else None
        self._probs_in = t if probs is not None else None
        self._logits = self._probs = None
        if self._validate_args:
            if probs is not None:
                self._check_arg("probs", t, constraints.unit_interval,
                                "Pass a probability, e.g. sigmoid(x), or logits=x.")
            else:
                self._check_arg("logits", t, constraints.real)

    @property
    def probs(self) -> Tensor:
        if self._probs is None:
            self._probs = (self._probs_in if self._probs_in is not None
                           else ops.sigmoid(self._logits_in))
        return self._probs

    @property
    def logits(self) -> Tensor:
        if self._logits is None:
            if self._logits_in is not None:
                self._logits = self._logits_in
            else:  # clamp as torch does, so p = 0 or 1 gives finite logits
                assert self._probs_in is not None  # (one of the two is given)
                eps = float(np.finfo(self._probs_in._value.dtype).eps)
                p = ops.clip(self._probs_in, eps, 1 - eps)
                self._logits = ops.log(p) - ops.log1p(-p)
        return self._logits

    def sample(self, sample_shape: ShapeLike = (), generator: GeneratorLike = None) -> Tensor:
        shape = _shape_tuple(sample_shape) + self._batch_shape
        u = _noise("uniform", generator, shape, self.probs.dtype)
        if VMAP_LEVELS:  # batched probabilities or draws: compared as tensors
            hit = ops.less(u, ops.stop_gradient(self.probs))
            return mark_cut(ops.astype(hit, self.probs.dtype), "sample", (self.probs,))
        p = self.probs._value
        return mark_cut(_const((u < p).astype(p.dtype)), "sample", (self.probs,))

    def log_prob(self, value: Tensor) -> Tensor:
        v: np.ndarray | Tensor = self._validate_sample(value) if self._validate_args else _data(value)
        if _Trace.compiling and isinstance(value, Tensor):  # rlgrad.jit: read at every call
            v = value
        if self._logits_in is not None:
            lg = self._logits_in
            if v.dtype != lg._value.dtype:
                v = v.astype(lg._value.dtype)
            return lg * v - ops.softplus(lg)  # minus BCE-with-logits: stable for any logit
        p = self._probs_in
        assert p is not None  # (one of the two is given)
        return ops.log(ops.where(v == 1, p, 1 - p))  # one log: no 0 * log(0)

    def entropy(self) -> Tensor:
        if self._logits_in is not None:
            # H(l) = softplus(l) - l sigmoid(l) is even in l; with n = -|l| it is
            # softplus(n) - n exp(-softplus(-n)): no cancellation, and exp(-softplus) keeps the
            # relative accuracy of a tiny sigmoid
            lg = self._logits_in
            n = ops.where(lg._value > 0, -lg, lg)
            return ops.softplus(n) - n * ops.exp(-ops.softplus(-n))
        p = self._probs_in
        assert p is not None  # (one of the two is given)
        return -(xlogy(p, p) + xlogy(1 - p, 1 - p))

    def enumerate_support(self, expand: bool = True) -> Tensor:
        t = self._probs_in if self._probs_in is not None else self._logits_in
        assert t is not None  # (one of the two is given)
        dt = t._value.dtype
        values = np.arange(2, dtype=dt).reshape((2,) + (1,) * len(self._batch_shape))
        if expand:
            values = np.broadcast_to(values, (2,) + self._batch_shape).copy()
        return _const(values)

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def variance(self) -> Tensor:
        p = self.probs
        return p * (1 - p)

    @property
    def mode(self) -> Tensor:
        """1 where p > 1/2, 0 where p < 1/2, NaN at a tie (as torch)."""
        p = self.probs._value
        m = (p >= 0.5).astype(p.dtype)
        return _const(np.where(p == 0.5, np.nan, m).astype(p.dtype))

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self._batch_shape

"""Stop on the first non-finite number instead of training on it.

An environment that returns NaN or inf once turns every weight into NaN within a few updates,
after which acting silently returns action 0. So observations and rewards are checked as they
arrive (one ``np.isfinite`` over the batch per step; ``check_finite=False`` turns it off, as
SB3's ``VecCheckNan`` is optional), and each update's loss terms before the weights move. Either
stops training with one line; a run's last good checkpoint stays on disk.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rlgrad.tensor import Tensor


class NonFiniteError(FloatingPointError):
    """A NaN or inf reached training (from the environment or in an update)."""


def _first_bad(x: np.ndarray) -> tuple[int, str] | None:
    """(env index, 'nan' / 'inf' / '-inf') of the first non-finite row, or None."""
    if x.dtype.kind not in "fc":
        return None
    ok = np.isfinite(x)
    if ok.all():
        return None
    rows = ok.reshape(len(x), -1).all(axis=1) if x.ndim > 1 else ok
    i = int(np.flatnonzero(~rows)[0])
    v = x[i].reshape(-1)[np.flatnonzero(~np.isfinite(x[i].reshape(-1)))[0]]
    return i, "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")


_FEW = 32  # numbers summed in Python (~1 us less than np.add.reduce's setup at one step)


def _float_sum(x: Any) -> Any:
    """The sum of ``x``'s floating-point entries (a Dict or Tuple observation: of each of its
    arrays): finite iff none is NaN or inf, barring overflow. Integer arrays (uint8 frames) hold
    no NaN or inf: not read."""
    if type(x) is np.ndarray:
        if x.dtype.kind not in "fc":
            return 0.0
        # a few numbers (a Dict's vector entry): as Python floats, without a reduction's setup
        return sum(x.ravel().tolist()) if x.size <= _FEW else np.add.reduce(x, axis=None)
    if isinstance(x, dict | tuple):
        total = 0.0
        for v in (x.values() if isinstance(x, dict) else x):
            total += _float_sum(v)
        return total
    return np.add.reduce(x, axis=None)


def _arrays(field: str, x: Any) -> list[tuple[str, np.ndarray]]:
    """(name, array) of ``x``'s arrays: itself, or a Dict / Tuple observation's entries."""
    if isinstance(x, np.ndarray):
        return [(field, x)]
    if isinstance(x, dict):
        return [(f"{field} entry {k!r}", v) for k, v in x.items() if isinstance(v, np.ndarray)]
    if isinstance(x, tuple):
        return [(f"{field} entry {i}", v) for i, v in enumerate(x) if isinstance(v, np.ndarray)]
    return []


def check_transition(obs: Any, rewards: Any, step: int) -> None:
    """Raise NonFiniteError naming the environment, the step and the field."""
    try:  # fast path: a sum is finite iff no entry is NaN or inf (barring overflow: then look)
        # one env's reward read as it is (its own sum) without a reduction (~0.5 us a step)
        r = rewards[0] if type(rewards) is np.ndarray and rewards.shape == (1,) else \
            np.add.reduce(rewards, axis=None)
        if math.isfinite(_float_sum(obs) + r):
            return
    except (TypeError, ValueError):
        pass  # not arrays of numbers: checked field by field below
    for field, x in (*_arrays("observation", obs), *_arrays("reward", rewards)):
        bad = _first_bad(x)
        if bad is not None:
            raise NonFiniteError(
                f"environment {bad[0]} returned a non-finite {field} ({bad[1]}) at vector step "
                f"{step}; training stops so no weight learns from it. Fix the environment, or pass "
                f"check_finite=False to train on it anyway")


def nonfinite_actions(actions: Any, step: int, by: str = "the policy") -> NonFiniteError | None:
    """The error for actions holding NaN / inf (a non-finite observation or reward that follows
    is their doing, not the environment's), or None if they are finite."""
    if not isinstance(actions, np.ndarray) or actions.dtype.kind not in "fc":
        return None
    bad = _first_bad(actions)
    if bad is None:
        return None
    return NonFiniteError(
        f"{by} produced a non-finite action ({bad[1]}) for environment {bad[0]} at vector step "
        f"{step}: its weights or its inputs hold NaN/inf (the environment is not at fault)")


def check_update(terms: dict[str, Any]) -> None:
    """Raise NonFiniteError naming the first loss term that is not finite."""
    for name, value in terms.items():
        v = value._value if isinstance(value, Tensor) else value
        if math.isfinite(v) if getattr(v, "ndim", 0) == 0 else np.isfinite(v).all():
            continue
        first = float(np.asarray(v, dtype=np.float64).reshape(-1)[0])
        raise NonFiniteError(
            f"the {name} of an update is {first}: training stops before the weights take it "
            f"(a learning rate too high, or inputs out of range?)")

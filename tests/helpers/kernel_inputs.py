"""Inputs that find where a fast kernel and its NumPy reference differ: many magnitudes, signed
zeros, NaNs, infinities, subnormals (tests/engine/test_kernels.py and test_reference_paths.py)."""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

from rlgrad.rl.buffers import RolloutBuffer


def awkward(rng: np.random.Generator, shape: tuple[int, int], dtype: DTypeLike) -> np.ndarray:
    """Values over many magnitudes, a column of -0.0 (NumPy's sum starts from +0: it gives +0.0),
    a NaN and an inf."""
    x = (rng.standard_normal(shape) * rng.choice([1e-6, 1.0, 1e6], size=shape)).astype(dtype)
    x[:, 0] = -0.0
    if shape[0] > 2 and shape[1] > 2:
        x[1, 1], x[2, 2] = np.nan, np.inf
    return x


def rollout(rng: np.random.Generator, steps: int, n: int, gamma: float = 0.99, lam: float = 0.95
            ) -> RolloutBuffer:
    """A rollout of ``steps`` x ``n`` envs with such rewards, random ends and bootstraps, for GAE."""

    b = RolloutBuffer(steps, n, 4, (), np.int64, gamma=gamma, gae_lambda=lam)
    b.rewards[:] = rng.standard_normal((steps, n)) * rng.choice([1e-6, 1.0, 1e6], size=(steps, n))
    b.rewards[0, 0], b.values[:] = -0.0, rng.standard_normal((steps, n))
    b.dones[:] = rng.random((steps, n)) < 0.3
    b.terminated[:] = b.dones & (rng.random((steps, n)) < 0.5)
    b.bootstrap[:] = np.where(rng.random((steps, n)) < 0.2, rng.standard_normal((steps, n)), np.nan)
    if steps > 2 and n > 2:
        b.rewards[1, 1], b.values[2, 2] = np.inf, np.nan
    return b


def relu_inputs(rng: np.random.Generator, shape: tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
    """Both signs over many magnitudes, signed zeros, NaNs of both signs (NumPy's maximum keeps
    a NaN's bits), infinities and a subnormal."""
    x = np.asarray(rng.standard_normal(shape) * rng.choice([1e-30, 1.0, 1e30], size=shape), dtype)
    special = np.array([-0.0, 0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -1e-45], dtype)
    flat = x.reshape(-1)
    flat[:min(flat.size, len(special))] = special[:flat.size]
    return x

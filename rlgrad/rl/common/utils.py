"""``stable_baselines3.common.utils``: the parts SB3 scripts use."""

from __future__ import annotations

from rlgrad.rl.schedules import get_schedule_fn, linear_schedule


def set_random_seed(seed: int, using_cuda: bool = False) -> None:
    """Seed Python's, NumPy's and rlgrad's generators (``using_cuda`` is accepted; rlgrad is
    CPU-only)."""
    import random

    import numpy as np

    import rlgrad

    random.seed(seed)
    np.random.seed(seed)
    rlgrad.random.seed(seed)


def get_linear_fn(start: float, end: float, end_fraction: float):  # noqa: ANN201
    """SB3's linear schedule of the progress remaining (1 -> 0): ``start`` to ``end`` over the
    first ``end_fraction`` of training."""
    return linear_schedule(start, end, end_fraction)


__all__ = ["get_linear_fn", "get_schedule_fn", "set_random_seed"]

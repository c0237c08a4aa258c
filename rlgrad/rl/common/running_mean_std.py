"""``stable_baselines3.common.running_mean_std``: SB3's constructor order over rlgrad's
``RunningMeanStd`` (the one ``VecNormalize`` uses)."""

from __future__ import annotations

from rlgrad.rl.normalize import RunningMeanStd as _RunningMeanStd


class RunningMeanStd(_RunningMeanStd):
    """SB3's ``RunningMeanStd(epsilon=1e-4, shape=())``: rlgrad's takes ``shape`` first, so a
    positional SB3 call needs this order."""

    def __init__(self, epsilon: float = 1e-4, shape: tuple[int, ...] = ()) -> None:
        super().__init__(shape, epsilon)


__all__ = ["RunningMeanStd"]

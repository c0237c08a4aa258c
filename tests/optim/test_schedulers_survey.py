"""Issue 29's audit: ``MultiplicativeLR``, ``PolynomialLR``, ``CosineAnnealingWarmRestarts`` and
``SequentialLR`` give torch's learning rates step by step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad

torch = pytest.importorskip("torch")


def _lrs(lib: Any, make: Callable, steps: int = 40) -> list[list[float]]:
    p = lib.nn.Parameter(lib.zeros(2))
    opt = lib.optim.SGD([{"params": [p]}, {"params": [lib.nn.Parameter(lib.zeros(1))], "lr": 0.3}], lr=0.1)
    sch = make(lib.optim.lr_scheduler, opt)
    out = [sch.get_last_lr()]
    for _ in range(steps):
        opt.step()
        sch.step()
        out.append(sch.get_last_lr())
    return out


@pytest.mark.parametrize("make", [
    lambda S, o: S.MultiplicativeLR(o, lambda e: 0.95 if e % 3 else 0.5),
    lambda S, o: S.PolynomialLR(o, total_iters=17, power=2.0),
    lambda S, o: S.PolynomialLR(o),
    lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=7),
    lambda S, o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01),
    lambda S, o: S.SequentialLR(o, [S.LinearLR(o, 0.1, total_iters=5), S.ExponentialLR(o, 0.9),
                                    S.CosineAnnealingLR(o, T_max=8)], milestones=[5, 20]),
], ids=["multiplicative", "polynomial", "polynomial default", "warm restarts", "warm restarts mult",
        "sequential"])
def test_learning_rates_match_torch(make: Callable) -> None:
    np.testing.assert_allclose(_lrs(rlgrad, make), _lrs(torch, make), rtol=1e-12, atol=1e-15)


def test_bad_arguments_raise_as_torch() -> None:
    for lib in (rlgrad, torch):
        opt = lib.optim.SGD([lib.nn.Parameter(lib.zeros(1))], lr=0.1)
        S = lib.optim.lr_scheduler
        with pytest.raises(ValueError, match="T_0"):
            S.CosineAnnealingWarmRestarts(opt, T_0=0)
        with pytest.raises(ValueError, match="one more than the number of milestone"):
            S.SequentialLR(opt, [S.ExponentialLR(opt, 0.9)], milestones=[3])

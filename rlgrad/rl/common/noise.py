"""``stable_baselines3.common.noise``: SB3's action-noise objects, for ``action_noise=``.

rlgrad's TD3 and DDPG add the noise themselves (``noise_type``, ``noise_std``, in the [-1, 1]
action space as SB3 adds it); ``TD3(..., action_noise=NormalActionNoise(mean=0, sigma=s))``
becomes ``noise_type="normal", noise_std=s`` (the same for every action dimension, mean zero).
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ActionNoise:
    kind = ""

    def __init__(self, mean: Any, sigma: Any) -> None:
        self.mean, self.sigma = np.asarray(mean, dtype=np.float64), np.asarray(sigma, dtype=np.float64)

    def __call__(self) -> np.ndarray:
        return np.random.normal(self.mean, self.sigma)

    def reset(self) -> None:
        pass


class NormalActionNoise(ActionNoise):
    kind = "normal"


class OrnsteinUhlenbeckActionNoise(ActionNoise):
    """Only SB3's default ``theta=0.15``, ``dt=1e-2`` (what rlgrad's noise uses)."""

    kind = "ornstein-uhlenbeck"

    def __init__(self, mean: Any, sigma: Any, theta: float = 0.15, dt: float = 1e-2,
                 initial_noise: Any = None) -> None:
        super().__init__(mean, sigma)
        if theta != 0.15 or dt != 1e-2 or initial_noise is not None:
            raise ValueError("OrnsteinUhlenbeckActionNoise: rlgrad's noise has theta=0.15, "
                             "dt=1e-2 and starts at 0; leave those arguments out")


__all__ = ["ActionNoise", "NormalActionNoise", "OrnsteinUhlenbeckActionNoise"]

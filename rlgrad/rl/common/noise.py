"""``stable_baselines3.common.noise``: SB3's action-noise objects, for ``action_noise=``.

The objects are SB3's processes (``noise()`` draws from NumPy's global generator, as SB3's do;
the Ornstein-Uhlenbeck one keeps its state until ``reset()``). rlgrad's TD3 and DDPG add the
noise themselves (``noise_type``, ``noise_std``, in the [-1, 1] action space as SB3 adds it), so
``TD3(..., action_noise=NormalActionNoise(mean=0, sigma=s))`` becomes ``noise_type="normal",
noise_std=s``: mean zero, one sigma for every action dimension, and for Ornstein-Uhlenbeck
SB3's default ``theta``, ``dt`` and start (``kind`` says which process an object stands for;
empty when it cannot be expressed, and the algorithm refuses it in one line).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from rlgrad.typing import FloatArrayLike


class NoiseArgumentError(ValueError, AssertionError):
    """An argument SB3's noise classes refuse with an assertion: catchable as either type."""


class ActionNoise:
    """The base class: ``noise()`` draws, ``reset()`` ends an episode."""

    #: rlgrad's ``noise_type`` this object stands for ("" when none does)
    kind = ""

    def reset(self) -> None:
        """Nothing to forget between episodes (a process with state overrides this)."""

    def __call__(self) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must define __call__")


class NormalActionNoise(ActionNoise):
    """Gaussian noise of ``mean`` and standard deviation ``sigma``, as ``dtype``."""

    kind = "normal"

    def __init__(self, mean: FloatArrayLike, sigma: FloatArrayLike,
                 dtype: npt.DTypeLike = np.float32) -> None:
        self._mu, self._sigma, self._dtype = mean, sigma, dtype

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(self._mu, dtype=np.float64)

    @property
    def sigma(self) -> np.ndarray:
        return np.asarray(self._sigma, dtype=np.float64)

    def __call__(self) -> np.ndarray:
        return np.random.normal(self._mu, self._sigma).astype(self._dtype)

    def __repr__(self) -> str:
        return f"NormalActionNoise(mu={self._mu}, sigma={self._sigma})"


class OrnsteinUhlenbeckActionNoise(NormalActionNoise):
    """Brownian motion with friction: ``x += theta (mean - x) dt + sigma sqrt(dt) N(0, 1)``,
    starting from ``initial_noise`` (zeros) at every ``reset()``."""

    def __init__(self, mean: FloatArrayLike, sigma: FloatArrayLike, theta: float = 0.15,
                 dt: float = 1e-2, initial_noise: np.ndarray | None = None,
                 dtype: npt.DTypeLike = np.float32) -> None:
        super().__init__(mean, sigma, dtype)
        self._theta, self._dt = theta, dt
        self.initial_noise = initial_noise
        # rlgrad's own process has SB3's default rate, step and start only
        default = theta == 0.15 and dt == 1e-2 and initial_noise is None
        self.kind = "ornstein-uhlenbeck" if default else ""
        self.noise_prev = np.zeros_like(self._mu)
        self.reset()

    def __call__(self) -> np.ndarray:
        mu = np.asarray(self._mu)
        noise = (self.noise_prev + self._theta * (mu - self.noise_prev) * self._dt
                 + self._sigma * np.sqrt(self._dt) * np.random.normal(size=mu.shape))
        self.noise_prev = noise
        return noise.astype(self._dtype)

    def reset(self) -> None:
        self.noise_prev = (self.initial_noise if self.initial_noise is not None
                           else np.zeros_like(self._mu))

    def __repr__(self) -> str:
        return f"OrnsteinUhlenbeckActionNoise(mu={self._mu}, sigma={self._sigma})"


class VectorizedActionNoise(ActionNoise):
    """One copy of ``base_noise`` per environment copy; ``noise()`` stacks their draws
    (``(n_envs, *action_shape)``), ``reset(indices)`` restarts some of them."""

    def __init__(self, base_noise: ActionNoise, n_envs: int) -> None:
        try:
            self.n_envs = int(n_envs)
        except (TypeError, ValueError):
            self.n_envs = 0
        if self.n_envs <= 0:
            raise ValueError(f"VectorizedActionNoise: n_envs={n_envs!r} must be an integer > 0")
        self.base_noise = base_noise
        self.noises = [copy.deepcopy(self.base_noise) for _ in range(self.n_envs)]

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.base_noise.kind

    @property
    def mean(self) -> np.ndarray | None:
        return getattr(self.base_noise, "mean", None)

    @property
    def sigma(self) -> np.ndarray | None:
        return getattr(self.base_noise, "sigma", None)

    @property
    def base_noise(self) -> ActionNoise:
        return self._base_noise

    @base_noise.setter
    def base_noise(self, base_noise: ActionNoise) -> None:
        if base_noise is None:
            raise ValueError("VectorizedActionNoise: base_noise is None; pass an ActionNoise, "
                             "e.g. NormalActionNoise(mean, sigma)")
        if not isinstance(base_noise, ActionNoise):
            raise TypeError(f"VectorizedActionNoise: base_noise must be an ActionNoise, got "
                            f"{type(base_noise).__name__}")
        self._base_noise = base_noise

    @property
    def noises(self) -> list[ActionNoise]:
        return self._noises

    @noises.setter
    def noises(self, noises: Iterable[ActionNoise]) -> None:
        noises = list(noises)  # TypeError for what is not iterable, as SB3
        if len(noises) != self.n_envs:
            raise NoiseArgumentError(f"VectorizedActionNoise: expected a list of {self.n_envs} "
                                     f"ActionNoises, found {len(noises)}")
        wrong = [i for i, n in enumerate(noises) if not isinstance(n, type(self.base_noise))]
        if wrong:
            raise ValueError(f"VectorizedActionNoise: the noises at indices {wrong} are not "
                             f"{type(self.base_noise).__name__} like base_noise")
        self._noises = noises
        for noise in noises:
            noise.reset()

    def reset(self, indices: Iterable[int] | None = None) -> None:
        for i in range(len(self.noises)) if indices is None else indices:
            self.noises[i].reset()

    def __call__(self) -> np.ndarray:
        return np.stack([noise() for noise in self.noises])

    def __repr__(self) -> str:
        return f"VecNoise(BaseNoise={self.base_noise!r}), n_envs={len(self.noises)})"


__all__ = ["ActionNoise", "NoiseArgumentError", "NormalActionNoise",
           "OrnsteinUhlenbeckActionNoise", "VectorizedActionNoise"]

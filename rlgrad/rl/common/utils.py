"""``stable_baselines3.common.utils``: the parts SB3 scripts use, with SB3's names, signatures
and results (on NumPy arrays and rlgrad Tensors where SB3 takes torch tensors)."""

from __future__ import annotations

import platform
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from gymnasium import spaces

from rlgrad.device import device as _device
from rlgrad.optim.lr_scheduler import update_learning_rate
from rlgrad.optim.target import polyak_update
from rlgrad.rl.logger import next_run_dir
from rlgrad.rl.on_policy import explained_variance
from rlgrad.rl.schedules import (
    ConstantSchedule,
    FloatSchedule,
    LinearSchedule,
    linear_schedule,
)
from rlgrad.rl.schedules import get_schedule_fn as _get_schedule_fn
from rlgrad.typing import DeviceLike


def set_random_seed(seed: int, using_cuda: bool = False) -> None:
    """Seed Python's, NumPy's and rlgrad's generators (``using_cuda`` is accepted; rlgrad is
    CPU-only)."""
    import random

    import rlgrad

    random.seed(seed)
    np.random.seed(seed)
    rlgrad.random.seed(seed)


def _deprecated(name: str, instead: str) -> None:
    """SB3 2.x deprecates its schedule functions for the schedule classes; so does this module."""
    warnings.warn(f"{name}() is deprecated, please use {instead}() instead", FutureWarning,
                  stacklevel=3)


def get_schedule_fn(value_schedule: Callable[[float], float] | float | str) -> FloatSchedule:
    """SB3's (deprecated) schedule of a number or a callable, with float values; rlgrad's
    ``"lin_X"`` strings too."""
    _deprecated("get_schedule_fn", "FloatSchedule")
    return FloatSchedule(_get_schedule_fn(value_schedule))


def get_linear_fn(start: float, end: float, end_fraction: float) -> Callable[[float], float]:
    """SB3's (deprecated) linear schedule of the progress remaining (1 -> 0): ``start`` to
    ``end`` over the first ``end_fraction`` of training."""
    _deprecated("get_linear_fn", "LinearSchedule")
    return linear_schedule(start, end, end_fraction)


def constant_fn(val: float) -> Callable[[float], float]:
    """SB3's (deprecated) constant schedule: ``val`` whatever the progress."""
    _deprecated("constant_fn", "ConstantSchedule")
    return ConstantSchedule(val)


def get_device(device: DeviceLike = "auto") -> _device:
    """SB3's device choice: ``"auto"`` and ``"cuda"`` fall back to the CPU when there is no GPU,
    which for rlgrad (NumPy on the CPU) is always."""
    if isinstance(device, str) and device == "auto":
        device = "cuda"
    dev = _device(device)
    return _device("cpu") if dev.type == "cuda" else dev


def safe_mean(arr: Any) -> float:
    """The mean of ``arr``, NaN when it is empty (SB3 logs it)."""
    return np.nan if len(arr) == 0 else float(np.mean(arr))


def zip_strict(*iterables: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """``zip`` that raises ``ValueError`` when the iterables' lengths differ."""
    return zip(*iterables, strict=True)


def obs_as_tensor(obs: np.ndarray | dict[str, np.ndarray], device: DeviceLike = "cpu") -> Any:
    """An observation (array, or dict of arrays) as rlgrad Tensors sharing its memory."""
    import rlgrad

    if isinstance(obs, np.ndarray):
        return rlgrad.as_tensor(obs, device=device)
    if isinstance(obs, dict):
        return {key: rlgrad.as_tensor(o, device=device) for key, o in obs.items()}
    raise TypeError(f"obs_as_tensor: unrecognized type of observation {type(obs).__name__}; "
                    "pass a NumPy array or a dict of them")


def get_system_info(print_info: bool = True) -> tuple[dict[str, str], str]:
    """The versions a bug report needs (SB3's keys, rlgrad's in place of SB3's and PyTorch's)
    as a dict and as the Markdown list SB3 prints."""
    from importlib.metadata import PackageNotFoundError, version

    import rlgrad

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    env_info = {
        # "#42" -> "# 42": GitHub would link the kernel build number to an issue
        "OS": re.sub(r"#(\d)", r"# \1", f"{platform.platform()} {platform.version()}"),
        "Python": platform.python_version(),
        "rlgrad": rlgrad.__version__,
        "GPU Enabled": "False",
        "Numpy": np.__version__,
        "Cloudpickle": installed("cloudpickle"),
        "Gymnasium": installed("gymnasium"),
    }
    env_info_str = "".join(f"- {key}: {value}\n" for key, value in env_info.items())
    if print_info:
        print(env_info_str)
    return env_info, env_info_str


def get_latest_run_id(log_path: str = "", log_name: str = "") -> int:
    """The largest ``n`` of the run folders ``<log_path>/<log_name>_<n>`` (0 when there is none)."""
    return int(next_run_dir(log_path, log_name, new=False).rsplit("_", 1)[1])


def get_parameters_by_name(model: Any, included_names: Iterable[str]) -> list[Any]:
    """The tensors of ``model.state_dict()`` whose names contain one of ``included_names``."""
    return [p for name, p in model.state_dict().items()
            if any(key in name for key in included_names)]


def check_for_correct_spaces(env: Any, observation_space: spaces.Space,
                             action_space: spaces.Space) -> None:
    """ValueError when ``env``'s spaces are not these (a model loaded with another env)."""
    if observation_space != env.observation_space:
        raise ValueError(f"Observation spaces do not match: {observation_space} != "
                         f"{env.observation_space}")
    if action_space != env.action_space:
        raise ValueError(f"Action spaces do not match: {action_space} != {env.action_space}")


class SpaceMismatchError(ValueError, AssertionError):
    """Spaces that should agree do not; an ``AssertionError`` too, which SB3 raises there."""


def check_shape_equal(space1: spaces.Space, space2: spaces.Space) -> None:
    """Two Box spaces (or the Box entries of two Dict spaces, same keys) have the same shapes."""
    if isinstance(space1, spaces.Dict):
        if not isinstance(space2, spaces.Dict) or space1.spaces.keys() != space2.spaces.keys():
            raise SpaceMismatchError(f"spaces must be Dict spaces with the same keys: {space1} != {space2}")
        for key in space1.spaces:
            check_shape_equal(space1.spaces[key], space2.spaces[key])
    elif isinstance(space1, spaces.Box) and space1.shape != space2.shape:
        raise SpaceMismatchError(f"spaces must have the same shape: {space1.shape} != {space2.shape}")


def _single_shape(space: spaces.Space) -> tuple[int, ...]:
    """The shape of one observation of ``space`` as an array."""
    if isinstance(space, spaces.Discrete):
        return ()
    if isinstance(space, spaces.MultiDiscrete):
        return (len(space.nvec),)
    if space.shape is None:  # Text, Graph, Sequence ...: no array of one shape
        raise ValueError(f"{space} has no fixed shape, so its observations are no arrays of one "
                         "shape; use a Box, Discrete, MultiDiscrete or MultiBinary space")
    return tuple(space.shape)


def is_vectorized_observation(observation: Any, observation_space: spaces.Space) -> bool:
    """Whether ``observation`` is a batch (n_env, ...) of observations of the space rather than
    one; ValueError, naming the shapes allowed, when it is neither."""
    if isinstance(observation_space, spaces.Dict):
        keys = observation_space.spaces
        single = [np.shape(observation[k]) == _single_shape(s) for k, s in keys.items()]
        batch = [np.shape(observation[k])[1:] == _single_shape(s) for k, s in keys.items()]
        if all(single) or all(batch):
            return not all(single)
        key = next(k for k, b in zip(keys, batch, strict=True) if not b)
        raise ValueError(f"There seems to be a mix of vectorized and non-vectorized observations: "
                         f"key {key!r} has shape {np.shape(observation[key])} for "
                         f"{keys[key]}")
    if not isinstance(observation_space, spaces.Box | spaces.Discrete | spaces.MultiDiscrete
                      | spaces.MultiBinary):
        raise ValueError("Error: Cannot determine if the observation is vectorized with the space "
                         f"type {observation_space}.")
    shape, one = np.shape(observation), _single_shape(observation_space)
    if shape == one:
        return False
    if len(shape) == len(one) + 1 and shape[1:] == one:
        return True
    raise ValueError(f"Error: Unexpected observation shape {shape} for {observation_space}: "
                     f"use {one} or (n_env, {', '.join(map(str, one))}) for the observation "
                     "shape".replace(", )", ")"))


__all__ = ["ConstantSchedule", "FloatSchedule", "LinearSchedule", "SpaceMismatchError",
           "check_for_correct_spaces", "check_shape_equal", "constant_fn", "explained_variance",
           "get_device", "get_latest_run_id", "get_linear_fn", "get_parameters_by_name",
           "get_schedule_fn", "get_system_info", "is_vectorized_observation", "obs_as_tensor",
           "polyak_update", "safe_mean", "set_random_seed", "update_learning_rate", "zip_strict"]

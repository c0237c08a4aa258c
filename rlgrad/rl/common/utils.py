"""``stable_baselines3.common.utils``: the parts SB3 scripts use, with SB3's names, signatures
and results (on NumPy arrays and rlgrad Tensors where SB3 takes torch tensors)."""

from __future__ import annotations

import platform
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from rlgrad.device import device as _device
from rlgrad.optim.target import polyak_update
from rlgrad.rl.on_policy import explained_variance
from rlgrad.rl.schedules import ConstantSchedule, LinearSchedule, get_schedule_fn, linear_schedule


def set_random_seed(seed: int, using_cuda: bool = False) -> None:
    """Seed Python's, NumPy's and rlgrad's generators (``using_cuda`` is accepted; rlgrad is
    CPU-only)."""
    import random

    import rlgrad

    random.seed(seed)
    np.random.seed(seed)
    rlgrad.random.seed(seed)


def get_linear_fn(start: float, end: float, end_fraction: float) -> Callable[[float], float]:
    """SB3's linear schedule of the progress remaining (1 -> 0): ``start`` to ``end`` over the
    first ``end_fraction`` of training."""
    return linear_schedule(start, end, end_fraction)


def constant_fn(val: float) -> Callable[[float], float]:
    """SB3's constant schedule: ``val`` whatever the progress."""
    return ConstantSchedule(val)


def get_device(device: Any = "auto") -> _device:
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


def obs_as_tensor(obs: np.ndarray | dict[str, np.ndarray], device: Any = "cpu") -> Any:
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


__all__ = ["ConstantSchedule", "LinearSchedule", "constant_fn", "explained_variance", "get_device",
           "get_linear_fn", "get_schedule_fn", "get_system_info", "obs_as_tensor", "polyak_update",
           "safe_mean", "set_random_seed", "zip_strict"]

"""PyTorch's device API on a CPU-only library: ``rlgrad.device``, ``rlgrad.cuda``,
``rlgrad.backends``.

rlgrad computes with NumPy on the CPU. Scripts written for PyTorch pick a device with
``torch.device("cuda" if torch.cuda.is_available() else "cpu")`` and move modules and tensors
with ``.to(device)``: here ``cuda.is_available()`` is False, every ``"cpu"`` device is accepted
(a no-op), and asking for any other device raises one line saying so. ``backends.cudnn``'s flags
exist so that seeding code runs; they change nothing (NumPy on the CPU is deterministic).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

__all__ = ["device", "cuda", "backends", "check_device", "is_device", "autocast"]


class device:  # noqa: N801 - PyTorch's name
    """``torch.device``: ``device("cpu")``, ``device("cpu", 0)``, ``device("cuda:0")``.

    A CUDA device can be named (as PyTorch allows without a GPU), but using it raises."""

    __slots__ = ("type", "index")

    def __init__(self, type: Any, index: int | None = None) -> None:  # noqa: A002
        if isinstance(type, device):
            type, index = type.type, type.index
        if not isinstance(type, str):
            raise TypeError(f"device() takes a string such as 'cpu', got {type!r}")
        name, _, idx = type.partition(":")
        self.type = name
        self.index = int(idx) if idx else index

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        idx = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{idx})"


CPU = device("cpu")


def is_device(x: Any) -> bool:
    """True for a ``device`` or a device name (``"cpu"``, ``"cuda:0"``, ``"mps"`` ...)."""
    if isinstance(x, device):
        return True
    return isinstance(x, str) and x.partition(":")[0] in _DEVICE_TYPES


_DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "meta", "xla", "hip", "mkldnn", "vulkan", "ipu")


def check_device(dev: Any) -> None:
    """Accept None and any CPU device; refuse the rest with one line."""
    if dev is None:
        return
    d = dev if isinstance(dev, device) else device(dev)
    if d.type != "cpu":
        raise RuntimeError(
            f"rlgrad computes on the CPU only, so device {str(d)!r} is not available; pick "
            "device='cpu' (torch.cuda.is_available() is False in rlgrad)"
        )


def _no_cuda(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("rlgrad has no CUDA: it computes with NumPy on the CPU; use device='cpu'")


cuda = SimpleNamespace(
    is_available=lambda: False,
    device_count=lambda: 0,
    manual_seed=lambda seed: None,  # as torch's: a no-op without CUDA
    manual_seed_all=lambda seed: None,
    is_initialized=lambda: False,
    synchronize=lambda device=None: None,
    empty_cache=lambda: None,
    current_device=_no_cuda,
    get_device_name=_no_cuda,
    set_device=_no_cuda,
)

backends = SimpleNamespace(
    cudnn=SimpleNamespace(deterministic=False, benchmark=False, enabled=True,
                          is_available=lambda: False),
    mps=SimpleNamespace(is_available=lambda: False, is_built=lambda: False),
    cuda=SimpleNamespace(is_built=lambda: False),
)


class autocast:  # noqa: N801 - torch's name
    """``torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``, as a context
    manager or decorator: accepted for "cpu" and computing in full precision (rlgrad has no
    mixed-precision kernels, so results are the float32 ones torch would give without it)."""

    def __init__(self, device_type: str, dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        check_device(device_type)
        self.device_type, self.fast_dtype, self.enabled = device_type, dtype, bool(enabled)

    def __enter__(self) -> autocast:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __call__(self, fn: Any) -> Any:
        return fn

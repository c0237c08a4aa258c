"""``from rlgrad.utils.tensorboard import SummaryWriter``, as ``torch.utils.tensorboard``'s:
tensorboardX's writer (the ``rl`` extra installs it), loaded without importing torch, taking
rlgrad Tensors wherever it takes numbers or arrays."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlgrad.cli.events import without_torch
from rlgrad.tensor import Tensor

try:
    with without_torch():
        from tensorboardX import SummaryWriter as _Writer
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError("rlgrad.utils.tensorboard needs tensorboardX: pip install 'rlgrad[rl]' "
                      "(or pip install tensorboardX)") from e

__all__ = ["SummaryWriter"]


def _plain(x: Any) -> Any:
    return np.asarray(x.detach()) if isinstance(x, Tensor) else x


class SummaryWriter(_Writer):
    """tensorboardX's ``SummaryWriter``; Tensors are converted to NumPy first."""

    def add_scalar(self, tag: str, scalar_value: Any, *args: Any, **kwargs: Any) -> Any:
        return super().add_scalar(tag, _plain(scalar_value), *args, **kwargs)

    def add_scalars(self, main_tag: str, values: dict, *args: Any, **kwargs: Any) -> Any:
        return super().add_scalars(main_tag, {k: _plain(v) for k, v in values.items()}, *args, **kwargs)

    def add_histogram(self, tag: str, values: Any, *args: Any, **kwargs: Any) -> Any:
        return super().add_histogram(tag, _plain(values), *args, **kwargs)

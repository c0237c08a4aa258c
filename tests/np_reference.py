"""Reference computations written with NumPy alone, independent of rlgrad's own NumPy paths, for
tests that check a formula against something rlgrad did not compute."""

from __future__ import annotations

from typing import Any

import numpy as np


def relu_mlp_np(net: Any, x: Any) -> np.ndarray:
    """A Linear/ReLU stack (a Sequential's Linear layers, ReLU between them) in float64."""
    x = np.asarray(x, np.float64)
    lin = [m for m in net if hasattr(m, "weight")]
    for k, m in enumerate(lin):
        x = x @ m.weight._value.astype(np.float64).T + m.bias._value
        if k < len(lin) - 1:
            x = np.maximum(x, 0)
    return x

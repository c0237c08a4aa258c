"""``mlp_numpy`` (acting and DQN's targets outside the step) gives, bit for bit, the layer-by-layer
NumPy forward: the product, the bias add, ``np.maximum(x, 0)``; also where a Linear and its ReLU
run as one pass (``_linear_relu``), on NaN, infinite and signed-zero pre-activations."""

from __future__ import annotations

import numpy as np
import pytest

from rlgrad import nn
from rlgrad.rl.policies import mlp_numpy


def _reference(net: nn.Sequential, x: np.ndarray) -> np.ndarray:
    for m in net:
        if isinstance(m, nn.Linear):
            x = x @ m.weight._value.T
            if m.bias is not None:
                x = x + m.bias._value
        elif isinstance(m, nn.ReLU):
            x = np.maximum(x, 0)
        else:
            x = np.tanh(x)
    return x


@pytest.mark.parametrize("rows", [1, 7, 300])
@pytest.mark.parametrize("layers", ["relu", "tanh-relu-nobias"])
def test_mlp_numpy_is_the_layer_by_layer_forward_bitwise(rows: int, layers: str) -> None:
    rng = np.random.default_rng(rows)
    if layers == "relu":
        net = nn.MLP([5, 32, 16, 3], activation=nn.ReLU)
    else:
        net = nn.Sequential(nn.Linear(5, 32), nn.Tanh(), nn.Linear(32, 16, bias=False), nn.ReLU(),
                            nn.Linear(16, 3))
    first = net[0]
    first.bias._value[:3] = [np.nan, np.inf, -np.inf]  # NaN, +-inf pre-activations in column 0-2
    first.weight._value[3] = 0.0
    first.bias._value[3] = -0.0  # column 3: -0.0 + 0 products
    x = rng.standard_normal((rows, 5)).astype(np.float32)
    got, want = mlp_numpy(net, x), _reference(net, x)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    h = _reference(net[:2], x)  # the first ReLU's output itself, signs of zero and NaN included
    assert mlp_numpy(net[:2], x).tobytes() == h.tobytes()

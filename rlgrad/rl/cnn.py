"""Convolutional trunks for pixel observations: the Nature DQN CNN (Mnih et al. 2015) for 84x84
Atari frames and the MinAtar paper's small CNN (Young & Tian 2019) for 10x10 inputs.

Their children are named as in the equivalent torch modules, so a ``state_dict`` moves between
them key for key:

* ``NatureCNN``: SB3's layout, ``cnn = Sequential(Conv2d(C, 32, 8, stride=4), ReLU,
  Conv2d(32, 64, 4, stride=2), ReLU, Conv2d(64, 64, 3, stride=1), ReLU, Flatten)`` and
  ``linear = Sequential(Linear(n_flatten, features_dim), ReLU)``; keys ``cnn.0 cnn.2 cnn.4
  linear.0`` (``.weight``, ``.bias``). State dicts of the older layout (one ``Sequential``:
  ``0 2 4 7``) still load: ``load_state_dict`` renames them.
* ``MinAtarCNN``: a ``Sequential``, ``Conv2d(C, 16, 3, stride=1), ReLU, Flatten,
  Linear(16 * 8 * 8, features_dim), ReLU``; keys ``0.weight 0.bias 3.weight 3.bias``.

The forward passes are the functions ``nature_cnn`` / ``minatar_cnn`` of an input and the list of
weights (the modules call them with their own parameters), so they can be differentiated with
respect to any of them. ``NatureCNN`` divides its input by 255 inside the network (uint8 frames go
in as stored, as SB3's ``normalize_images``); ``MinAtarCNN`` casts its 0/1 input to float.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from rlgrad.batching import BatchedTensor
from rlgrad.nn import functional as F
from rlgrad.nn.layers import Conv2d, Flatten, Linear, ReLU, Sequential
from rlgrad.nn.module import Module
from rlgrad.tensor import Tensor, _Trace, constant, get_default_dtype
from rlgrad.tracer import is_grad_enabled

_NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))  # (out channels, kernel, stride)


def _dtype_of(w: Any) -> np.dtype:
    return w._value.dtype if isinstance(w, Tensor) else np.asarray(w).dtype


def _as_float(x: Any, dtype: np.dtype, scale: float | None) -> Any:
    """An observation batch as float of the weights' dtype, divided by ``scale`` (uint8 frames
    become [0, 1]). A Tensor that requires grad stays in the graph."""
    if isinstance(x, Tensor) and x.requires_grad:
        return x if scale is None else x / scale
    shape = x.shape if isinstance(x, Tensor | np.ndarray) else np.shape(x)
    if len(shape) != 4:
        raise ValueError(f"a CNN expects a batch of images of shape (N, C, H, W), got {shape}")
    return F._images_to_float(x, dtype, scale)


# Acting (no graph to record: gradients off, nothing traced, a NumPy batch in) runs the layers'
# NumPy functions on the parameters' arrays, each conv with its ReLU in one pass
# (``F._conv2d_relu``) and the linear with its own (``F._linear_relu``): the bits of the recorded
# path (tests/rl/test_cnn.py) without its dispatch, ~40% of a batch-1 forward. Off: the recorded
# path always (the reference).
PLAIN_ACTING = True


def _plain_values(x: Any, params: Sequence[Any]) -> list[np.ndarray] | None:
    """The parameters' arrays, if the trunk can run on them directly (see PLAIN_ACTING)."""
    if not (PLAIN_ACTING and type(x) is np.ndarray and x.ndim == 4 and not is_grad_enabled()
            and _Trace.tape is None):
        return None
    # plain Tensors or arrays only (a BatchedTensor, vmap's, is a Tensor whose array is a stack)
    vals = [p._value if isinstance(p, Tensor) and not isinstance(p, BatchedTensor) else p
            for p in params]
    return vals if all(type(v) is np.ndarray for v in vals) else None


def _plain_trunk(x: np.ndarray, vals: list[np.ndarray], strides: Sequence[int],
                 scale: float | None) -> np.ndarray:
    """conv+ReLU layers (``strides``), flatten, linear+ReLU on arrays: the plain acting path."""
    h = F._images(x, vals[0].dtype, scale)
    for i, s in enumerate(strides):
        h = F._conv2d_relu(h, vals[2 * i], vals[2 * i + 1], s)
    return F._linear_relu(h.reshape(len(h), -1), vals[-2], vals[-1])


def nature_cnn(x: Any, params: Sequence[Any], normalize: bool = True) -> Any:
    """Nature CNN on (N, C, H, W): three conv+ReLU, flatten, linear+ReLU; ``params`` are
    (w1, b1, w2, b2, w3, b3, w4, b4). ``normalize`` divides the input by 255."""
    vals = _plain_values(x, params)
    if vals is not None:
        return constant(_plain_trunk(x, vals, [s for _, _, s in _NATURE_CONVS],
                                     255.0 if normalize else None))
    h = _as_float(x, _dtype_of(params[0]), 255.0 if normalize else None)
    for i, (_, _, stride) in enumerate(_NATURE_CONVS):
        h = F.relu(F.conv2d(h, params[2 * i], params[2 * i + 1], stride))
    return F.relu(F.linear(F.flatten(h, 1), params[6], params[7]))


def minatar_cnn(x: Any, params: Sequence[Any], normalize: bool = False) -> Any:
    """MinAtar CNN on (N, C, 10, 10): conv 3x3 (16) + ReLU, flatten, linear + ReLU; ``params`` are
    (w1, b1, w2, b2). ``normalize`` divides the input by 255 (MinAtar's own 0/1 input: no)."""
    vals = _plain_values(x, params)
    if vals is not None:
        return constant(_plain_trunk(x, vals, [1], 255.0 if normalize else None))
    h = _as_float(x, _dtype_of(params[0]), 255.0 if normalize else None)
    h = F.relu(F.conv2d(h, params[0], params[1], 1))
    return F.relu(F.linear(F.flatten(h, 1), params[2], params[3]))


# A trunk's features for acting as an array, without the module call, the Tensor wrapping of the
# output and a Dict extractor's op dispatch (~20 us of a batch-1 step): the functions registered
# here per exact module class (a subclass, or an instance with hooks, whose class is a subclass
# made by nn.hooks, is called as a module), under PLAIN_ACTING's conditions. The same arrays as
# the module's own forward (tests/rl/test_rollout_step.py compares them, PLAIN_ACTING off).
PLAIN_FEATURES: dict[type, Callable[[Any, np.ndarray], np.ndarray | None]] = {}


def plain_features(module: Any, x: Any) -> np.ndarray | None:
    """``module(x)``'s array on the plain acting path, or None when it does not apply (another
    module class, a Tensor input, gradients on or a trace running, PLAIN_ACTING off)."""
    fn = PLAIN_FEATURES.get(type(module))
    if fn is None or not (PLAIN_ACTING and type(x) is np.ndarray and not is_grad_enabled()
                          and _Trace.tape is None):
        return None
    return fn(module, x)


def _layer_params(seq: Sequential, layers: Sequence[int]) -> list[Any]:
    """The weight and bias of each of ``layers`` (``list(seq.parameters())``'s order, without its
    walk over the modules: a fifth of a batch-1 forward; the children listed once, not indexed
    one by one: ``Sequential[i]`` lists its keys at every call)."""
    mods = list(seq._modules.values())
    return [t for i in layers for t in (mods[i].weight, mods[i].bias)]


def _conv_out(size: int, kernel: int, stride: int) -> int:
    return (size - kernel) // stride + 1


class NatureCNN(Module):
    """The Nature DQN trunk; ``features_dim`` outputs (512). ``observation_shape`` is (C, H, W),
    channels first: 4 stacked 84x84 frames for Atari. SB3's children: ``cnn`` (the convolutions
    and the flatten) and ``linear`` (the linear layer and its ReLU)."""

    #: the keys of the older layout (one Sequential), read under SB3's
    _renamed_state_keys: ClassVar[dict[str, str]] = {
        "0.": "cnn.0.", "2.": "cnn.2.", "4.": "cnn.4.", "7.": "linear.0."}

    def __init__(self, observation_shape: Sequence[int] = (4, 84, 84), features_dim: int = 512,
                 normalize: bool = True, dtype: Any = None) -> None:
        super().__init__()
        c, h, w = (int(d) for d in observation_shape)
        for _, k, s in _NATURE_CONVS:
            h, w = _conv_out(h, k, s), _conv_out(w, k, s)
        if min(h, w) < 1:
            raise ValueError(f"NatureCNN needs (C, H, W) observations of at least 36x36, got "
                             f"{tuple(observation_shape)}")
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        (c1, k1, s1), (c2, k2, s2), (c3, k3, s3) = _NATURE_CONVS
        self.cnn = Sequential(
            Conv2d(c, c1, k1, s1, dtype=dt), ReLU(), Conv2d(c1, c2, k2, s2, dtype=dt), ReLU(),
            Conv2d(c2, c3, k3, s3, dtype=dt), ReLU(), Flatten())
        self.linear = Sequential(Linear(c3 * h * w, features_dim, dtype=dt), ReLU())
        self.observation_shape = (c, *observation_shape[1:])
        self.features_dim = int(features_dim)
        self.normalize = normalize

    def forward(self, x: Any) -> Any:
        return nature_cnn(x, _nature_params(self), self.normalize)


def _nature_params(m: NatureCNN) -> list[Any]:
    """(w1, b1, w2, b2, w3, b3, w4, b4): the three convolutions' and the linear layer's."""
    lin = m.linear._modules["0"]
    return [*_layer_params(m.cnn, (0, 2, 4)), lin.weight, lin.bias]


class MinAtarCNN(Sequential):
    """The MinAtar paper's trunk; ``features_dim`` outputs (128). ``observation_shape`` is (C, H, W),
    channels first: (C, 10, 10) for MinAtar."""

    def __init__(self, observation_shape: Sequence[int], features_dim: int = 128,
                 normalize: bool = False, dtype: Any = None) -> None:
        c, h, w = (int(d) for d in observation_shape)
        if min(h, w) < 3:
            raise ValueError(f"MinAtarCNN needs (C, H, W) observations of at least 3x3, got "
                             f"{tuple(observation_shape)}")
        dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
        super().__init__(
            Conv2d(c, 16, 3, 1, dtype=dt), ReLU(), Flatten(),
            Linear(16 * (h - 2) * (w - 2), features_dim, dtype=dt), ReLU(),
        )
        self.observation_shape = (c, h, w)
        self.features_dim = int(features_dim)
        self.normalize = normalize

    def forward(self, x: Any) -> Any:
        return minatar_cnn(x, _layer_params(self, (0, 3)), self.normalize)


def _kept_values(m: Module, x: np.ndarray, params: Callable[[Any], list[Any]]
                 ) -> list[np.ndarray] | None:
    """``_plain_values(x, params(m))``; inside ``F.weights_fixed()`` (a rollout) the arrays are
    read once, kept with the conv weights' columns (~3 us of a batch-1 step; KEEP_WEIGHT_COLS
    off: read at every call, the reference)."""
    vals = F._kept_get(id(m), m)
    if vals is not F._MISSING:
        return vals if x.ndim == 4 else None  # (the other conditions: plain_features')
    vals = _plain_values(x, params(m))
    return vals if vals is None else F._keep(id(m), m, vals)


def _nature_plain(m: NatureCNN, x: np.ndarray) -> np.ndarray | None:
    vals = _kept_values(m, x, _nature_params)
    if vals is None:
        return None
    return _plain_trunk(x, vals, _NATURE_STRIDES, 255.0 if m.normalize else None)


def _minatar_params(m: MinAtarCNN) -> list[Any]:
    return _layer_params(m, (0, 3))


def _minatar_plain(m: MinAtarCNN, x: np.ndarray) -> np.ndarray | None:
    vals = _kept_values(m, x, _minatar_params)
    if vals is None:
        return None
    return _plain_trunk(x, vals, (1,), 255.0 if m.normalize else None)


_NATURE_STRIDES = tuple(s for _, _, s in _NATURE_CONVS)
PLAIN_FEATURES[NatureCNN] = _nature_plain
PLAIN_FEATURES[MinAtarCNN] = _minatar_plain

"""``stable_baselines3.common.torch_layers`` -> rlgrad's policy building blocks
(``rlgrad.rl.layers``): the features extractors, ``MlpExtractor``, ``create_mlp`` and
``get_actor_critic_arch``, with SB3's names and arguments. The modules are rlgrad's: a custom
extractor subclasses ``BaseFeaturesExtractor`` with ``rlgrad.nn`` layers."""

from __future__ import annotations

from typing import Any, ClassVar

from gymnasium import spaces

from rlgrad.rl import cnn as rl_cnn
from rlgrad.rl.layers import (
    BaseFeaturesExtractor,
    CombinedExtractor,
    FlattenExtractor,
    MlpExtractor,
    cnn_trunk,
    create_mlp,
    get_actor_critic_arch,
)


class NatureCNN(BaseFeaturesExtractor):
    """SB3's ``NatureCNN(observation_space, features_dim=512, normalize_images=True)``: the
    Nature DQN trunk (rlgrad.rl.cnn's) on (C, H, W) uint8 images, with SB3's children ``cnn``
    and ``linear`` (its keys). Images under 36x36, which SB3's refuses, get the MinAtar CNN as
    ``cnn``."""

    _net: rl_cnn.NatureCNN | rl_cnn.MinAtarCNN  # the trunk whose forward runs (see __init__)
    #: the keys this class wrote when it held the whole trunk as ``cnn`` (``cnn.7``: the linear)
    _renamed_state_keys: ClassVar[dict[str, str]] = {"cnn.7.": "linear.0."}

    def __init__(self, observation_space: spaces.Box, features_dim: int = 512,
                 normalize_images: bool = True) -> None:
        super().__init__(observation_space, features_dim)
        net = cnn_trunk(observation_space, features_dim, normalize_images)
        if isinstance(net, rl_cnn.NatureCNN):
            self.cnn, self.linear = net.cnn, net.linear  # the trunk's own children
        else:
            self.cnn = net
        object.__setattr__(self, "_net", net)  # (not a child: its children are this module's)

    def forward(self, observations: Any) -> Any:
        return self._net(observations)


__all__ = ["BaseFeaturesExtractor", "CombinedExtractor", "FlattenExtractor", "MlpExtractor",
           "NatureCNN", "create_mlp", "get_actor_critic_arch"]

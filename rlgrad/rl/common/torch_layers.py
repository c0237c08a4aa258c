"""``stable_baselines3.common.torch_layers`` -> rlgrad's policy building blocks
(``rlgrad.rl.layers``): the features extractors, ``MlpExtractor``, ``create_mlp`` and
``get_actor_critic_arch``, with SB3's names and arguments. The modules are rlgrad's: a custom
extractor subclasses ``BaseFeaturesExtractor`` with ``rlgrad.nn`` layers."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

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
    Nature DQN trunk (rlgrad.rl.cnn's, as ``self.cnn``) on (C, H, W) uint8 images."""

    def __init__(self, observation_space: spaces.Box, features_dim: int = 512,
                 normalize_images: bool = True) -> None:
        super().__init__(observation_space, features_dim)
        self.cnn = cnn_trunk(observation_space, features_dim, normalize_images)

    def forward(self, observations: Any) -> Any:
        return self.cnn(observations)


__all__ = ["BaseFeaturesExtractor", "CombinedExtractor", "FlattenExtractor", "MlpExtractor",
           "NatureCNN", "create_mlp", "get_actor_critic_arch"]

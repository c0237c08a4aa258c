"""``stable_baselines3.common.policies`` -> rlgrad.rl's policies, with SB3's names.

``ActorCriticPolicy`` is the one A2C and PPO build (and a custom policy subclasses, overriding
``_build_mlp_extractor``); ``ActorCriticCnnPolicy`` and ``MultiInputActorCriticPolicy`` are it
with SB3's defaults for images (``NatureCNN``) and Dict observations (``CombinedExtractor``),
which ``ActorCriticPolicy`` already picks from the observation space."""

from __future__ import annotations

from rlgrad.rl.layers import BaseFeaturesExtractor
from rlgrad.rl.policies import ActorCriticPolicy, ContinuousCritic, SB3PolicyMethods

#: SB3's base class of every policy (rlgrad's tensor methods of ActorCriticPolicy)
BasePolicy = SB3PolicyMethods


class ActorCriticCnnPolicy(ActorCriticPolicy):
    """SB3's CnnPolicy for A2C and PPO (the CNN trunk is chosen for image observations)."""


class MultiInputActorCriticPolicy(ActorCriticPolicy):
    """SB3's MultiInputPolicy for A2C and PPO (``CombinedExtractor`` for Dict observations)."""


__all__ = ["ActorCriticCnnPolicy", "ActorCriticPolicy", "BaseFeaturesExtractor", "BasePolicy",
           "ContinuousCritic", "MultiInputActorCriticPolicy"]

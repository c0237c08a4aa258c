"""``sb3_contrib.ppo_mask``: ``MaskablePPO`` and its policy names."""

from rlgrad.rl.maskable import MaskableActorCriticPolicy, MaskablePPO


class MlpPolicy(MaskableActorCriticPolicy):
    """``MaskablePPO(MlpPolicy, env)``: the class stands for its name."""


class CnnPolicy(MaskableActorCriticPolicy):
    """``MaskablePPO(CnnPolicy, env)``: the class stands for its name."""


class MultiInputPolicy(MaskableActorCriticPolicy):
    """``MaskablePPO(MultiInputPolicy, env)``: the class stands for its name."""


__all__ = ["CnnPolicy", "MaskablePPO", "MlpPolicy", "MultiInputPolicy"]

"""``stable_baselines3.common.envs`` (and sb3-contrib's ``InvalidActionEnv*``): small
Gymnasium envs for tests and examples."""

from rlgrad.rl.common.envs.bit_flipping_env import BitFlippingEnv
from rlgrad.rl.common.envs.identity_env import (
    FakeImageEnv,
    IdentityEnv,
    IdentityEnvBox,
    IdentityEnvMultiBinary,
    IdentityEnvMultiDiscrete,
)
from rlgrad.rl.common.envs.invalid_actions_env import (
    InvalidActionEnvDiscrete,
    InvalidActionEnvMultiBinary,
    InvalidActionEnvMultiDiscrete,
)
from rlgrad.rl.common.envs.multi_input_envs import SimpleMultiObsEnv

__all__ = ["BitFlippingEnv", "FakeImageEnv", "IdentityEnv", "IdentityEnvBox",
           "IdentityEnvMultiBinary", "IdentityEnvMultiDiscrete", "InvalidActionEnvDiscrete",
           "InvalidActionEnvMultiBinary", "InvalidActionEnvMultiDiscrete", "SimpleMultiObsEnv"]

"""``sb3_contrib.ppo_recurrent``: ``RecurrentPPO`` and its policy names."""

from rlgrad.rl.recurrent_policies import RecurrentActorCriticPolicy
from rlgrad.rl.recurrent_ppo import RecurrentPPO


class MlpLstmPolicy(RecurrentActorCriticPolicy):
    """``RecurrentPPO(MlpLstmPolicy, env)``: the class stands for its name."""


class CnnLstmPolicy(RecurrentActorCriticPolicy):
    """``RecurrentPPO(CnnLstmPolicy, env)``: the class stands for its name."""


class MultiInputLstmPolicy(RecurrentActorCriticPolicy):
    """``RecurrentPPO(MultiInputLstmPolicy, env)``: the class stands for its name."""


__all__ = ["CnnLstmPolicy", "MlpLstmPolicy", "MultiInputLstmPolicy", "RecurrentPPO"]

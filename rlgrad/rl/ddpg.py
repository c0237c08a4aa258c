"""Deep Deterministic Policy Gradient (Lillicrap et al., 2016).

TD3 with one critic, the actor updated after every critic update, and no target policy
smoothing: the critic regresses on ``r + gamma (1 - terminated) Q'(s', mu'(s'))`` and the actor
ascends ``Q(s, mu(s))`` through ``dQ/da``. (Stable-Baselines3 defines DDPG the same way.)

DDPG takes TD3's arguments (``**kwargs``) except the four it pins (``fixed_hyperparams``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rlgrad.rl.envs import EnvLike
from rlgrad.rl.td3 import TD3


class DDPG(TD3):
    #: TD3's arguments that DDPG pins: not settable, not recorded (rlgrad.rl.hyperparams)
    fixed_hyperparams: ClassVar[dict[str, Any]] = {
        "policy_delay": 1, "target_policy_noise": 0.0, "target_noise_clip": 0.0, "n_critics": 1}

    def __init__(self, env: EnvLike, **kwargs: Any) -> None:
        pinned = sorted(set(kwargs) & set(self.fixed_hyperparams))
        if pinned:
            raise TypeError(f"DDPG fixes {', '.join(pinned)} (it is TD3 with "
                            f"{self.fixed_hyperparams}); use TD3 to set them")
        super().__init__(env, **kwargs, **self.fixed_hyperparams)

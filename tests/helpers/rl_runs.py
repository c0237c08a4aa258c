"""Fixed-seed training runs that tests compare bit for bit with a fast path on and off."""

from __future__ import annotations

import numpy as np


def dict_image_ppo(n_steps: int, batch_size: int, total: int,
                   with_callback: bool) -> list[np.ndarray]:
    """PPO ``MultiInputPolicy`` on SB3's SimpleMultiObsEnv (a Dict of a 64x64 image and a
    vector: CombinedExtractor with a Nature CNN), one epoch per rollout, seed 3: the last
    rollout buffer's arrays and the trained parameters."""
    from rlgrad.rl import PPO
    from rlgrad.rl.common.envs import SimpleMultiObsEnv

    np.random.seed(3)  # (the env draws its images from NumPy's global generator)
    model = PPO("MultiInputPolicy", SimpleMultiObsEnv(random_start=False), n_steps=n_steps,
                batch_size=batch_size, n_epochs=1, seed=3)
    model.learn(total, callback=(lambda _locals, _globals: True) if with_callback else None)
    buf = model.rollout_buffer
    return [buf.observations.copy(), buf.actions.copy(), buf.log_probs.copy(),
            buf.values.copy(), buf.bootstrap.copy(), buf.returns.copy(),
            *(p._value.copy() for p in model.policy.parameters())]

"""A custom callback in the form of SB3's documentation: every hook counted."""
from rlgrad.rl import PPO
from rlgrad.rl.common.callbacks import BaseCallback


class CustomCallback(BaseCallback):
    def __init__(self, verbose: int = 0):
        super().__init__(verbose)
        self.counts = {"init": 0, "training_start": 0, "rollout_start": 0, "step": 0,
                       "rollout_end": 0, "training_end": 0}

    def _init_callback(self) -> None:
        self.counts["init"] += 1

    def _on_training_start(self) -> None:
        self.counts["training_start"] += 1

    def _on_rollout_start(self) -> None:
        self.counts["rollout_start"] += 1

    def _on_step(self) -> bool:
        self.counts["step"] += 1
        assert self.num_timesteps == self.n_calls * self.training_env.num_envs
        self.logger.record("custom/calls", self.n_calls)
        return True

    def _on_rollout_end(self) -> None:
        self.counts["rollout_end"] += 1

    def _on_training_end(self) -> None:
        self.counts["training_end"] += 1


callback = CustomCallback()
model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, n_epochs=1, seed=0)
model.learn(total_timesteps=640, callback=callback)
results = {"counts": callback.counts, "n_calls": callback.n_calls,
           "num_timesteps": model.num_timesteps}

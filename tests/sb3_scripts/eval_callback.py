"""EvalCallback with StopTrainingOnRewardThreshold / StopTrainingOnNoModelImprovement, as in SB3's
callbacks documentation."""
import gymnasium as gym
import numpy as np

from rlgrad.rl import DQN
from rlgrad.rl.common.callbacks import (
    CallbackList,
    CheckpointCallback,
    EvalCallback,
    StopTrainingOnNoModelImprovement,
    StopTrainingOnRewardThreshold,
)
from rlgrad.rl.common.monitor import Monitor

eval_env = Monitor(gym.make("CartPole-v1"))
# stop training when the model reaches the reward threshold
callback_on_best = StopTrainingOnRewardThreshold(reward_threshold=1_000, verbose=1)
stop_train_callback = StopTrainingOnNoModelImprovement(max_no_improvement_evals=50, min_evals=5,
                                                       verbose=1)
eval_callback = EvalCallback(eval_env, callback_on_new_best=callback_on_best,
                             callback_after_eval=stop_train_callback, eval_freq=250,
                             n_eval_episodes=3, best_model_save_path="./logs/",
                             log_path="./logs/", deterministic=True, render=False, verbose=1)
checkpoint_callback = CheckpointCallback(save_freq=500, save_path="./logs/checkpoints/",
                                         name_prefix="rl_model")

model = DQN("MlpPolicy", "CartPole-v1", learning_starts=200, seed=0, verbose=0)
model.learn(total_timesteps=1_000, callback=CallbackList([checkpoint_callback, eval_callback]))

evaluations = np.load("./logs/evaluations.npz")
best = DQN.load("./logs/best_model")
results = {"keys": sorted(evaluations.files),
           "timesteps": evaluations["timesteps"].tolist(),
           "results_shape": evaluations["results"].shape,
           "ep_lengths_shape": evaluations["ep_lengths"].shape,
           "n_calls": eval_callback.n_calls,
           "n_evals_after": stop_train_callback.n_calls,
           "best_mean_reward": float(eval_callback.best_mean_reward),
           "num_timesteps": model.num_timesteps,
           "best_is_dqn": type(best).__name__}

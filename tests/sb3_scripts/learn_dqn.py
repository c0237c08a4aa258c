"""DQN on CartPole written as an SB3 user would, with the hyperparameters of rlgrad's DQN
learning test (rl-baselines3-zoo's, smaller network and budget)."""
import gymnasium as gym

from rlgrad.rl import DQN
from rlgrad.rl.common.evaluation import evaluate_policy
from rlgrad.rl.common.monitor import Monitor

env = gym.make("CartPole-v1")
model = DQN("MlpPolicy", env, learning_rate=2.3e-3, batch_size=64, buffer_size=20_000,
            learning_starts=1000, target_update_interval=10, train_freq=256, gradient_steps=128,
            exploration_fraction=0.16, exploration_final_eps=0.04,
            policy_kwargs=dict(net_arch=[64, 64]), seed=0, verbose=0)
eval_env = Monitor(gym.make("CartPole-v1"))
before, _ = evaluate_policy(model, eval_env, n_eval_episodes=10)
model.learn(total_timesteps=20_000)
after, std = evaluate_policy(model, eval_env, n_eval_episodes=10)
results = {"before": before, "after": after, "std": std}

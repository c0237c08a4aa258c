"""evaluate_policy on a one-copy env and on a vector env (returned shapes, episode split)."""
import gymnasium as gym

from rlgrad.rl import A2C
from rlgrad.rl.common.env_util import make_vec_env
from rlgrad.rl.common.evaluation import evaluate_policy
from rlgrad.rl.common.monitor import Monitor

model = A2C("MlpPolicy", "CartPole-v1", seed=0)
model.learn(total_timesteps=500)

mean_reward, std_reward = evaluate_policy(model, Monitor(gym.make("CartPole-v1")),
                                          n_eval_episodes=5)
vec_env = make_vec_env("CartPole-v1", n_envs=3, seed=1)
rewards, lengths = evaluate_policy(model, vec_env, n_eval_episodes=7, return_episode_rewards=True)

results = {"floats": isinstance(mean_reward, float) and isinstance(std_reward, float),
           "n_rewards": len(rewards), "n_lengths": len(lengths),
           "rewards_equal_lengths": [float(r) for r in rewards] == [float(n) for n in lengths]}

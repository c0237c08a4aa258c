"""PPO on CartPole written as an SB3 user would, with rl-baselines3-zoo's hyperparameters
(rlgrad's preset) as a schedule function and a vector env from make_vec_env."""
from rlgrad.rl import PPO
from rlgrad.rl.common.env_util import make_vec_env
from rlgrad.rl.common.evaluation import evaluate_policy


def linear_schedule(initial_value: float):
    def func(progress_remaining: float) -> float:
        return progress_remaining * initial_value
    return func


vec_env = make_vec_env("CartPole-v1", n_envs=8, seed=0)
model = PPO("MlpPolicy", vec_env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
            n_epochs=20, ent_coef=0.0, learning_rate=linear_schedule(1e-3),
            clip_range=linear_schedule(0.2), seed=0, verbose=0)
before, _ = evaluate_policy(model, make_vec_env("CartPole-v1", n_envs=4, seed=100),
                            n_eval_episodes=20)
model.learn(total_timesteps=100_000)
after, std = evaluate_policy(model, make_vec_env("CartPole-v1", n_envs=4, seed=100),
                             n_eval_episodes=20)
results = {"before": before, "after": after, "std": std}

"""SB3's quickstart, in the style of its documentation: train, step the env, save, load."""
import gymnasium as gym

from rlgrad.rl import PPO

env = gym.make("CartPole-v1")

model = PPO("MlpPolicy", env, n_steps=256, batch_size=64, n_epochs=4, seed=0, verbose=1)
model.learn(total_timesteps=1_024)

vec_env = model.get_env()
obs = vec_env.reset()
steps = dones_seen = 0
for _ in range(300):
    action, _states = model.predict(obs, deterministic=True)
    obs, reward, done, info = vec_env.step(action)
    steps += 1
    dones_seen += int(done[0])
    if done[0]:
        assert "terminal_observation" in info[0]

model.save("ppo_cartpole")
del model  # remove to demonstrate saving and loading
model = PPO.load("ppo_cartpole")
action, _ = model.predict(obs, deterministic=True)

results = {"obs_shape": obs.shape, "reward_shape": reward.shape, "done_dtype": str(done.dtype),
           "action_shape": action.shape, "n_envs": vec_env.num_envs, "steps": steps,
           "dones": dones_seen}

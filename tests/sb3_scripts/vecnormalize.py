"""VecNormalize with save/load, as in SB3's examples ("PyBullet: Normalizing input features")."""
import os

from rlgrad.rl import PPO
from rlgrad.rl.common.env_util import make_vec_env
from rlgrad.rl.common.vec_env import VecNormalize

vec_env = make_vec_env("Pendulum-v1", n_envs=4, seed=0)
vec_env = VecNormalize(vec_env, norm_obs=True, norm_reward=True, clip_obs=10.0)

model = PPO("MlpPolicy", vec_env, n_steps=128, batch_size=128, seed=0)
model.learn(total_timesteps=1_024)

log_dir = "."
model.save(os.path.join(log_dir, "ppo_pendulum"))
stats_path = os.path.join(log_dir, "vec_normalize.pkl")
vec_env.save(stats_path)
mean_before = vec_env.obs_rms.mean.copy()

del model, vec_env

# load the saved statistics
vec_env = make_vec_env("Pendulum-v1", n_envs=1)
vec_env = VecNormalize.load(stats_path, vec_env)
# do not update them at test time
vec_env.training = False
# reward normalization is not needed at test time
vec_env.norm_reward = False

model = PPO.load(os.path.join(log_dir, "ppo_pendulum"), env=vec_env)
obs = vec_env.reset()
total = 0.0
for _ in range(50):
    action, _ = model.predict(obs, deterministic=True)
    obs, reward, done, info = vec_env.step(action)
    total += float(reward[0])

results = {"same_stats": bool((vec_env.obs_rms.mean == mean_before).all()),
           "obs_abs_max": float(abs(obs).max()), "raw_reward_negative": total < 0,
           "training": vec_env.training, "count": float(vec_env.obs_rms.count)}

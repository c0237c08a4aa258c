"""DQN on Atari, written the way CleanRL's ``dqn_atari.py`` is, for PyTorch; only the import lines
name rlgrad. Its idioms: uint8 frames scaled by ``x / 255.0`` inside the network, a one-env
``SyncVectorEnv``, greedy actions by ``torch.argmax(q_values, dim=1)``, the target's
``max(dim=1)`` pair, ``gather(1, actions).squeeze()``, ``F.mse_loss(td_target, old_val)`` and the
target refreshed through ``target_param.data.copy_(tau * p.data + (1 - tau) * target_param.data)``."""

from __future__ import annotations

import argparse
import random
import time
from types import SimpleNamespace

import gymnasium as gym
import numpy as np

import rlgrad as torch
import rlgrad.nn as nn
import rlgrad.nn.functional as F
import rlgrad.optim as optim
from rlgrad.rl.atari import make_atari_env


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--env-id", default="ALE/Breakout-v5")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=80)
    p.add_argument("--learning-rate", type=float, default=1e-4)
    p.add_argument("--buffer-size", type=int, default=1000)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--tau", type=float, default=1.0)
    p.add_argument("--target-network-frequency", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--start-e", type=float, default=1.0)
    p.add_argument("--end-e", type=float, default=0.01)
    p.add_argument("--exploration-fraction", type=float, default=0.5)
    p.add_argument("--learning-starts", type=int, default=40)
    p.add_argument("--train-frequency", type=int, default=4)
    p.add_argument("--cuda", action="store_true")
    return p.parse_args(argv)


def make_env(env_id, seed):
    def thunk():
        env = make_atari_env(env_id, training=True)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env.action_space.seed(seed)
        return env

    return thunk


class QNetwork(nn.Module):
    def __init__(self, n_actions):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3136, 512),
            nn.ReLU(),
            nn.Linear(512, n_actions),
        )

    def forward(self, x):
        return self.network(x / 255.0)


class ReplayBuffer:
    """uint8 frames in NumPy; ``sample`` returns tensors with SB3's field names, as CleanRL reads them."""

    def __init__(self, size, obs_shape, device):
        self.obs = np.zeros((size,) + obs_shape, np.uint8)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros((size, 1), np.int64)
        self.rewards, self.dones = np.zeros((size, 1), np.float32), np.zeros((size, 1), np.float32)
        self.size, self.pos, self.full, self.device = size, 0, False, device

    def add(self, obs, next_obs, action, reward, done):
        self.obs[self.pos], self.next_obs[self.pos] = obs, next_obs
        self.actions[self.pos], self.rewards[self.pos], self.dones[self.pos] = action, reward, done
        self.pos = (self.pos + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, n):
        idx = np.random.randint(0, self.size if self.full else self.pos, n)
        t = lambda a: torch.as_tensor(a[idx]).to(self.device)  # noqa: E731
        return SimpleNamespace(observations=t(self.obs), next_observations=t(self.next_obs),
                               actions=t(self.actions), rewards=t(self.rewards), dones=t(self.dones))


def linear_schedule(start_e, end_e, duration, t):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def td_loss(args, q_network, target_network, data):
    with torch.no_grad():
        target_max, _ = target_network(data.next_observations).max(dim=1)
        td_target = data.rewards.flatten() + args.gamma * target_max * (1 - data.dones.flatten())
    old_val = q_network(data.observations).gather(1, data.actions).squeeze()
    return F.mse_loss(td_target, old_val), old_val


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = gym.vector.SyncVectorEnv([make_env(args.env_id, args.seed)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    assert isinstance(envs.single_action_space, gym.spaces.Discrete), \
        "only discrete action space is supported"
    q_network = QNetwork(envs.single_action_space.n).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(envs.single_action_space.n).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = ReplayBuffer(args.buffer_size, envs.single_observation_space.shape, device)

    losses, q_means, start = [], [], time.time()
    obs, _ = envs.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps,
                                  global_step)
        if random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            q_values = q_network(torch.Tensor(obs).to(device))
            actions = torch.argmax(q_values, dim=1).cpu().numpy()
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        real_next_obs = next_obs.copy()
        for idx, trunc in enumerate(truncations):
            if trunc:
                real_next_obs[idx] = infos["final_obs"][idx]
        rb.add(obs[0], real_next_obs[0], actions[0], rewards[0], terminations[0])
        obs = next_obs

        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                loss, old_val = td_loss(args, q_network, target_network, rb.sample(args.batch_size))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                q_means.append(old_val.mean().item())
            if global_step % args.target_network_frequency == 0:
                for target_network_param, q_network_param in zip(target_network.parameters(),
                                                                 q_network.parameters()):
                    target_network_param.data.copy_(
                        args.tau * q_network_param.data + (1.0 - args.tau) * target_network_param.data)
    envs.close()
    return {"losses": losses, "q_means": q_means,
            "steps_per_second": args.total_timesteps / (time.time() - start)}


if __name__ == "__main__":
    out = main()
    print(f"{len(out['losses'])} updates, last loss {out['losses'][-1]:.4f}, "
          f"{out['steps_per_second']:.0f} steps/s")

"""A single-file DQN written the way CleanRL writes its scripts, for PyTorch; only the import
lines name rlgrad. The target network follows with the soft update through ``.data`` that
PyTorch scripts write (``target.data.copy_(tau * p.data + (1 - tau) * target.data)``)."""

from __future__ import annotations

import argparse
import random
import time

import gymnasium as gym
import numpy as np

import rlgrad as torch
import rlgrad.nn as nn
import rlgrad.nn.functional as F
import rlgrad.optim as optim


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=30000)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--buffer-size", type=int, default=20000)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--tau", type=float, default=0.05)
    p.add_argument("--target-network-frequency", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--start-e", type=float, default=1.0)
    p.add_argument("--end-e", type=float, default=0.05)
    p.add_argument("--exploration-fraction", type=float, default=0.4)
    p.add_argument("--learning-starts", type=int, default=1000)
    p.add_argument("--train-frequency", type=int, default=2)
    p.add_argument("--cuda", action="store_true")
    p.add_argument("--compile", action="store_true", help="the update under torch.compile")
    return p.parse_args(argv)


class QNetwork(nn.Module):
    def __init__(self, obs_dim, n_actions):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(obs_dim, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                                    nn.Linear(84, n_actions))

    def forward(self, x):
        return self.layers(x)


class Replay:
    """A ring buffer of NumPy arrays; samples come back as tensors on `device`."""

    def __init__(self, size, obs_shape, device):
        self.obs = np.zeros((size,) + obs_shape, np.float32)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros((size, 1), np.int64)
        self.rewards = np.zeros((size, 1), np.float32)
        self.dones = np.zeros((size, 1), np.float32)
        self.size, self.pos, self.full, self.device = size, 0, False, device

    def add(self, o, o2, a, r, d):
        self.obs[self.pos], self.next_obs[self.pos] = o, o2
        self.actions[self.pos], self.rewards[self.pos], self.dones[self.pos] = a, r, d
        self.pos = (self.pos + 1) % self.size
        self.full = self.full or self.pos == 0

    def sample(self, n):
        idx = np.random.randint(0, self.size if self.full else self.pos, n)
        as_t = lambda a: torch.as_tensor(a[idx]).to(self.device)  # noqa: E731
        return (as_t(self.obs), as_t(self.actions), as_t(self.rewards), as_t(self.next_obs),
                as_t(self.dones))


def epsilon(start, end, duration, t):
    return max(end, start + (end - start) * t / duration)


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    env = gym.make(args.env_id)
    env.action_space.seed(args.seed)
    obs_dim = int(np.prod(env.observation_space.shape))
    q_network = QNetwork(obs_dim, env.action_space.n).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate)
    target_network = QNetwork(obs_dim, env.action_space.n).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = Replay(args.buffer_size, env.observation_space.shape, device)

    def update(b_obs, b_act, b_rew, b_next, b_done):
        with torch.no_grad():
            target_max, _ = target_network(b_next).max(dim=1)
            td_target = b_rew.flatten() + args.gamma * target_max * (1 - b_done.flatten())
        old_val = q_network(b_obs).gather(1, b_act).squeeze()
        loss = F.mse_loss(td_target, old_val)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    def soft_update():
        with torch.no_grad():
            for target_param, param in zip(target_network.parameters(), q_network.parameters()):
                target_param.data.copy_(args.tau * param.data + (1.0 - args.tau) * target_param.data)

    if args.compile:
        update, soft_update = torch.compile(update), torch.compile(soft_update)

    episode_returns, running, start = [], 0.0, time.time()
    obs, _ = env.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        eps = epsilon(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps, global_step)
        if random.random() < eps:
            action = env.action_space.sample()
        else:
            q_values = q_network(torch.Tensor(obs).to(device).unsqueeze(0))
            action = torch.argmax(q_values, dim=1).cpu().numpy()[0]
        next_obs, reward, term, trunc, _ = env.step(action)
        running += reward
        rb.add(obs, next_obs, action, reward, float(term))
        obs = next_obs
        if term or trunc:
            episode_returns.append(running)
            running = 0.0
            obs, _ = env.reset()

        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                update(*rb.sample(args.batch_size))
            if global_step % args.target_network_frequency == 0:
                soft_update()
    env.close()
    return {"episode_returns": episode_returns,
            "steps_per_second": args.total_timesteps / (time.time() - start)}


if __name__ == "__main__":
    out = main()
    print(f"last 10 episodes: {np.mean(out['episode_returns'][-10:]):.1f}, "
          f"{out['steps_per_second']:.0f} steps/s")

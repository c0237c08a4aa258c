"""A single-file C51 (categorical DQN) written the way CleanRL writes its scripts, for PyTorch;
only the import lines name rlgrad. It uses the idioms CleanRL's ``c51.py`` failed on before
issue 29: ``torch.linspace(v_min, v_max, steps=n_atoms)`` registered as a buffer, and the
distribution projection written with ``target_pmfs[i].index_add_(0, l[i].long(), d_m_l[i])``
into a row of a ``zeros_like`` tensor under ``no_grad``."""

from __future__ import annotations

import argparse
import random
import time

import gymnasium as gym
import numpy as np

import rlgrad as torch
import rlgrad.nn as nn
import rlgrad.optim as optim


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=30000)
    p.add_argument("--learning-rate", type=float, default=2.5e-3)
    p.add_argument("--n-atoms", type=int, default=51)
    p.add_argument("--v-min", type=float, default=-100)
    p.add_argument("--v-max", type=float, default=100)
    p.add_argument("--buffer-size", type=int, default=20000)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--target-network-frequency", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--start-e", type=float, default=1.0)
    p.add_argument("--end-e", type=float, default=0.05)
    p.add_argument("--exploration-fraction", type=float, default=0.4)
    p.add_argument("--learning-starts", type=int, default=1000)
    p.add_argument("--train-frequency", type=int, default=2)
    p.add_argument("--cuda", action="store_true")
    return p.parse_args(argv)


class QNetwork(nn.Module):
    def __init__(self, obs_dim, n_actions, n_atoms=101, v_min=-100, v_max=100):
        super().__init__()
        self.n_atoms = n_atoms
        self.register_buffer("atoms", torch.linspace(v_min, v_max, steps=n_atoms))
        self.n = n_actions
        self.network = nn.Sequential(nn.Linear(obs_dim, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                                     nn.Linear(84, self.n * n_atoms))

    def get_action(self, x, action=None):
        logits = self.network(x)
        # probability mass function for each action
        pmfs = torch.softmax(logits.view(len(x), self.n, self.n_atoms), dim=2)
        q_values = (pmfs * self.atoms).sum(2)
        if action is None:
            action = torch.argmax(q_values, 1)
        return action, pmfs[torch.arange(len(x)), action]


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


def linear_schedule(start_e, end_e, duration, t):
    slope = (end_e - start_e) / duration
    return max(slope * t + start_e, end_e)


def project(target_network, next_pmfs, rewards, dones, args):
    """CleanRL's projection of the shifted target distribution onto the fixed atoms."""
    next_atoms = rewards + args.gamma * target_network.atoms * (1 - dones)
    delta_z = target_network.atoms[1] - target_network.atoms[0]
    tz = next_atoms.clamp(args.v_min, args.v_max)
    b = (tz - args.v_min) / delta_z
    l = b.floor().clamp(0, args.n_atoms - 1)  # noqa: E741 - CleanRL's name
    u = b.ceil().clamp(0, args.n_atoms - 1)
    # (l == u).float() handles the case where bj is exactly an integer
    d_m_l = (u + (l == u).float() - b) * next_pmfs
    d_m_u = (b - l) * next_pmfs
    target_pmfs = torch.zeros_like(next_pmfs)
    for i in range(target_pmfs.size(0)):
        target_pmfs[i].index_add_(0, l[i].long(), d_m_l[i])
        target_pmfs[i].index_add_(0, u[i].long(), d_m_u[i])
    return target_pmfs


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
    make = lambda: QNetwork(obs_dim, env.action_space.n, args.n_atoms, args.v_min, args.v_max)  # noqa: E731
    q_network = make().to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=0.01 / args.batch_size)
    target_network = make().to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = Replay(args.buffer_size, env.observation_space.shape, device)

    episode_returns, losses, running, start = [], [], 0.0, time.time()
    obs, _ = env.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        eps = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps,
                              global_step)
        if random.random() < eps:
            action = env.action_space.sample()
        else:
            actions, pmf = q_network.get_action(torch.Tensor(obs).to(device).unsqueeze(0))
            action = actions.cpu().numpy()[0]
        next_obs, reward, term, trunc, _ = env.step(action)
        running += reward
        rb.add(obs, next_obs, action, reward, float(term))
        obs = next_obs
        if term or trunc:
            episode_returns.append(running)
            running = 0.0
            obs, _ = env.reset()

        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            b_obs, b_act, b_rew, b_next, b_done = rb.sample(args.batch_size)
            with torch.no_grad():
                _, next_pmfs = target_network.get_action(b_next)
                target_pmfs = project(target_network, next_pmfs, b_rew, b_done, args)
            _, old_pmfs = q_network.get_action(b_obs, b_act.flatten())
            loss = (-(target_pmfs * old_pmfs.clamp(min=1e-5, max=1 - 1e-5).log()).sum(-1)).mean()
            losses.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if global_step % args.target_network_frequency == 0:
            target_network.load_state_dict(q_network.state_dict())
    env.close()
    return {"episode_returns": episode_returns, "losses": losses,
            "steps_per_second": args.total_timesteps / (time.time() - start)}


if __name__ == "__main__":
    out = main()
    print(f"last 10 episodes: {np.mean(out['episode_returns'][-10:]):.1f}, "
          f"{out['steps_per_second']:.0f} steps/s")

"""C51 (categorical DQN) on Atari, written the way CleanRL's c51_atari.py is, for PyTorch; only
the import lines name rlgrad. Its idioms: the support as a buffer made by
``torch.linspace(v_min, v_max, steps=n_atoms)``, ``pmfs[torch.arange(len(x)), action]``, the
projection of the target distribution with ``index_add_`` into rows of a zeros tensor, and the
target network refreshed by ``load_state_dict``."""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

import rlgrad as torch
import rlgrad.nn as nn
import rlgrad.optim as optim
from rlgrad.rl.atari import make_atari_env


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--env-id", default="ALE/Breakout-v5")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=80)
    p.add_argument("--learning-rate", type=float, default=2.5e-4)
    p.add_argument("--n-atoms", type=int, default=51)
    p.add_argument("--v-min", type=float, default=-10)
    p.add_argument("--v-max", type=float, default=10)
    p.add_argument("--buffer-size", type=int, default=1000)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--target-network-frequency", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--start-e", type=float, default=1.0)
    p.add_argument("--end-e", type=float, default=0.01)
    p.add_argument("--exploration-fraction", type=float, default=0.5)
    p.add_argument("--learning-starts", type=int, default=40)
    p.add_argument("--train-frequency", type=int, default=4)
    p.add_argument("--cuda", action="store_true")
    return p.parse_args(argv)


class QNetwork(nn.Module):
    def __init__(self, n_actions, n_atoms=101, v_min=-100, v_max=100):
        super().__init__()
        self.n_atoms = n_atoms
        self.register_buffer("atoms", torch.linspace(v_min, v_max, steps=n_atoms))
        self.n = n_actions
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
            nn.Linear(512, self.n * n_atoms),
        )

    def get_action(self, x, action=None):
        logits = self.network(x / 255.0)
        pmfs = torch.softmax(logits.view(len(x), self.n, self.n_atoms), dim=2)
        q_values = (pmfs * self.atoms).sum(2)
        if action is None:
            action = torch.argmax(q_values, 1)
        return action, pmfs[torch.arange(len(x)), action]


class Replay:
    """A ring buffer of uint8 frames; samples come back as tensors on `device`."""

    def __init__(self, size, obs_shape, device):
        self.obs = np.zeros((size,) + obs_shape, np.uint8)
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


def project(args, target_network, rewards, dones, next_pmfs):
    """CleanRL's projection of the shifted support onto the fixed atoms."""
    next_atoms = rewards + args.gamma * target_network.atoms * (1 - dones)
    delta_z = target_network.atoms[1] - target_network.atoms[0]
    tz = next_atoms.clamp(args.v_min, args.v_max)
    b = (tz - args.v_min) / delta_z
    lo = b.floor().clamp(0, args.n_atoms - 1)
    up = b.ceil().clamp(0, args.n_atoms - 1)
    d_m_l = (up + (lo == up).float() - b) * next_pmfs
    d_m_u = (b - lo) * next_pmfs
    target_pmfs = torch.zeros_like(next_pmfs)
    for i in range(target_pmfs.size(0)):
        target_pmfs[i].index_add_(0, lo[i].long(), d_m_l[i])
        target_pmfs[i].index_add_(0, up[i].long(), d_m_u[i])
    return target_pmfs


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    env = make_atari_env(args.env_id, training=True)
    env.action_space.seed(args.seed)
    n = env.action_space.n
    q_network = QNetwork(n, n_atoms=args.n_atoms, v_min=args.v_min, v_max=args.v_max).to(device)
    optimizer = optim.Adam(q_network.parameters(), lr=args.learning_rate, eps=0.01 / args.batch_size)
    target_network = QNetwork(n, n_atoms=args.n_atoms, v_min=args.v_min, v_max=args.v_max).to(device)
    target_network.load_state_dict(q_network.state_dict())
    rb = Replay(args.buffer_size, env.observation_space.shape, device)

    losses, start = [], time.time()
    obs, _ = env.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        epsilon = linear_schedule(args.start_e, args.end_e, args.exploration_fraction * args.total_timesteps,
                                  global_step)
        if random.random() < epsilon:
            action = env.action_space.sample()
        else:
            actions, pmf = q_network.get_action(torch.Tensor(obs).to(device).unsqueeze(0))
            action = actions.cpu().numpy()[0]
        next_obs, reward, term, trunc, _ = env.step(action)
        rb.add(obs, next_obs, action, reward, float(term))
        obs = next_obs
        if term or trunc:
            obs, _ = env.reset()

        if global_step > args.learning_starts:
            if global_step % args.train_frequency == 0:
                b_obs, b_act, b_rew, b_next, b_done = rb.sample(args.batch_size)
                with torch.no_grad():
                    _, next_pmfs = target_network.get_action(b_next)
                    target_pmfs = project(args, target_network, b_rew, b_done, next_pmfs)
                _, old_pmfs = q_network.get_action(b_obs, b_act.flatten())
                loss = (-(target_pmfs * old_pmfs.clamp(min=1e-5, max=1 - 1e-5).log()).sum(-1)).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            if global_step % args.target_network_frequency == 0:
                target_network.load_state_dict(q_network.state_dict())
    env.close()
    return {"losses": losses, "steps_per_second": args.total_timesteps / (time.time() - start)}


if __name__ == "__main__":
    out = main()
    print(f"{len(out['losses'])} updates, last loss {out['losses'][-1]:.4f}, "
          f"{out['steps_per_second']:.0f} steps/s")

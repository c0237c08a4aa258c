"""A single-file TD3 for continuous actions written the way CleanRL writes its scripts, for
PyTorch; only the import lines name rlgrad. It uses what CleanRL's TD3/DDPG/SAC files use:
``register_buffer`` for the action scale, ``torch.normal(0, tensor)`` exploration noise,
``torch.randn_like(x, device=)`` target smoothing, ``.clamp`` with Tensor bounds,
``torch.min(q1, q2)``, ``torch.cat`` and the soft updates through ``.data``."""

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
    p.add_argument("--env-id", default="Pendulum-v1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=8000)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--buffer-size", type=int, default=100000)
    p.add_argument("--gamma", type=float, default=0.98)
    p.add_argument("--tau", type=float, default=0.005)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--policy-noise", type=float, default=0.2)
    p.add_argument("--exploration-noise", type=float, default=0.1)
    p.add_argument("--learning-starts", type=int, default=1000)
    p.add_argument("--policy-frequency", type=int, default=2)
    p.add_argument("--noise-clip", type=float, default=0.5)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--cuda", action="store_true")
    return p.parse_args(argv)


class QNetwork(nn.Module):
    def __init__(self, obs_dim, act_dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim + act_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Actor(nn.Module):
    def __init__(self, obs_dim, space, hidden):
        super().__init__()
        self.fc1 = nn.Linear(obs_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc_mu = nn.Linear(hidden, int(np.prod(space.shape)))
        self.register_buffer("action_scale",
                             torch.tensor((space.high - space.low) / 2.0, dtype=torch.float32))
        self.register_buffer("action_bias",
                             torch.tensor((space.high + space.low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = torch.tanh(self.fc_mu(F.relu(self.fc2(F.relu(self.fc1(x))))))
        return x * self.action_scale + self.action_bias


def soft_update(target, source, tau):
    for target_param, param in zip(target.parameters(), source.parameters()):
        target_param.data.copy_(tau * param.data + (1 - tau) * target_param.data)


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    env = gym.make(args.env_id)
    env.action_space.seed(args.seed)
    space, obs_dim = env.action_space, int(np.prod(env.observation_space.shape))
    act_dim = int(np.prod(space.shape))
    actor = Actor(obs_dim, space, args.hidden).to(device)
    qf1, qf2, qf1_target, qf2_target = (QNetwork(obs_dim, act_dim, args.hidden).to(device) for _ in range(4))
    target_actor = Actor(obs_dim, space, args.hidden).to(device)
    target_actor.load_state_dict(actor.state_dict())
    qf1_target.load_state_dict(qf1.state_dict())
    qf2_target.load_state_dict(qf2.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()) + list(qf2.parameters()), lr=args.learning_rate)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.learning_rate)

    n = args.buffer_size
    buf = {"o": np.zeros((n, obs_dim), np.float32), "o2": np.zeros((n, obs_dim), np.float32),
           "a": np.zeros((n, act_dim), np.float32), "r": np.zeros((n, 1), np.float32),
           "d": np.zeros((n, 1), np.float32)}
    episode_returns, running, start = [], 0.0, time.time()
    obs, _ = env.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        if global_step < args.learning_starts:
            action = space.sample()
        else:
            with torch.no_grad():
                action = actor(torch.Tensor(obs).to(device).unsqueeze(0))[0]
                action += torch.normal(0, actor.action_scale * args.exploration_noise)
                action = action.cpu().numpy().clip(space.low, space.high)
        next_obs, reward, term, trunc, _ = env.step(action)
        running += reward
        i = global_step % n
        buf["o"][i], buf["o2"][i], buf["a"][i], buf["r"][i], buf["d"][i] = obs, next_obs, action, reward, term
        obs = next_obs
        if term or trunc:
            episode_returns.append(running)
            running = 0.0
            obs, _ = env.reset()

        if global_step > args.learning_starts:
            idx = np.random.randint(0, min(global_step + 1, n), args.batch_size)
            o, o2, a, r, d = (torch.as_tensor(buf[k][idx], device=device) for k in ("o", "o2", "a", "r", "d"))
            with torch.no_grad():
                clipped_noise = (torch.randn_like(a, device=device) * args.policy_noise).clamp(
                    -args.noise_clip, args.noise_clip) * target_actor.action_scale
                next_actions = (target_actor(o2) + clipped_noise).clamp(
                    torch.Tensor(space.low).to(device), torch.Tensor(space.high).to(device))
                min_q_next = torch.min(qf1_target(o2, next_actions), qf2_target(o2, next_actions))
                next_q_value = r.flatten() + (1 - d.flatten()) * args.gamma * min_q_next.view(-1)
            qf1_loss = F.mse_loss(qf1(o, a).view(-1), next_q_value)
            qf2_loss = F.mse_loss(qf2(o, a).view(-1), next_q_value)
            q_optimizer.zero_grad()
            (qf1_loss + qf2_loss).backward()
            q_optimizer.step()
            if global_step % args.policy_frequency == 0:
                actor_loss = -qf1(o, actor(o)).mean()
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()
                soft_update(target_actor, actor, args.tau)
                soft_update(qf1_target, qf1, args.tau)
                soft_update(qf2_target, qf2, args.tau)
    env.close()
    return {"episode_returns": episode_returns,
            "steps_per_second": args.total_timesteps / (time.time() - start)}


if __name__ == "__main__":
    out = main()
    print(f"last 5 episodes: {np.mean(out['episode_returns'][-5:]):.1f}, "
          f"{out['steps_per_second']:.0f} steps/s")

"""A single-file DDPG for continuous actions, written the way CleanRL's
``ddpg_continuous_action.py`` is, for PyTorch; only the import lines name rlgrad. Its idioms: a
one-env ``SyncVectorEnv`` whose truncated episodes give their last observation through
``infos["final_obs"]``, a replay buffer that hands back tensors, ``actions += torch.normal(0,
buffer * noise)`` on a batch of actions, ``.view(-1)`` targets and the soft update through
``target_param.data.copy_``."""

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
    p.add_argument("--exploration-noise", type=float, default=0.1)
    p.add_argument("--learning-starts", type=int, default=1000)
    p.add_argument("--policy-frequency", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--cuda", action="store_true")
    return p.parse_args(argv)


def make_env(env_id, seed):
    def thunk():
        env = gym.make(env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env.action_space.seed(seed)
        return env

    return thunk


class QNetwork(nn.Module):
    def __init__(self, env, hidden):
        super().__init__()
        self.fc1 = nn.Linear(np.array(env.single_observation_space.shape).prod()
                             + np.prod(env.single_action_space.shape), hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 1)

    def forward(self, x, a):
        x = torch.cat([x, a], 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class Actor(nn.Module):
    def __init__(self, env, hidden):
        super().__init__()
        self.fc1 = nn.Linear(np.array(env.single_observation_space.shape).prod(), hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc_mu = nn.Linear(hidden, np.prod(env.single_action_space.shape))
        self.register_buffer(
            "action_scale",
            torch.tensor((env.action_space.high - env.action_space.low) / 2.0, dtype=torch.float32))
        self.register_buffer(
            "action_bias",
            torch.tensor((env.action_space.high + env.action_space.low) / 2.0, dtype=torch.float32))

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = torch.tanh(self.fc_mu(x))
        return x * self.action_scale + self.action_bias


class ReplayBuffer:
    """Transitions in NumPy arrays; ``sample`` returns them as float tensors (CleanRL's fields)."""

    def __init__(self, size, obs_dim, act_dim, device):
        self.o, self.o2 = np.zeros((size, obs_dim), np.float32), np.zeros((size, obs_dim), np.float32)
        self.a = np.zeros((size, act_dim), np.float32)
        self.r, self.d = np.zeros((size, 1), np.float32), np.zeros((size, 1), np.float32)
        self.size, self.pos, self.full, self.device = size, 0, False, device

    def add(self, obs, next_obs, actions, rewards, dones):
        for i in range(len(obs)):
            self.o[self.pos], self.o2[self.pos], self.a[self.pos] = obs[i], next_obs[i], actions[i]
            self.r[self.pos], self.d[self.pos] = rewards[i], dones[i]
            self.pos = (self.pos + 1) % self.size
            self.full = self.full or self.pos == 0

    def sample(self, n):
        idx = np.random.randint(0, self.size if self.full else self.pos, n)
        t = lambda a: torch.tensor(a[idx]).to(self.device)  # noqa: E731
        return SimpleNamespace(observations=t(self.o), next_observations=t(self.o2), actions=t(self.a),
                               rewards=t(self.r), dones=t(self.d))


def train_step(args, data, nets, optimizers, global_step):
    actor, qf1, target_actor, qf1_target = nets
    q_optimizer, actor_optimizer = optimizers
    with torch.no_grad():
        next_state_actions = target_actor(data.next_observations)
        qf1_next_target = qf1_target(data.next_observations, next_state_actions)
        next_q_value = (data.rewards.flatten()
                        + (1 - data.dones.flatten()) * args.gamma * (qf1_next_target).view(-1))
    qf1_a_values = qf1(data.observations, data.actions).view(-1)
    qf1_loss = F.mse_loss(qf1_a_values, next_q_value)
    q_optimizer.zero_grad()
    qf1_loss.backward()
    q_optimizer.step()

    if global_step % args.policy_frequency == 0:
        actor_loss = -qf1(data.observations, actor(data.observations)).mean()
        actor_optimizer.zero_grad()
        actor_loss.backward()
        actor_optimizer.step()
        for param, target_param in zip(actor.parameters(), target_actor.parameters()):
            target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
        for param, target_param in zip(qf1.parameters(), qf1_target.parameters()):
            target_param.data.copy_(args.tau * param.data + (1 - args.tau) * target_param.data)
    return qf1_loss.item()


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = gym.vector.SyncVectorEnv([make_env(args.env_id, args.seed)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    assert isinstance(envs.single_action_space, gym.spaces.Box), "only continuous action space is supported"
    actor, qf1 = Actor(envs, args.hidden).to(device), QNetwork(envs, args.hidden).to(device)
    qf1_target, target_actor = QNetwork(envs, args.hidden).to(device), Actor(envs, args.hidden).to(device)
    target_actor.load_state_dict(actor.state_dict())
    qf1_target.load_state_dict(qf1.state_dict())
    q_optimizer = optim.Adam(list(qf1.parameters()), lr=args.learning_rate)
    actor_optimizer = optim.Adam(list(actor.parameters()), lr=args.learning_rate)
    rb = ReplayBuffer(args.buffer_size, int(np.prod(envs.single_observation_space.shape)),
                      int(np.prod(envs.single_action_space.shape)), device)

    episode_returns, losses, start = [], [], time.time()
    obs, _ = envs.reset(seed=args.seed)
    for global_step in range(args.total_timesteps):
        if global_step < args.learning_starts:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            with torch.no_grad():
                actions = actor(torch.Tensor(obs).to(device))
                actions += torch.normal(0, actor.action_scale * args.exploration_noise)
                actions = actions.cpu().numpy().clip(envs.single_action_space.low,
                                                     envs.single_action_space.high)

        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        if "final_info" in infos:
            info = infos["final_info"]
            episode_returns += [float(r) for r, d in zip(info["episode"]["r"], info["_episode"]) if d]
        real_next_obs = next_obs.copy()
        for idx, trunc in enumerate(truncations):
            if trunc:
                real_next_obs[idx] = infos["final_obs"][idx]
        rb.add(obs, real_next_obs, actions, rewards, terminations)
        obs = next_obs

        if global_step > args.learning_starts:
            losses.append(train_step(args, rb.sample(args.batch_size), (actor, qf1, target_actor, qf1_target),
                                     (q_optimizer, actor_optimizer), global_step))
    envs.close()
    return {"episode_returns": episode_returns, "losses": losses,
            "steps_per_second": args.total_timesteps / (time.time() - start)}


if __name__ == "__main__":
    out = main()
    print(f"last 5 episodes: {np.mean(out['episode_returns'][-5:]):.1f}, "
          f"{out['steps_per_second']:.0f} steps/s")

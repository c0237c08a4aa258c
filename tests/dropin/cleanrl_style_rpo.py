"""A single-file RPO (Robust Policy Optimization: PPO whose Gaussian mean is shifted by uniform
noise when the taken actions are re-scored) for continuous actions, written the way CleanRL
writes its scripts, for PyTorch; only the import lines name rlgrad. It uses the idiom CleanRL's
``rpo_continuous_action.py`` failed on before issue 29:
``torch.FloatTensor(action_mean.shape).uniform_(-rpo_alpha, rpo_alpha).to(device)``, and its
environment wrappers (observation and reward normalisation, clipping)."""

from __future__ import annotations

import argparse
import random
import time

import gymnasium as gym
import numpy as np

import rlgrad as torch
import rlgrad.nn as nn
import rlgrad.optim as optim
from rlgrad.distributions.normal import Normal

device = torch.device("cpu")


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--env-id", default="Pendulum-v1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=8192)
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--num-envs", type=int, default=1)
    p.add_argument("--num-steps", type=int, default=2048)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=32)
    p.add_argument("--update-epochs", type=int, default=10)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.0)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--rpo-alpha", type=float, default=0.5)
    p.add_argument("--cuda", action="store_true")
    args = p.parse_args(argv)
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    return args


def make_env(env_id, gamma):
    def thunk():
        env = gym.make(env_id)
        env = gym.wrappers.FlattenObservation(env)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -10, 10), env.observation_space)
        env = gym.wrappers.NormalizeReward(env, gamma=gamma)
        env = gym.wrappers.TransformReward(env, lambda reward: np.clip(reward, -10, 10))
        return env

    return thunk


def layer_init(layer, std=2 ** 0.5, bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, envs, rpo_alpha):
        super().__init__()
        self.rpo_alpha = rpo_alpha
        obs_dim = np.array(envs.single_observation_space.shape).prod()
        act_dim = np.prod(envs.single_action_space.shape)
        self.critic = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
                                    layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                    layer_init(nn.Linear(64, 1), std=1.0))
        self.actor_mean = nn.Sequential(layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
                                        layer_init(nn.Linear(64, 64)), nn.Tanh(),
                                        layer_init(nn.Linear(64, act_dim), std=0.01))
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def get_value(self, x):
        return self.critic(x)

    def get_action_and_value(self, x, action=None):
        action_mean = self.actor_mean(x)
        action_logstd = self.actor_logstd.expand_as(action_mean)
        action_std = torch.exp(action_logstd)
        probs = Normal(action_mean, action_std)
        if action is None:
            action = probs.sample()
        else:  # RPO: sample again to add stochasticity to the policy
            z = torch.FloatTensor(action_mean.shape).uniform_(-self.rpo_alpha, self.rpo_alpha).to(device)
            action_mean = action_mean + z
            probs = Normal(action_mean, action_std)
        return action, probs.log_prob(action).sum(1), probs.entropy().sum(1), self.critic(x)


def gae(agent, rewards, dones, values, next_obs, next_done, args):
    with torch.no_grad():
        next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages = torch.zeros_like(rewards).to(device)
        lastgaelam = 0
        for t in reversed(range(args.num_steps)):
            if t == args.num_steps - 1:
                nextnonterminal, nextvalues = 1.0 - next_done, next_value
            else:
                nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
            delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def update(agent, optimizer, batch, args):
    b_obs, b_logprobs, b_actions, b_advantages, b_returns, b_values = batch
    order, losses = np.arange(args.batch_size), []
    for _epoch in range(args.update_epochs):
        np.random.shuffle(order)
        for start in range(0, args.batch_size, args.minibatch_size):
            mb = order[start:start + args.minibatch_size]
            _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_actions[mb])
            ratio = (newlogprob - b_logprobs[mb]).exp()
            mb_adv = b_advantages[mb]
            mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
            pg_loss = torch.max(-mb_adv * ratio,
                                -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
            v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb]) ** 2).mean()
            loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
            optimizer.step()
            losses.append(loss.item())
    return losses


def main(argv=None):
    global device
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
    envs = gym.vector.SyncVectorEnv([make_env(args.env_id, args.gamma) for _ in range(args.num_envs)])
    agent = Agent(envs, args.rpo_alpha).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    shape = (args.num_steps, args.num_envs)
    obs = torch.zeros(shape + envs.single_observation_space.shape).to(device)
    actions = torch.zeros(shape + envs.single_action_space.shape).to(device)
    logprobs, rewards, dones, values = (torch.zeros(shape).to(device) for _ in range(4))

    episode_returns, losses, start = [], [], time.time()
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs, next_done = torch.Tensor(next_obs).to(device), torch.zeros(args.num_envs).to(device)
    for _iteration in range(args.total_timesteps // args.batch_size):
        for step in range(args.num_steps):
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step], logprobs[step] = action, logprob
            next_obs, reward, term, trunc, infos = envs.step(action.cpu().numpy())
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs = torch.Tensor(next_obs).to(device)
            next_done = torch.Tensor(np.logical_or(term, trunc)).to(device)
            if "episode" in infos:
                episode_returns += [float(r) for r, d in zip(infos["episode"]["r"], infos["_episode"]) if d]
        advantages, returns = gae(agent, rewards, dones, values, next_obs, next_done, args)
        batch = (obs.reshape((-1,) + envs.single_observation_space.shape), logprobs.reshape(-1),
                 actions.reshape((-1,) + envs.single_action_space.shape), advantages.reshape(-1),
                 returns.reshape(-1), values.reshape(-1))
        losses += update(agent, optimizer, batch, args)
    envs.close()
    return {"episode_returns": episode_returns, "losses": losses,
            "steps_per_second": args.total_timesteps / (time.time() - start)}


if __name__ == "__main__":
    out = main()
    print(f"last 5 episodes: {np.mean(out['episode_returns'][-5:]):.1f}, "
          f"{out['steps_per_second']:.0f} steps/s")

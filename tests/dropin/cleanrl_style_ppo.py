"""A single-file PPO for discrete actions, written the way CleanRL writes its scripts, for
PyTorch; only the import lines below name rlgrad (bench/dropin.py runs this same file with them
pointed at torch). Nothing else in it knows which library runs it."""

from __future__ import annotations

import argparse
import random
import time

import gymnasium as gym
import numpy as np

import rlgrad as torch
import rlgrad.nn as nn
import rlgrad.optim as optim
from rlgrad.distributions.categorical import Categorical


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=40000)
    p.add_argument("--learning-rate", type=float, default=2.5e-3)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--cuda", action="store_true")
    p.add_argument("--compile", action="store_true", help="the update under torch.compile")
    args = p.parse_args(argv)
    args.batch_size = args.num_envs * args.num_steps
    args.minibatch_size = args.batch_size // args.num_minibatches
    return args


def init_layer(layer, std=2 ** 0.5, bias_const=0.0):
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class ActorCritic(nn.Module):
    def __init__(self, obs_dim, n_actions):
        super().__init__()
        self.value_net = nn.Sequential(
            init_layer(nn.Linear(obs_dim, 64)), nn.Tanh(),
            init_layer(nn.Linear(64, 64)), nn.Tanh(),
            init_layer(nn.Linear(64, 1), std=1.0),
        )
        self.policy_net = nn.Sequential(
            init_layer(nn.Linear(obs_dim, 64)), nn.Tanh(),
            init_layer(nn.Linear(64, 64)), nn.Tanh(),
            init_layer(nn.Linear(64, n_actions), std=0.01),
        )

    def value(self, x):
        return self.value_net(x)

    def act(self, x, action=None):
        dist = Categorical(logits=self.policy_net(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value_net(x)


def main(argv=None):
    args = parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.backends.cudnn.deterministic = True
    device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")

    envs = gym.vector.SyncVectorEnv([lambda: gym.make(args.env_id) for _ in range(args.num_envs)])
    obs_dim = int(np.array(envs.single_observation_space.shape).prod())
    agent = ActorCritic(obs_dim, envs.single_action_space.n).to(device)
    optimizer = optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)

    def update(mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns, mb_values):
        _, newlogprob, entropy, newvalue = agent.act(mb_obs, mb_actions)
        logratio = newlogprob - mb_logprobs
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - logratio).mean()
            clipped = ((ratio - 1.0).abs() > args.clip_coef).float().mean()

        adv = (mb_advantages - mb_advantages.mean()) / (mb_advantages.std() + 1e-8)
        pg_loss = torch.max(-adv * ratio,
                            -adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
        newvalue = newvalue.view(-1)
        v_unclipped = (newvalue - mb_returns) ** 2
        v_clipped = mb_values + torch.clamp(newvalue - mb_values, -args.clip_coef, args.clip_coef)
        v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - mb_returns) ** 2).mean()
        loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef

        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
        optimizer.step()
        return approx_kl, clipped

    if args.compile:
        update = torch.compile(update)

    obs = torch.zeros((args.num_steps, args.num_envs) + envs.single_observation_space.shape).to(device)
    actions = torch.zeros((args.num_steps, args.num_envs)).to(device)
    logprobs = torch.zeros((args.num_steps, args.num_envs)).to(device)
    rewards = torch.zeros((args.num_steps, args.num_envs)).to(device)
    dones = torch.zeros((args.num_steps, args.num_envs)).to(device)
    values = torch.zeros((args.num_steps, args.num_envs)).to(device)

    episode_returns, running = [], np.zeros(args.num_envs)
    start = time.time()
    next_obs, _ = envs.reset(seed=args.seed)
    next_obs = torch.Tensor(next_obs).to(device)
    next_done = torch.zeros(args.num_envs).to(device)
    n_updates = args.total_timesteps // args.batch_size

    for iteration in range(1, n_updates + 1):
        optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / n_updates) * args.learning_rate
        for step in range(args.num_steps):
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.act(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob

            next_obs, reward, term, trunc, _ = envs.step(action.cpu().numpy())
            running += reward
            for i in np.nonzero(np.logical_or(term, trunc))[0]:
                episode_returns.append(running[i])
                running[i] = 0.0
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs = torch.Tensor(next_obs).to(device)
            next_done = torch.Tensor(np.logical_or(term, trunc)).to(device)

        with torch.no_grad():
            next_value = agent.value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards).to(device)
            last = 0
            for t in reversed(range(args.num_steps)):
                if t == args.num_steps - 1:
                    not_done, following = 1.0 - next_done, next_value
                else:
                    not_done, following = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + args.gamma * following * not_done - values[t]
                advantages[t] = last = delta + args.gamma * args.gae_lambda * not_done * last
            returns = advantages + values

        b_obs = obs.reshape((-1,) + envs.single_observation_space.shape)
        b_logprobs, b_actions = logprobs.reshape(-1), actions.reshape(-1)
        b_advantages, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), values.reshape(-1)

        order = np.arange(args.batch_size)
        for _epoch in range(args.update_epochs):
            np.random.shuffle(order)
            for lo in range(0, args.batch_size, args.minibatch_size):
                mb = order[lo:lo + args.minibatch_size]
                approx_kl, clipped = update(b_obs[mb], b_actions.long()[mb], b_logprobs[mb],
                                            b_advantages[mb], b_returns[mb], b_values[mb])
        del approx_kl, clipped
    envs.close()
    steps = n_updates * args.batch_size
    return {"episode_returns": episode_returns, "steps_per_second": steps / (time.time() - start)}


if __name__ == "__main__":
    out = main()
    print(f"last 20 episodes: {np.mean(out['episode_returns'][-20:]):.1f}, "
          f"{out['steps_per_second']:.0f} steps/s")

"""PureJaxRL's PPO (``purejaxrl/ppo.py`` and the two wrappers of ``purejaxrl/wrappers.py`` it uses),
transcribed for ``bench/purejaxrl.py``: the comparator, imported only by that benchmark's JAX process.

Written from reading PureJaxRL's source (Lu et al., 2022; MIT licence): the same computation step
by step (network, initialisation, rollout under ``lax.scan``, GAE, shuffled minibatch epochs, the
loss with value clipping, Adam with global-norm clipping and a per-update linear schedule). The
one stand-in: ``distrax.Categorical`` is written out as ``_Categorical`` (same sampling rule,
log-probabilities and entropy), since distrax is not a dependency here.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant, orthogonal
from flax.training.train_state import TrainState


class _Categorical:
    """distrax.Categorical(logits=...) as ppo.py uses it: sample, log_prob, entropy."""

    def __init__(self, logits: jax.Array) -> None:
        self.logits = logits
        self.log_probs = jax.nn.log_softmax(logits, axis=-1)

    def sample(self, seed: jax.Array) -> jax.Array:
        return jax.random.categorical(seed, self.logits, axis=-1)

    def log_prob(self, value: jax.Array) -> jax.Array:
        return jnp.take_along_axis(self.log_probs, value[..., None].astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self) -> jax.Array:
        return -jnp.sum(jnp.exp(self.log_probs) * self.log_probs, axis=-1)


class ActorCritic(nn.Module):
    action_dim: int
    activation: str = "tanh"

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[_Categorical, jax.Array]:
        act = nn.relu if self.activation == "relu" else nn.tanh
        dense = lambda n, g: nn.Dense(n, kernel_init=orthogonal(g), bias_init=constant(0.0))  # noqa: E731
        a = act(dense(64, np.sqrt(2))(x))
        a = act(dense(64, np.sqrt(2))(a))
        logits = dense(self.action_dim, 0.01)(a)
        c = act(dense(64, np.sqrt(2))(x))
        c = act(dense(64, np.sqrt(2))(c))
        c = dense(1, 1.0)(c)
        return _Categorical(logits), jnp.squeeze(c, axis=-1)


class Transition(NamedTuple):
    done: jax.Array
    action: jax.Array
    value: jax.Array
    reward: jax.Array
    log_prob: jax.Array
    obs: jax.Array
    info: Any


class _LogState(NamedTuple):
    env_state: Any
    episode_returns: jax.Array
    episode_lengths: jax.Array
    returned_episode_returns: jax.Array
    returned_episode_lengths: jax.Array
    timestep: jax.Array


class LogWrapper:
    """PureJaxRL's FlattenObservationWrapper + LogWrapper: flat observations, episode returns."""

    def __init__(self, env: Any) -> None:
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def reset(self, key: jax.Array, params: Any) -> tuple[jax.Array, _LogState]:
        obs, env_state = self._env.reset(key, params)
        z = jnp.zeros((), jnp.float32)
        zi = jnp.zeros((), jnp.int32)
        return jnp.reshape(obs, (-1,)), _LogState(env_state, z, zi, z, zi, zi)

    def step(self, key: jax.Array, state: _LogState, action: jax.Array, params: Any) -> tuple:
        out = self._env.step(key, state.env_state, action, params)
        if len(out) == 6:  # gymnax >= 1.0: (obs, state, reward, terminated, truncated, info)
            obs, env_state, reward, term, trunc, info = out
            done = jnp.logical_or(term, trunc)  # PureJaxRL's one done flag
        else:
            obs, env_state, reward, done, info = out
        ret = state.episode_returns + reward
        length = state.episode_lengths + 1
        state = _LogState(
            env_state=env_state,
            episode_returns=ret * (1 - done),
            episode_lengths=length * (1 - done),
            returned_episode_returns=state.returned_episode_returns * (1 - done) + ret * done,
            returned_episode_lengths=state.returned_episode_lengths * (1 - done) + length * done,
            timestep=state.timestep + 1,
        )
        info = dict(info)
        info["returned_episode_returns"] = state.returned_episode_returns
        info["returned_episode_lengths"] = state.returned_episode_lengths
        info["timestep"] = state.timestep
        info["returned_episode"] = done
        return jnp.reshape(obs, (-1,)), state, reward, done, info


def make_train(config: dict) -> Any:
    config = dict(config)
    config["NUM_UPDATES"] = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    config["MINIBATCH_SIZE"] = config["NUM_ENVS"] * config["NUM_STEPS"] // config["NUM_MINIBATCHES"]
    env, env_params = gymnax.make(config["ENV_NAME"])
    env = LogWrapper(env)

    def linear_schedule(count: jax.Array) -> jax.Array:
        frac = 1.0 - (count // (config["NUM_MINIBATCHES"] * config["UPDATE_EPOCHS"])) / config["NUM_UPDATES"]
        return config["LR"] * frac

    def train(rng: jax.Array) -> dict:
        network = ActorCritic(env.action_space(env_params).n, activation=config["ACTIVATION"])
        rng, _rng = jax.random.split(rng)
        params = network.init(_rng, jnp.zeros(env.observation_space(env_params).shape))
        lr = linear_schedule if config["ANNEAL_LR"] else config["LR"]
        tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]),
                         optax.adam(learning_rate=lr, eps=1e-5))
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        rng, _rng = jax.random.split(rng)
        reset_rng = jax.random.split(_rng, config["NUM_ENVS"])
        obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(reset_rng, env_params)

        def _update_step(runner_state: tuple, unused: Any) -> tuple:
            runner_state, traj_batch = jax.lax.scan(_env_step, runner_state, None, config["NUM_STEPS"])
            train_state, env_state, last_obs, rng = runner_state
            _, last_val = network.apply(train_state.params, last_obs)
            advantages, targets = _calculate_gae(traj_batch, last_val)
            update_state = (train_state, traj_batch, advantages, targets, rng)
            update_state, _loss_info = jax.lax.scan(_update_epoch, update_state, None,
                                                    config["UPDATE_EPOCHS"])
            return (update_state[0], env_state, last_obs, update_state[-1]), traj_batch.info

        def _env_step(runner_state: tuple, unused: Any) -> tuple:
            train_state, env_state, last_obs, rng = runner_state
            rng, _rng = jax.random.split(rng)
            pi, value = network.apply(train_state.params, last_obs)
            action = pi.sample(seed=_rng)
            log_prob = pi.log_prob(action)
            rng, _rng = jax.random.split(rng)
            rng_step = jax.random.split(_rng, config["NUM_ENVS"])
            obsv, env_state, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                rng_step, env_state, action, env_params)
            transition = Transition(done, action, value, reward, log_prob, last_obs, info)
            return (train_state, env_state, obsv, rng), transition

        def _calculate_gae(traj_batch: Transition, last_val: jax.Array) -> tuple:
            def _get_advantages(gae_and_next_value: tuple, transition: Transition) -> tuple:
                gae, next_value = gae_and_next_value
                done, value, reward = transition.done, transition.value, transition.reward
                delta = reward + config["GAMMA"] * next_value * (1 - done) - value
                gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - done) * gae
                return (gae, value), gae

            _, advantages = jax.lax.scan(_get_advantages, (jnp.zeros_like(last_val), last_val),
                                         traj_batch, reverse=True, unroll=16)
            return advantages, advantages + traj_batch.value

        def _loss_fn(params: Any, traj_batch: Transition, gae: jax.Array, targets: jax.Array) -> tuple:
            pi, value = network.apply(params, traj_batch.obs)
            log_prob = pi.log_prob(traj_batch.action)
            eps = config["CLIP_EPS"]
            value_pred_clipped = traj_batch.value + (value - traj_batch.value).clip(-eps, eps)
            value_losses = jnp.square(value - targets)
            value_losses_clipped = jnp.square(value_pred_clipped - targets)
            value_loss = 0.5 * jnp.maximum(value_losses, value_losses_clipped).mean()
            ratio = jnp.exp(log_prob - traj_batch.log_prob)
            gae = (gae - gae.mean()) / (gae.std() + 1e-8)
            loss_actor1 = ratio * gae
            loss_actor2 = jnp.clip(ratio, 1.0 - eps, 1.0 + eps) * gae
            loss_actor = -jnp.minimum(loss_actor1, loss_actor2).mean()
            entropy = pi.entropy().mean()
            total = loss_actor + config["VF_COEF"] * value_loss - config["ENT_COEF"] * entropy
            return total, (value_loss, loss_actor, entropy)

        def _update_minbatch(train_state: TrainState, batch_info: tuple) -> tuple:
            traj_batch, advantages, targets = batch_info
            grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
            total_loss, grads = grad_fn(train_state.params, traj_batch, advantages, targets)
            return train_state.apply_gradients(grads=grads), total_loss

        def _update_epoch(update_state: tuple, unused: Any) -> tuple:
            train_state, traj_batch, advantages, targets, rng = update_state
            rng, _rng = jax.random.split(rng)
            batch_size = config["MINIBATCH_SIZE"] * config["NUM_MINIBATCHES"]
            assert batch_size == config["NUM_STEPS"] * config["NUM_ENVS"]
            permutation = jax.random.permutation(_rng, batch_size)
            batch = (traj_batch, advantages, targets)
            batch = jax.tree_util.tree_map(lambda x: x.reshape((batch_size,) + x.shape[2:]), batch)
            shuffled = jax.tree_util.tree_map(lambda x: jnp.take(x, permutation, axis=0), batch)
            minibatches = jax.tree_util.tree_map(
                lambda x: jnp.reshape(x, [config["NUM_MINIBATCHES"], -1] + list(x.shape[1:])), shuffled)
            train_state, total_loss = jax.lax.scan(_update_minbatch, train_state, minibatches)
            return (train_state, traj_batch, advantages, targets, rng), total_loss

        rng, _rng = jax.random.split(rng)
        runner_state = (train_state, env_state, obsv, _rng)
        runner_state, metric = jax.lax.scan(_update_step, runner_state, None, config["NUM_UPDATES"])
        return {"runner_state": runner_state, "metrics": metric}

    return train

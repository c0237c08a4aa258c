"""sb3-contrib's recurrent actor-critic (``MlpLstmPolicy``, ``CnnLstmPolicy``) over
``ActorCriticPolicy``: features -> LSTM -> the MLP towers and heads of ``ActorCriticPolicy``.

The actor has its LSTM (``lstm_actor``); the critic its own (``lstm_critic``, the default),
the actor's with the gradient stopped (``shared_lstm``) or a linear layer (neither). An LSTM's
state is a pair ``(h, c)`` of arrays ``(n_lstm_layers, n_envs, lstm_hidden_size)``, set to zero
where an episode starts.

Acting runs the LSTM step in NumPy on the parameter arrays (``lstm_numpy``); training runs
``rlgrad.nn.LSTM`` over padded sequences laid out time-major, ``(T, n_seq)`` rows flattened.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

from rlgrad import nn, no_grad
from rlgrad.nn.cells import lstm_step_numpy
from rlgrad.rl.layers import MlpExtractor
from rlgrad.rl.policies import ActorCriticPolicy, _ortho, mlp_numpy, trunk_numpy


class InvalidArgumentError(ValueError, AssertionError):
    """An argument sb3-contrib refuses with an ``assert``: a ValueError (one line) that code
    written against sb3-contrib can also catch as ``AssertionError``."""


class LSTMStates(NamedTuple):
    """The actor's and the critic's LSTM states, each ``(h, c)``."""

    pi: tuple[np.ndarray, np.ndarray]
    vf: tuple[np.ndarray, np.ndarray]


def lstm_numpy(lstm: nn.LSTM, x: np.ndarray, h: np.ndarray, c: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step of ``lstm`` (unidirectional, no dropout) on a batch ``x`` (B, I) from the state
    ``h, c`` (layers, B, H), in NumPy: ``(output (B, H), h', c')``. Each layer is the LSTM cell's
    own kernel (``cells.lstm_step_numpy``), so acting computes what training's ``lstm`` does."""
    H = lstm.hidden_size
    hs, cs = np.empty_like(h), np.empty_like(c)
    for layer in range(lstm.num_layers):
        w_ih, w_hh, b_ih, b_hh = (None if p is None else p._value
                                  for p in lstm._weights(f"_l{layer}"))
        s = lstm_step_numpy(x, h[layer], c[layer], w_ih, w_hh, b_ih, b_hh)
        hs[layer], cs[layer] = s[:, :H], s[:, H:2 * H]
        x = hs[layer]
    return x, hs, cs


def _check_lstm_options(shared_lstm: bool, enable_critic_lstm: bool, share_features: bool) -> None:
    if shared_lstm and enable_critic_lstm:
        raise InvalidArgumentError("RecurrentPPO: shared_lstm=True and enable_critic_lstm=True "
                                   "both give the critic an LSTM; set enable_critic_lstm=False "
                                   "to share the actor's")
    if shared_lstm and not share_features:
        raise InvalidArgumentError("RecurrentPPO: shared_lstm=True needs "
                                   "share_features_extractor=True (one LSTM reads one set of "
                                   "features)")


class RecurrentActorCriticPolicy(ActorCriticPolicy):
    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space,
                 net_arch: Any = None, activation_fn: Any = "tanh", ortho_init: bool = True,
                 log_std_init: float = 0.0, init_seed: int | None = None, cnn: bool | None = None,
                 features_dim: int | None = None, normalize_images: bool | None = None,
                 share_features_extractor: bool = True, lstm_hidden_size: int = 256,
                 n_lstm_layers: int = 1, shared_lstm: bool = False,
                 enable_critic_lstm: bool = True, lstm_kwargs: dict[str, Any] | None = None,
                 use_sde: bool = False, full_std: bool = True, use_expln: bool = False,
                 squash_output: bool = False) -> None:
        _check_lstm_options(shared_lstm, enable_critic_lstm, share_features_extractor)
        super().__init__(observation_space, action_space, net_arch=net_arch,
                         activation_fn=activation_fn, ortho_init=ortho_init,
                         log_std_init=log_std_init, normalize_images=normalize_images,
                         share_features_extractor=share_features_extractor, init_seed=init_seed,
                         cnn=cnn, features_dim=features_dim, use_sde=use_sde, full_std=full_std,
                         use_expln=use_expln, squash_output=squash_output)
        in_dim = self.features_dim
        # the critic's own CNN (share_features_extractor=False); vectors need no extractor
        self.vf_features_extractor = (self.vf_features_extractor
                                      if self.cnn and not share_features_extractor else None)
        H = int(lstm_hidden_size)
        kw = dict(lstm_kwargs or {})
        self.shared_lstm, self.lstm_hidden_size, self.n_lstm_layers = shared_lstm, H, n_lstm_layers
        self.lstm_actor = nn.LSTM(in_dim, H, num_layers=n_lstm_layers, **kw)
        self.lstm_critic = (nn.LSTM(in_dim, H, num_layers=n_lstm_layers, **kw)
                            if enable_critic_lstm else None)
        self.critic = None if enable_critic_lstm or shared_lstm else nn.Linear(in_dim, H)
        # the towers and heads read the LSTM's output, not the features: rebuilt for H inputs
        towers = self.mlp_extractor  # ActorCriticPolicy's, on the features: replaced below
        pi_arch = [m.out_features for m in towers.policy_net if isinstance(m, nn.Linear)]
        vf_arch = [m.out_features for m in towers.value_net if isinstance(m, nn.Linear)]
        self.mlp_extractor = MlpExtractor(H, {"pi": pi_arch, "vf": vf_arch}, activation_fn)
        self.action_net = nn.Linear(pi_arch[-1] if pi_arch else H, self.act_dim)
        self.value_net = nn.Linear(vf_arch[-1] if vf_arch else H, 1)
        if self.use_sde:  # gSDE's noise reads the policy tower's output on the LSTM's
            latent = self.mlp_extractor.latent_dim_pi
            self.log_std = nn.Parameter(np.full((latent, self.act_dim if full_std else 1),
                                                self.log_std_init, dtype=np.float32))
            self.reset_noise(1)
        if ortho_init:  # sb3-contrib's gains (its LSTMs keep PyTorch's initialisation)
            from rlgrad.nn import init

            g = init.default_generator() if init_seed is None else np.random.default_rng(init_seed)
            for net, gain in ((self.pi_net, 2 ** 0.5), (self.vf_net, 2 ** 0.5),
                              (self.action_net, 0.01), (self.value_net, 1.0)):
                _ortho(net, gain, g)
            if self.vf_features_extractor is not None:
                _ortho(self.vf_features_extractor, 2 ** 0.5, g)


    # ---- states --------------------------------------------------------------------------
    def initial_state(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Zeros ``(h, c)`` of shape (n_lstm_layers, n, lstm_hidden_size)."""
        z = np.zeros((self.n_lstm_layers, n, self.lstm_hidden_size), dtype=np.float32)
        return z, z.copy()

    def initial_states(self, n: int) -> LSTMStates:
        return LSTMStates(self.initial_state(n), self.initial_state(n))

    # ---- training (padded sequences, time-major rows) ----------------------------------------
    def _sequence(self, lstm: nn.LSTM, features: Any, state: tuple[Any, Any]) -> Any:
        n_seq = state[0].shape[1]
        x = features.reshape(-1, n_seq, lstm.input_size)
        out, _ = lstm(x, (state[0], state[1]))
        return out.reshape(-1, self.lstm_hidden_size)

    def distribution_and_value_sequences(self, obs: Any, pi_state: tuple[Any, Any],
                                         vf_state: tuple[Any, Any]) -> tuple[Any, Any]:
        """pi and V of rows ``(T, n_seq)`` flattened, sequence ``j`` starting from its state."""
        f = self._features(obs)
        latent_pi = self._sequence(self.lstm_actor, f, pi_state)
        f_vf = f if self.vf_features_extractor is None else self.vf_features_extractor(obs)
        if self.lstm_critic is not None:
            latent_vf = self._sequence(self.lstm_critic, f_vf, vf_state)
        elif self.shared_lstm:  # only the actor's gradient trains the shared LSTM
            latent_vf = latent_pi.detach()
        else:
            latent_vf = self.critic(f_vf)
        return self._distribution(latent_pi), self.value_net(self.vf_net(latent_vf)).reshape(-1)

    # ---- acting (NumPy) -------------------------------------------------------------------
    def _latent_numpy(self, obs: np.ndarray, states: LSTMStates, critic: bool = True
                      ) -> tuple[np.ndarray, np.ndarray | None, LSTMStates]:
        f = trunk_numpy(self._trunk, obs)
        lat_pi, h, c = lstm_numpy(self.lstm_actor, f, *states.pi)
        lat_vf, vf = None, states.vf
        if critic:
            f_vf = f if self.vf_features_extractor is None else trunk_numpy(
                self.vf_features_extractor, obs)
            if self.lstm_critic is not None:
                lat_vf, hv, cv = lstm_numpy(self.lstm_critic, f_vf, *states.vf)
                vf = (hv, cv)
            elif self.shared_lstm:
                lat_vf = lat_pi
            else:
                lat_vf = mlp_numpy([self.critic], f_vf)
        return lat_pi, lat_vf, LSTMStates((h, c), vf)

    def act_recurrent(self, obs: np.ndarray, states: LSTMStates, rng: np.random.Generator
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, LSTMStates]:
        """(actions, values, log-probabilities, next states) of one step from ``states``."""
        lat_pi, lat_vf, nxt = self._latent_numpy(obs, states)
        latent = mlp_numpy(self.pi_net, lat_pi)
        out = mlp_numpy([self.action_net], latent)
        values = mlp_numpy([self.value_net], mlp_numpy(self.vf_net, lat_vf))[:, 0]
        actions, log_prob = (self.sde_sample_numpy(latent, out) if self.use_sde
                             else self.sample_numpy(out, rng))
        return actions, values, log_prob, nxt

    def values_recurrent(self, obs: np.ndarray, vf_state: tuple[np.ndarray, np.ndarray]
                         ) -> np.ndarray:
        """V(obs) from the critic's state (the actor's, shared_lstm), without advancing it."""
        st = LSTMStates(vf_state, vf_state)
        _, lat_vf, _ = self._latent_numpy(obs, st)
        return mlp_numpy([self.value_net], mlp_numpy(self.vf_net, lat_vf))[:, 0]

    def actions_recurrent(self, obs: np.ndarray, state: tuple[np.ndarray, np.ndarray],
                          deterministic: bool, rng: np.random.Generator
                          ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """Actions for ``obs`` from the actor's ``state``, and its next state."""
        lat_pi, _, nxt = self._latent_numpy(obs, LSTMStates(state, state), critic=False)
        latent = mlp_numpy(self.pi_net, lat_pi)
        out = mlp_numpy([self.action_net], latent)
        if deterministic:
            a = out.argmax(axis=1) if self.discrete else out.reshape(len(obs), *self.action_shape)
            if self.squash_output:
                a = np.tanh(a)
        elif self.use_sde:  # the held exploration matrices (sb3-contrib's get_actions)
            a = self.sde_sample_numpy(latent, out)[0]
        else:
            a = self.sample_numpy(out, rng)[0]
        return a, nxt.pi

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """sb3-contrib's ``policy.predict``: actions and the actor's next LSTM state."""
        from rlgrad.random import default_generator
        from rlgrad.rl.policies import predict_with

        out: dict[str, Any] = {}

        def act(x: np.ndarray) -> np.ndarray:
            st = start_state(self, state, episode_start, len(x))
            a, out["state"] = self.actions_recurrent(x, st, deterministic, default_generator.numpy)
            if self.squash_output:  # tanh-squashed actions: onto the bounds (sb3-contrib's)
                a = self.unscale_action(a)
            elif isinstance(self.action_space, spaces.Box):
                a = np.clip(a, self.action_space.low, self.action_space.high)
            return a

        with no_grad():
            actions, _ = predict_with(self.observation_space, observation, act)
        return actions, out["state"]


def start_state(policy: RecurrentActorCriticPolicy, state: Any, episode_start: Any, n: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """``predict``'s ``state`` (zeros when None) as float32 arrays, zeroed where
    ``episode_start``; one line if its shape is not (n_lstm_layers, n, lstm_hidden_size)."""
    if state is None:
        return policy.initial_state(n)
    h, c = (np.asarray(s, dtype=np.float32) for s in state)
    want = (policy.n_lstm_layers, n, policy.lstm_hidden_size)
    if h.shape != want or c.shape != want:
        raise ValueError(f"predict: state must be a pair (h, c) of shape {want} (n_lstm_layers, "
                         f"observations, lstm_hidden_size), got {h.shape} and {c.shape}; pass "
                         "the state the previous predict returned, or None")
    if episode_start is not None:
        keep = 1.0 - np.asarray(episode_start, dtype=np.float32).reshape(1, n, 1)
        h, c = h * keep, c * keep
    return h, c

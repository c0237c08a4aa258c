"""PPO with an LSTM policy, as sb3-contrib's ``RecurrentPPO`` (its defaults and policy names).

It is ``PPO`` with four hooks overridden: the rollout's actor carries the LSTM states from step
to step (zeroed where an episode starts) and stores each step's starting state; the bootstrap
values read the critic's state; the minibatches are padded sequences; and the loss runs the
LSTMs over them (``RecurrentActorCriticPolicy.distribution_and_value_sequences``).

Minibatches as sb3-contrib makes them: the rollout's rows env by env, rotated by a random
offset, cut into ``batch_size`` consecutive rows; inside a minibatch a sequence starts at an
episode start or where the env copy changes, begins from the state stored for its first row,
and is padded to the longest one (padding rows weigh 0 in the loss).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np

from rlgrad.rl.buffers import RolloutBuffer
from rlgrad.rl.envs import EnvLike
from rlgrad.rl.hyperparams import apply_defaults
from rlgrad.rl.ppo import PPO
from rlgrad.rl.ranges import ROLLOUT_BATCH
from rlgrad.rl.recurrent_policies import LSTMStates, RecurrentActorCriticPolicy, start_state

#: sb3-contrib's RecurrentPPO policy names -> the network they stand for in rlgrad
_POLICIES = {"MlpLstmPolicy": "MlpPolicy", "CnnLstmPolicy": "CnnPolicy",
             "MultiInputLstmPolicy": "MultiInputPolicy"}


class RecurrentRolloutBuffer(RolloutBuffer):
    """A rollout with each step's episode-start flag and the LSTM states it acted from."""

    def __init__(self, *args: Any, state_shape: tuple[int, int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        T, N = self.n_steps, self.n_envs
        L, H = state_shape
        self.episode_starts = np.zeros((T, N), dtype=bool)
        # (T, 4, L, N, H): h and c of the actor, then of the critic
        self.states = np.zeros((T, 4, L, N, H), dtype=np.float32)

    def add_states(self, states: LSTMStates, starts: np.ndarray) -> None:
        """The states and start flags of the step about to be added (at ``pos``)."""
        p = self.pos
        self.episode_starts[p] = starts
        for k, s in enumerate((*states.pi, *states.vf)):
            self.states[p, k] = s

    def sequence_minibatches(self, batch_size: int, rng: np.random.Generator
                             ) -> Iterator[dict[str, Any]]:
        """Padded-sequence minibatches (module docstring): each a dict of ``rows`` (flat indices
        into ``flat()``, time-major ``(T, n_seq)``, -1 for padding) and ``init`` (the 4 initial
        state arrays, (L, n_seq, H) each)."""
        T, N = self.n_steps, self.n_envs
        env_major = np.arange(T * N).reshape(T, N).T.reshape(-1)  # flat (t, env) index, env by env
        split = int(rng.integers(T * N))
        order = np.concatenate([env_major[split:], env_major[:split]])
        starts = self.episode_starts.reshape(-1)
        for b0 in range(0, T * N, batch_size):
            idx = order[b0:b0 + batch_size]
            new_seq = np.ones(len(idx), dtype=bool)
            # the same env copy and the next step: the sequence goes on, unless an episode starts
            new_seq[1:] = (idx[1:] != idx[:-1] + N) | starts[idx[1:]]
            seq = np.cumsum(new_seq) - 1
            first = np.flatnonzero(new_seq)
            pos = np.arange(len(idx)) - first[seq]
            rows = np.full((pos.max() + 1, len(first)), -1, dtype=np.int64)
            rows[pos, seq] = idx
            t0, e0 = np.divmod(idx[first], N)
            # (n_seq, 4, L, H) -> 4 arrays (L, n_seq, H)
            init = list(np.ascontiguousarray(self.states[t0, :, :, e0].transpose(1, 2, 0, 3)))
            yield {"rows": rows.reshape(-1), "init": init}


class RecurrentPPO(PPO):
    """sb3-contrib's ``RecurrentPPO``: PPO whose actor and critic read an LSTM's output."""

    default_hyperparams: ClassVar[dict[str, Any]] = {"n_steps": 128, "batch_size": 128}
    policy: RecurrentActorCriticPolicy
    rollout_buffer: RecurrentRolloutBuffer
    policy_aliases: ClassVar[dict[str, dict[str, Any]]] = {"MlpPolicy": {}, "CnnPolicy": {}}
    fixed_shape_batches = False  # padded sequences differ in shape: the eager step
    # (a batch_size above the rollout is the whole rollout, as in sb3-contrib)
    relations_not_applying = (ROLLOUT_BATCH,)
    env_runner_sampling = False

    def __init__(self, env: EnvLike, **kwargs: Any) -> None:
        super().__init__(env, **apply_defaults(RecurrentPPO, kwargs))

    # ---- construction hooks ----------------------------------------------------------------
    def _apply_policy_name(self) -> None:
        name = self._policy_name
        self._policy_name = _POLICIES.get(name, name) if isinstance(name, str) else name
        super()._apply_policy_name()

    def _build_policy(self, cnn: bool, extra: dict[str, Any]) -> Any:
        kw = dict(self.policy_kwargs)
        fe_kwargs = kw.pop("features_extractor_kwargs", None) or {}
        self.policy_kwargs = {**kw, **fe_kwargs}  # SB3's features_dim key, at the top level
        lstm = {"share_features_extractor": True, "lstm_hidden_size": 256, "n_lstm_layers": 1,
                "shared_lstm": False, "enable_critic_lstm": True, "lstm_kwargs": None,
                "full_std": True, "use_expln": False, "squash_output": False}
        try:
            return RecurrentActorCriticPolicy(
                self._policy_observation_space(), self.action_space, cnn=cnn,
                use_sde=self.use_sde,
                **self.net_kwargs(net_arch=None, activation_fn="tanh", ortho_init=True,
                                  log_std_init=0.0, init_seed=None, normalize_images=None,
                                  **lstm, **extra))
        finally:
            self.policy_kwargs = {**kw, **({"features_extractor_kwargs": fe_kwargs}
                                           if fe_kwargs else {})}

    def _make_rollout_buffer(self, *args: Any, **kwargs: Any) -> RolloutBuffer:
        p = self.policy
        self._lstm_states = p.initial_states(self.n_envs)
        self._episode_starts = np.ones(self.n_envs, dtype=bool)
        self._predict_state: Any = None
        return RecurrentRolloutBuffer(*args, state_shape=(p.n_lstm_layers, p.lstm_hidden_size),
                                      **kwargs)

    # ---- collection: the LSTM states carried from step to step ------------------------------
    def _on_reset(self) -> None:
        super()._on_reset()
        self._lstm_states = self.policy.initial_states(self.n_envs)
        self._episode_starts = np.ones(self.n_envs, dtype=bool)

    def _current_starts(self) -> np.ndarray:
        """Which env copies' current observation starts an episode (SAME_STEP autoreset: the
        step that just ended one; NEXT_STEP: the reset step after it, kept in _episode_starts)."""
        if self._adapter.next_step:
            return self._episode_starts
        return self._episode_starts | self._adapter.prev_done

    def _rollout_actor(self) -> Any:
        return self._act_step

    def _act_step(self, obs: np.ndarray, rng: np.random.Generator, fused: Any
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        starts = self._current_starts()
        keep = (~starts).astype(np.float32)[None, :, None]
        st = LSTMStates(*((s[0] * keep, s[1] * keep) for s in self._lstm_states))
        self.rollout_buffer.add_states(st, starts)
        actions, values, log_prob, self._lstm_states = self.policy.act_recurrent(obs, st, rng)
        ad = self._adapter
        # NEXT_STEP: the step after a done is the reset, whose observation starts an episode
        self._episode_starts = (ad.prev_done.copy() if ad.next_step
                                else np.zeros(self.n_envs, dtype=bool))
        return actions, values, log_prob

    def _bootstrap_values(self, obs: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        h, c = self._lstm_states.vf if self.policy.lstm_critic is not None else self._lstm_states.pi
        if rows is not None:  # truncated copies: their final observation, their carried state
            return self.policy.values_recurrent(obs, (h[:, rows], c[:, rows]))
        keep = (~self._current_starts()).astype(np.float32)[None, :, None]
        return self.policy.values_recurrent(obs, (h * keep, c * keep))

    # ---- the update: padded sequences --------------------------------------------------------
    def _distribution_and_value(self, b: dict[str, Any]) -> tuple[Any, Any]:
        pi, vf = b["lstm"][:2], b["lstm"][2:]
        return self.policy.distribution_and_value_sequences(b["obs"], pi, vf)

    def _minibatches(self) -> Iterator[tuple[dict[str, Any], np.ndarray]]:
        """Padded-sequence minibatches (rows time-major), advantages normalised over each one's
        real rows; yields (loss batch, mask of its real rows)."""
        buf = self.rollout_buffer
        data, valid = buf.flat(), buf.valid.reshape(-1)
        for mb in buf.sequence_minibatches(self.batch_size, self.rng):
            rows = mb["rows"]
            pad = rows < 0
            r = np.where(pad, 0, rows)
            real = ~pad & valid[r]
            adv = data.advantages[r]
            if self.normalize_advantage and real.sum() > 1:
                a = adv[real]
                adv = (adv - a.mean()) / (a.std(ddof=1) + 1e-8)
            adv = np.where(real, adv, 0.0).astype(np.float32)
            w = real.astype(np.float32) / max(int(real.sum()), 1)
            batch = type(data)(*(x[r] for x in data))
            b = self._loss_batch(batch, adv, w)
            b["lstm"] = mb["init"]
            yield b, real

    # ---- predict: sb3-contrib's (actions, state) ---------------------------------------------
    # sb3-contrib's: the state is always returned (BaseAlgorithm.predict's may be None)
    def predict(self, observation: Any, state: Any = None,  # type: ignore[override]
                episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """Actions and the actor's next LSTM state ``(h, c)``, each (n_lstm_layers, n_obs,
        lstm_hidden_size); pass the state back with ``episode_start`` (True where an episode
        began, its state is zeroed) at the next call; ``state=None`` starts from zeros."""
        self._predict_state = (state, episode_start)
        actions, _ = super().predict(observation, deterministic=deterministic)
        out, self._predict_state = self._predict_state, None
        return actions, out

    def _predict(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        state, episode_start = self._predict_state
        st = start_state(self.policy, state, episode_start, len(obs))
        actions, self._predict_state = self.policy.actions_recurrent(obs, st, deterministic,
                                                                     self.rng)
        return self._to_env(actions)

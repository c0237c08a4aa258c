"""Environments: Gymnasium ids or instances turned into one vector environment, episode statistics
from Gymnasium's own ``RecordEpisodeStatistics``, and the autoreset convention made explicit.

Gymnasium 1.x vector environments reset a finished sub-environment on the *next* call to
``step`` (``AutoresetMode.NEXT_STEP``): the step after a done returns the first observation of the
new episode, a reward of 0, and its transition (old final observation -> new first observation)
is not a real one. Algorithms here therefore track ``prev_done`` and drop those transitions. A
nice consequence: the observation returned at a done step *is* the final observation, so bootstrap
values on truncation come for free. ``SAME_STEP`` vector environments (reset inside the same step,
final observation in ``info["final_obs"]``) are handled too; ``DISABLED`` is refused.
"""

from __future__ import annotations

import importlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from rlgrad.random import generator_state_dict, load_generator_state
from rlgrad.rl.finite import NonFiniteError, check_transition, nonfinite_actions
from rlgrad.rl.one_env import OneEnvSyncVectorEnv
from rlgrad.rl.vec_env import VecEnv, reset_compatible

#: what an algorithm takes as its environment: an id, a Gymnasium env or vector env, or an
#: SB3-style VecEnv (DummyVecEnv, SubprocVecEnv ...)
EnvLike = str | gym.Env | VectorEnv | VecEnv


class SpaceError(ValueError, AssertionError):
    """A space that an algorithm or a policy cannot take: one line; an ``AssertionError`` too,
    which Stable-Baselines3 raises there (so SB3 code that catches it still does)."""


class NestedSpaceError(ValueError, NotImplementedError):
    """A Dict or Tuple inside a Dict observation space: SB3 raises NotImplementedError for it."""


def _suggest(env_id: str) -> str:
    import difflib

    close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3, cutoff=0.6)
    return f" Did you mean: {', '.join(close)}?" if close else ""


def env_spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """The registry entry of ``env_id``; Gymnasium's ``"module:EnvId"`` form imports ``module``
    first (which registers ``EnvId``), as ``gymnasium.make`` does."""
    module, sep, name = env_id.rpartition(":")
    if sep:
        if not module or not name or ":" in module:
            raise ValueError(f"environment id {env_id!r}: expected an id or module:EnvId")
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise ModuleNotFoundError(f"cannot import module {module!r} of environment id "
                                      f"{env_id!r}: {e}", name=e.name) from e
    if name not in gym.registry:
        where = f" (module {module!r} registered no such id)" if sep else ""
        raise ValueError(f"unknown Gymnasium environment id {name!r}{where}.{_suggest(name)}")
    return gym.spec(name)


def functional_id(env_id: str) -> str:
    """The id of ``env_id`` written as functions of arrays (``rlgrad/CartPole-v1``), or one line
    saying which ids have one."""
    from rlgrad.rl.functional import FUNCTIONAL_ENVS, register_functional_envs

    register_functional_envs()
    name = env_id.removeprefix("rlgrad/")
    if name not in FUNCTIONAL_ENVS:
        raise ValueError(f"vectorization_mode='functional': {env_id!r} has no functional form; "
                         f"these do: {', '.join(FUNCTIONAL_ENVS)}")
    return f"rlgrad/{name}"


def _vec_env_of_id(env_id: str, n_envs: int, vectorization_mode: str | None,
                   env_kwargs: dict[str, Any],
                   wrappers: Sequence[Callable[[gym.Env], gym.Env]] | None) -> VectorEnv:
    """``make_vec_env`` for a Gymnasium id (not a pixel one)."""
    if vectorization_mode == "functional":
        env_id, vectorization_mode = functional_id(env_id), "vector_entry_point"
    spec = env_spec(env_id)
    mode = vectorization_mode
    if mode is None:
        # Gymnasium's vectorised implementation steps all copies in a few NumPy calls: a win
        # from about 3 copies on (CartPole: 8 copies 2x faster than sync), a loss for one
        # (NumPy calls on length-1 arrays cost more than one env's plain-float step).
        fast = spec.vector_entry_point and not wrappers and n_envs >= 3
        mode = "vector_entry_point" if fast else "sync"
    kwargs: dict[str, Any] = {}
    if mode != "vector_entry_point" and wrappers:
        kwargs["wrappers"] = wrappers
    venv = gym.make_vec(env_id, num_envs=n_envs, vectorization_mode=mode, **kwargs, **env_kwargs)
    if n_envs == 1 and type(venv) is SyncVectorEnv:  # one env: SyncVectorEnv, a shorter step
        venv = OneEnvSyncVectorEnv.of(venv)
    return venv


def make_vec_env(
    env: EnvLike | Callable[[], gym.Env],
    n_envs: int = 1,
    seed: int | None = None,
    vectorization_mode: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gym.Env], gym.Env]] | None = None,
    record_statistics: bool = True,
    training: bool = True,
) -> VectorEnv:
    """A vector environment with episode statistics, from an id, env, factory or vector env.

    ``record_statistics=False`` leaves out Gymnasium's ``RecordEpisodeStatistics`` wrapper (the
    algorithms keep the same statistics in their ``StepAdapter``, for less work per step).

    For an id, Gymnasium's own vectorised implementation is used when it exists (CartPole's
    ``vector_entry_point`` steps all copies in a few NumPy calls), otherwise ``SyncVectorEnv``;
    ``vectorization_mode="async"`` gives ``AsyncVectorEnv`` (worth it only for slow environments);
    ``"functional"`` the environment written as functions of arrays (``rlgrad.rl.functional``:
    the classic-control tasks, equal to Gymnasium's step for step). Atari and MinAtar ids get
    their preprocessing (``rlgrad.rl.atari``); ``training=False`` builds
    Atari's evaluation form (whole games, raw rewards).
    """
    env_kwargs = dict(env_kwargs or {})
    if isinstance(env, str) and env_kwargs.get("render_mode") is not None:
        check_render_mode(env_kwargs["render_mode"], _registered_render_modes(env), env)
    if isinstance(env, str) and _pixel_kind(env):
        from rlgrad.rl.atari import make_pixel_vec_env

        venv = make_pixel_vec_env(env, n_envs, training, vectorization_mode, env_kwargs, wrappers,
                                  record_statistics)
    elif isinstance(env, str):
        venv = _vec_env_of_id(env, n_envs, vectorization_mode, env_kwargs, wrappers)
    elif isinstance(env, VectorEnv):
        venv = env
    elif hasattr(env, "as_vector_env"):  # SB3's VecEnv (rl.vec_env): what it has the algorithm step
        venv = env.as_vector_env()
    elif isinstance(env, gym.Env):
        if n_envs != 1:
            raise ValueError(
                f"an environment instance is one environment; got n_envs={n_envs}. Pass its id "
                "(or a factory function) to get several copies"
            )
        for w in wrappers or ():
            env = w(env)
        env = reset_compatible(env)  # a reset without options (SB3 accepts such envs)
        # SAME_STEP, as SB3's DummyVecEnv: every step is a transition, so a rollout of n_steps
        # holds n_steps of them (no reset rows) and GAE sees SB3's episode boundaries
        venv = OneEnvSyncVectorEnv([lambda: env], autoreset_mode=AutoresetMode.SAME_STEP)
    elif callable(env):
        fns = [env] * n_envs
        if wrappers:
            def fn(_f=env):  # noqa: ANN202
                e = _f()
                for w in wrappers:
                    e = w(e)
                return e
            fns = [fn] * n_envs
        venv = (gym.vector.AsyncVectorEnv if vectorization_mode == "async" else SyncVectorEnv)(fns)
    else:
        raise TypeError(
            f"expected a Gymnasium id, Env, VectorEnv or env factory, got {type(env).__name__}"
        )
    autoreset_mode(venv)  # validates
    check_render_mode(getattr(venv, "render_mode", None), venv.metadata.get("render_modes"),
                      env_name(env))
    if record_statistics and find_episode_statistics(venv) is None:
        venv = RecordEpisodeStatistics(venv, buffer_length=100)
    if seed is not None:
        seed_env(venv, seed)
    return venv


def env_name(env: Any) -> str:
    """An environment's id for messages: its id, its registered id, else its class."""
    if isinstance(env, str):
        return env
    spec = getattr(env, "spec", None)
    return getattr(spec, "id", None) or type(getattr(env, "unwrapped", env)).__name__


def _registered_render_modes(env_id: str) -> Any:
    """The render modes the class registered as ``env_id`` offers (checked before it is built,
    so that Gymnasium does not warn first), or None if it does not say."""
    from gymnasium.envs.registration import load_env_creator

    entry = env_spec(env_id).entry_point
    creator = load_env_creator(entry) if isinstance(entry, str) else entry
    return (getattr(creator, "metadata", None) or {}).get("render_modes")


def check_render_mode(mode: Any, modes: Any, name: str) -> None:
    """ValueError, one line, for a render_mode the environment does not offer (Gymnasium only
    warns, then the first render fails or draws nothing)."""
    if mode is not None and modes is not None and mode not in modes:
        raise ValueError(f"{name}: render_mode={mode!r} is not one of its render modes "
                         f"{list(modes)} (or None, no rendering)")


def _pixel_kind(env_id: str) -> str | None:
    from rlgrad.rl.atari import pixel_env_kind  # no heavy import: ale-py/minatar load on use

    return pixel_env_kind(env_id)


class EpisodeStatistics:
    """The returns and lengths of finished episodes as Gymnasium's ``RecordEpisodeStatistics``
    records them (``return_queue``, ``length_queue``: the last ``buffer_length``;
    ``episode_count``), kept by ``StepAdapter`` from what it already has (rewards, valid, done):
    two NumPy calls per vector step instead of the wrapper's dozen. As the wrapper's, in NEXT_STEP
    mode the reset step after a done counts neither its reward nor a step; returns in float64.
    """

    def __init__(self, num_envs: int, buffer_length: int = 100) -> None:
        self.episode_returns = np.zeros(num_envs)
        self.episode_lengths = np.zeros(num_envs, dtype=np.int64)
        self.return_queue: deque[float] = deque(maxlen=buffer_length)
        self.length_queue: deque[int] = deque(maxlen=buffer_length)
        self.episode_count = 0

    def reset(self) -> None:
        self.episode_returns[:] = 0.0
        self.episode_lengths[:] = 0

    def record(self, rewards: np.ndarray, valid: np.ndarray, done: np.ndarray,
               all_valid: bool = False, any_done: bool | None = None) -> None:
        """Add one vector step; ``all_valid`` / ``any_done`` say what the caller already knows
        of ``valid`` / ``done`` (the same sums either way, without a masked add or a scan)."""
        if all_valid and len(rewards) == 1:  # one env: the same float64 sum on scalars (~1 us less)
            self.episode_returns[0] += rewards[0]
            self.episode_lengths[0] += 1
        elif all_valid:
            np.add(self.episode_returns, rewards, out=self.episode_returns)
            np.add(self.episode_lengths, 1, out=self.episode_lengths)
        else:
            np.add(self.episode_returns, rewards, out=self.episode_returns, where=valid)
            np.add(self.episode_lengths, valid, out=self.episode_lengths)
        if any_done if any_done is not None else np.count_nonzero(done):
            for i in np.flatnonzero(done):
                self.return_queue.append(float(self.episode_returns[i]))
                self.length_queue.append(int(self.episode_lengths[i]))
                self.episode_returns[i] = 0.0
                self.episode_lengths[i] = 0
                self.episode_count += 1

    def state_dict(self) -> dict[str, Any]:
        return {"episode_returns": self.episode_returns.copy(),
                "episode_lengths": self.episode_lengths.copy(),
                "return_queue": np.asarray(self.return_queue, dtype=np.float64),
                "length_queue": np.asarray(self.length_queue, dtype=np.int64),
                "episode_count": self.episode_count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episode_returns[:] = state["episode_returns"]
        self.episode_lengths[:] = state["episode_lengths"]
        self.return_queue.clear()
        self.return_queue.extend(float(x) for x in np.asarray(state["return_queue"]).reshape(-1))
        self.length_queue.clear()
        self.length_queue.extend(int(x) for x in np.asarray(state["length_queue"]).reshape(-1))
        self.episode_count = int(state["episode_count"])


def record_successes(out: deque[bool], info: dict[str, Any], done: np.ndarray,
                     next_step: bool) -> None:
    """Append the ``is_success`` of each finished episode's last info (SB3's
    ``ep_success_buffer``): the step's info in NEXT_STEP mode, ``final_info`` in SAME_STEP."""
    src = info if next_step else info.get("final_info", {})
    if "is_success" not in src:
        return
    values, mask = src["is_success"], src.get("_is_success", done)
    for i in np.flatnonzero(done & np.asarray(mask, dtype=bool)):
        out.append(bool(values[i]))


def find_episode_statistics(venv: VectorEnv) -> RecordEpisodeStatistics | None:
    e: Any = venv
    while e is not None:
        if isinstance(e, RecordEpisodeStatistics):
            return e
        e = getattr(e, "env", None)
    return None


def episode_statistics(venv: VectorEnv) -> RecordEpisodeStatistics:
    """The ``RecordEpisodeStatistics`` wrapper in ``venv`` (``return_queue``, ``length_queue``)."""
    stats = find_episode_statistics(venv)
    if stats is None:
        raise ValueError("this vector environment has no RecordEpisodeStatistics wrapper")
    return stats


def autoreset_mode(venv: VectorEnv) -> AutoresetMode:
    """The vector env's autoreset mode (Gymnasium >= 1.0 records it in ``metadata``)."""
    mode = venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
    if isinstance(mode, str):
        mode = AutoresetMode(mode)
    if mode == AutoresetMode.DISABLED:
        raise ValueError(
            "vector environments with autoreset_mode=DISABLED are not supported: the algorithms "
            "need the environment to reset itself (use NEXT_STEP, Gymnasium's default, or "
            "SAME_STEP)"
        )
    return mode


def seed_env(venv: VectorEnv, seed: int) -> tuple[np.ndarray, dict]:
    """Seed the sub-environments (seed, seed+1, ...) and the spaces; returns the first reset."""
    venv.action_space.seed(seed)
    venv.single_action_space.seed(seed)
    venv.observation_space.seed(seed)
    return venv.reset(seed=seed)


def is_image_space(space: spaces.Space) -> bool:
    """Image observations: a uint8 ``Box`` of 3 dimensions, channels first (C, H, W), as the Atari
    and MinAtar envs of ``rlgrad.rl.atari`` give them. They are kept as uint8 arrays of that shape
    (the CNN scales them), not flattened to float32."""
    return isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def obs_shape(space: spaces.Space) -> tuple[int, ...]:
    """The shape of one preprocessed observation: (C, H, W) for images, (features,) otherwise."""
    return tuple(int(d) for d in space.shape) if is_image_space(space) else (flat_obs_dim(space),)


def frame_stacked(venv: VectorEnv) -> bool:
    """Whether the sub-environments end in Gymnasium's ``FrameStackObservation`` (each
    observation is the previous one shifted by a frame), looked up through the wrappers of the
    first copy of a ``SyncVectorEnv`` (no wrapper over it may change the observations); False
    when it cannot be seen (``AsyncVectorEnv``)."""
    from gymnasium.wrappers import FrameStackObservation

    e: Any = venv
    while e is not None and not getattr(e, "envs", None):
        e = getattr(e, "env", None)
    if e is None:
        return False
    e = e.envs[0]
    while isinstance(e, gym.Wrapper):
        if isinstance(e, FrameStackObservation):
            return True
        if isinstance(e, gym.ObservationWrapper) or e.observation_space != e.env.observation_space:
            return False  # a wrapper over the stack that changes the observations
        e = e.env
    return False


def flat_obs_dim(space: spaces.Space) -> int:
    """The width of one preprocessed (``preprocess_obs``) vector observation."""
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, spaces.Discrete):
        return int(space.n)  # one-hot encoded
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))  # one one-hot per entry, side by side (as SB3)
    if isinstance(space, spaces.MultiBinary):
        return int(np.prod(space.shape))
    if isinstance(space, spaces.Dict):
        return sum(flat_obs_dim(_dict_entry(space, k)) for k in space.spaces)
    if isinstance(space, spaces.Tuple):
        raise ValueError(
            f"Tuple observation spaces are not supported (got {space}): wrap the environment in "
            "gymnasium.wrappers.FlattenObservation, or use a Dict space")
    raise ValueError(
        f"observation space {space} is not supported: rlgrad.rl's MLP policies take Box "
        "(flattened), Discrete and MultiDiscrete (one-hot), MultiBinary or Dict of them"
    )


def dict_has_images(space: spaces.Space) -> bool:
    """A Dict observation space with an image entry (its policy needs CombinedExtractor)."""
    return isinstance(space, spaces.Dict) and any(is_image_space(s) for s in space.spaces.values())


def _dict_entry(space: spaces.Dict, key: str) -> spaces.Space:
    """An entry of a Dict observation space that its flattening can take (one line if not)."""
    sub = space.spaces[key]
    if isinstance(sub, spaces.Dict | spaces.Tuple):
        raise NestedSpaceError(f"nested observation spaces are not supported: entry {key!r} of "
                               f"{space} is itself a Dict or Tuple; flatten the inner one")
    return sub  # (an image entry: its pixel values, reshaped by CombinedExtractor.forward_flat)


def preprocess_obs(obs: Any, space: spaces.Space) -> np.ndarray:
    """Batch of observations -> float32 matrix (n, features): flatten Box and MultiBinary, one-hot
    Discrete (and each entry of MultiDiscrete); a Dict's entries so preprocessed and joined in
    the space's key order (what SB3's CombinedExtractor does with vector entries); images
    (``is_image_space``) stay uint8 (n, C, H, W), as they are."""
    if isinstance(space, spaces.Box):  # first: the case of every step of the benchmarks
        if space.dtype == np.uint8 and len(space.shape) == 3:  # is_image_space, inlined
            return np.asarray(obs)
        obs = np.asarray(obs, dtype=np.float32)
        return obs.reshape(len(obs), -1) if obs.ndim != 2 else obs
    if isinstance(space, spaces.Discrete):
        return _one_hot(np.asarray(obs, dtype=np.int64).reshape(-1) - space.start, int(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        obs = np.asarray(obs, dtype=np.int64).reshape(-1, len(space.nvec)) - space.start.reshape(-1)
        return np.concatenate([_one_hot(obs[:, i], int(n))
                               for i, n in enumerate(space.nvec.reshape(-1))], axis=1)
    if isinstance(space, spaces.MultiBinary):
        obs = np.asarray(obs, dtype=np.float32)
        return obs.reshape(len(obs), -1)
    if isinstance(space, spaces.Dict):
        if not isinstance(obs, dict):
            raise ValueError(f"a Dict observation space takes a dict of arrays, got "
                             f"{type(obs).__name__}")
        out = _dict_columns(obs, space) if FLAT_DICT_COLUMNS else None
        if out is not None:
            return out
        return np.concatenate([_flat_entry(obs[k], _dict_entry(space, k)) for k in space.spaces],
                              axis=1)
    flat_obs_dim(space)  # raises its one line
    raise ValueError(f"observation space {space} is not supported")


# A Dict of Box / MultiBinary entries (images included) flattened by writing each entry's
# float32 values into its columns of one array (the cast of the assignment, the same numbers as
# np.asarray(..., float32)), the columns worked out once per space: the per-entry recursion and
# the concatenate cost ~4 us of every step of a Dict-observation rollout. Off, or any other
# entry (one-hot Discrete), or arrays that do not fit: the per-entry path (the reference:
# tests/rl/test_rollout_step.py compares the two).
FLAT_DICT_COLUMNS = True
_LAYOUTS: dict[int, tuple[spaces.Dict, tuple[tuple[str, spaces.Space, int, int], ...]]] = {}
_COLUMN_ENTRIES = (spaces.Box, spaces.MultiBinary)  # the entries written as they are


def dict_columns(space: spaces.Dict) -> tuple[tuple[str, spaces.Space, int, int], ...]:
    """(key, sub-space, first column, end column) of each entry of a Dict in the rows
    ``preprocess_obs`` flattens its batches to; worked out once per space object (kept holding
    it, so its id is not reused): a rollout step reads it."""
    hit = _LAYOUTS.get(id(space))
    if hit is not None and hit[0] is space:
        return hit[1]
    cols, start = [], 0
    for k, sub in space.spaces.items():
        width = flat_obs_dim(sub)
        cols.append((k, sub, start, start + width))
        start += width
    if len(_LAYOUTS) >= 64:
        _LAYOUTS.clear()
    _LAYOUTS[id(space)] = (space, tuple(cols))
    return _LAYOUTS[id(space)][1]


def _dict_columns(obs: dict, space: spaces.Dict) -> np.ndarray | None:
    """``preprocess_obs`` of a Dict batch written column block by column block, or None when
    an entry or an array does not fit (see FLAT_DICT_COLUMNS)."""
    cols = dict_columns(space)
    first = obs.get(cols[0][0]) if cols else None
    if type(first) is not np.ndarray or not first.ndim:
        return None
    n = len(first)
    out = np.empty((n, cols[-1][3]), dtype=np.float32)
    for k, sub, a, b in cols:
        x = obs.get(k)
        if (type(sub) not in _COLUMN_ENTRIES or type(x) is not np.ndarray or not x.ndim
                or len(x) != n or x.size != n * (b - a)):
            return None
        out[:, a:b] = x.reshape(n, b - a)
    return out


def _flat_entry(obs: Any, space: spaces.Space) -> np.ndarray:
    """One Dict entry's batch as float32 rows (an image: its pixel values, flattened)."""
    if is_image_space(space):
        obs = np.asarray(obs, dtype=np.float32)
        return obs.reshape(len(obs), -1)
    return preprocess_obs(obs, space)


def _one_hot(idx: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros((len(idx), n), dtype=np.float32)
    out[np.arange(len(idx)), idx] = 1.0
    return out


def space_str(space: Any) -> str:
    """A space for a message: a Box by its shape and dtype (its bounds fill lines)."""
    if isinstance(space, spaces.Box):
        return f"Box(shape={space.shape}, dtype={space.dtype})"
    return str(space)


_RETURNS = {"reset": "(observation, info)",
            "step": "(observation, reward, terminated, truncated, info)"}


def env_api_error(call: str, e: ValueError, venv: Any) -> ValueError:
    """The ValueError of a vector env's ``reset`` / ``step`` said as what the environment did
    wrong (NumPy's "Output array is the wrong shape" or "too many values to unpack" name
    nothing); another ValueError as it was."""
    msg, space = str(e), getattr(venv, "single_observation_space", None)
    if "values to unpack" in msg:
        return ValueError(f"the environment's {call}() must return {_RETURNS[call]} "
                          f"(Gymnasium's API) and returned something else ({msg}): fix its {call}")
    if any(k in msg for k in ("wrong shape", "could not broadcast", "same shape",
                              "setting an array element")):
        return ValueError(f"the environment's {call}() returned an observation that does not "
                          f"fit its observation_space {space_str(space)} ({msg}): fix its {call}() or its "
                          "observation_space")
    return e


class StepAdapter:
    """Steps a vector env and says which transitions are real, whatever its autoreset mode.

    ``step`` returns ``(next_obs, reward, terminated, truncated, valid, final_obs)``:
    * ``valid[i]`` is False for the reset step that NEXT_STEP inserts after a done;
    * ``final_obs`` is the true last observation of the rows that are done (``next_obs`` itself in
      NEXT_STEP mode, ``info["final_obs"]`` in SAME_STEP mode), for bootstrapping on truncation.
    """

    def __init__(self, venv: VectorEnv, check_finite: bool = True,
                 statistics: EpisodeStatistics | None = None) -> None:
        self.venv = venv
        self.check_finite = check_finite  # NaN/inf observations and rewards stop training
        self.statistics = statistics  # episode returns and lengths, kept here when given
        #: SB3's ep_success_buffer: the finished episodes' info["is_success"], when given
        self.successes: deque[bool] | None = None
        #: SB3's ep_info_buffer: ``{"r", "l", "t"}`` of each finished episode, when given, as
        #: ``episode_source`` (this adapter's statistics or the env's wrapper) counts them
        self.episodes: deque[dict[str, float]] | None = None
        self.episode_source: Any = statistics
        self.episodes_seen = 0  # the source's episode_count when last read
        self._t0 = time.perf_counter()  # "t": seconds since then (SB3's Monitor: since its start)
        self.steps = 0
        self.mode = autoreset_mode(venv)
        self.next_step = self.mode == AutoresetMode.NEXT_STEP
        self.num_envs = venv.num_envs
        self.prev_done = np.zeros(self.num_envs, dtype=bool)
        self._all_valid = np.ones(self.num_envs, dtype=bool)  # returned, never written
        self.last_info: dict[str, Any] = {}
        # what the last step found, for callers that would otherwise scan the arrays again:
        # any row done, and every row valid (False may still mean all valid: then check)
        self.any_done, self.all_valid = False, False

    @property
    def prev_done(self) -> np.ndarray:
        """The rows that were done at the previous step (their next step is a reset: not valid)."""
        return self._prev_done

    @prev_done.setter
    def prev_done(self, value: np.ndarray) -> None:  # (restored from a checkpoint)
        self._prev_done, self._prev_any = value, True  # True: look at the rows at the next step

    def reset(self, seed: int | None = None) -> np.ndarray:
        try:
            obs, _ = self.venv.reset(seed=seed)
        except ValueError as e:
            raise env_api_error("reset", e, self.venv) from None
        self.prev_done[:] = False
        self._prev_any = True
        if self.statistics is not None:
            self.statistics.reset()
        return obs

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                  np.ndarray, np.ndarray]:
        try:
            obs, rew, term, trunc, info = self.venv.step(actions)
        except ValueError as e:
            raise env_api_error("step", e, self.venv) from None
        self.last_info = info  # for callbacks (SB3's locals["infos"]), split only if read
        self.steps += 1
        if self.check_finite:
            try:
                check_transition(obs, rew, self.steps)
            except NonFiniteError as e:
                raise nonfinite_actions(actions, self.steps) or e from None
        done = term | trunc
        any_done = np.count_nonzero(done) > 0  # (count_nonzero: a fraction of .any()'s cost)
        if self.next_step:
            # no row done at the previous step (most steps): every row is valid, nothing to invert
            valid = ~self.prev_done if self._prev_any else self._all_valid
            final_obs = obs
        else:
            valid = self._all_valid
            final_obs = obs
            if any_done:
                fo, mask = info.get("final_obs"), info.get("_final_obs", done)
                final_obs = _with_final_rows(obs, fo, np.flatnonzero(mask))
        self._prev_done, self._prev_any = done, any_done
        all_valid = valid is self._all_valid
        self.any_done, self.all_valid = any_done, all_valid
        if self.statistics is not None:
            self.statistics.record(rew, valid, done, all_valid, any_done)
        if any_done and self.successes is not None:
            record_successes(self.successes, info, done, self.next_step)
        if any_done and self.episodes is not None:
            self.add_episodes(int(np.count_nonzero(done)))
        return obs, rew, term, trunc, valid, final_obs

    def add_episodes(self, at_most: int | None = None) -> None:
        """Append to ``episodes`` the episodes ``episode_source`` finished since the last call
        (its newest entries; ``at_most``: the rows done at this step, which bounds them even if
        the source's count was restored from a checkpoint meanwhile)."""
        st = self.episode_source
        new = int(st.episode_count) - self.episodes_seen
        self.episodes_seen = int(st.episode_count)
        k = min(new, len(st.return_queue), new if at_most is None else at_most)
        if k > 0 and self.episodes is not None:
            t = round(time.perf_counter() - self._t0, 6)
            rs, ls = list(st.return_queue)[-k:], list(st.length_queue)[-k:]
            self.episodes.extend({"r": float(r), "l": int(n), "t": t} for r, n in zip(rs, ls, strict=True))


def obs_rows(obs: Any, rows: np.ndarray) -> Any:
    """Rows ``rows`` of a batch of observations (of each entry for a Dict space)."""
    return {k: v[rows] for k, v in obs.items()} if isinstance(obs, dict) else obs[rows]


def _with_final_rows(obs: Any, final: Any, rows: np.ndarray) -> Any:
    """A copy of the batch ``obs`` whose ``rows`` are the episodes' final observations
    (``final[i]``; a Dict space's observations are dicts of arrays)."""
    if isinstance(obs, dict):
        out = {k: v.copy() for k, v in obs.items()}
        for i in rows:
            for k in out:
                out[k][i] = final[i][k]
        return out
    out = obs.copy()
    for i in rows:
        out[i] = final[i]
    return out


# ---- environment state, for checkpoints that resume bit for bit ----------------------------------
_SKIP = {"observation_space", "action_space", "single_observation_space", "single_action_space",
         "metadata", "spec", "render_mode", "screen", "clock", "surf", "screens", "env", "envs",
         "_np_random_seed", "_cached_spec", "_env_fns", "closed", "viewer"}


def _children(obj: Any) -> list[tuple[str, Any]]:
    out = []
    if getattr(obj, "env", None) is not None:
        out.append(("env", obj.env))
    for i, e in enumerate(getattr(obj, "envs", None) or ()):
        out.append((f"envs.{i}", e))
    return out


def _capture(obj: Any) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for k, v in vars(obj).items():
        if k in _SKIP:
            continue
        if isinstance(v, np.random.Generator):
            state[k] = {"__rng__": generator_state_dict(v)}
        elif isinstance(v, np.ndarray) and v.dtype.kind in "fiub":
            state[k] = v.copy()
        elif isinstance(v, bool | int | float | np.number) and not isinstance(v, np.complexfloating):
            state[k] = v.item() if isinstance(v, np.number) else v
        elif isinstance(v, tuple) and v and all(isinstance(x, int | float) for x in v):
            state[k] = {"__tuple__": list(v)}
        elif type(v).__name__ == "deque" and all(isinstance(x, int | float | np.number) for x in v):
            state[k] = {"__deque__": np.asarray(list(v), dtype=np.float64),
                        "maxlen": -1 if v.maxlen is None else v.maxlen}
    for name, child in _children(obj):
        state[f"[{name}]"] = _capture(child)
    return state


def _restore(obj: Any, state: dict[str, Any]) -> None:
    from collections import deque

    children = dict(_children(obj))
    for k, v in state.items():
        if k.startswith("["):
            _restore(children[k[1:-1]], v)
        elif isinstance(v, dict) and "__rng__" in v:
            gen = getattr(obj, k, None)
            if not isinstance(gen, np.random.Generator):  # an env never reset has none yet
                gen = np.random.Generator(np.random.PCG64())
                setattr(obj, k, gen)
            load_generator_state(gen, v["__rng__"])
        elif isinstance(v, dict) and "__tuple__" in v:
            setattr(obj, k, tuple(v["__tuple__"]))
        elif isinstance(v, dict) and "__deque__" in v:
            old = getattr(obj, k)
            vals = [type(old[0])(x) if len(old) else float(x) for x in np.asarray(v["__deque__"])]
            setattr(obj, k, deque(vals, maxlen=None if int(v["maxlen"]) < 0 else int(v["maxlen"])))
        elif isinstance(v, np.ndarray):
            cur = getattr(obj, k, None)
            if isinstance(cur, np.ndarray) and cur.shape == v.shape:
                cur[...] = v
            else:
                setattr(obj, k, np.array(v))
        else:
            setattr(obj, k, v)


_SNAPSHOT_SAFE = ("gymnasium.envs.classic_control", "gymnasium.envs.toy_text")


def _base_envs(obj: Any) -> list[Any]:
    kids = _children(obj)
    if not kids:
        return [obj]
    return [b for _, c in kids for b in _base_envs(c)]


def get_env_state(venv: VectorEnv) -> dict[str, Any]:
    """Snapshot of a vector env (wrappers, sub-envs): its arrays, numbers and RNG states.

    Only for Gymnasium's classic-control and toy-text environments, whose whole state lives in
    such attributes; for any other environment (physics engines hold state elsewhere) it is
    empty, and a resumed run starts from a fresh reset instead.
    """
    if not all(type(b).__module__.startswith(_SNAPSHOT_SAFE) for b in _base_envs(venv)):
        return {}
    return _capture(venv)


def set_env_state(venv: VectorEnv, state: dict[str, Any],
                  statistics: EpisodeStatistics | None = None) -> None:
    """Restore a ``get_env_state`` snapshot. Checkpoints from before the step adapter kept the
    episode statistics have Gymnasium's ``RecordEpisodeStatistics`` as the outer layer: without
    that wrapper here, its returns go to ``statistics`` and the layer below to the env (and the
    other way round, a snapshot without the layer restores below a wrapper)."""
    if not state:
        return
    has_layer = "[env]" in state and "return_queue" in state and "episode_count" in state
    wrapped = isinstance(venv, RecordEpisodeStatistics)
    if has_layer and not wrapped:
        if statistics is not None:
            statistics.load_state_dict(_wrapper_statistics(state))
        state = state["[env]"]
    elif wrapped and not has_layer:
        venv = venv.env
    _restore(venv, state)


def _wrapper_statistics(state: dict[str, Any]) -> dict[str, Any]:
    """A RecordEpisodeStatistics snapshot as ``EpisodeStatistics.state_dict()``: the wrapper
    zeroes the running return of a done env one step later (``prev_dones``), the adapter at once."""
    done = np.asarray(state.get("prev_dones", False), dtype=bool)
    return {"episode_returns": np.where(done, 0.0, state["episode_returns"]),
            "episode_lengths": np.where(done, 0, state["episode_lengths"]),
            "return_queue": state["return_queue"]["__deque__"],
            "length_queue": state["length_queue"]["__deque__"],
            "episode_count": state["episode_count"]}

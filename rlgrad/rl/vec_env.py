"""Stable-Baselines3's vector-environment stack: ``VecEnv`` and its wrappers, with SB3's semantics.

SB3 scripts step environments as ``obs = env.reset()`` and
``obs, rewards, dones, infos = env.step(actions)``: a finished copy is reset inside the same
step, its last observation in ``infos[i]["terminal_observation"]`` and
``infos[i]["TimeLimit.truncated"]`` telling a time limit from a real end. ``seed(s)`` and
``set_options(o)`` apply at the next ``reset`` (copy i gets seed s + i); ``reset_infos`` holds
the infos of the last resets; ``get_attr`` / ``set_attr`` / ``env_method`` / ``env_is_wrapped``
reach the copies (``indices``: None, an int or a list).

* ``DummyVecEnv(env_fns)``: the copies stepped one after the other in this process;
  ``SubprocVecEnv(env_fns, start_method)``: one process per copy.
* ``VecEnvWrapper(venv)``: the base of the wrappers; ``self.venv`` is the wrapped VecEnv and
  unknown attributes are looked up down the chain (an attribute defined twice is ambiguous).
* ``VecNormalize``, ``VecCheckNan`` here; ``VecFrameStack``, ``VecMonitor``,
  ``VecTransposeImage``, ``VecExtractDictObs``, ``VecVideoRecorder`` in
  ``rlgrad.rl.common.vec_env``.

An algorithm given a VecEnv steps ``env.as_vector_env()``, a Gymnasium vector env in
``SAME_STEP`` autoreset mode: a DummyVecEnv's own copies in Gymnasium's ``SyncVectorEnv`` (the
algorithms' fast path), a VecNormalize's inner env with the statistics shared with the
algorithm (it normalises as VecNormalize would), anything else the VecEnv itself behind
Gymnasium's interface (every wrapper's ``step`` runs).
"""

from __future__ import annotations

import inspect
import multiprocessing as mp
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space

from rlgrad.rl.monitor import Monitor, ResultsWriter
from rlgrad.rl.normalize import Normalizer, RunningMeanStd

__all__ = ["VecEnv", "DummyVecEnv", "SubprocVecEnv", "VecEnvWrapper", "VecNormalize",
           "VecCheckNan", "sync_envs_normalization", "unwrap_vec_normalize", "is_vecenv_wrapped",
           "tile_images", "VecEnvError", "CloudpickleWrapper", "unwrap_vec_wrapper", "VecMonitor"]

VecEnvIndices = None | int | Iterable[int]


class VecEnvError(ValueError, AssertionError):
    """Bad input to a VecEnv: a ValueError, and an AssertionError where SB3 asserts."""


def split_infos(info: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Gymnasium's vector ``info`` (arrays with ``_key`` masks) as one dict per copy (SB3's)."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in info.items():
        if key.startswith("_"):
            continue
        mask = info.get("_" + key, np.ones(n, dtype=bool))
        per_env = split_infos(value, n) if isinstance(value, dict) else value
        for i in np.flatnonzero(mask):
            out[i][key] = per_env[i]
    return out


class VecInfos(dict):
    """The info dict of a VecEnv stepped through Gymnasium's interface (``VecEnvVectorEnv``):
    ``final_obs`` / ``_final_obs`` as Gymnasium's, SB3's per-copy infos in ``per_env``."""

    def __init__(self, per_env: Sequence[dict[str, Any]]) -> None:
        super().__init__()
        self.per_env = per_env


class LazyInfos(Sequence):
    """SB3's list of per-copy info dicts, made from Gymnasium's vector info when first read (a
    callback's ``self.locals["infos"]``: most callbacks never read it). A copy whose episode
    ended gets SB3's ``info["episode"] = {"r", "l", "t"}`` from the algorithm's episode
    statistics when no wrapper (Monitor, RecordEpisodeStatistics) put one there."""

    def __init__(self, info: dict[str, Any], n: int, done: np.ndarray | None = None,
                 stats: Any = None, elapsed: float = 0.0) -> None:
        self._info, self._n = info, n
        self._list: list[dict[str, Any]] | None = None
        self._done = np.flatnonzero(done) if done is not None else np.zeros(0, dtype=int)
        self._episodes: list[dict[str, Any]] = []
        if len(self._done) and stats is not None:  # the statistics' newest entries, in row order
            k = len(self._done)
            self._episodes = [{"r": r, "l": n_, "t": round(elapsed, 6)} for r, n_ in zip(
                list(stats.return_queue)[-k:], list(stats.length_queue)[-k:])]

    def _items(self) -> list[dict[str, Any]]:
        if self._list is None:
            if isinstance(self._info, VecInfos):  # already SB3's (a VecEnv stepped directly)
                out = list(self._info.per_env) or [{} for _ in range(self._n)]
                finals = None
            else:
                out = split_infos(self._info, self._n)
                final = self._info.get("final_info")
                finals = split_infos(final, self._n) if final else None
            for j, i in enumerate(self._done):
                if finals is not None:
                    out[i].update(finals[i])
                out[i].pop("final_info", None)
                out[i].pop("final_obs", None)
                if "episode" not in out[i] and j < len(self._episodes):
                    out[i]["episode"] = self._episodes[j]
            self._list = out
        return self._list

    def __getitem__(self, i: Any) -> Any:
        return self._items()[i]

    def __len__(self) -> int:
        return self._n


def tile_images(images: Sequence[np.ndarray]) -> np.ndarray:
    """N images (H, W, C) as one image of a near-square grid of them (black where none)."""
    imgs = np.asarray(images)
    n, h, w, c = imgs.shape
    rows = int(np.ceil(np.sqrt(n)))
    cols = int(np.ceil(n / rows))
    grid = np.zeros((rows * cols, h, w, c), dtype=imgs.dtype)
    grid[:n] = imgs
    return grid.reshape(rows, cols, h, w, c).transpose(0, 2, 1, 3, 4).reshape(rows * h, cols * w, c)


def is_wrapped(env: gym.Env, wrapper_class: type[gym.Wrapper]) -> bool:
    """Whether ``wrapper_class`` is in the wrapper chain of ``env``."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False


def _check_nesting(space: spaces.Space) -> None:
    if isinstance(space, spaces.Dict | spaces.Tuple):
        subs = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        if any(isinstance(s, spaces.Dict | spaces.Tuple) for s in subs):
            raise NotImplementedError("VecEnv: nested observation spaces (a Dict or Tuple inside "
                                      "a Dict or Tuple) are not supported: flatten the inner one")


class VecEnv:
    """SB3's abstract vectorised environment (``reset``, ``step_async``, ``step_wait``,
    ``close``, ``get_attr``, ``set_attr``, ``env_method``, ``env_is_wrapped`` to define)."""

    def __init__(self, num_envs: int, observation_space: spaces.Space,
                 action_space: spaces.Space, render_mode: Any = ...) -> None:
        self.num_envs = num_envs
        self.observation_space = observation_space
        self.action_space = action_space
        self.reset_infos: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self._seeds: list[int | None] = [None] * num_envs  # for the next reset only
        self._options: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        if render_mode is ...:
            try:
                modes = self.get_attr("render_mode")
            except AttributeError:
                warnings.warn("The `render_mode` attribute is not defined in your environment. "
                              "It will be set to None.", stacklevel=2)
                modes = [None] * num_envs
            if any(m != modes[0] for m in modes):
                raise VecEnvError(f"render_mode should be the same for all environments, got "
                                  f"{modes}")
            render_mode = modes[0]
        self.render_mode = render_mode
        # an rgb_array env can also be shown (OpenCV): "human" is accepted too
        shown = ["human", "rgb_array"] if render_mode == "rgb_array" else [render_mode]
        self.metadata: dict[str, Any] = {"render_modes": [] if render_mode is None else shown}

    def _reset_seeds(self) -> None:
        self._seeds = [None] * self.num_envs

    def _reset_options(self) -> None:
        self._options = [{} for _ in range(self.num_envs)]

    # ---- to define ---------------------------------------------------------------------------
    def reset(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define reset()")

    def step_async(self, actions: np.ndarray) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define step_async()")

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        raise NotImplementedError(f"{type(self).__name__} does not define step_wait()")

    def close(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define close()")

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        raise AttributeError(f"{type(self).__name__} does not define get_attr()")

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define set_attr()")

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        raise NotImplementedError(f"{type(self).__name__} does not define env_method()")

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
                       ) -> list[bool]:
        raise NotImplementedError(f"{type(self).__name__} does not define env_is_wrapped()")

    # ---- SB3's interface -----------------------------------------------------------------------
    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        self.step_async(actions)
        return self.step_wait()

    def has_attr(self, attr_name: str) -> bool:
        try:
            self.get_attr(attr_name)
            return True
        except AttributeError:
            return False

    def get_images(self) -> Sequence[np.ndarray | None]:
        raise NotImplementedError(f"{type(self).__name__} does not define get_images()")

    def render(self, mode: str | None = None) -> np.ndarray | None:
        """The copies' images tiled in one (``rgb_array``), shown with OpenCV (``human`` on an
        ``rgb_array`` env) or each copy's own rendering; a mode other than the one the envs were
        made with warns and returns None (Gymnasium fixes it at construction)."""
        if mode == "human" and self.render_mode not in ("human", "rgb_array"):
            warnings.warn(f"You tried to render a VecEnv with mode='human' but the render mode "
                          f"defined when initializing the environment must be 'human' or "
                          f"'rgb_array', not '{self.render_mode}'.", stacklevel=2)
            return None
        if mode and mode != "human" and mode != self.render_mode:
            warnings.warn(f"render mode {mode!r} differs from the environments' render_mode "
                          f"{self.render_mode!r} (fixed when they were made): nothing rendered",
                          stacklevel=2)
            return None
        mode = mode or self.render_mode
        if mode is None:
            warnings.warn("You tried to call render() but no `render_mode` was passed to the env "
                          "constructor.", stacklevel=2)
            return None
        if self.render_mode == "human" or mode not in ("human", "rgb_array"):
            self.env_method("render")
            return None
        big = tile_images(self.get_images())  # type: ignore[arg-type]
        if mode == "rgb_array":
            return big
        import cv2  # "human" on rgb_array envs: shown the way SB3 shows it

        cv2.imshow("vecenv", big[:, :, ::-1])
        cv2.waitKey(1)
        return None

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Seeds for the next ``reset`` (copy i: seed + i; a random one for None, so that the
        copies still differ)."""
        if seed is None:
            seed = int(np.random.randint(0, np.iinfo(np.uint32).max, dtype=np.uint32))
        self._seeds = [seed + i for i in range(self.num_envs)]
        return self._seeds

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        """Reset options for the next ``reset``: one dict for all copies or one per copy."""
        options = {} if options is None else options
        self._options = deepcopy([options] * self.num_envs if isinstance(options, dict)
                                 else list(options))

    @property
    def unwrapped(self) -> VecEnv:
        return self

    def getattr_depth_check(self, name: str, already_found: bool) -> str | None:
        """The class hiding ``name`` when it is found again below a wrapper that has it."""
        if hasattr(self, name) and already_found:
            return f"{type(self).__module__}.{type(self).__name__}"
        return None

    def _get_indices(self, indices: VecEnvIndices) -> Iterable[int]:
        if indices is None:
            return range(self.num_envs)
        return [indices] if isinstance(indices, int) else indices

    # ---- what an algorithm steps ----------------------------------------------------------------
    def as_vector_env(self) -> VectorEnv:
        """This VecEnv as a Gymnasium vector env in SAME_STEP mode, for an algorithm to step."""
        return VecEnvVectorEnv(self)

    def algorithm_normalizer(self) -> Normalizer | None:
        """Normalisation the algorithm must apply itself to ``as_vector_env()``'s observations
        (a VecNormalize whose inner env it steps), None when the env does its own."""
        return None


class VecEnvVectorEnv(VectorEnv):
    """A VecEnv behind Gymnasium's vector interface (SAME_STEP autoreset): what an algorithm
    steps when the VecEnv has wrappers of its own, so that every one of them runs."""

    def __init__(self, vec_env: VecEnv) -> None:
        self.vec_env = vec_env
        self.num_envs = vec_env.num_envs
        self.single_observation_space = vec_env.observation_space
        self.single_action_space = vec_env.action_space
        self.observation_space = batch_space(vec_env.observation_space, self.num_envs)
        self.action_space = batch_space(vec_env.action_space, self.num_envs)
        self.render_mode = vec_env.render_mode
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP,
                         "render_modes": list(vec_env.metadata.get("render_modes", []))}

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None
              ) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.vec_env.seed(seed if isinstance(seed, int) else seed[0])
        if options:
            self.vec_env.set_options(options)
        obs = self.vec_env.reset()
        return obs, {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        obs, rew, dones, infos = self.vec_env.step(actions)
        dones = np.asarray(dones, dtype=bool)
        if len(infos) != self.num_envs:  # a VecEnv that returns no infos ([]) at some steps
            infos = [*infos, *({} for _ in range(self.num_envs - len(infos)))]
        info, rew = VecInfos(infos), np.asarray(rew)
        if not np.count_nonzero(dones):  # most steps: no copy done, so none truncated
            return obs, rew, dones.copy(), np.zeros(self.num_envs, dtype=bool), info
        trunc = np.array([bool(d and i.get("TimeLimit.truncated", False))
                          for d, i in zip(dones, infos, strict=True)], dtype=bool)
        have = np.array([d and "terminal_observation" in i for d, i in zip(dones, infos,
                                                                            strict=True)])
        final = np.empty(self.num_envs, dtype=object)
        for k in np.flatnonzero(have):
            final[k] = infos[k]["terminal_observation"]
        info["final_obs"], info["_final_obs"] = final, have
        return obs, rew, dones & ~trunc, trunc, info

    def render(self) -> Any:
        return self.vec_env.render()

    def close_extras(self, **kwargs: Any) -> None:
        self.vec_env.close()


def _obs_dtype(space: spaces.Space) -> Any:
    return getattr(space, "dtype", None)


def stack_obs(obs_list: Sequence[Any], space: spaces.Space) -> Any:
    """One observation per copy stacked as the space's batch, in the space's dtype: a dict
    (Dict space, in the space's key order) or tuple (Tuple space) of arrays, else one array."""
    if isinstance(space, spaces.Dict):
        return {key: np.asarray([o[key] for o in obs_list], dtype=_obs_dtype(sub))
                for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(np.asarray([o[i] for o in obs_list], dtype=_obs_dtype(sub))
                     for i, sub in enumerate(space.spaces))
    return np.asarray(obs_list, dtype=_obs_dtype(space))


def _step_one(env: gym.Env, action: Any) -> tuple[Any, float, bool, dict[str, Any],
                                                   dict[str, Any] | None]:
    """One copy's step in SB3's form; a finished copy is reset (its reset info returned)."""
    obs, reward, terminated, truncated, info = env.step(action)
    done = bool(terminated or truncated)
    info = dict(info)
    info["TimeLimit.truncated"] = bool(truncated and not terminated)
    reset_info = None
    if done:
        # (a dict of its own: VecFrameStack replaces its entries, which must not write into
        # an observation dict the env keeps, as SimpleMultiObsEnv's state mapping)
        info["terminal_observation"] = dict(obs) if isinstance(obs, dict) else obs
        obs, reset_info = env.reset()
    return obs, float(reward), done, info, reset_info


def _check_env_fns(name: str, env_fns: Any) -> None:
    if isinstance(env_fns, gym.Env) or not isinstance(env_fns, Sequence) or not env_fns:
        raise VecEnvError(f"{name} takes a non-empty list of functions that each make an env "
                          f"(e.g. [lambda: gym.make('CartPole-v1')] * 4), got {env_fns!r}")
    bad = [f for f in env_fns if not callable(f) or isinstance(f, gym.Env)]
    if bad:
        raise VecEnvError(f"{name} takes functions that make an env, not {bad[0]!r}: wrap it as "
                          "lambda: <your env constructor>")


def _actions_for(name: str, actions: Any, n: int) -> Any:
    """The actions of ``n`` copies (more are ignored, as SB3 does; fewer raise one line)."""
    if len(actions) < n:
        raise VecEnvError(f"{name}.step: {len(actions)} actions for {n} environments; pass one "
                          "action per environment")
    return actions


class _ResetWithoutOptions(gym.Wrapper):
    """An env whose ``reset`` takes no ``options`` (older code; SB3 passes options only when
    set, Gymnasium's vector envs always): options are passed only when given."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        return self.env.reset(seed=seed) if options is None else self.env.reset(seed=seed,
                                                                                 options=options)


def reset_compatible(env: gym.Env) -> gym.Env:
    """``env`` itself when its ``reset`` takes ``options``, else wrapped so that Gymnasium's
    vector envs can call it (checked once: no cost per step for the usual env)."""
    try:
        params = inspect.signature(env.reset).parameters
    except (TypeError, ValueError):
        return env
    takes = "options" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())
    return env if takes else _ResetWithoutOptions(env)


class DummyVecEnv(VecEnv):
    """The copies stepped one after the other in this process."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        _check_env_fns("DummyVecEnv", env_fns)
        self.envs = [fn() for fn in env_fns]
        if len({id(e.unwrapped) for e in self.envs}) != len(self.envs):
            raise VecEnvError("DummyVecEnv: the functions returned the same environment instance; "
                              "each must make a new one (gym.make(...) inside the function, not "
                              "`lambda: env`)")
        env = self.envs[0]
        _check_nesting(env.observation_space)
        super().__init__(len(self.envs), env.observation_space, env.action_space)
        self.metadata = env.metadata
        self.actions: Any = None
        self._vector_env: VectorEnv | None = None

    def step_async(self, actions: Any) -> None:
        self.actions = _actions_for("DummyVecEnv", actions, self.num_envs)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rews = [], np.zeros(self.num_envs, dtype=np.float32)
        dones, infos = np.zeros(self.num_envs, dtype=bool), []
        for i, env in enumerate(self.envs):
            o, rews[i], dones[i], info, reset_info = _step_one(env, self.actions[i])
            if reset_info is not None:
                self.reset_infos[i] = reset_info
            obs.append(o)
            infos.append(info)
        return stack_obs(obs, self.observation_space), rews, dones, infos

    def reset(self) -> Any:
        obs = []
        for i, env in enumerate(self.envs):
            options = {"options": self._options[i]} if self._options[i] else {}
            o, self.reset_infos[i] = env.reset(seed=self._seeds[i], **options)
            obs.append(o)
        self._reset_seeds()
        self._reset_options()
        return stack_obs(obs, self.observation_space)

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(f"The render mode is {self.render_mode}, but get_images needs "
                          "`rgb_array` to obtain images.", stacklevel=2)
            return [None] * self.num_envs
        return [env.render() for env in self.envs]  # type: ignore[misc]

    def _targets(self, indices: VecEnvIndices) -> list[gym.Env]:
        return [self.envs[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [env.get_wrapper_attr(attr_name) for env in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        for env in self._targets(indices):
            setattr(env, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        return [env.get_wrapper_attr(method_name)(*method_args, **method_kwargs)
                for env in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
                       ) -> list[bool]:
        return [is_wrapped(env, wrapper_class) for env in self._targets(indices)]

    def as_vector_env(self) -> VectorEnv:
        """The same copies in Gymnasium's SyncVectorEnv (SAME_STEP): the algorithms' fast path."""
        if self._vector_env is None:
            self._vector_env = SyncVectorEnv([lambda e=e: reset_compatible(e) for e in self.envs],
                                             autoreset_mode=AutoresetMode.SAME_STEP)
        return self._vector_env


class CloudpickleWrapper:
    """A value pickled with cloudpickle (env factories are often closures or lambdas)."""

    def __init__(self, var: Any) -> None:
        self.var = var

    def __getstate__(self) -> bytes:
        import cloudpickle

        return cloudpickle.dumps(self.var)

    def __setstate__(self, data: bytes) -> None:
        import cloudpickle

        self.var = cloudpickle.loads(data)


def _worker_command(env: gym.Env, cmd: str, data: Any) -> Any:
    """What a SubprocVecEnv worker answers to one command."""
    if cmd == "step":
        return _step_one(env, data)
    if cmd == "reset":
        seed, options = data
        return env.reset(seed=seed, **({"options": options} if options else {}))
    if cmd == "render":
        return env.render()
    if cmd == "get_spaces":
        return env.observation_space, env.action_space
    if cmd == "env_method":
        return env.get_wrapper_attr(data[0])(*data[1], **data[2])
    if cmd == "get_attr":
        return env.get_wrapper_attr(data)
    if cmd == "set_attr":
        return setattr(env, data[0], data[1])
    if cmd == "is_wrapped":
        return is_wrapped(env, data)
    raise NotImplementedError(f"SubprocVecEnv worker: unknown command {cmd!r}")


def _worker(remote: Any, parent_remote: Any, env_fn: CloudpickleWrapper) -> None:
    """A SubprocVecEnv process: one env, commands in, results out; an exception is sent back
    (raised in the parent) instead of killing the process."""
    parent_remote.close()
    env = env_fn.var()
    while True:
        try:
            cmd, data = remote.recv()
        except (EOFError, KeyboardInterrupt):
            break
        if cmd == "close":
            env.close()
            remote.close()
            break
        try:
            remote.send(("ok", _worker_command(env, cmd, data)))
        except Exception as e:  # noqa: BLE001 - the parent raises it
            remote.send(("error", e))


class SubprocVecEnv(VecEnv):
    """One process per copy (``start_method`` as multiprocessing's; forkserver by default where
    it exists, else spawn)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], start_method: str | None = None
                 ) -> None:
        _check_env_fns("SubprocVecEnv", env_fns)
        self.waiting, self.closed = False, False
        if start_method is None:
            start_method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        ctx = mp.get_context(start_method)
        pipes = [ctx.Pipe() for _ in env_fns]
        self.remotes = [p[0] for p in pipes]
        self.processes = []
        for (remote, work_remote), fn in zip(pipes, env_fns, strict=True):
            proc = ctx.Process(target=_worker, args=(work_remote, remote, CloudpickleWrapper(fn)),
                               daemon=True)  # daemon: a crashed parent leaves no process behind
            proc.start()
            self.processes.append(proc)
            work_remote.close()
        observation_space, action_space = self._call([self.remotes[0]], "get_spaces", None)[0]
        super().__init__(len(env_fns), observation_space, action_space)

    def _call(self, remotes: list[Any], cmd: str, data: Any) -> list[Any]:
        for remote in remotes:
            remote.send((cmd, data))
        return self._receive(remotes)

    @staticmethod
    def _receive(remotes: list[Any]) -> list[Any]:
        results = [remote.recv() for remote in remotes]
        for status, value in results:
            if status == "error":
                raise value
        return [value for _, value in results]

    def step_async(self, actions: Any) -> None:
        _actions_for("SubprocVecEnv", actions, self.num_envs)
        for remote, action in zip(self.remotes, actions, strict=False):
            remote.send(("step", action))
        self.waiting = True

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        self.waiting = False  # (before receiving: an error raised in a worker ends the wait too)
        results = self._receive(self.remotes)
        for i, r in enumerate(results):
            if r[4] is not None:
                self.reset_infos[i] = r[4]
        return (stack_obs([r[0] for r in results], self.observation_space),
                np.array([r[1] for r in results], dtype=np.float32),
                np.array([r[2] for r in results], dtype=bool), [r[3] for r in results])

    def reset(self) -> Any:
        for i, remote in enumerate(self.remotes):
            remote.send(("reset", (self._seeds[i], self._options[i])))
        results = self._receive(self.remotes)
        self.reset_infos = [r[1] for r in results]
        self._reset_seeds()
        self._reset_options()
        return stack_obs([r[0] for r in results], self.observation_space)

    def close(self) -> None:
        if self.closed:
            return
        if self.waiting:
            for remote in self.remotes:
                remote.recv()
        for remote in self.remotes:
            remote.send(("close", None))
        for proc in self.processes:
            proc.join()
        for remote in self.remotes:
            remote.close()
        self.closed = True

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            warnings.warn(f"The render mode is {self.render_mode}, but get_images needs "
                          "`rgb_array` to obtain images.", stacklevel=2)
            return [None] * self.num_envs
        return self._call(self.remotes, "render", None)

    def _targets(self, indices: VecEnvIndices) -> list[Any]:
        return [self.remotes[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call(self._targets(indices), "get_attr", attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._call(self._targets(indices), "set_attr", (attr_name, value))

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        return self._call(self._targets(indices), "env_method",
                          (method_name, method_args, method_kwargs))

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
                       ) -> list[bool]:
        return self._call(self._targets(indices), "is_wrapped", wrapper_class)


class GymVecEnv(VecEnv):
    """SB3's interface over a Gymnasium vector env ``venv`` in SAME_STEP autoreset mode (what
    ``model.get_env()`` gives for an env built from an id); an algorithm steps ``venv``."""

    _same_step_only = True

    def __init__(self, venv: VectorEnv) -> None:
        mode = venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if self._same_step_only and AutoresetMode(mode) != AutoresetMode.SAME_STEP:
            raise VecEnvError("GymVecEnv needs a Gymnasium vector env in SAME_STEP autoreset mode")
        self.venv = venv
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space,
                         render_mode=getattr(venv, "render_mode", None))
        self._actions: Any = None

    def reset(self) -> Any:
        """New episodes in every copy (seeded once after ``seed(s)``: copy i gets s + i)."""
        seed = self._seeds[0]
        options = self._options[0] or None
        obs, info = self.venv.reset(seed=seed, options=options)
        self._reset_seeds()
        self._reset_options()
        self.reset_infos = split_infos(info, self.num_envs)
        return obs

    def step_async(self, actions: Any) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rew, term, trunc, info = self.venv.step(self._actions)
        dones = np.logical_or(term, trunc)
        infos = split_infos(info, self.num_envs)
        final_obs, final_info = info.get("final_obs"), info.get("final_info")
        finals = split_infos(final_info, self.num_envs) if final_info else None
        for i in np.flatnonzero(dones):
            if finals is not None:
                infos[i].update(finals[i])
            infos[i].pop("final_obs", None)
            infos[i].pop("final_info", None)
            if final_obs is not None:
                infos[i]["terminal_observation"] = final_obs[i]
            infos[i]["TimeLimit.truncated"] = bool(trunc[i] and not term[i])
        return obs, np.asarray(rew, dtype=np.float32), dones, infos

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        out = super().seed(seed)
        self.action_space.seed(out[0])
        return out

    def close(self) -> None:
        self.venv.close()

    def render(self, mode: str | None = None) -> Any:
        return self.venv.render()

    def get_images(self) -> Sequence[np.ndarray | None]:
        return self.env_method("render")

    def _targets(self, indices: VecEnvIndices) -> list[gym.Env]:
        envs = getattr(self.venv.unwrapped, "envs", None)
        if envs is None:
            raise AttributeError("this vector env does not hold its copies in this process")
        return [envs[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [e.get_wrapper_attr(attr_name) for e in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        for e in self._targets(indices):
            setattr(e, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        return [e.get_wrapper_attr(method_name)(*method_args, **method_kwargs)
                for e in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
                       ) -> list[bool]:
        return [is_wrapped(e, wrapper_class) for e in self._targets(indices)]

    @property
    def envs(self) -> list[gym.Env]:
        return self._targets(None)

    def as_vector_env(self) -> VectorEnv:
        return self.venv


def _obs_copy(obs: Any) -> Any:
    """A copy of a batch of observations (of each entry of a Dict space's)."""
    if isinstance(obs, dict):
        return {k: np.array(v, copy=True) for k, v in obs.items()}
    return np.array(obs, copy=True)


class _NextStepView(GymVecEnv):
    """SB3's interface on a NEXT_STEP vector env that can reset some copies
    (``reset(options={"reset_mask": ...})``): finished copies are reset right after the step."""

    _same_step_only = False

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rew, term, trunc, info = self.venv.step(self._actions)
        dones = np.logical_or(term, trunc)
        infos = split_infos(info, self.num_envs)
        if dones.any():
            final = _obs_copy(obs)
            obs, reset_info = self.venv.reset(options={"reset_mask": dones})
            for i in np.flatnonzero(dones):
                infos[i]["terminal_observation"] = (
                    {k: v[i] for k, v in final.items()} if isinstance(final, dict) else final[i])
                infos[i]["TimeLimit.truncated"] = bool(trunc[i] and not term[i])
            self.reset_infos = split_infos(reset_info, self.num_envs)
        return obs, np.asarray(rew, dtype=np.float32), dones, infos


def vec_env_view(venv: VectorEnv, env_id: str | None = None) -> VecEnv:
    """SB3's interface on a Gymnasium vector env: the env itself when it resets copies in the
    same step or on request; else (Gymnasium's one-array vector implementations, e.g.
    CartPole's) a new SAME_STEP env of the same id and number of copies."""
    mode = AutoresetMode(venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
    if mode == AutoresetMode.SAME_STEP:
        return GymVecEnv(venv)
    if isinstance(venv.unwrapped, SyncVectorEnv | AsyncVectorEnv):
        return _NextStepView(venv)
    env_id = env_id or getattr(getattr(venv, "spec", None), "id", None)
    if env_id is None:
        raise VecEnvError("this Gymnasium vector env cannot reset single copies; pass a "
                          "DummyVecEnv instead")
    return GymVecEnv(gym.make_vec(env_id, num_envs=venv.num_envs, vectorization_mode="sync",
                                  vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}))


class VecEnvWrapper(VecEnv):
    """The base of SB3's VecEnv wrappers: ``self.venv`` is the wrapped VecEnv (a Gymnasium
    vector env is given SB3's interface first); subclasses define ``reset`` and ``step_wait``."""

    def __init__(self, venv: VecEnv | VectorEnv, observation_space: spaces.Space | None = None,
                 action_space: spaces.Space | None = None) -> None:
        if isinstance(venv, VectorEnv):
            venv = vec_env_view(venv)
        if not isinstance(venv, VecEnv):
            raise TypeError(f"{type(self).__name__} wraps a VecEnv (DummyVecEnv, make_vec_env's, "
                            f"...), got {type(venv).__name__}")
        self.venv = venv
        super().__init__(venv.num_envs, observation_space or venv.observation_space,
                         action_space or venv.action_space, render_mode=venv.render_mode)
        self.class_attributes = dict(inspect.getmembers(type(self)))

    # the wrapped env's reset infos (a wrapper's reset returns the inner env's)
    reset_infos = property(  # type: ignore[assignment]
        lambda self: getattr(self.venv, "reset_infos", [{} for _ in range(self.num_envs)]),
        lambda self, value: None)

    def step_async(self, actions: Any) -> None:
        self.venv.step_async(actions)

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        return self.venv.seed(seed)

    def set_options(self, options: list[dict] | dict | None = None) -> None:
        self.venv.set_options(options)

    def close(self) -> None:
        self.venv.close()

    def render(self, mode: str | None = None) -> np.ndarray | None:
        return self.venv.render(mode=mode)

    def get_images(self) -> Sequence[np.ndarray | None]:
        return self.venv.get_images()

    def has_attr(self, attr_name: str) -> bool:
        return self.venv.has_attr(attr_name)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self.venv.get_attr(attr_name, indices)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self.venv.set_attr(attr_name, value, indices)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        return self.venv.env_method(method_name, *method_args, indices=indices, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None
                       ) -> list[bool]:
        return self.venv.env_is_wrapped(wrapper_class, indices=indices)

    @property
    def unwrapped(self) -> VecEnv:
        return self.venv.unwrapped

    # ---- attributes of the wrapped envs (SB3's lookup: ambiguous ones raise) -------------------
    def __getattr__(self, name: str) -> Any:
        if name in ("venv", "class_attributes") or name.startswith("__"):
            raise AttributeError(name)
        blocked = self.getattr_depth_check(name, already_found=False)
        if blocked is not None:
            raise AttributeError(f"Error: Recursive attribute lookup for {name} from "
                                 f"{type(self).__module__}.{type(self).__name__} is ambiguous "
                                 f"and hides attribute from {blocked}")
        return self.getattr_recursive(name)

    def _own_attributes(self) -> dict[str, Any]:
        return {**self.class_attributes, **self.__dict__}

    def getattr_recursive(self, name: str) -> Any:
        if name in self._own_attributes():
            return getattr(self, name)
        if hasattr(self.venv, "getattr_recursive"):
            return self.venv.getattr_recursive(name)
        return getattr(self.venv, name)

    def getattr_depth_check(self, name: str, already_found: bool) -> str | None:
        mine = name in self._own_attributes()
        if mine and already_found:
            return f"{type(self).__module__}.{type(self).__name__}"
        return self.venv.getattr_depth_check(name, already_found or mine)


def _is_image(space: spaces.Space) -> bool:
    from rlgrad.rl.common.preprocessing import is_image_space

    return is_image_space(space)


def _setting(name: str) -> property:
    """A VecNormalize attribute kept on its Normalizer (shared with an algorithm)."""
    return property(lambda self: getattr(self.normalizer, name),
                    lambda self, v: setattr(self.normalizer, name, v))


class VecNormalize(VecEnvWrapper):
    """Running mean/std normalisation of observations (a Box, or the ``norm_obs_keys`` Box
    entries of a Dict), rewards scaled by the std of the discounted return (SB3's
    ``VecNormalize``). The Box statistics are a ``Normalizer`` an algorithm given this env
    shares."""

    def __init__(self, venv: VecEnv | VectorEnv, training: bool = True, norm_obs: bool = True,
                 norm_reward: bool = True, clip_obs: float = 10.0, clip_reward: float = 10.0,
                 gamma: float = 0.99, epsilon: float = 1e-8,
                 norm_obs_keys: list[str] | None = None) -> None:
        super().__init__(venv)
        space = self.observation_space
        self.norm_obs_keys = norm_obs_keys
        flat = int(np.prod(space.shape)) if isinstance(space, spaces.Box) else 0
        self.normalizer = Normalizer(flat, self.num_envs, norm_obs=norm_obs,
                                     norm_reward=norm_reward, clip_obs=clip_obs,
                                     clip_reward=clip_reward, gamma=gamma, epsilon=epsilon)
        self.normalizer.training = training
        self._key_rms: dict[str, RunningMeanStd] | None = None
        if norm_obs:
            self._check_spaces()
            self._image_spaces_as_float(clip_obs)
        self.old_obs: Any = np.zeros(0)
        self.old_reward = np.zeros(0)

    def _check_spaces(self) -> None:
        space = self.observation_space
        if isinstance(space, spaces.Dict):
            if self.norm_obs_keys is None:
                self.norm_obs_keys = list(space.spaces)
            for key in self.norm_obs_keys:
                if not isinstance(space.spaces[key], spaces.Box):
                    raise VecEnvError(f"VecNormalize only supports `gym.spaces.Box` observation "
                                      f"spaces but {key} is of type {space.spaces[key]}: "
                                      "explicitly pass the observation keys to normalise as "
                                      "norm_obs_keys")
            self._key_rms = {k: RunningMeanStd(space.spaces[k].shape) for k in self.norm_obs_keys}
        elif isinstance(space, spaces.Box):
            if self.norm_obs_keys is not None:
                raise VecEnvError("VecNormalize: `norm_obs_keys` is applicable only with "
                                  "`gym.spaces.Dict` observation spaces; leave it out for a Box")
        else:
            raise VecEnvError(f"VecNormalize only supports `gym.spaces.Box` and `gym.spaces.Dict` "
                              f"observation spaces, not {space}")

    def _image_spaces_as_float(self, clip: float) -> None:
        """Normalised images are floats in [-clip, clip], no longer uint8 images (SB3 says so in
        the space, so that a CNN policy does not scale them again)."""
        space = self.observation_space
        if isinstance(space, spaces.Dict):
            subs = dict(space.spaces)
            for key in self._key_rms or {}:
                if _is_image(subs[key]):
                    subs[key] = spaces.Box(-clip, clip, subs[key].shape, np.float32)
            self.observation_space = spaces.Dict(subs)
        elif _is_image(space):
            self.observation_space = spaces.Box(-clip, clip, space.shape, np.float32)

    training = _setting("training")
    norm_obs = _setting("norm_obs")
    norm_reward = _setting("norm_reward")
    clip_obs = _setting("clip_obs")
    clip_reward = _setting("clip_reward")
    gamma = _setting("gamma")
    epsilon = _setting("epsilon")
    ret_rms = _setting("ret_rms")
    returns = _setting("returns")

    @property
    def obs_rms(self) -> Any:
        return self._key_rms if self._key_rms is not None else self.normalizer.obs_rms

    @obs_rms.setter
    def obs_rms(self, value: Any) -> None:
        if isinstance(value, dict):
            self._key_rms = value
        else:
            self.normalizer.obs_rms = value

    def algorithm_normalizer(self) -> Normalizer | None:
        """A Box env's statistics, for an algorithm that steps the inner env (the fast path)."""
        return self.normalizer if self._key_rms is None else None

    def as_vector_env(self) -> VectorEnv:
        if self._key_rms is None:
            return self.venv.as_vector_env()
        return VecEnvVectorEnv(self)

    # ---- normalisation -------------------------------------------------------------------------
    def _box(self, obs: Any, rms: RunningMeanStd, inverse: bool = False) -> np.ndarray:
        obs = np.asarray(obs)
        shape = obs.shape
        flat = obs.reshape(-1, *rms.mean.shape) if rms.mean.ndim else obs
        if inverse:
            return (flat * np.sqrt(rms.var + self.epsilon) + rms.mean).reshape(shape)
        out = np.clip((flat - rms.mean) / np.sqrt(rms.var + self.epsilon), -self.clip_obs,
                      self.clip_obs)
        return out.reshape(shape).astype(np.float32)

    def _map(self, obs: Any, inverse: bool) -> Any:
        if not self.norm_obs:
            return deepcopy(obs)
        if isinstance(obs, dict) and self._key_rms is not None:
            out = dict(deepcopy(obs))
            for key, rms in self._key_rms.items():
                out[key] = self._box(obs[key], rms, inverse)
            return out
        return self._box(obs, self.normalizer.obs_rms, inverse)

    def normalize_obs(self, obs: Any) -> Any:
        """Observations normalised with the current statistics (not updated)."""
        return self._map(obs, inverse=False)

    def unnormalize_obs(self, obs: Any) -> Any:
        return self._map(obs, inverse=True)

    def normalize_reward(self, reward: np.ndarray) -> np.ndarray:
        if self.norm_reward:
            reward = np.clip(reward / np.sqrt(self.ret_rms.var + self.epsilon),
                             -self.clip_reward, self.clip_reward)
        return np.asarray(reward).astype(np.float32)

    def unnormalize_reward(self, reward: np.ndarray) -> np.ndarray:
        if self.norm_reward:
            return reward * np.sqrt(self.ret_rms.var + self.epsilon)
        return reward

    def get_original_obs(self) -> Any:
        return deepcopy(self.old_obs)

    def get_original_reward(self) -> np.ndarray:
        return self.old_reward.copy()

    def _update_obs(self, obs: Any) -> None:
        if not (self.training and self.norm_obs):
            return
        if isinstance(obs, dict) and self._key_rms is not None:
            for key, rms in self._key_rms.items():
                rms.update(np.asarray(obs[key]))
        else:
            self.normalizer.obs_rms.update(np.asarray(obs).reshape(self.num_envs, -1))

    def reset(self) -> Any:
        obs = self.venv.reset()
        self.old_obs = obs
        self.normalizer.returns = np.zeros(self.num_envs)
        self._update_obs(obs)
        return self.normalize_obs(obs)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.old_obs, self.old_reward = obs, rewards
        self._update_obs(obs)
        obs = self.normalize_obs(obs)
        if self.training:
            self.normalizer.returns = self.normalizer.returns * self.gamma + rewards
            self.ret_rms.update(self.normalizer.returns)
        rewards = self.normalize_reward(rewards)
        for i in np.flatnonzero(dones):
            if "terminal_observation" in infos[i]:
                infos[i]["terminal_observation"] = self.normalize_obs(
                    infos[i]["terminal_observation"])
        self.normalizer.returns[np.asarray(dones, dtype=bool)] = 0
        return obs, rewards, dones, infos

    # ---- saving --------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        n = self.normalizer
        keys = None if self._key_rms is None else {k: r.state_dict() for k, r in self._key_rms.items()}
        return {"kind": "VecNormalize", "state": n.state_dict(), "key_rms": keys,
                "training": n.training, "norm_obs_keys": self.norm_obs_keys,
                "settings": {"norm_obs": n.norm_obs, "norm_reward": n.norm_reward,
                             "clip_obs": n.clip_obs, "clip_reward": n.clip_reward,
                             "gamma": n.gamma, "epsilon": n.epsilon}}

    def save(self, save_path: str) -> None:
        """The statistics and settings, in an rlgrad checkpoint file at ``save_path`` as named
        (SB3 pickles the object; this file holds only arrays, numbers and strings)."""
        import rlgrad

        rlgrad.save(self._state(), save_path)

    @staticmethod
    def load(load_path: str, venv: VecEnv | VectorEnv) -> VecNormalize:
        """A VecNormalize around ``venv`` with the statistics saved at ``load_path``."""
        import rlgrad

        data = rlgrad.load(load_path)
        if not isinstance(data, dict) or data.get("kind") != "VecNormalize":
            raise VecEnvError(f"{load_path} is not a VecNormalize file written by "
                              "VecNormalize.save")
        keys = data.get("norm_obs_keys")
        out = VecNormalize(venv, training=bool(data["training"]),
                           norm_obs_keys=None if keys is None else list(keys),
                           **dict(data["settings"]))
        out._load_state(data, load_path)
        return out

    def _load_state(self, data: dict[str, Any], where: str) -> None:
        saved = np.shape(data["state"]["obs_rms"]["mean"])
        if self._key_rms is None and self.normalizer.obs_rms.mean.shape != saved:
            raise VecEnvError(f"{where}: its observation statistics have shape {saved}, the "
                              f"env's observations {self.observation_space.shape}")
        state = dict(data["state"])
        state["returns"] = np.zeros(self.num_envs)  # running returns belong to the old copies
        self.normalizer.load_state_dict(state)
        for key, st in (data.get("key_rms") or {}).items():
            if self._key_rms is None or key not in self._key_rms:
                raise VecEnvError(f"{where}: statistics for key {key!r}, which this env's "
                                  "normalised observations do not have")
            self._key_rms[key].load_state_dict(st)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the wrapped env (often not picklable): ``set_venv`` after loading."""
        state = self.__dict__.copy()
        state.pop("venv", None)
        state.pop("class_attributes", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.venv = None  # type: ignore[assignment]

    def set_venv(self, venv: VecEnv) -> None:
        """Wrap ``venv`` (after unpickling), whose observations must have the saved shapes."""
        if self.venv is not None:
            raise VecEnvError("Trying to set venv of already initialized VecNormalize wrapper.")
        saved, given = self.observation_space, venv.observation_space
        if (isinstance(saved, spaces.Dict) != isinstance(given, spaces.Dict)
                or getattr(saved, "shape", None) != getattr(given, "shape", None)
                or (isinstance(saved, spaces.Dict) and any(
                    saved[k].shape != given[k].shape for k in saved.spaces))):
            raise VecEnvError(f"VecNormalize.set_venv: the env's observation space {given} does "
                              f"not have the saved shapes {saved}")
        self.venv = venv
        self.num_envs = venv.num_envs
        self.class_attributes = dict(inspect.getmembers(type(self)))
        self.render_mode = venv.render_mode
        self.normalizer.returns = np.zeros(self.num_envs)


class VecCheckNan(VecEnvWrapper):
    """Raise (``raise_exception=True``) or warn when actions, observations or rewards hold NaN
    (or inf, ``check_inf``)."""

    def __init__(self, venv: VecEnv | VectorEnv, raise_exception: bool = False,
                 warn_once: bool = True, check_inf: bool = True) -> None:
        super().__init__(venv)
        self.raise_exception, self.warn_once, self.check_inf = raise_exception, warn_once, check_inf
        self._user_warned = False

    def _check(self, where: str, **arrays: Any) -> None:
        bad = []
        for name, a in arrays.items():
            for part in (a.values() if isinstance(a, dict) else a if isinstance(a, tuple) else [a]):
                part = np.asarray(part)
                if part.dtype.kind not in "fc":
                    continue
                if np.isnan(part).any():
                    bad.append(f"NaN in {name}")
                if self.check_inf and np.isinf(part).any():
                    bad.append(f"inf in {name}")
        if not bad:
            return
        msg = f"VecCheckNan: {', '.join(dict.fromkeys(bad))} {where}"
        if self.raise_exception:
            raise ValueError(msg)
        if not (self.warn_once and self._user_warned):
            warnings.warn(msg, UserWarning, stacklevel=3)
            self._user_warned = True

    def step_async(self, actions: Any) -> None:
        self._check("of the actions given to step()", actions=actions)
        self.venv.step_async(actions)

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rew, dones, infos = self.venv.step_wait()
        self._check("returned by step()", observations=obs, rewards=rew)
        return obs, rew, dones, infos

    def reset(self) -> Any:
        obs = self.venv.reset()
        self._check("returned by reset()", observations=obs)
        return obs



class VecMonitor(VecEnvWrapper):
    """``Monitor``'s episode records for a whole VecEnv (for vector envs made without a chance
    to wrap each copy)."""

    def __init__(self, venv: VecEnv, filename: str | None = None,
                 info_keywords: tuple[str, ...] = ()) -> None:
        try:
            monitored = venv.env_is_wrapped(Monitor)[0]
        except (AttributeError, NotImplementedError):
            monitored = False
        if monitored:
            warnings.warn("The environment is already wrapped with a `Monitor` wrapper but you "
                          "are wrapping it with a `VecMonitor` wrapper, the `Monitor` statistics "
                          "will be overwritten by the `VecMonitor` ones.", UserWarning,
                          stacklevel=2)
        super().__init__(venv)
        self.episode_count = 0
        self.t_start = time.time()
        spec = getattr(venv, "spec", None)
        env_id = spec.id if spec is not None else None
        self.results_writer: ResultsWriter | None = None
        if filename:
            self.results_writer = ResultsWriter(
                filename, header={"t_start": self.t_start, "env_id": str(env_id)},
                extra_keys=tuple(info_keywords))
        self.info_keywords = tuple(info_keywords)
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)

    def reset(self) -> Any:
        obs = self.venv.reset()
        self.episode_returns = np.zeros(self.num_envs, dtype=np.float32)
        self.episode_lengths = np.zeros(self.num_envs, dtype=np.int32)
        return obs

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rewards, dones, infos = self.venv.step_wait()
        self.episode_returns += rewards
        self.episode_lengths += 1
        infos = list(infos)
        for i in np.flatnonzero(dones):
            info = dict(infos[i])
            ep = {"r": self.episode_returns[i], "l": self.episode_lengths[i],
                  "t": round(time.time() - self.t_start, 6)}
            for key in self.info_keywords:
                ep[key] = info[key]
            info["episode"] = ep
            self.episode_count += 1
            self.episode_returns[i], self.episode_lengths[i] = 0, 0
            if self.results_writer is not None:
                self.results_writer.write_row(ep)
            infos[i] = info
        return obs, rewards, dones, infos

    def close(self) -> None:
        if self.results_writer is not None:
            self.results_writer.close()
        self.venv.close()


def _chain(env: Any) -> Iterable[VecEnv]:
    """``env`` and the VecEnvs it wraps, outermost first."""
    while isinstance(env, VecEnv):
        yield env
        env = env.venv if isinstance(env, VecEnvWrapper) else None


def unwrap_vec_normalize(env: Any) -> VecNormalize | None:
    """The VecNormalize in the wrapper chain of ``env``, if any."""
    return next((e for e in _chain(env) if isinstance(e, VecNormalize)), None)


def unwrap_vec_wrapper(env: Any, vec_wrapper_class: type[VecEnvWrapper]) -> VecEnvWrapper | None:
    """The first ``vec_wrapper_class`` in the wrapper chain of ``env``, if any."""
    return next((e for e in _chain(env) if isinstance(e, vec_wrapper_class)), None)


def is_vecenv_wrapped(env: Any, vec_wrapper_class: type[VecEnvWrapper]) -> bool:
    return unwrap_vec_wrapper(env, vec_wrapper_class) is not None


def sync_envs_normalization(env: Any, eval_env: Any) -> None:
    """Copy the normalisation statistics of ``env``'s VecNormalize wrappers to the ones at the
    same depth in ``eval_env`` (as EvalCallback does before evaluating); the two must be wrapped
    the same way."""
    src, dst = env, eval_env
    while isinstance(src, VecEnvWrapper):
        if not isinstance(dst, VecEnvWrapper if not isinstance(src, VecNormalize) else VecNormalize):
            want = "a VecNormalize" if isinstance(src, VecNormalize) else "a VecEnvWrapper"
            raise VecEnvError(f"Error while synchronizing normalization stats: expected the eval "
                              f"env to be {want} but got {type(dst).__name__} instead: wrap the "
                              f"eval env as the training env ({type(src).__name__})")
        if isinstance(src, VecNormalize) and src is not dst:
            dst.obs_rms = deepcopy(src.obs_rms)
            dst.ret_rms = deepcopy(src.ret_rms)
        src, dst = src.venv, dst.venv


def as_vec_env(env: Any) -> VecEnv:
    """An eval env with SB3's VecEnv interface: a VecEnv as is; a Gymnasium vector env behind
    SB3's interface; a Gymnasium env or id in a one-copy DummyVecEnv (an id gets a Monitor, as
    SB3's make_vec_env would)."""
    if isinstance(env, VecEnv):
        return env
    if isinstance(env, VectorEnv):
        return vec_env_view(env)
    if isinstance(env, str):
        return DummyVecEnv([lambda: Monitor(gym.make(env))])
    if isinstance(env, gym.Env):
        return DummyVecEnv([lambda: env])
    raise TypeError(f"expected a VecEnv, a Gymnasium env or an env id, got {type(env).__name__}")

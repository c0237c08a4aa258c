"""Stable-Baselines3's vector-environment interface over Gymnasium's vector environments.

SB3 scripts step environments as ``obs = env.reset()`` and
``obs, rewards, dones, infos = env.step(actions)``: a finished copy is reset inside the same
step, its last observation in ``infos[i]["terminal_observation"]`` and
``infos[i]["TimeLimit.truncated"]`` telling a time limit from a real end. ``VecEnv`` gives that
interface to a Gymnasium vector env in ``SAME_STEP`` autoreset mode (``self.venv``), which is
also what an algorithm trains on when it is given one: the algorithms step ``venv`` directly.

* ``DummyVecEnv(env_fns)`` / ``SubprocVecEnv(env_fns)``: Gymnasium's ``SyncVectorEnv`` /
  ``AsyncVectorEnv`` behind SB3's interface.
* ``VecNormalize(venv, ...)``: running normalisation of observations and rewards, with
  ``training``, ``norm_obs``, ``norm_reward``, ``save(path)`` / ``VecNormalize.load(path, venv)``.
  Its statistics are an ``rlgrad.rl.Normalizer`` that an algorithm given this env shares: training
  updates them, and ``model.predict`` then takes the normalised observations this env returns.
* ``VecCheckNan(venv)``: NaN/inf in actions, observations or rewards raise or warn.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from rlgrad.rl.monitor import Monitor
from rlgrad.rl.normalize import Normalizer

__all__ = ["VecEnv", "DummyVecEnv", "SubprocVecEnv", "VecEnvWrapper", "VecNormalize",
           "VecCheckNan", "sync_envs_normalization", "unwrap_vec_normalize", "is_vecenv_wrapped"]


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


class VecEnv:
    """SB3's VecEnv interface over the Gymnasium vector env ``venv`` (SAME_STEP autoreset)."""

    _same_step_only = True

    def __init__(self, venv: VectorEnv) -> None:
        mode = venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if self._same_step_only and AutoresetMode(mode) != AutoresetMode.SAME_STEP:
            raise ValueError("VecEnv needs a Gymnasium vector env in SAME_STEP autoreset mode")
        self.venv = venv
        self.num_envs = venv.num_envs
        self.observation_space = venv.single_observation_space
        self.action_space = venv.single_action_space
        self.render_mode = getattr(venv, "render_mode", None)
        self.reset_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        self._seed: int | None = None
        self._actions: Any = None

    # ---- SB3's interface ---------------------------------------------------------------------
    def reset(self) -> np.ndarray:
        """New episodes in every copy (seeded once after ``seed(s)``: copy i gets s + i)."""
        obs, info = self.venv.reset(seed=self._seed)
        self._seed = None
        self.reset_infos = split_infos(info, self.num_envs)
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
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

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                  list[dict[str, Any]]]:
        self.step_async(np.asarray(actions))
        return self.step_wait()

    def seed(self, seed: int | None = None) -> list[int | None]:
        """Seeds for the next ``reset`` (copy i: seed + i), as SB3 2.x does."""
        self._seed = seed
        if seed is None:
            return [None] * self.num_envs
        self.action_space.seed(seed)
        return [seed + i for i in range(self.num_envs)]

    def close(self) -> None:
        self.venv.close()

    def render(self, mode: str | None = None) -> Any:
        return self.venv.render()

    def get_images(self) -> Sequence[np.ndarray | None]:
        return self.env_method("render")

    def _sub_envs(self, indices: Any) -> list[gym.Env]:
        envs = getattr(self.venv, "envs", None)
        if envs is None:
            raise AttributeError("this vector env does not hold its copies in this process")
        idx = range(self.num_envs) if indices is None else (
            [indices] if isinstance(indices, int) else indices)
        return [envs[i] for i in idx]

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(e.unwrapped if not hasattr(e, attr_name) else e, attr_name)
                for e in self._sub_envs(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        for e in self._sub_envs(indices):
            setattr(e.unwrapped, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any
                   ) -> list[Any]:
        return [getattr(e, method_name)(*args, **kwargs) for e in self._sub_envs(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        out = []
        for e in self._sub_envs(indices):
            while isinstance(e, gym.Wrapper) and not isinstance(e, wrapper_class):
                e = e.env
            out.append(isinstance(e, wrapper_class))
        return out

    @property
    def unwrapped(self) -> VecEnv:
        return self

    @property
    def envs(self) -> list[gym.Env]:
        return self._sub_envs(None)


class DummyVecEnv(VecEnv):
    """The copies stepped one after the other in this process (Gymnasium's SyncVectorEnv)."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        super().__init__(SyncVectorEnv(list(env_fns), autoreset_mode=AutoresetMode.SAME_STEP))


class SubprocVecEnv(VecEnv):
    """One process per copy (Gymnasium's AsyncVectorEnv); ``start_method`` as multiprocessing's."""

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], start_method: str | None = None
                 ) -> None:
        super().__init__(AsyncVectorEnv(list(env_fns), context=start_method,
                                        autoreset_mode=AutoresetMode.SAME_STEP))


class _NextStepView(VecEnv):
    """SB3's interface on a NEXT_STEP vector env that can reset some copies
    (``reset(options={"reset_mask": ...})``): finished copies are reset right after the step."""

    _same_step_only = False

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rew, term, trunc, info = self.venv.step(self._actions)
        dones = np.logical_or(term, trunc)
        infos = split_infos(info, self.num_envs)
        if dones.any():
            final = np.array(obs, copy=True)
            obs, reset_info = self.venv.reset(options={"reset_mask": dones})
            for i in np.flatnonzero(dones):
                infos[i]["terminal_observation"] = final[i]
                infos[i]["TimeLimit.truncated"] = bool(trunc[i] and not term[i])
            self.reset_infos = split_infos(reset_info, self.num_envs)
        return obs, np.asarray(rew, dtype=np.float32), dones, infos


def vec_env_view(venv: VectorEnv, env_id: str | None) -> VecEnv:
    """SB3's interface on an algorithm's vector env: the env itself when it resets copies in the
    same step or on request; else (Gymnasium's one-array vector implementations, e.g.
    CartPole's) a new SAME_STEP env of the same id and number of copies."""
    mode = AutoresetMode(venv.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
    if mode == AutoresetMode.SAME_STEP:
        return VecEnv(venv)
    if isinstance(venv.unwrapped, SyncVectorEnv | AsyncVectorEnv):
        return _NextStepView(venv)
    if env_id is None:
        raise ValueError("get_env: this vector env cannot reset single copies; pass a "
                         "DummyVecEnv as env")
    return VecEnv(gym.make_vec(env_id, num_envs=venv.num_envs, vectorization_mode="sync",
                               vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}))


class VecEnvWrapper(VecEnv):
    """A VecEnv wrapping another one (``self.venv`` of the inner one is shared)."""

    def __init__(self, venv: VecEnv) -> None:
        self.inner = venv
        self.venv = venv.venv
        self.num_envs = venv.num_envs
        self.observation_space = venv.observation_space
        self.action_space = venv.action_space
        self.render_mode = venv.render_mode

    def reset(self) -> np.ndarray:
        return self.inner.reset()

    def step_async(self, actions: np.ndarray) -> None:
        self.inner.step_async(actions)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        return self.inner.step_wait()

    def seed(self, seed: int | None = None) -> list[int | None]:
        return self.inner.seed(seed)

    @property
    def reset_infos(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.inner.reset_infos

    def _sub_envs(self, indices: Any) -> list[gym.Env]:
        return self.inner._sub_envs(indices)

    @property
    def unwrapped(self) -> VecEnv:
        return self.inner.unwrapped

    def __getattr__(self, name: str) -> Any:  # SB3's wrappers forward unknown attributes
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class VecNormalize(VecEnvWrapper):
    """Running mean/std normalisation of observations, rewards scaled by the std of the
    discounted return (SB3's ``VecNormalize``; the statistics are a ``Normalizer``)."""

    def __init__(self, venv: VecEnv, training: bool = True, norm_obs: bool = True,
                 norm_reward: bool = True, clip_obs: float = 10.0, clip_reward: float = 10.0,
                 gamma: float = 0.99, epsilon: float = 1e-8) -> None:
        super().__init__(venv)
        if not isinstance(self.observation_space, gym.spaces.Box):
            raise ValueError(f"VecNormalize normalises Box observations, got {self.observation_space}")
        self._shape = self.observation_space.shape
        self.normalizer = Normalizer(int(np.prod(self._shape)), self.num_envs, norm_obs=norm_obs,
                                     norm_reward=norm_reward, clip_obs=clip_obs,
                                     clip_reward=clip_reward, gamma=gamma, epsilon=epsilon)
        self.normalizer.training = training
        self.old_obs = np.zeros(0)
        self.old_reward = np.zeros(0)

    # SB3's attributes, read from and written to the shared statistics
    def _setting(name: str) -> property:  # a property factory, used in the class body
        return property(lambda self: getattr(self.normalizer, name),
                        lambda self, v: setattr(self.normalizer, name, v))

    training = _setting("training")
    norm_obs = _setting("norm_obs")
    norm_reward = _setting("norm_reward")
    clip_obs = _setting("clip_obs")
    clip_reward = _setting("clip_reward")
    gamma = _setting("gamma")
    epsilon = _setting("epsilon")
    obs_rms = _setting("obs_rms")
    ret_rms = _setting("ret_rms")
    del _setting

    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        flat = np.asarray(obs, dtype=np.float32).reshape(-1, int(np.prod(self._shape)))
        return self.normalizer.normalize_obs(flat).reshape(np.shape(obs))

    def normalize_reward(self, reward: np.ndarray) -> np.ndarray:
        if not self.norm_reward:
            return reward
        return np.clip(reward / np.sqrt(self.ret_rms.var + self.epsilon), -self.clip_reward,
                       self.clip_reward).astype(np.float32)

    def get_original_obs(self) -> np.ndarray:
        return self.old_obs.copy()

    def get_original_reward(self) -> np.ndarray:
        return self.old_reward.copy()

    def reset(self) -> np.ndarray:
        obs = self.inner.reset()
        self.old_obs = obs
        self.normalizer.returns[:] = 0.0
        self.normalizer.update_obs(np.asarray(obs, dtype=np.float32).reshape(self.num_envs, -1))
        return self.normalize_obs(obs)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rew, dones, infos = self.inner.step_wait()
        self.old_obs, self.old_reward = obs, rew
        self.normalizer.update_obs(np.asarray(obs, dtype=np.float32).reshape(self.num_envs, -1))
        for i in np.flatnonzero(dones):
            if "terminal_observation" in infos[i]:
                infos[i]["terminal_observation"] = self.normalize_obs(
                    infos[i]["terminal_observation"][None])[0]
        rew = self.normalizer.process_reward(rew, dones, np.ones(self.num_envs, dtype=bool))
        return self.normalize_obs(obs), rew, dones, infos

    def save(self, save_path: str) -> None:
        """The statistics and settings, in an rlgrad checkpoint file at ``save_path`` as named
        (SB3 pickles; this file holds only arrays, numbers and strings)."""
        import rlgrad

        n = self.normalizer
        rlgrad.save({"kind": "VecNormalize", "state": n.state_dict(), "training": n.training,
                     "settings": {"norm_obs": n.norm_obs, "norm_reward": n.norm_reward,
                                  "clip_obs": n.clip_obs, "clip_reward": n.clip_reward,
                                  "gamma": n.gamma, "epsilon": n.epsilon}}, save_path)

    @staticmethod
    def load(load_path: str, venv: VecEnv) -> VecNormalize:
        """A VecNormalize around ``venv`` with the statistics saved at ``load_path``."""
        import rlgrad

        data = rlgrad.load(load_path)
        if not isinstance(data, dict) or data.get("kind") != "VecNormalize":
            raise ValueError(f"{load_path} is not a VecNormalize file written by "
                             "VecNormalize.save")
        out = VecNormalize(venv, training=bool(data["training"]), **dict(data["settings"]))
        if out.normalizer.obs_rms.mean.shape != np.shape(data["state"]["obs_rms"]["mean"]):
            raise ValueError(f"{load_path}: its observation statistics have shape "
                             f"{np.shape(data['state']['obs_rms']['mean'])}, the env's "
                             f"observations {out.observation_space.shape}")
        state = dict(data["state"])
        state["returns"] = np.zeros(out.num_envs)  # running returns belong to the old copies
        out.normalizer.load_state_dict(state)
        return out


class VecCheckNan(VecEnvWrapper):
    """Raise (``raise_exception=True``) or warn when actions, observations or rewards hold NaN
    (or inf, ``check_inf``)."""

    def __init__(self, venv: VecEnv, raise_exception: bool = False, warn_once: bool = True,
                 check_inf: bool = True) -> None:
        super().__init__(venv)
        self.raise_exception, self.warn_once, self.check_inf = raise_exception, warn_once, check_inf
        self._warned = False

    def _check(self, where: str, **arrays: Any) -> None:
        bad = []
        for name, a in arrays.items():
            a = np.asarray(a)
            if a.dtype.kind != "f":
                continue
            if np.isnan(a).any():
                bad.append(f"NaN in {name}")
            if self.check_inf and np.isinf(a).any():
                bad.append(f"inf in {name}")
        if not bad:
            return
        msg = f"VecCheckNan: {', '.join(bad)} {where}"
        if self.raise_exception:
            raise ValueError(msg)
        if not (self.warn_once and self._warned):
            warnings.warn(msg, UserWarning, stacklevel=3)
            self._warned = True

    def step_async(self, actions: np.ndarray) -> None:
        self._check("of the actions given to step()", actions=actions)
        super().step_async(actions)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        obs, rew, dones, infos = super().step_wait()
        self._check("returned by step()", observations=obs, rewards=rew)
        return obs, rew, dones, infos

    def reset(self) -> np.ndarray:
        obs = super().reset()
        self._check("returned by reset()", observations=obs)
        return obs


def unwrap_vec_normalize(env: Any) -> VecNormalize | None:
    """The VecNormalize in the wrapper chain of ``env``, if any."""
    while isinstance(env, VecEnv):
        if isinstance(env, VecNormalize):
            return env
        env = getattr(env, "inner", None)
    return None


def is_vecenv_wrapped(env: Any, wrapper_class: type) -> bool:
    while isinstance(env, VecEnv):
        if isinstance(env, wrapper_class):
            return True
        env = getattr(env, "inner", None)
    return False


def sync_envs_normalization(env: Any, eval_env: Any) -> None:
    """Copy the normalisation statistics of ``env`` to ``eval_env`` (both VecNormalize-wrapped
    or neither), as EvalCallback does before evaluating."""
    src, dst = unwrap_vec_normalize(env), unwrap_vec_normalize(eval_env)
    if src is not None and dst is not None and src is not dst:
        dst.normalizer.obs_rms.load_state_dict(src.normalizer.obs_rms.state_dict())
        dst.normalizer.ret_rms.load_state_dict(src.normalizer.ret_rms.state_dict())


def as_vec_env(env: Any) -> Any:
    """An eval env with SB3's VecEnv interface: a VecEnv as is; a Gymnasium env or id in a
    one-copy DummyVecEnv (an id gets a Monitor, as SB3's make_vec_env would)."""
    if isinstance(env, VecEnv):
        return env
    if isinstance(env, str):
        return DummyVecEnv([lambda: Monitor(gym.make(env))])
    if isinstance(env, gym.Env):
        return DummyVecEnv([lambda: env])
    raise TypeError(f"expected a VecEnv, a Gymnasium env or an env id, got {type(env).__name__}")

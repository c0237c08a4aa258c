"""The algorithm base class, shaped like Stable-Baselines3's ``BaseAlgorithm``.

``Algo(env, seed=0, **hyperparams)`` (or SB3's ``Algo("MlpPolicy", env, ...)``: see
``rlgrad.rl.sb3_args``) builds the vector environment, the networks and optimizers;
``learn(total_timesteps, callback=None, progress_bar=False)`` trains (call it again with
``reset_num_timesteps=False`` to continue in chunks); ``predict(obs, deterministic=False)`` acts;
``save(path)`` / ``Algo.load(path)`` go through rlgrad's safe checkpoints. The complete training
state (networks, optimizers, counters, RNG streams, normaliser, optionally the replay buffer) is
``get_state()``: nested dicts of arrays, numbers and strings, restored by ``set_state``.
"""

from __future__ import annotations

import contextvars
import math
import os
import random
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, cast

import numpy as np
from gymnasium import spaces

import rlgrad
from rlgrad import threads
from rlgrad.nn import init as nn_init
from rlgrad.nn.module import fill_shared_names
from rlgrad.random import Generator, generator_state_dict, load_generator_state
from rlgrad.rl.callbacks import BaseCallback, make_callback
from rlgrad.rl.common.save_util import PathOrFile
from rlgrad.rl.common.save_util_model import (
    SpacesOnlyEnv,
    apply_archive,
    archive_model_args,
    archive_target,
    is_archive_file,
    read_archive,
    resolve_saved,
    save_archive,
)
from rlgrad.rl.common.vec_env.vec_transpose import wrap_channels_last
from rlgrad.rl.envs import (
    EnvLike,
    EpisodeStatistics,
    SpaceError,
    StepAdapter,
    dict_has_images,
    env_name,
    find_episode_statistics,
    flat_obs_dim,
    get_env_state,
    is_image_space,
    make_vec_env,
    preprocess_obs,
    set_env_state,
)
from rlgrad.rl.finite import NonFiniteError
from rlgrad.rl.hyperparams import capture, constructor_hyperparams, hyperparameters
from rlgrad.rl.logger import Logger, set_learn_formats
from rlgrad.rl.normalize import Normalizer
from rlgrad.rl.policies import make_optimizer, predict_with
from rlgrad.rl.progress import ProgressBar
from rlgrad.rl.ranges import check_hyperparams, check_relations
from rlgrad.rl.runtime import keep_freed_memory, limit_blas_threads
from rlgrad.rl.sb3_args import (
    ARS_POLICY_NAMES,
    DEFAULT_POLICY,
    LSTM_POLICY_NAMES,
    action_noise_kwargs,
    buffer_class_args,
    fresh_seed,
    multi_input_error,
    split_policy,
)
from rlgrad.rl.schedules import (
    FloatSchedule,
    Schedule,
    get_schedule_fn,
    linear_schedule,
    schedule_from_data,
    schedule_to_data,
)
from rlgrad.rl.steps import set_grads
from rlgrad.rl.vec_env import LazyInfos, VecEnv, unwrap_vec_normalize, vec_env_view
from rlgrad.typing import DeviceLike

if TYPE_CHECKING:
    from typing_extensions import Self  # (typing's from Python 3.11)

# The helpers that lived here keep their old import path (rlgrad.rl.base.<name>).
rng_state, set_rng_state = generator_state_dict, load_generator_state
__all__ = ["BaseAlgorithm", "Schedule", "action_space_error", "constructor_hyperparams",
           "get_schedule_fn", "keep_freed_memory", "linear_schedule", "rng_state", "set_grads",
           "set_rng_state"]


_LOADING: contextvars.ContextVar[bool] = contextvars.ContextVar("rlgrad_loading", default=False)


def check_total_timesteps(algo: str, value: Any) -> int:
    """``learn``'s budget as an int: a whole number >= 0 (``1e5`` too, as SB3 runs it), else
    ValueError in one line (SB3 runs -1 and 1.5 silently and fails on '100' deep inside)."""
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_)
    if ok and math.isfinite(value) and float(value).is_integer() and value >= 0:
        return int(value)
    raise ValueError(f"{algo}.learn(total_timesteps={value!r}): total_timesteps must be a whole "
                     "number of environment steps >= 0, e.g. learn(100_000)")


def check_same_spaces(what: str, venv: Any, observation_space: Any, action_space: Any) -> None:
    """One line when the vector env's spaces are not the model's (compared as their strings:
    type, bounds, shape, dtype)."""
    for kind, have, want in (("observation", venv.single_observation_space, observation_space),
                             ("action", venv.single_action_space, action_space)):
        if str(have) != str(want):
            raise ValueError(f"{what}: the environment's {kind} space {have} is not the model's "
                             f"{want}; pass an environment like the one it was trained on")


def action_space_error(name: str, allowed: tuple[type, ...], space: spaces.Space) -> str:
    """One line: which action space the algorithm needs, what it got, what to use instead."""
    if allowed == (spaces.Discrete,):
        return (f"{name} needs a discrete (Discrete) action space, got {space}: for continuous "
                "actions use SAC, TD3 or DDPG")
    if allowed == (spaces.Box,):
        return (f"{name} needs a continuous (Box) action space, got {space}: for discrete actions "
                "use DQN, PPO or A2C")
    kinds = " or ".join(t.__name__ for t in allowed)
    # SB3's words ("The algorithm only supports ..."), which its users' code matches on
    return (f"{name} supports {kinds} action spaces, got {space}: The algorithm only supports "
            f"({', '.join(t.__name__ for t in allowed)}) as action spaces")


def resolve_policy(cls: type[BaseAlgorithm], policy: str | None, space: spaces.Space,
                   env_id: str | None) -> str:
    """"CnnPolicy" or "MlpPolicy" (SB3's names): ``policy`` if given, else from the observation
    space (images -> CNN); a policy that cannot take the observations is refused in one line."""
    name, env = cls.__name__, env_id or "this environment"
    if policy in LSTM_POLICY_NAMES:  # (RecurrentPPO maps its names before this)
        raise ValueError(f"{name}: {policy} is RecurrentPPO's policy "
                         "(rlgrad.rl.contrib.RecurrentPPO); use 'MlpPolicy' or 'CnnPolicy'")
    if policy in ARS_POLICY_NAMES and policy not in cls.policy_aliases:
        raise ValueError(f"{name}: {policy} is ARS's policy (rlgrad.rl.contrib.ARS); use "
                         "'MlpPolicy' or 'CnnPolicy'")
    image = is_image_space(space)
    if policy is None:
        policy = "CnnPolicy" if image else "MlpPolicy"
    if policy == "CnnPolicy" and not image:
        raise ValueError(f"{name}: CnnPolicy needs image observations (a uint8 Box of shape (C, H, "
                         f"W)), but {env} gives {space}: use policy='MlpPolicy'")
    if policy == "CnnPolicy" and not cls.cnn_policy:
        raise ValueError(f"{name} has MLP networks only, but {env} gives image observations "
                         f"{space}: use PPO, A2C, the DQN family or SAC, TD3, DDPG, TQC, which have "
                         "a CNN")
    if policy == "MlpPolicy" and image:
        raise ValueError(f"{name}: MlpPolicy takes vector observations, but {env} gives images "
                         f"{space}: use policy='CnnPolicy' (the default for images)")
    return policy



def _savable_hyperparams(name: str, hp: dict[str, Any], functions: str) -> dict[str, Any]:
    """``hp`` with schedules as data; another function refused, or (``functions="start"``)
    replaced by its starting value with a warning."""
    if functions not in ("refuse", "start"):
        raise ValueError(f"{name}.save: function_hyperparams must be 'refuse' or 'start', got "
                         f"{functions!r}")
    for k, v in hp.items():
        if not callable(v):
            continue
        data = schedule_to_data(v)
        if data is not None:
            hp[k] = data
        elif functions == "start":
            hp[k] = float(v(1.0))
            warnings.warn(f"{name}.save: hyperparameter {k!r} is a function; saved as its "
                          f"starting value {hp[k]:g} (pass {k}= to load to train with the "
                          "function again)", stacklevel=3)
        else:
            raise ValueError(
                f"{name}.save: hyperparameter {k!r} is a function ({v!r}), and a checkpoint holds "
                "no code: use a number, 'lin_X', ConstantSchedule or LinearSchedule (SB3's or "
                "rlgrad.rl.schedules'), or save(..., function_hyperparams='start') to save its "
                "starting value")
    return hp


_PLAIN = (bool, int, float, str)


def _with_attributes(model: Any, hp: dict[str, Any]) -> dict[str, Any]:
    """``hp`` with each plain value (number, string) replaced by the model's attribute of that
    name when the user changed it to one of the same type (SB3 saves ``model.__dict__``)."""
    out = dict(hp)
    for k, v in hp.items():
        cur = model.__dict__.get(k, v)
        if isinstance(v, _PLAIN) and type(cur) is type(v) and cur != v:
            out[k] = cur
    return out


def _loaded_state(saved: dict[str, Any], given: Any, force_reset: bool) -> dict[str, Any]:
    """A checkpoint's state for the env the model is loaded on: a new env starts new episodes
    (``force_reset=False``: its last observation kept, as SB3 keeps ``_last_obs``); an env
    whose state is not snapshot (Atari) too, the finished episodes' statistics kept."""
    state = dict(saved)
    env_state = state.get("env", {})
    if given is not None and force_reset:
        state.pop("env", None)
    elif given is not None:
        state["env"] = {k: v for k, v in env_state.items() if k in ("last_obs", "prev_done")}
    elif not env_state.get("vector_env", True):
        state["env"] = {k: v for k, v in env_state.items() if k == "episode_statistics"}
    return state


def _load_module_state(module: Any, state: dict[str, Any]) -> None:
    """``module.load_state_dict(state)``, exactly. A checkpoint of the older layout, which
    listed a shared child once (rlgrad's ``state_dict`` before it listed every name, as
    PyTorch's), lacks the child's other names: they are filled from the name it has, the same
    tensors (``fill_shared_names``). A policy without ``pi_features_extractor`` entries gets
    SB3's warning for A2C/PPO models saved before SB3 1.7 too (SB3 loads those loosely)."""
    try:
        module.load_state_dict(state)
    except rlgrad.nn.StateDictError as e:
        if "Missing key(s) in state_dict" not in str(e) or "Unexpected key(s)" in str(e):
            raise
        try:
            module.load_state_dict(fill_shared_names(module, state))
        except rlgrad.nn.StateDictError:
            raise e from None
        if "pi_features_extractor" in str(e):
            warnings.warn("You are probably loading an A2C/PPO model saved with SB3 < 1.7.0 (or "
                          "an rlgrad checkpoint older than SB3's extractor names): its policy "
                          "has no pi_features_extractor entries; loaded from its "
                          "features_extractor's, save the model again to avoid this warning. "
                          f"Original error: {e}", UserWarning, stacklevel=4)


def _load_device(device: Any) -> Any:
    """``load(device=)`` as SB3's ``get_device``: "auto" and CUDA give the CPU (there is no GPU
    here), None; any other device goes to the constructor's check."""
    name = str(device)
    return None if name == "auto" or name.partition(":")[0] == "cuda" else device


def _refuse_file_module(what: str, env_id: str) -> None:
    """A checkpoint's ``module:EnvId`` would import ``module`` (run its code): only when the
    caller names it (``env=``), or when it is imported already (then no code runs)."""
    module, sep, _ = env_id.rpartition(":")
    if sep and module and module not in sys.modules:
        raise ValueError(f"{what}: the checkpoint names the environment {env_id!r}, which would "
                         f"import module {module!r}: code chosen by a file, not by you. If you "
                         f"trust it, pass env={env_id!r} (or an environment) to load")


#: policy_kwargs every algorithm takes besides its networks' own: SB3's optimizer keys
OPTIMIZER_KEYS = ("optimizer_class", "optimizer_kwargs")


class _AlgorithmType(type):
    """Takes SB3's call ``Algo(policy, env, ...)`` as well as rlgrad's ``Algo(env, ...)``: the
    policy name is taken out before ``__new__`` captures the hyperparameters."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        policy, args, kwargs = split_policy(cls.__name__, args, kwargs)
        if "action_noise" in kwargs:  # SB3's noise object -> noise_type / noise_std
            kwargs = dict(kwargs)
            kwargs.update(action_noise_kwargs(cls.__name__, "noise_type" in hyperparameters(cls),
                                              kwargs.pop("action_noise")))
        if any(k.endswith(("buffer_class", "buffer_kwargs")) for k in kwargs):
            kwargs = buffer_class_args(cls.__name__, kwargs)  # classes as names: savable
        algo = cast("type[BaseAlgorithm]", cls)  # (this metaclass makes algorithms only)
        obj = algo.__new__(algo, *args, **kwargs)
        obj._policy_name = policy  # None: chosen from the observation space
        if policy not in (None, DEFAULT_POLICY):  # (MlpPolicy: what vectors get anyway)
            obj._hyperparams["policy"] = policy  # save/load rebuilds with the same policy
        algo.__init__(obj, *args, **kwargs)
        return obj


class BaseAlgorithm(metaclass=_AlgorithmType):
    """Shared machinery: environment, seeding, counters, logging, callbacks, predict, save/load."""

    _abstract = True  # not an algorithm itself (see rlgrad.rl.hyperparams)
    #: keys of the constructor that describe the environment rather than the learner
    _env_keys: ClassVar[tuple[str, ...]] = ("n_envs", "normalize")
    #: the Gymnasium action spaces the algorithm takes: checked when it is built, and read by the
    #: CLI to refuse an environment before building anything
    action_spaces: ClassVar[tuple[type[spaces.Space], ...]] = (spaces.Discrete, spaces.Box)
    #: SB3 policy names the algorithm builds, each with the policy_kwargs defaults it stands for
    policy_aliases: ClassVar[dict[str, dict[str, Any]]] = {"MlpPolicy": {}}
    _policy_name: str | type | None = None  # (SB3 passes a policy class, too)
    #: whether the algorithm has a CNN for image observations (``policy="CnnPolicy"``)
    cnn_policy: ClassVar[bool] = False
    #: whether its policy takes Dict observations with image entries (CombinedExtractor)
    dict_images: ClassVar[bool] = False
    #: rules of ``rlgrad.rl.ranges.RELATIONS`` (their text) that this algorithm does not need
    relations_not_applying: ClassVar[tuple[str, ...]] = ()
    #: whether ``env_runners > 0`` (rollouts on Ray actors, rlgrad.rl.distributed) is supported
    env_runner_sampling: ClassVar[bool] = False
    #: the constructor's hyperparameters (``__new__`` captures them; save/load rebuilds from them)
    _hyperparams: dict[str, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> BaseAlgorithm:
        # the hyperparameters of this call, through the whole class chain (rlgrad.rl.hyperparams)
        obj = super().__new__(cls)
        obj._hyperparams = capture(cls, args, kwargs) or {}
        return obj

    def __init__(self, env: EnvLike, seed: int | None = None, n_envs: int | None = 1,
                 normalize: bool | dict[str, Any] = False, learning_rate: float | str | Schedule = 3e-4,
                 gamma: float = 0.99, policy_kwargs: dict[str, Any] | None = None,
                 verbose: int = 0, env_kwargs: dict[str, Any] | None = None,
                 vectorization_mode: str | None = None, blas_threads: int | None = 1,
                 check_finite: bool = True, tensorboard_log: str | None = None,
                 device: DeviceLike = "auto", env_runners: int = 0,
                 stats_window_size: int = 100) -> None:
        check_hyperparams(type(self).__name__, self._hyperparams)  # before anything is built
        #: SB3's: how many finished episodes rollout/ep_rew_mean and success_rate average
        self._stats_window_size = int(stats_window_size)
        self._init_env_runners(env, env_runners)
        if blas_threads is not None:
            limit_blas_threads(blas_threads)
        else:
            threads.leave_alone()  # the optimizers built below leave BLAS alone too
        keep_freed_memory()
        self.env_id = env if isinstance(env, str) else getattr(getattr(env, "spec", None), "id", None)
        self.seed = fresh_seed() if seed is None else int(seed)
        n_envs = 1 if n_envs is None else n_envs  # None: the default, one copy
        self.n_envs = n_envs
        self.verbose = verbose
        self.tensorboard_log = None if tensorboard_log is None else str(tensorboard_log)
        #: SB3's: a device ("auto" and "cuda" give the CPU without a GPU, as SB3's get_device; rlgrad
        #: computes on the CPU)
        self.device = rlgrad.device("cpu")
        if verbose >= 1:
            print(f"Using {self.device} device")
        self.gamma = float(gamma)
        self.learning_rate = learning_rate
        self.lr_schedule = FloatSchedule(get_schedule_fn(learning_rate))  # floats, as SB3's
        self.policy_kwargs = dict(policy_kwargs or {})
        # Seeding: network initialisation draws from rlgrad.nn.init's generator, SAC's rsample
        # from self.generator, everything else (action sampling, exploration, minibatch order,
        # replay sampling) from self.rng, its NumPy generator; the env copies get seed + i.
        rlgrad.random.seed(self.seed)
        nn_init.manual_seed(self.seed)
        self.generator = Generator(self.seed)
        self.rng = self.generator.numpy
        self._check_finite = check_finite
        given = wrap_channels_last(env)  # SB3's VecTransposeImage for channels-last images
        self._attach_env(make_vec_env(given, n_envs=n_envs,
                                      env_kwargs=env_kwargs, vectorization_mode=vectorization_mode,
                                      record_statistics=False), given)
        self.observation_space: spaces.Space = self.vector_env.single_observation_space
        self.action_space: spaces.Space = self.vector_env.single_action_space
        if seed is not None:
            self._seed_shared_generators(self.seed)
        try:
            check_relations(type(self).__name__, {**self._hyperparams, "n_envs": self.n_envs},
                            self.relations_not_applying)
        except ValueError as e:
            if not _LOADING.get():
                raise
            # loaded onto an env with fewer copies (to predict, as SB3 scripts do): say it once
            warnings.warn(f"{e}; fine for predict, change it before training further",
                          stacklevel=3)
        if not isinstance(self.action_space, self.action_spaces):
            raise SpaceError(action_space_error(type(self).__name__, self.action_spaces,
                                                self.action_space))
        self._apply_policy_name()
        self.obs_dim = flat_obs_dim(self.observation_space)
        self._build_normalizer(normalize)
        self.logger = Logger()
        self.num_timesteps = 0
        self._total_timesteps = 0
        self._n_updates = 0
        self._episode_num = 0
        self._last_obs: Any = None  # raw observations (an array, or a dict of them) of the vector env
        self._env_seeded = False
        self._current_progress_remaining = 1.0
        self._start_time = 0.0
        self._num_timesteps_at_start = 0
        self._stop = False


    def _build_normalizer(self, normalize: bool | dict[str, Any]) -> None:
        """``normalize=True`` (or its options): rlgrad's observation normalizer; refused with a
        CNN policy or beside a VecNormalize env, which normalises already."""
        self.normalizer: Normalizer | None = None
        if normalize and self.policy_name == "CnnPolicy":
            raise ValueError(f"{type(self).__name__}: normalize is for vector observations; image "
                             "observations are scaled inside the CNN: set normalize=False")
        if normalize:
            opts = dict(normalize) if isinstance(normalize, dict) else {}
            opts.setdefault("gamma", self.gamma)
            self.normalizer = Normalizer(self.obs_dim, self.n_envs, **opts)
        if normalize and self._env_normalizes():
            raise ValueError(f"{type(self).__name__}: normalize=True and a VecNormalize env both "
                             "normalise; use one of them")
        self._adopt_env_normalizer()
        norm = self.normalizer
        if (norm is not None and norm.norm_obs and is_image_space(self.observation_space)
                and self.policy_kwargs.get("normalize_images") is not False):
            # SB3's NatureCNN asserts it: dividing normalised floats by 255 again is silently wrong
            raise SpaceError(f"{type(self).__name__}: a VecNormalize env hands the CNN normalised "
                             "floats, not 0-255 images: pass policy_kwargs=dict("
                             "normalize_images=False), or VecNormalize(norm_obs=False)")
    def _init_env_runners(self, env: EnvLike, env_runners: int) -> None:
        """``env_runners > 0``: rollouts on Ray actors (started on first use), checked here."""
        if env_runners and not self.env_runner_sampling:
            raise ValueError(f"{type(self).__name__}: env_runners={env_runners}: rollouts on Ray "
                             "env runners are implemented for REINFORCE, A2C and PPO only so far")
        if env_runners and not isinstance(env, str):
            raise ValueError(f"{type(self).__name__}: env_runners={env_runners} needs the "
                             "environment as an id (each runner builds its own copies)")
        self.env_runners = int(env_runners)
        self._sampler: Any = None  # the Ray env runners' driver (rlgrad.rl.distributed)
        self._runner_states: dict[str, Any] | None = None  # theirs, from a checkpoint
        self._env_arg = env  # what env runners build their own copies from

    @property
    def env(self) -> VecEnv:
        """SB3's ``model.env``: the training environment as SB3's VecEnv (``get_env()``); the
        Gymnasium vector env the algorithm steps is ``vector_env``."""
        return self.get_env()

    def _attach_env(self, venv: Any, given: Any) -> None:
        """Train on the vector env ``venv`` (built from ``given``, what the user passed)."""
        #: the Gymnasium vector env the algorithm steps (its fast paths read it directly)
        self.vector_env = venv
        self.n_envs = venv.num_envs
        self._user_env = given if not isinstance(given, str) else None
        self._env_view: Any = None  # get_env()'s SB3 interface, made on first use
        # episode statistics: a RecordEpisodeStatistics wrapper the env comes with, else kept by
        # the step adapter (the same numbers, less work per step)
        wrapper = find_episode_statistics(venv)
        own = EpisodeStatistics(self.n_envs, self._stats_window_size) if wrapper is None else None
        self._adapter = StepAdapter(venv, check_finite=self._check_finite, statistics=own)
        self._ep_stats: Any = wrapper if own is None else own
        # SB3's ep_info_buffer and ep_success_buffer: kept across set_env, as SB3 keeps them
        infos = getattr(self, "ep_info_buffer", None)
        self.ep_info_buffer: deque[dict[str, float]] = (
            infos if infos is not None else deque(maxlen=self._stats_window_size))
        old = getattr(self, "_adapter_successes", None)
        self._adapter_successes = old if old is not None else deque(maxlen=self._stats_window_size)
        self._connect_episode_buffers()
        # what checkpoints keep of them: ours, or a wrapper that saves itself (pixel envs' own)
        self._saved_stats: Any = own if own is not None or not hasattr(wrapper, "state_dict") else wrapper

    def _env_name(self) -> str:
        """The environment's id for messages, or its class for an unregistered instance."""
        return self.env_id or env_name(self._user_env if self._user_env is not None else self.vector_env)

    def _apply_policy_name(self) -> None:
        """SB3's policy name: refused in one line if the spaces or the algorithm do not fit it,
        else its policy_kwargs defaults under the user's."""
        name = self._policy_name
        #: a custom policy class (SB3's ``PPO(CustomPolicy, env)``), else None: the algorithm's own
        self.policy_class: type | None = name if isinstance(name, type) else None
        if isinstance(name, type):  # (self.policy_class)
            name = None  # (its CNN or MLP form from the observation space, as for a name)
        if isinstance(self.observation_space, spaces.Dict):
            # Dict observations: their entries flattened side by side (rlgrad.rl.envs.preprocess_obs)
            if name not in (None, "MultiInputPolicy"):
                raise ValueError(f"{type(self).__name__}: You must use `MultiInputPolicy` when "
                                 f"working with dict observation space, not {name}")
            if dict_has_images(self.observation_space) and not self.dict_images:
                raise ValueError(f"{type(self).__name__}: image entries need a CNN extractor "
                                 "(CombinedExtractor), which A2C, PPO, the DQN family and SAC, TD3, "
                                 "DDPG, TQC have "
                                 f"and this algorithm not yet; the Dict observation space is "
                                 f"{self.observation_space}: keep vector entries only")
            self.policy_name = "MultiInputPolicy"
            self.policy_kwargs = {**self.policy_aliases.get("MlpPolicy", {}), **self.policy_kwargs}
            return
        if name == "MultiInputPolicy":
            raise ValueError(multi_input_error(type(self).__name__, self.observation_space))
        self.policy_name = resolve_policy(type(self), name, self.observation_space, self.env_id)
        self.policy_kwargs = {**self.policy_aliases.get(self.policy_name, {}), **self.policy_kwargs}

    def net_kwargs(self, **defaults: Any) -> dict[str, Any]:
        """``policy_kwargs`` over the algorithm's network defaults (the one way every algorithm
        reads them); a key the networks do not take is refused in one line."""
        unknown = sorted(set(self.policy_kwargs) - set(defaults) - set(OPTIMIZER_KEYS))
        if unknown:
            raise ValueError(f"{type(self).__name__}: policy_kwargs has no key "
                             f"{', '.join(map(repr, unknown))}; it takes "
                             f"{', '.join([*defaults, *OPTIMIZER_KEYS])}")
        return {**defaults, **{k: v for k, v in self.policy_kwargs.items()
                               if k not in OPTIMIZER_KEYS}}

    def make_optimizer(self, params: Any, default: Any = None, **defaults: Any) -> Any:
        """The optimizer of ``params`` at the initial learning rate: the algorithm's own
        (``default``, Adam, with ``defaults``) unless ``policy_kwargs`` has SB3's
        ``optimizer_class`` / ``optimizer_kwargs``."""
        pk = self.policy_kwargs
        return make_optimizer(params, self.lr_schedule(1.0), pk.get("optimizer_class"),
                              pk.get("optimizer_kwargs"), default, **defaults)

    # ---- hooks for subclasses -------------------------------------------------------------
    def _iteration(self, callback: BaseCallback | None) -> bool:
        """One collection + update; False stops training."""
        raise NotImplementedError

    def _predict(self, obs: np.ndarray, deterministic: bool) -> np.ndarray:
        """Environment actions for a batch of preprocessed (normalised) observations."""
        raise NotImplementedError

    def _modules(self) -> dict[str, Any]:
        """Named networks (their state_dicts go into checkpoints)."""
        raise NotImplementedError

    def _optimizers(self) -> dict[str, Any]:
        raise NotImplementedError

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _set_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def _upgrade_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """A checkpoint's state as this version names it (older layouts stay loadable)."""
        return state

    # ---- observations -----------------------------------------------------------------------
    def _obs(self, raw: np.ndarray, update: bool) -> np.ndarray:
        x = preprocess_obs(raw, self.observation_space)
        if self.normalizer is None:
            return x
        return self.normalizer.process_obs(x) if update else self.normalizer.normalize_obs(x)

    # ---- training loop ------------------------------------------------------------------------
    def _setup_learn(self, total_timesteps: int, callback: Any = None,
                     reset_num_timesteps: bool = True, tb_log_name: str = "run",
                     progress_bar: bool = False) -> tuple[int, BaseCallback | None]:
        """SB3's: reset the env and counters for a run of ``total_timesteps``; returns the run's
        total and the callback, initialised. ``learn`` sets up the logger (``tb_log_name``) and
        the progress bar itself; they are in the signature for code written against SB3's."""
        self._start_learn(total_timesteps, reset_num_timesteps)
        cb = make_callback(callback)
        if cb is not None:
            cb.init_callback(self)
        return self._total_timesteps, cb

    def _start_learn(self, total_timesteps: int, reset_num_timesteps: bool) -> None:
        self._start_time = time.perf_counter()
        if reset_num_timesteps or self._last_obs is None:
            if reset_num_timesteps:
                self.num_timesteps = 0
                self._episode_num = 0
                # SB3's: new episode buffers for a new run
                self.ep_info_buffer = deque(maxlen=self._stats_window_size)
                self._adapter_successes = deque(maxlen=self._stats_window_size)
                self._connect_episode_buffers()
            # the first reset is seeded (sub-environment i gets seed + i); later ones continue
            seed = None if self._env_seeded else self.seed
            if seed is not None:
                self.vector_env.action_space.seed(seed)
                self.action_space.seed(seed)
            self._last_obs = self._adapter.reset(seed=seed)
            self._env_seeded = True
            self._on_reset()
        self._total_timesteps = int(total_timesteps) + (0 if reset_num_timesteps else self.num_timesteps)
        self._num_timesteps_at_start = self.num_timesteps

    def _on_reset(self) -> None:
        if self.normalizer is not None:
            self.normalizer.update_obs(preprocess_obs(self._last_obs, self.observation_space))

    def _update_progress(self) -> None:
        # clamped: the last rollout may overshoot the budget (a linear schedule must not go < 0)
        self._current_progress_remaining = max(
            0.0, 1.0 - self.num_timesteps / max(self._total_timesteps, 1))

    def learn(self, total_timesteps: int, callback: Any = None, log_interval: int | None = None,
              tb_log_name: str | None = None, reset_num_timesteps: bool = True,
              progress_bar: bool = False) -> Self:
        """Train for ``total_timesteps`` environment steps (summed over the vector env copies).

        SB3's signature: ``log_interval`` iterations (on-policy) or episodes (off-policy) between
        two rows of the log; with ``tensorboard_log`` set, the rows also go to TensorBoard event
        files in ``<tensorboard_log>/<tb_log_name>_<n>`` (a new ``n`` per run, the same one when
        continuing with ``reset_num_timesteps=False``); ``verbose=1`` prints them as SB3's table.
        """
        total_timesteps = check_total_timesteps(type(self).__name__, total_timesteps)
        if log_interval is not None:
            self.log_interval = log_interval
        cb = self._setup_learn(total_timesteps, callback,
                               reset_num_timesteps=reset_num_timesteps)[1]
        writers = self._learn_writers(tb_log_name or type(self).__name__, reset_num_timesteps)
        if cb is not None:
            cb.on_training_start(locals(), globals())
        bar = ProgressBar(self._total_timesteps, self) if progress_bar else None
        try:
            while self.num_timesteps < self._total_timesteps:
                try:
                    if not self._iteration(cb):
                        break
                except NonFiniteError as e:
                    raise NonFiniteError(f"{type(self).__name__} on {self._env_name()}, after "
                                         f"{self.num_timesteps} timesteps: {e}") from None
                if bar is not None:
                    bar.update()
                if cb is not None and cb.on_iteration_end() is False:
                    break
        finally:
            if bar is not None:
                bar.close()
            del writers  # kept until the next learn, as SB3 keeps its logger's formats
        if cb is not None:
            cb.on_training_end()
        return self

    def set_logger(self, logger: Logger) -> None:
        """Log to ``logger`` from now on (SB3's; e.g. ``rlgrad.rl.common.logger.configure``):
        ``learn`` then leaves its output formats as they are."""
        self.logger = logger
        self._custom_logger = True

    def _learn_writers(self, tb_log_name: str, reset_num_timesteps: bool) -> list[Any]:
        """SB3's logger set-up at each ``learn`` (``rlgrad.rl.logger.set_learn_formats``),
        unless ``set_logger`` gave a logger."""
        if getattr(self, "_custom_logger", False):
            return []
        return set_learn_formats(self.logger, self.verbose, self.tensorboard_log, tb_log_name,
                                 reset_num_timesteps)

    @property
    def ep_success_buffer(self) -> deque[bool]:
        """SB3's: ``info["is_success"]`` of the last ``stats_window_size`` finished episodes
        that reported one."""
        return self._adapter_successes

    def _connect_episode_buffers(self) -> None:
        """The step adapter appends to ``ep_info_buffer`` (SB3's ``{"r": return, "l": length,
        "t": seconds}`` of the last ``stats_window_size`` finished episodes, one deque the
        rollouts fill) and ``ep_success_buffer``, the episodes counted from now on."""
        ad = self._adapter
        ad.episodes, ad.successes = self.ep_info_buffer, self._adapter_successes
        ad.episode_source = self._ep_stats
        ad.episodes_seen = int(self._ep_stats.episode_count)

    def _record_rollout_stats(self) -> None:
        infos = self.ep_info_buffer  # SB3's means: over ep_info_buffer (a user's entries too)
        if len(infos) > 0 and len(infos[0]) > 0:
            self.logger.record("rollout/ep_rew_mean", float(np.mean([e["r"] for e in infos])))
            self.logger.record("rollout/ep_len_mean", float(np.mean([e["l"] for e in infos])))
        st = self._ep_stats
        if len(self._adapter_successes):
            self.logger.record("rollout/success_rate", float(np.mean(self._adapter_successes)))
        elapsed = max(time.perf_counter() - self._start_time, 1e-9)
        self.logger.record("time/fps", int((self.num_timesteps - self._num_timesteps_at_start) / elapsed))
        self.logger.record("time/time_elapsed", elapsed)
        self.logger.record("time/episodes", int(st.episode_count))
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")

    def _env_runner_sampler(self, make: Callable[[Any], Any]) -> Any:
        """The env runners' driver, ``make(self)`` on first use; a checkpoint's runner states
        are handed to it, so that its runners continue the checkpoint's episodes."""
        if self._sampler is None:
            self._sampler = make(self)
            if self._runner_states:
                self._sampler.set_state(self._runner_states)
                self._runner_states = None
        return self._sampler

    def _env_runner_state(self) -> dict[str, Any]:
        """The checkpoint's part of the env runners: their environments, streams, pending data."""
        if self._sampler is not None:
            return {"env_runners": self._sampler.get_state()}
        return {"env_runners": self._runner_states} if self._runner_states else {}

    def _set_env_runner_state(self, state: dict[str, Any]) -> None:
        self._runner_states = state.get("env_runners")
        if self._runner_states and self._sampler is not None:
            self._sampler.set_state(self._runner_states)
            self._runner_states = None

    def close_env_runners(self) -> None:
        """Stop the Ray env runners of ``env_runners > 0``, and Ray if it was started for them
        (a later ``learn`` starts new ones)."""
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.close()

    # ---- acting ---------------------------------------------------------------------------------
    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = False) -> tuple[np.ndarray, None]:
        """Actions for one observation or a batch (SB3's signature and default: sampled unless
        ``deterministic``; returns ``(actions, None)``). Observations are the environment's: the
        algorithm's own normaliser (``normalize=``) is applied here, a ``VecNormalize`` env
        passed as ``env`` normalises them itself, as in SB3."""
        if (isinstance(observation, tuple) and len(observation) == 2
                and isinstance(observation[1], dict)
                and not isinstance(self.observation_space, spaces.Tuple)):  # (obs, info)
            raise ValueError(f"{type(self).__name__}.predict: got a tuple (obs, info), not an "
                             "observation: you are probably mixing Gym API with SB3 VecEnv API; "
                             "pass obs, e.g. obs, info = env.reset(); model.predict(obs)")
        norm = None if self._env_normalizes() else self.normalizer
        return predict_with(self.observation_space, observation, lambda x: self._predict(
            x if norm is None else norm.normalize_obs(x), deterministic))

    def _adopt_env_normalizer(self) -> None:
        """A VecNormalize env's statistics are the ones training updates (shared, as in SB3)."""
        if self._env_normalizes():
            self.normalizer = self._env_normalizer()

    def _callback_step(self, callback: BaseCallback, want_locals: bool, raw: Any, rew: Any,
                       done: Any, actions: Any) -> bool:
        """One environment step's callback: SB3's locals (when the callback reads them), then
        ``on_step``; False (training stops, the observation kept for the next ``learn``) when it
        says so."""
        if want_locals:
            callback.update_locals({"new_obs": raw, "rewards": rew, "dones": done,
                                    "infos": self._infos(done), "actions": actions})
        if callback.on_step():
            return True
        self._last_obs = raw
        return False

    def _infos(self, done: np.ndarray) -> LazyInfos:
        """The last vector step's infos as SB3's per-copy list (a callback's locals["infos"])."""
        return LazyInfos(self._adapter.last_info, self.n_envs, done, self._ep_stats,
                         time.perf_counter() - self._start_time)

    def _env_normalizes(self) -> bool:
        """Whether the env the user passed normalises observations itself (SB3's VecNormalize)."""
        return self._env_normalizer() is not None

    def _env_normalizer(self) -> Normalizer | None:
        """The statistics of a VecNormalize env whose inner env the algorithm steps (it then
        normalises as the VecNormalize would, with the same statistics)."""
        get = getattr(self._user_env, "algorithm_normalizer", None)
        return None if get is None else get()

    # ---- SB3's environment and seeding methods ---------------------------------------------------
    def get_env(self) -> Any:
        """The training environment with SB3's VecEnv interface (``reset() -> obs``,
        ``step(a) -> (obs, rewards, dones, infos)``): the one passed in, or a view of the vector
        env built from an id."""
        if isinstance(self._user_env, VecEnv):
            return self._user_env
        if self._env_view is None:
            self._env_view = vec_env_view(self.vector_env, self.env_id)
        return self._env_view

    def get_vec_normalize_env(self) -> Any:
        """The VecNormalize wrapper of the training env, if it has one (SB3's)."""
        return unwrap_vec_normalize(self._user_env)

    def set_env(self, env: EnvLike, force_reset: bool = True) -> None:
        """Train on ``env`` from now on: the same spaces and number of copies (the buffers are
        sized by it); ``force_reset`` starts new episodes at the next ``learn``."""
        env = wrap_channels_last(env)
        venv = make_vec_env(env, n_envs=self.n_envs, record_statistics=False)
        if venv.num_envs != self.n_envs:  # (SB3 asserts: catchable as AssertionError too)
            raise SpaceError(
                f"{type(self).__name__}.set_env: the env has {venv.num_envs} copies, the model "
                f"was built for {self.n_envs}; use {type(self).__name__}.load(path, env) to "
                "load a model with a different number of environments")
        check_same_spaces(type(self).__name__, venv, self.observation_space, self.action_space)
        self._attach_env(venv, env)
        self._adopt_env_normalizer()
        if force_reset:
            self._last_obs = None

    def set_random_seed(self, seed: int | None = None) -> None:
        """Reseed the algorithm's generators (actions, minibatches, exploration) and the env's
        next reset; ``None`` draws a fresh seed."""
        self.seed = fresh_seed() if seed is None else int(seed)
        rlgrad.random.seed(self.seed)
        nn_init.manual_seed(self.seed)
        self.generator.manual_seed(self.seed)
        self.rng = self.generator.numpy
        self._env_seeded = False
        self._last_obs = None
        if seed is not None:
            self._seed_shared_generators(self.seed)

    def _seed_shared_generators(self, seed: int) -> None:
        """SB3's ``set_random_seed`` beyond the algorithm's own generators (a given seed only):
        Python's and NumPy's global ones and the action space, which is the env's own object
        when an env instance was given, so an env that draws from them (SB3's Identity and
        sb3-contrib's InvalidAction envs) steps the same for the same seed."""
        random.seed(seed)
        np.random.seed(seed)
        self.action_space.seed(seed)

    # ---- state ---------------------------------------------------------------------------------
    def get_state(self, include_replay_buffer: bool = True) -> dict[str, Any]:
        """Everything needed to continue training exactly: nested dicts of arrays/numbers/strings."""
        state: dict[str, Any] = {
            "modules": {k: {n: np.array(v) for n, v in m.state_dict().items()}  # a snapshot
                        for k, m in self._modules().items()},
            "optimizers": {k: o.state_dict() for k, o in self._optimizers().items()},
            "counters": {"num_timesteps": self.num_timesteps, "n_updates": self._n_updates,
                         "episode_num": self._episode_num, "total_timesteps": self._total_timesteps},
            "rng": {"algo": generator_state_dict(self.rng),
                    "global": generator_state_dict(rlgrad.random.default_generator.numpy)},
        }
        if self.normalizer is not None and not self._env_normalizes():  # a VecNormalize saves its own
            state["normalizer"] = self.normalizer.state_dict()
        if self._last_obs is not None:
            last = self._last_obs  # (a Dict space's observations: a dict of arrays)
            state["env"] = {"last_obs": ({k: np.array(v) for k, v in last.items()}
                                         if isinstance(last, dict) else np.array(last)),
                            "prev_done": self._adapter.prev_done.copy(),
                            "vector_env": get_env_state(self.vector_env)}
            if self._saved_stats is not None:
                state["env"]["episode_statistics"] = self._saved_stats.state_dict()
        state["episode_infos"] = {k: np.asarray([e.get(k, np.nan) for e in self.ep_info_buffer],
                                                dtype=np.float64) for k in ("r", "l", "t")}
        state.update(self._extra_state())
        if not include_replay_buffer:
            state.pop("replay_buffer", None)
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        state = self._upgrade_state(state)
        for k, m in self._modules().items():
            _load_module_state(m, state["modules"][k])
        for k, o in self._optimizers().items():
            o.load_state_dict(state["optimizers"][k])
        c = state["counters"]
        self.num_timesteps = int(c["num_timesteps"])
        self._n_updates = int(c["n_updates"])
        self._episode_num = int(c["episode_num"])
        self._total_timesteps = int(c["total_timesteps"])
        load_generator_state(self.rng, state["rng"]["algo"])
        load_generator_state(rlgrad.random.default_generator.numpy, state["rng"]["global"])
        if self.normalizer is not None and "normalizer" in state and not self._env_normalizes():
            self.normalizer.load_state_dict(state["normalizer"])
        env = state.get("env", {})
        if "episode_statistics" in env and self._saved_stats is not None:
            self._saved_stats.load_state_dict(env["episode_statistics"])
        if "last_obs" in env:
            last = env["last_obs"]
            self._last_obs = ({k: np.asarray(v) for k, v in last.items()}
                              if isinstance(last, dict) else np.asarray(last))
            self._adapter.prev_done = np.asarray(env["prev_done"], dtype=bool).copy()
            if "vector_env" in env:
                set_env_state(self.vector_env, env["vector_env"], self._adapter.statistics)
            self._env_seeded = True
        self._restore_episode_infos(state.get("episode_infos"))
        self._set_extra_state(state)

    def _restore_episode_infos(self, saved: dict[str, Any] | None) -> None:
        """``ep_info_buffer`` (the same deque) as a checkpoint had it; one written before it was
        saved: the statistics' last episodes, their times unknown (NaN)."""
        buf, st = self.ep_info_buffer, self._ep_stats
        buf.clear()
        if saved is not None:
            r, n, t = (np.asarray(saved[k], dtype=np.float64).reshape(-1) for k in ("r", "l", "t"))
        else:
            k = buf.maxlen or 0
            r = np.asarray(list(st.return_queue)[-k:] if k else [], dtype=np.float64)
            n = np.asarray(list(st.length_queue)[-k:] if k else [], dtype=np.float64)
            t = np.full(len(r), np.nan)
        buf.extend({"r": float(a), "l": int(b), "t": float(c)} for a, b, c in zip(r, n, t, strict=True))
        self._adapter.episodes_seen = int(st.episode_count)

    # ---- SB3's parameter access -----------------------------------------------------------------
    def _parameter_objects(self) -> dict[str, Any]:
        """SB3's names of what ``get_parameters`` returns: "policy" (its state dict has SB3's
        keys) and the optimizers ("policy.optimizer"; SAC/TD3: "actor.optimizer", ...)."""
        sb3_name = {"optimizer": "policy.optimizer", "ent_coef": "ent_coef_optimizer"}
        objects: dict[str, Any] = {"policy": getattr(self, "policy")}  # noqa: B009 - each algorithm's
        for k, opt in self._optimizers().items():
            objects[sb3_name.get(k, f"{k}.optimizer")] = opt
        return objects

    def get_parameters(self) -> dict[str, dict[str, Any]]:
        """SB3's: the state dicts of the policy and the optimizers, by SB3's object names. The
        policy's Tensors share the parameters' memory (``copy.deepcopy`` to keep a snapshot)."""
        return {name: obj.state_dict() for name, obj in self._parameter_objects().items()}

    def set_parameters(self, load_path_or_dict: str | os.PathLike | dict[str, Any],
                       exact_match: bool = True, device: DeviceLike = "auto") -> None:
        """SB3's: load parameters from ``get_parameters``' dict (some objects may be left out
        unless ``exact_match``), or the networks and optimizers of a checkpoint ``save`` wrote
        (counters, buffers and hyperparameters stay this model's)."""
        if not isinstance(load_path_or_dict, dict):
            self._set_parameters_from_file(load_path_or_dict, exact_match)
            return
        objects = self._parameter_objects()
        for name in load_path_or_dict:
            if name not in objects:
                raise ValueError(f"set_parameters: key {name!r} is an invalid object name; this "
                                 f"model has {sorted(objects)}")
        if exact_match and set(load_path_or_dict) != set(objects):
            raise ValueError(f"set_parameters: names of parameters do not match the model's: "
                             f"expected {sorted(objects)}, got {sorted(load_path_or_dict)}")
        for name, params in load_path_or_dict.items():
            obj = objects[name]
            if name == "policy":
                obj.load_state_dict(params, strict=exact_match)
            else:
                obj.load_state_dict(params)

    def _set_parameters_from_file(self, path: PathOrFile, exact_match: bool) -> None:
        path = resolve_saved(path)
        ckpt = read_archive(path, None).own if is_archive_file(path) else rlgrad.load(path)
        if ckpt is None:  # an archive SB3 wrote: its .pth files, by SB3's object names
            self.set_parameters(read_archive(path, None).params, exact_match=exact_match)
            return
        if ckpt.get("algo") != type(self).__name__:
            raise ValueError(f"set_parameters: {path} holds a {ckpt.get('algo')} checkpoint, not "
                             f"{type(self).__name__}")
        state = self._upgrade_state(ckpt["state"])
        for k, m in self._modules().items():  # (filled: a file of the older layout, see above)
            m.load_state_dict(fill_shared_names(m, state["modules"][k]), strict=exact_match)
        for k, o in self._optimizers().items():
            o.load_state_dict(state["optimizers"][k])

    def get_hyperparams(self) -> dict[str, Any]:
        """The constructor arguments (JSON-like) that rebuild this algorithm."""
        return dict(self._hyperparams)

    def save(self, path: PathOrFile, exclude: list[str] | None = None,
             include: list[str] | None = None, include_replay_buffer: bool = False,
             function_hyperparams: str = "refuse") -> None:
        """Write the model to ``path``: SB3's archive (``.zip`` appended when the name has no
        extension, as SB3 does; an open binary file too), which SB3 loads as well, with
        rlgrad's complete training state inside it (``rlgrad.safetensors``: counters, RNG
        streams, the episode in progress, the replay buffer with ``include_replay_buffer``) so
        that rlgrad continues exactly; a ``.safetensors`` name gets that state alone.

        ``exclude`` leaves hyperparameters out (``include`` keeps some of them), as SB3's
        argument does. SB3's standard schedules (``ConstantSchedule``, ``LinearSchedule``,
        rlgrad's ``linear_schedule``) are saved as data and loaded back as schedules; any other
        function is code, which a checkpoint does not hold: it is refused unless
        ``function_hyperparams="start"`` saves its value at the start of training (then
        ``load(..., name=fn)`` or ``custom_objects`` gives it back). A hyperparameter changed
        on the model since (``model.verbose = 2``) is saved with its new value, as SB3 saves
        the model's attributes."""
        hp = _savable_hyperparams(type(self).__name__,
                                  _with_attributes(self, self.get_hyperparams()),
                                  function_hyperparams)
        for key in set(exclude or ()) - set(include or ()):
            hp.pop(key, None)
        ckpt = {
            "algo": type(self).__name__, "env_id": self.env_id or "", "seed": self.seed,
            "hyperparams": hp, "state": self.get_state(include_replay_buffer),
            "spaces": {"observation": str(self.observation_space), "action": str(self.action_space)},
        }
        target = archive_target(path)
        if target is None:
            rlgrad.save(ckpt, path)
        else:
            save_archive(self, target, hp, ckpt)

    @classmethod
    def load(cls, path: PathOrFile, env: EnvLike | None = None, device: DeviceLike = "auto",
             custom_objects: dict[str, Any] | None = None, print_system_info: bool = False,
             force_reset: bool = True, **overrides: Any) -> BaseAlgorithm:
        """The algorithm saved at ``path`` (a classmethod, as SB3's): SB3's archive (SB3's or
        rlgrad's) or rlgrad's ``.safetensors``; on ``env`` if given (its spaces must be the
        saved ones), else on a new env of the saved id (an archive SB3 wrote has none: the
        model predicts, and ``set_env`` gives it one to train). ``overrides`` replace saved
        hyperparameters; SB3's ``custom_objects`` those of them the file has. With
        ``force_reset=False`` and ``env``, the saved last observation is kept (SB3's)."""
        path = resolve_saved(path)
        if not is_archive_file(path):
            return cls._from_checkpoint(rlgrad.load(path), str(path), env, custom_objects,
                                        overrides, device, force_reset)
        archive = read_archive(path, custom_objects, print_system_info)
        if archive.own is not None:  # rlgrad's complete state, inside the archive
            own = archive.own
            if env is None and not own.get("env_id") and archive.saved:
                env = SpacesOnlyEnv(archive.saved["observation_space"],
                                    archive.saved["action_space"])  # (trained on an instance)
            saved = archive.saved or {}
            return cls._from_checkpoint(own, str(path), env, {
                k: v for k, v in (custom_objects or {}).items() if k in saved},
                overrides, device, force_reset)
        return cls._from_sb3_archive(archive, path, env, overrides, device)

    @classmethod
    def _from_sb3_archive(cls, archive: Any, path: Any, env: Any, overrides: dict[str, Any],
                          device: Any) -> BaseAlgorithm:
        """The model of an archive SB3 wrote (``rlgrad.rl.common.save_util_model``)."""
        if env is not None:
            check_same_spaces(f"{cls.__name__}.load({path!r})",
                              make_vec_env(wrap_channels_last(env), record_statistics=False),
                              archive.saved["observation_space"], archive.saved["action_space"])
        policy, env, hp, seed = archive_model_args(cls, archive, path, env)
        hp.update(overrides)
        if _load_device(device) is not None:
            hp["device"] = device
        token = _LOADING.set(True)
        try:
            model = cls(policy, env, **{**hp, "seed": seed})
        finally:
            _LOADING.reset(token)
        apply_archive(model, archive.saved, archive.params, archive.variables)
        return model

    @classmethod
    def _from_checkpoint(cls, ckpt: dict[str, Any], path: str, env: Any,
                         custom_objects: dict[str, Any] | None, overrides: dict[str, Any],
                         device: Any, force_reset: bool = True) -> BaseAlgorithm:
        """The model of rlgrad's checkpoint ``ckpt`` (read from ``path``)."""
        if ckpt["algo"] != cls.__name__:
            raise ValueError(f"{path} holds a {ckpt['algo']} checkpoint, not {cls.__name__}")
        given = env
        env = env if env is not None else ckpt["env_id"]
        if not env:
            raise ValueError("this checkpoint was trained on an environment instance; pass env=")
        if given is None:
            _refuse_file_module(f"{cls.__name__}.load({path!r})", str(env))
        if given is not None and "spaces" in ckpt:  # before building networks that would not fit
            check_same_spaces(f"{cls.__name__}.load({path!r})",
                              make_vec_env(wrap_channels_last(given), record_statistics=False),
                              ckpt["spaces"]["observation"], ckpt["spaces"]["action"])
        hp: dict[str, Any] = {k: schedule_from_data(v) for k, v in ckpt["hyperparams"].items()}
        if given is not None and not isinstance(given, str):
            hp.pop("n_envs", None)  # the env passed in has its own number of copies
        takes = hyperparameters(cls)  # custom_objects: only what a file can hold (SB3's)
        hp.update({k: v for k, v in (custom_objects or {}).items() if k in takes})
        hp.update(overrides)
        if _load_device(device) is not None:
            hp["device"] = device
        token = _LOADING.set(True)
        try:
            model = cls(env, seed=int(ckpt["seed"]), **hp)
        finally:
            _LOADING.reset(token)
        model.set_state(_loaded_state(ckpt["state"], given, force_reset))
        return model

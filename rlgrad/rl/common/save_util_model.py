"""A model as SB3's archive and back (``model.save("x.zip")``, ``Algo.load`` of an SB3 file).

Writing: ``data`` holds what SB3's ``load`` rebuilds a model from (its policy class by name,
the spaces, the hyperparameters, the counters) and rlgrad's own hyperparameters under
``"rlgrad"``; ``policy.pth`` and the optimizers' files are ``get_parameters()`` (SB3's keys).
Reading: the policy class becomes its SB3 name (``MlpPolicy``...), the hyperparameters rlgrad's
constructor takes are passed to it, then the parameters and counters are set. An archive
without an environment id gets an environment of its spaces that cannot step: ``predict``
works, ``learn`` asks for ``env=`` in one line.
"""

from __future__ import annotations

import io
import os
import warnings
from typing import TYPE_CHECKING, Any, NoReturn, cast

import gymnasium as gym
import numpy as np

from rlgrad.rl.common.save_util import PathOrFile, PickledGlobal
from rlgrad.rl.common.save_util_pth import Missing

if TYPE_CHECKING:  # (base imports this module)
    from rlgrad.rl.base import BaseAlgorithm
    from rlgrad.rl.envs import EnvLike

#: SB3's module of each algorithm's policies, and its class for each policy name
_POLICY_MODULES = {"PPO": "stable_baselines3.common.policies",
                   "A2C": "stable_baselines3.common.policies",
                   "DQN": "stable_baselines3.dqn.policies", "SAC": "stable_baselines3.sac.policies",
                   "TD3": "stable_baselines3.td3.policies", "DDPG": "stable_baselines3.td3.policies"}
_ACTOR_CRITIC = {"MlpPolicy": "ActorCriticPolicy", "CnnPolicy": "ActorCriticCnnPolicy",
                 "MultiInputPolicy": "MultiInputActorCriticPolicy"}
_OFF_POLICY_MLP = {"DQN": "DQNPolicy", "SAC": "SACPolicy", "TD3": "TD3Policy", "DDPG": "TD3Policy"}
#: what a torch class named in policy_kwargs is written as
_TORCH_MODULES = {"optimizer_class": "torch.optim", "activation_fn": "torch.nn.modules.activation"}
#: SB3's default buffers: nothing to rebuild (rlgrad's algorithms have their own)
_DEFAULT_BUFFERS = ("ReplayBuffer", "RolloutBuffer", "DictReplayBuffer", "DictRolloutBuffer")


def sb3_policy_class(algo: str, policy: str) -> str | PickledGlobal:
    """SB3's class for ``algo``'s ``policy`` (a name pickled by reference), else the name."""
    module = _POLICY_MODULES.get(algo)
    if module is None:
        return policy
    if module.endswith("common.policies"):
        return PickledGlobal(module, _ACTOR_CRITIC.get(policy, "ActorCriticPolicy"))
    return PickledGlobal(module, _OFF_POLICY_MLP[algo] if policy == "MlpPolicy" else policy)


def policy_name(saved: object) -> str:
    """SB3's policy name of an archive's ``policy_class`` (a class named in the file)."""
    name = saved.name if isinstance(saved, Missing) else getattr(saved, "__name__", str(saved))
    if "MultiInput" in name:
        return "MultiInputPolicy"
    return "CnnPolicy" if "Cnn" in name else "MlpPolicy"


def _torch_ref(key: str, value: Any) -> Any:
    """An activation or optimizer class as torch's class of the same name (what SB3 builds)."""
    if key not in _TORCH_MODULES:
        return value
    name = value if isinstance(value, str) else getattr(value, "__name__", None)
    if name is None:
        return value
    if key == "activation_fn":
        from rlgrad.rl.layers import _act_cls

        name = _act_cls(name).__name__
    return PickledGlobal(_TORCH_MODULES[key], name)


def sb3_policy_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: _torch_ref(k, v) for k, v in kwargs.items()}


def model_data(model: BaseAlgorithm, hyperparams: dict[str, Any]) -> dict[str, Any]:
    """The ``data`` entry of ``model``'s archive."""
    algo = type(model).__name__
    # None and rlgrad's buffer names would replace SB3's own defaults ({} and its classes)
    sb3_hp = {k: v for k, v in hyperparams.items()
              if k not in ("policy", "policy_kwargs", "seed", "n_envs") and v is not None
              and not k.endswith(("_buffer_class", "_buffer_kwargs"))}
    return {
        **sb3_hp,
        "policy_class": sb3_policy_class(algo, model.policy_name),
        "policy_kwargs": sb3_policy_kwargs({**({"n_critics": 1} if algo == "DDPG" else {}),
                                            **(hyperparams.get("policy_kwargs") or {})}),
        "observation_space": model.observation_space, "action_space": model.action_space,
        "n_envs": model.n_envs, "num_timesteps": model.num_timesteps,
        "_total_timesteps": model._total_timesteps, "_n_updates": model._n_updates,
        "_episode_num": model._episode_num, "seed": model.seed, "verbose": model.verbose,
        "_stats_window_size": model._stats_window_size,
        "_current_progress_remaining": model._current_progress_remaining,
        "rlgrad": {"algo": algo, "env_id": model.env_id or "", "hyperparams": hyperparams},
    }


def model_params(model: BaseAlgorithm) -> tuple[dict[str, Any], dict[str, Any]]:
    """(``get_parameters()`` with torch's optimizer conventions, the torch variables)."""
    params = model.get_parameters()
    for name, state in params.items():
        if name != "policy" and isinstance(state, dict) and "state" in state:
            state["state"] = {i: {k: (np.asarray(v, np.float32) if k == "step" else v)
                                  for k, v in s.items()} for i, s in state["state"].items()}
    variables = {}
    log_ent = getattr(model, "log_ent_coef", None)
    if log_ent is not None:
        variables["log_ent_coef"] = np.asarray(getattr(log_ent, "_value", log_ent))
    return params, variables


def constructor_args(cls: type, data: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the hyperparameters rlgrad's ``cls`` takes from an archive's ``data``, the policy)."""
    from rlgrad.rl.hyperparams import hyperparameters

    own = data.get("rlgrad")
    if isinstance(own, dict) and own.get("algo") == cls.__name__:
        hp = dict(own.get("hyperparams", {}))
        return hp, str(hp.pop("policy", "MlpPolicy"))
    takes = hyperparameters(cls)
    skip = ("env", "seed", "n_envs", "device", "tensorboard_log", "_init_setup_model")
    hp = {k: v for k, v in data.items() if k in takes and k not in skip}
    for key in ("replay_buffer_class", "rollout_buffer_class"):
        value = hp.get(key)
        if isinstance(value, Missing) and value.name in _DEFAULT_BUFFERS:
            hp.pop(key)
    freq = hp.get("train_freq")
    if isinstance(freq, tuple) and len(freq) == 2:  # SB3's TrainFreq(n, TrainFrequencyUnit)
        hp["train_freq"] = (int(freq[0]), str(getattr(freq[1], "value", freq[1])))
    if "_stats_window_size" in data:
        hp["stats_window_size"] = data["_stats_window_size"]
    pk = hp.get("policy_kwargs")
    if isinstance(pk, dict):
        # (SB3's off-policy algorithms copy their use_sde there themselves)
        hp["policy_kwargs"] = {k: v for k, v in pk.items() if k not in ("device", "use_sde")}
    for key, value in hp.items():
        from rlgrad.rl.common.save_util import _first_missing

        missing = _first_missing(value)
        if missing is not None:
            raise ValueError(f"{cls.__name__}.load: the archive's {key} needs "
                             f"{missing.qualname}, which rlgrad does not have; pass "
                             f"custom_objects={{{key!r}: ...}} to replace it")
    return {k: v for k, v in hp.items() if v is not None or k == "target_kl"}, policy_name(
        data.get("policy_class", "MlpPolicy"))


class SpacesOnlyEnv(gym.Env):
    """The environment of a model loaded without one: its spaces, for ``predict``; stepping
    it asks for the real environment."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        return self.observation_space.sample(), {}

    def step(self, action: object) -> NoReturn:
        raise ValueError("this model was loaded from an archive without its environment: pass "
                         "env= to load, or model.set_env(env), before learn")


def apply_archive(model: BaseAlgorithm, data: dict[str, Any], params: dict[str, Any],
                  variables: dict[str, Any] | None) -> None:
    """Set ``model``'s parameters, torch variables and counters from an archive."""
    objects = model._parameter_objects()
    known = {k: v for k, v in params.items() if k in objects}
    for name in sorted(set(params) - set(objects)):
        warnings.warn(f"{type(model).__name__}.load: the archive's {name}.pth has no "
                      "counterpart in rlgrad's model; left out", stacklevel=3)
    try:
        model.set_parameters(known, exact_match=False)
    except (ValueError, KeyError) as e:
        raise ValueError(f"{type(model).__name__}.load: the archive's parameters do not fit "
                         f"the model built from its data: {e}") from None
    for name, value in (variables or {}).items():
        target = getattr(model, name, None)
        if target is not None and value is not None and hasattr(target, "_value"):
            target._value[...] = np.asarray(value).reshape(target._value.shape)
    for attr in ("num_timesteps", "_total_timesteps", "_n_updates", "_episode_num"):
        if isinstance(data.get(attr), int):
            setattr(model, attr, data[attr])


_SCHEDULE_KEYS = ("learning_rate", "clip_range", "clip_range_vf")


def _sb3_value(key: str, value: Any) -> Any:
    """A hyperparameter as SB3 reads it: a schedule (rlgrad's data or ``"lin_X"``) as its
    starting value (SB3 would need the function's code; rlgrad keeps the schedule under
    ``"rlgrad"``)."""
    from rlgrad.rl.schedules import get_schedule_fn, schedule_from_data

    if key in _SCHEDULE_KEYS and (isinstance(value, dict) or isinstance(value, str)):
        return float(get_schedule_fn(cast(Any, schedule_from_data(value)))(1.0))
    return value


#: the entry of an archive with rlgrad's complete training state (SB3 reads only data, *.pth)
RLGRAD_ENTRY = "rlgrad.safetensors"


def archive_target(path: PathOrFile) -> str | io.BufferedIOBase | None:
    """Where ``save(path)`` writes SB3's archive: an open file, ``path``, or ``path + ".zip"``
    for a name without an extension; None for a ``.safetensors`` name (rlgrad's file alone)."""
    if hasattr(path, "write"):
        return cast(io.BufferedIOBase, path)
    name = os.fspath(path)
    ext = os.path.splitext(name)[1].lower()
    if ext == ".safetensors":
        return None
    return name if ext else name + ".zip"


def resolve_saved(path: PathOrFile) -> str | io.BufferedIOBase:
    """The file ``load(path)`` reads: ``path``, else ``path`` + ``.zip`` or ``.safetensors``
    (a name without an extension, as ``save`` completes it)."""
    if hasattr(path, "read"):
        return cast(io.BufferedIOBase, path)
    name = os.fspath(path)
    if not os.path.exists(name) and not os.path.splitext(name)[1]:
        for ext in (".zip", ".safetensors"):
            if os.path.exists(name + ext):
                return name + ext
    return name


def is_archive_file(path: PathOrFile) -> bool:
    """Whether ``path`` (a name or an open file) is SB3's archive (a zip), not rlgrad's file."""
    if hasattr(path, "read"):
        return True
    name = os.fspath(path)
    if name.lower().endswith(".zip") or not os.path.isfile(name):
        return name.lower().endswith(".zip")
    with open(name, "rb") as f:
        return f.read(4) == b"PK\x03\x04"


def state_bytes(ckpt: dict[str, Any]) -> bytes:
    """rlgrad's checkpoint ``ckpt`` as the bytes of its safetensors file."""
    import tempfile

    import rlgrad

    with tempfile.TemporaryDirectory() as tmp:
        name = os.path.join(tmp, RLGRAD_ENTRY)
        rlgrad.save(ckpt, name)
        with open(name, "rb") as f:
            return f.read()


def state_from_bytes(data: bytes) -> dict[str, Any]:
    import tempfile

    import rlgrad

    with tempfile.TemporaryDirectory() as tmp:
        name = os.path.join(tmp, RLGRAD_ENTRY)
        with open(name, "wb") as f:
            f.write(data)
        return rlgrad.load(name)


def save_archive(model: BaseAlgorithm, path: str | io.BufferedIOBase, hyperparams: dict[str, Any],
                 ckpt: dict[str, Any] | None = None) -> None:
    """``model`` as SB3's archive at ``path`` (``hyperparams``: its savable ones), with
    rlgrad's checkpoint ``ckpt`` inside when given."""
    from rlgrad.rl.common.save_util import save_to_zip_file

    data = model_data(model, hyperparams)
    for key in _SCHEDULE_KEYS:
        if key in data:
            data[key] = _sb3_value(key, data[key])
    target_entropy = getattr(model, "target_entropy", None)
    if isinstance(target_entropy, float):  # SB3 reads "auto" with an env
        data["target_entropy"] = target_entropy
    params, variables = model_params(model)
    extra = {RLGRAD_ENTRY: state_bytes(ckpt)} if ckpt is not None else {}
    save_to_zip_file(path, data=data, params=params, pytorch_variables=variables, extra=extra)


def _own_checkpoint(path: str | io.BufferedIOBase) -> dict[str, Any] | None:
    """rlgrad's checkpoint inside the archive at ``path``, if it has one."""
    import zipfile

    if hasattr(path, "seek"):
        path.seek(0)
    try:
        with zipfile.ZipFile(path) as z:
            if RLGRAD_ENTRY not in z.namelist():
                return None
            data = z.read(RLGRAD_ENTRY)
    except zipfile.BadZipFile:
        return None
    finally:
        if hasattr(path, "seek"):
            path.seek(0)
    return state_from_bytes(data)


class Archive:
    """What ``load`` builds a model from: rlgrad's checkpoint inside the archive (``own``), or
    (an archive SB3 wrote) the constructor's arguments and what to set after it."""

    def __init__(self, own: dict[str, Any] | None, data: dict[str, Any] | None,
                 params: dict[str, Any], variables: dict[str, Any] | None) -> None:
        self.own, self.saved, self.params, self.variables = own, data, params, variables


def read_archive(path: str | io.BufferedIOBase, custom_objects: dict[str, Any] | None,
                 print_system_info: bool = False) -> Archive:
    """The archive at ``path`` (``custom_objects`` replace values of its data)."""
    from rlgrad.rl.common.save_util import load_from_zip_file

    data, params, variables = load_from_zip_file(path, custom_objects=custom_objects,
                                                 print_system_info=print_system_info)
    return Archive(_own_checkpoint(path), data, params, variables)


def archive_model_args(cls: type, archive: Archive, path: PathOrFile, env: EnvLike | None
                       ) -> tuple[str, EnvLike, dict[str, Any], int | None]:
    """(policy, env, hyperparameters, seed) for ``cls`` from an archive SB3 wrote: on ``env``,
    or on an environment of the saved spaces (predict only)."""
    data = archive.saved
    if not data or "observation_space" not in data or "action_space" not in data:
        raise ValueError(f"{cls.__name__}.load({path!r}): the archive has no observation and "
                         "action spaces in its data; it is not a model SB3 or rlgrad saved")
    hp, policy = constructor_args(cls, data)
    hp.pop("n_envs", None)
    if env is None:
        env = SpacesOnlyEnv(data["observation_space"], data["action_space"])
    seed = data.get("seed")
    return policy, env, hp, None if seed is None else int(seed)


__all__ = ["Archive", "SpacesOnlyEnv", "apply_archive", "archive_model_args", "archive_target",
           "state_bytes", "state_from_bytes",
           "constructor_args", "is_archive_file", "model_data", "model_params", "policy_name",
           "read_archive", "resolve_saved", "save_archive", "sb3_policy_class"]

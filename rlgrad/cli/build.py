"""From what was typed to an algorithm: environment id, algorithm name, preset, ``--set`` values.

Everything here is checked before anything is built or written, so that a typo costs one clear
line (exit status 2) rather than a traceback or a half-made run directory.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlgrad.cli.env_ids import check_env_id  # noqa: F401 - also accepts module:EnvId
from rlgrad.cli.errors import CLIError, did_you_mean

# Keys of a preset that are not constructor arguments.
BUDGET_KEY = "n_timesteps"
DEFAULT_STEPS = 100_000


def algorithms() -> dict[str, type]:
    """{name: class} of the algorithms rlgrad.rl provides (its registry, ``rl.ALGORITHMS``)."""
    from rlgrad import rl

    return dict(rl.ALGORITHMS)


def algorithm_list(markdown: bool = False) -> str:
    """The registry as one phrase, for ``--algo``'s help and docs/cli.md (a test checks the docs
    hold it): the names in registry order, each run of names that take the same action spaces
    followed by those spaces, e.g. ``dqn, qrdqn (Discrete), ddpg, td3, sac (Box)``."""
    out: list[str] = []
    items = list(algorithms().items())
    for i, (name, cls) in enumerate(items):
        out.append(f"`{name}`" if markdown else name)
        if i + 1 == len(items) or items[i + 1][1].action_spaces != cls.action_spaces:
            kinds = " or ".join(s.__name__ for s in cls.action_spaces)
            out[-1] += f" ({kinds}{' actions' if len(cls.action_spaces) > 1 else ''})"
    return ", ".join(out)


def resolve_algo(name: str) -> tuple[str, type]:
    table = algorithms()
    key = name.lower()
    if key not in table:
        raise CLIError(f"unknown algorithm {name!r}{did_you_mean(key, table)} (available: "
                       f"{', '.join(sorted(table))})")
    return key, table[key]


def env_creation_error(env_id: str, e: Exception) -> CLIError:
    """One line for an environment that cannot be created. A missing module of one of
    Gymnasium's own families is fixed by that family's extra, never by the bare package
    (``pip install mujoco`` alone still lacks imageio): the hint names the extra."""
    import gymnasium as gym
    from gymnasium.error import DependencyNotInstalled

    hint = ""
    entry = getattr(gym.registry.get(env_id.rpartition(":")[2]), "entry_point", None)
    if isinstance(e, ImportError | DependencyNotInstalled) and isinstance(entry, str) \
            and entry.startswith("gymnasium.envs."):
        family = entry.split(".")[2].split(":")[0].replace("_", "-")
        if f"gymnasium[{family}]" not in str(e):  # (Gymnasium's own message may say it)
            hint = f"; install its dependencies with: pip install \"gymnasium[{family}]\""
    return CLIError(f"cannot create environment {env_id!r}: {type(e).__name__}: {e}{hint}")


def action_space_of(env_id: str) -> Any:
    import gymnasium as gym

    try:
        env = gym.make(env_id)
    except Exception as e:  # a registered env whose dependencies are missing (box2d, mujoco)
        raise env_creation_error(env_id, e) from None
    try:
        return env.action_space
    finally:
        env.close()


def check_action_space(algo: str, cls: type, env_id: str) -> None:
    """Refuse an environment whose action space ``cls`` does not take (``cls.action_spaces``,
    the one statement of it) before anything is built."""
    space = action_space_of(env_id)
    if isinstance(space, cls.action_spaces):
        return
    from rlgrad.rl.base import action_space_error

    fits = [a for a, c in algorithms().items() if isinstance(space, c.action_spaces)]
    hint = f"; for this environment use {', '.join(sorted(fits))}" if fits else ""
    raise CLIError(action_space_error(cls.__name__, cls.action_spaces, space).split(", got")[0]
                   + f" but {env_id} has {space}{hint}")


# ---- parameters and their types ----------------------------------------------------------------
def parameters(cls: type) -> dict[str, inspect.Parameter]:
    """Constructor arguments of ``cls`` that a person may set, through the whole class chain
    (``rlgrad.rl.hyperparams.hyperparameters``: a subclass's ``**kwargs`` reach its parent's)."""
    from rlgrad.rl.hyperparams import hyperparameters

    return hyperparameters(cls)


def _tokens(annotation: Any) -> list[str]:
    if annotation is inspect.Parameter.empty:
        return ["Any"]
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__",
                                                                  str(annotation))
    out, depth, cur = [], 0, ""
    for ch in text:  # split on | at the top level only ("dict[str, Any] | None")
        depth += ch == "["
        depth -= ch == "]"
        if ch == "|" and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    names = [t.split("[")[0].split(".")[-1] for t in out if t]
    # rlgrad.rl.schedules.ScheduleLike: a number, a schedule's name or a function of progress
    return [n for t in names for n in (_ALIASES.get(t) or [t])]


_ALIASES = {"ScheduleLike": ["float", "Schedule"]}  # (a name: "lin_X", which Schedule covers)


def _is_schedule(s: str) -> bool:
    try:
        float(s[4:] if s.startswith("lin_") else s)
        return True
    except ValueError:
        return False


def coerce(key: str, value: Any, param: inspect.Parameter) -> Any:
    """``value`` (parsed from YAML) checked against ``param``'s annotation and default."""
    tokens = set(_tokens(param.annotation))
    default = param.default
    if "Any" in tokens:  # infer from the default: clip_range: Any = 0.2 takes 0.2 or "lin_0.2"
        tokens.discard("Any")
        if default is None or default is inspect.Parameter.empty:
            return value
        if isinstance(default, bool):
            tokens |= {"bool"}
        elif isinstance(default, int | float):
            tokens |= {"float", "Schedule"} if isinstance(default, float) else {"int"}
        elif isinstance(default, str):
            tokens |= {"str"}
        else:
            return value
        if isinstance(default, int) and not isinstance(default, bool):
            tokens |= {"tuple", "list", "str"}  # train_freq: 4 or (1, "episode")
    known = {"None", "bool", "int", "float", "str", "dict", "list", "tuple", "Sequence",
             "Schedule", "Callable"}
    if not tokens or not tokens <= known:
        return value  # a type we cannot check from here: the constructor will
    if value is None and "None" in tokens:
        return None
    if isinstance(value, bool):
        if "bool" in tokens:
            return value
    elif isinstance(value, int):
        if "int" in tokens:
            return value
        if "float" in tokens:
            return float(value)
    elif isinstance(value, float):
        if "float" in tokens:
            return value
        if "int" in tokens and value.is_integer():
            return int(value)
    elif isinstance(value, str):
        if tokens & {"Schedule", "Callable"} and _is_schedule(value):
            return value
        if "str" in tokens and not (tokens & {"Schedule", "Callable", "float"}):
            return value
    elif isinstance(value, dict):
        if "dict" in tokens:
            return value
    elif isinstance(value, list):
        if tokens & {"list", "tuple", "Sequence"}:
            return value
    names = {"None": "null", "bool": "true/false", "int": "an integer", "float": "a number",
             "str": "a string", "dict": "a mapping like {a: 1}", "list": "a list like [64, 64]",
             "tuple": "a list", "Sequence": "a list", "Schedule": "a 'lin_X' schedule",
             "Callable": "a 'lin_X' schedule"}
    order = ["int", "float", "Schedule", "bool", "str", "list", "tuple", "dict", "None"]
    want = " or ".join(dict.fromkeys(names[t] for t in order if t in tokens))
    raise CLIError(f"--set {key}={_show(value)}: {key} takes {want}, got {_show(value)}")


def _show(v: Any) -> str:
    import yaml

    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def parse_sets(items: list[str], cls: type) -> dict[str, Any]:
    """``["key=value", ...]`` -> {key: value}, values as YAML and checked against ``cls``.

    ``policy_kwargs.net_arch=[64,64]`` sets one entry of a dict-valued argument.
    """
    import yaml

    params = parameters(cls)
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CLIError(f"--set {item!r}: expected key=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw  # unquoted text with YAML syntax in it: take it as a string
        top, _, sub = key.partition(".")
        if top == BUDGET_KEY:
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0 or (
                    isinstance(value, float) and not value.is_integer()):
                raise CLIError(f"--set {item}: {BUDGET_KEY} takes a positive integer")
            out[BUDGET_KEY] = int(value)
            continue
        if top not in params:
            hint = did_you_mean(top, params) or f"; known: {', '.join(sorted(params))}"
            raise CLIError(f"--set {item}: {cls.__name__} has no hyperparameter {top!r}{hint}")
        if sub:
            if "dict" not in _tokens(params[top].annotation):
                raise CLIError(f"--set {item}: {top} is not a mapping, so {key!r} cannot be set")
            d = out.setdefault(top, {})
            if not isinstance(d, dict):
                raise CLIError(f"--set {item}: {top} was already set to a non-mapping value")
            d[sub] = value
        else:
            out[top] = coerce(top, value, params[top])
    return out


# ---- the whole resolution ----------------------------------------------------------------------
@dataclass
class TrainSpec:
    env_id: str
    algo: str
    cls: type
    seed: int
    hyperparams: dict[str, Any]
    total_timesteps: int
    preset: str | None
    overrides: dict[str, Any] = field(default_factory=dict)


def load_preset_for(algo: str, env_id: str, preset: str | None) -> tuple[dict[str, Any], str | None]:
    """(preset values, the preset's name) for ``--preset`` (an env id of the algorithm's preset
    file, a YAML file, or "none"); without ``--preset``, the env's own preset if there is one."""
    import yaml

    from rlgrad.rl.presets import list_presets, load_preset, preset_key

    table = list_presets().get(algo, [])
    if preset is None:  # the id's own entry, or its family's (atari, minatar)
        key = preset_key(env_id, table)
        return (load_preset(algo, key), key) if key is not None else ({}, None)
    if preset.lower() == "none":
        return {}, None
    if preset in table:
        return load_preset(algo, preset), preset
    path = Path(preset)
    if path.suffix in (".yaml", ".yml") or path.exists():
        try:
            data = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as e:
            raise CLIError(f"--preset {preset}: cannot read it: {e}") from None
        if isinstance(data, dict) and env_id in data and isinstance(data[env_id], dict):
            data = data[env_id]  # a zoo-style file with one entry per environment
        if not isinstance(data, dict):
            raise CLIError(f"--preset {preset}: expected a mapping of hyperparameters")
        return data, str(path)
    raise CLIError(f"unknown preset {preset!r} for {algo}" + (
        did_you_mean(preset, table) or f"; {algo} presets: {', '.join(table) or 'none'}")
        + " (a preset is an environment id of rlgrad presets, a YAML file, or 'none')")


def resolve(env_id: str, algo_name: str, seed: int, preset: str | None, steps: int | None,
            n_envs: int | None, sets: list[str]) -> TrainSpec:
    """Check everything typed and merge: class defaults < preset < --n-envs < --set < --steps."""
    algo, cls = resolve_algo(algo_name)
    check_env_id(env_id)
    check_action_space(algo, cls, env_id)
    values, preset_name = load_preset_for(algo, env_id, preset)
    params = parameters(cls)
    hp: dict[str, Any] = {}
    for k, v in values.items():
        if k == BUDGET_KEY:
            continue
        if k not in params:
            raise CLIError(f"preset {preset_name}: {cls.__name__} has no hyperparameter {k!r}")
        hp[k] = v
    if n_envs is not None:
        if n_envs < 1:
            raise CLIError(f"--n-envs must be at least 1, got {n_envs}")
        hp["n_envs"] = n_envs
    overrides = parse_sets(sets, cls)
    budget = overrides.pop(BUDGET_KEY, None)
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(hp.get(k), dict):
            hp[k] = {**hp[k], **v}
        else:
            hp[k] = v
    total = steps if steps is not None else budget or values.get(BUDGET_KEY) or DEFAULT_STEPS
    if int(total) < 1:
        raise CLIError(f"--steps must be positive, got {total}")
    return TrainSpec(env_id, algo, cls, int(seed), hp, int(total), preset_name, overrides)


def build(cls: type, env_id: str, seed: int, hp: dict[str, Any]) -> Any:
    """The algorithm; a ValueError/TypeError of its constructor is a bad value, said in one line."""
    try:
        return cls(env_id, seed=seed, **hp)
    except (ValueError, TypeError) as e:
        msg = str(e).removeprefix(f"{cls.__name__}: ")  # range errors name the class already
        raise CLIError(f"{cls.__name__} on {env_id}: {msg}") from None

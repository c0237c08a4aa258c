"""The valid range of every hyperparameter of every algorithm, in one table.

``check_hyperparams(name, values)`` runs when an algorithm is built (``BaseAlgorithm.__init__``,
so the Python API and the CLI alike), before anything is allocated, and refuses the first bad
value with one line naming the parameter, the value and the range; ``check_relations`` follows
once the environment exists. ``RANGES`` holds one entry per argument name (the same name
means the same thing in every algorithm); ``RELATIONS`` the rules between two arguments.
A new hyperparameter needs an entry here (``tests/rl/test_rl_ranges.py`` checks every algorithm).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rlgrad.rl.sb3_args import (
    ARS_POLICY_NAMES,
    LSTM_POLICY_NAMES,
    POLICY_NAMES,
    REPLAY_BUFFER_CLASSES,
    ROLLOUT_BUFFER_CLASSES,
    device_ok,
    is_policy_class,
)


class HyperparameterError(ValueError, AssertionError):
    """A hyperparameter out of its range: SB3 asserts some of these, raises ValueError for
    others; one line, catchable as either type."""


@dataclass(frozen=True)
class Range:
    """A number in an interval (``lo``/``hi``, open or closed), optionally an integer, None, a
    schedule (``"lin_X"`` or a function of the progress), or one of ``choices``."""

    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    none_ok: bool = False
    schedule: bool = False
    choices: tuple[Any, ...] = ()
    kind: type | tuple[type, ...] | None = None  # a non-numeric argument: only its type is checked

    def describe(self) -> str:
        parts = []
        if self.kind is not None:
            kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
            parts.append(" or ".join(k.__name__ for k in kinds))
        elif self.lo > -math.inf or self.hi < math.inf or self.integer:
            what = "an integer" if self.integer else "a number"
            if self.lo > -math.inf and self.hi < math.inf:
                parts.append(f"{what} in {'(' if self.lo_open else '['}{_num(self.lo)}, "
                             f"{_num(self.hi)}{')' if self.hi_open else ']'}")
            elif self.lo > -math.inf:
                parts.append(f"{what} {'>' if self.lo_open else '>='} {_num(self.lo)}")
            elif self.hi < math.inf:
                parts.append(f"{what} {'<' if self.hi_open else '<='} {_num(self.hi)}")
            else:
                parts.append(what)
        parts += [repr(c) for c in self.choices]
        if self.schedule:
            parts.append("'lin_X' with X in that range")
        if self.none_ok:
            parts.append("None")
        return " or ".join(parts)

    def ok(self, v: Any) -> bool:
        if v is None:
            return self.none_ok
        if any(v == c and type(v) is type(c) for c in self.choices):
            return True
        if self.kind is not None:
            return isinstance(v, self.kind)
        if self.schedule and isinstance(v, str) and v.startswith("lin_"):
            v = _float(v[4:])
        elif self.schedule and callable(v):
            try:
                v = v(1.0)  # a schedule's value at the start of training
            except Exception:  # noqa: BLE001 - a schedule that cannot be called is not valid
                return False
        if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(v):
            return False
        if self.integer and not float(v).is_integer():
            return False
        above = v > self.lo if self.lo_open else v >= self.lo
        below = v < self.hi if self.hi_open else v <= self.hi
        return above and below


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _float(s: str) -> Any:
    try:
        return float(s)
    except ValueError:
        return s


_PROB = Range(0.0, 1.0)
_POSITIVE = Range(0.0, lo_open=True)
_NON_NEGATIVE = Range(0.0)
_COUNT = Range(1, integer=True)
_FLAG = Range(kind=bool)
_MAX_ROWS = 10_000_000  # rollout and replay rows: beyond this a typo, not a plan (memory)

RANGES: dict[str, Range] = {
    # shared
    "learning_rate": Range(0.0, lo_open=True, schedule=True),
    "gamma": _PROB,
    "n_envs": Range(1, 4096, integer=True, none_ok=True),  # None: the algorithm's default
    "normalize": Range(kind=(bool, dict)),
    "policy_kwargs": Range(kind=dict, none_ok=True),
    "replay_buffer_class": Range(choices=tuple(REPLAY_BUFFER_CLASSES), none_ok=True),
    "replay_buffer_kwargs": Range(kind=dict, none_ok=True),
    "rollout_buffer_class": Range(choices=tuple(ROLLOUT_BUFFER_CLASSES), none_ok=True),
    "rollout_buffer_kwargs": Range(kind=dict, none_ok=True),
    "verbose": Range(0, integer=True),
    "env_kwargs": Range(kind=dict, none_ok=True),
    "vectorization_mode": Range(choices=("sync", "async", "vector_entry_point", "functional"), none_ok=True),
    "blas_threads": Range(1, integer=True, none_ok=True),
    "check_finite": Range(kind=bool),
    "tensorboard_log": Range(kind=(str, os.PathLike), none_ok=True),
    "env_runners": Range(0, 1024, integer=True),
    "stats_window_size": _COUNT,  # episodes the rollout/ means average (SB3)
    "max_grad_norm": Range(0.0, lo_open=True, none_ok=True),
    "batch_size": _COUNT,
    # on-policy
    "n_steps": Range(1, _MAX_ROWS, integer=True),
    "gae_lambda": _PROB,
    "ent_coef": Range(0.0, choices=("auto",)),  # SAC also takes "auto_X" (see _ent_coef_ok)
    "vf_coef": _NON_NEGATIVE,
    "normalize_advantage": _FLAG,
    "n_epochs": Range(1, 10_000, integer=True),  # more: a typo, a run that never ends
    "clip_range": Range(0.0, lo_open=True, schedule=True),
    "clip_range_vf": Range(0.0, lo_open=True, schedule=True, none_ok=True),
    "clip_vf_max": _FLAG,
    "target_kl": Range(0.0, lo_open=True, none_ok=True),
    "rms_prop_eps": _POSITIVE,
    "top_quantiles_to_drop_per_net": Range(0, 10_000, integer=True),  # TQC
    # TRPO
    "cg_max_steps": Range(1, 10_000, integer=True),
    "cg_damping": _NON_NEGATIVE,
    "line_search_shrinking_factor": Range(0.0, 1.0, lo_open=True, hi_open=True),
    "line_search_max_iter": Range(1, 10_000, integer=True),
    "n_critic_updates": Range(1, 10_000, integer=True),
    "sub_sampling_factor": Range(1, _MAX_ROWS, integer=True),
    "use_rms_prop": _FLAG,
    # off-policy
    "buffer_size": Range(1, _MAX_ROWS * 10, integer=True),
    "learning_starts": Range(0, integer=True),
    "tau": Range(0.0, 1.0),  # 0: the targets keep their weights (SB3 takes it)
    "train_freq": Range(1, integer=True),  # or (n, "step" | "episode"): see _train_freq_ok
    "gradient_steps": Range(0, integer=True, choices=(-1,)),  # 0: collect only, as SB3
    "target_update_interval": _COUNT,
    "exploration_fraction": Range(0.0, 1.0, lo_open=True),
    "exploration_initial_eps": _PROB,
    "exploration_final_eps": _PROB,
    "exploration_steps": Range(1, integer=True, none_ok=True),
    "clip_delta": _POSITIVE,
    "double_q": _FLAG,
    "noise_type": Range(choices=("normal", "ornstein-uhlenbeck"), none_ok=True),
    "noise_std": _NON_NEGATIVE,
    "policy_delay": _COUNT,
    "target_policy_noise": _NON_NEGATIVE,
    "target_noise_clip": _NON_NEGATIVE,
    "n_critics": _COUNT,
    "target_entropy": Range(choices=("auto",)),
    "use_sde": _FLAG,
    "sde_sample_freq": Range(-1, integer=True),
    "use_sde_at_warmup": _FLAG,
    "compile_loop": _FLAG,  # the whole training loop as one jitted program (functional envs)
    # ARS
    "n_delta": Range(1, 100_000, integer=True),
    "n_top": Range(1, integer=True, none_ok=True),
    "delta_std": Range(0.0, lo_open=True, schedule=True),
    "zero_policy": _FLAG,
    "alive_bonus_offset": Range(),
    "n_eval_episodes": Range(1, 100_000, integer=True),
}


def _train_freq_ok(v: Any) -> bool:
    if isinstance(v, list | tuple) and len(v) == 2:
        return RANGES["train_freq"].ok(v[0]) and v[1] in ("step", "episode")
    return RANGES["train_freq"].ok(v)


def _ent_coef_ok(v: Any) -> bool:
    if isinstance(v, str) and v.startswith("auto_"):
        return _POSITIVE.ok(_float(v[5:]))
    return RANGES["ent_coef"].ok(v)


def _net_arch_ok(pk: Any) -> bool:
    arch = (pk or {}).get("net_arch") if isinstance(pk, dict) else None
    if arch is None:
        return True
    if isinstance(arch, list | tuple) and arch and isinstance(arch[0], dict):
        arch = arch[0]  # SB3's pre-1.8 form [dict(pi=.., vf=..)] (the policy warns)
    lists = arch.values() if isinstance(arch, dict) else [arch]
    return all(isinstance(a, list | tuple) and all(_COUNT.ok(n) for n in a) for a in lists)


#: arguments whose check is a function (several forms), with the range as the message says it
SPECIAL: dict[str, tuple[Callable[[Any], bool], str]] = {
    "train_freq": (_train_freq_ok, "an integer >= 1 or [n >= 1, 'step' | 'episode']"),
    "ent_coef": (_ent_coef_ok, "a number >= 0 (SAC also 'auto' or 'auto_X', X > 0)"),
    "target_entropy": (lambda v: v == "auto" or Range().ok(v), "a number or 'auto'"),
    "device": (device_ok, "'auto' or 'cpu' (rlgrad computes on the CPU)"),
    "policy": (lambda v: v is None or v in POLICY_NAMES or v in LSTM_POLICY_NAMES
               or v in ARS_POLICY_NAMES or is_policy_class(v),
               "'MlpPolicy', 'CnnPolicy', 'MultiInputPolicy', an LSTM policy name (RecurrentPPO), "
               "'LinearPolicy' (ARS), None or a policy class"),
}

#: rules between arguments: (arguments, holds(values), what must hold)
ROLLOUT_BATCH = "batch_size <= n_steps * n_envs (the rollout)"
RELATIONS: list[tuple[tuple[str, ...], Callable[..., bool], str]] = [
    # (buffer_size < batch_size is fine: minibatches are drawn with replacement, as in SB3)
    (("n_steps", "n_envs"), lambda t, n: t * n <= _MAX_ROWS,
     f"n_steps * n_envs <= {_MAX_ROWS:,} (rollout rows)"),
    (("env_runners", "n_envs"), lambda r, n: r <= n,
     "env_runners <= n_envs (n_envs is the total over the runners; each steps one copy or more)"),
    # (the on-policy minibatch, with the rollout's n_epochs: off-policy n_steps is n-step returns)
    (("batch_size", "n_steps", "n_envs", "n_epochs"), lambda bs, t, n, _: bs <= t * n,
     ROLLOUT_BATCH),
    (("batch_size", "normalize_advantage"), lambda bs, norm: bs >= 2 or not norm,
     "batch_size >= 2 when normalize_advantage is on (a one-row batch has no std)"),
]


def check_hyperparams(algo: str, values: dict[str, Any]) -> None:
    """Raise HyperparameterError (a ValueError), one line, for the first value outside its
    range."""
    for name, v in values.items():
        if name in SPECIAL:
            ok, what = SPECIAL[name][0](v), SPECIAL[name][1]
        elif name in RANGES:
            ok, what = RANGES[name].ok(v), RANGES[name].describe()
        else:
            continue
        if not ok:
            raise HyperparameterError(f"{algo}: {name}={v!r} is out of range: {name} must be {what}")
    if not _net_arch_ok(values.get("policy_kwargs")):
        raise HyperparameterError(f"{algo}: policy_kwargs.net_arch="
                         f"{values['policy_kwargs']['net_arch']!r} is out of range: layer sizes "
                         "must be integers >= 1")


_RELATIONS_CHECKED = [True]


@contextmanager
def relations_unchecked() -> Iterator[None]:
    """Build algorithms without ``RELATIONS``: an env runner's copy samples a share of the
    learner's environment copies, and the learner checked the rules for the whole rollout."""
    _RELATIONS_CHECKED.append(False)
    try:
        yield
    finally:
        _RELATIONS_CHECKED.pop()


def check_relations(algo: str, values: dict[str, Any], skip: tuple[str, ...] = ()) -> None:
    """Raise ValueError, one line, for the first rule of ``RELATIONS`` that does not hold (run
    once the environment is built: ``n_envs`` is then the real number of copies); rules whose
    text is in ``skip`` do not apply to the algorithm."""
    if not _RELATIONS_CHECKED[-1]:
        return
    for names, holds, what in RELATIONS:
        if what in skip:
            continue
        if all(n in values for n in names) and not holds(*(values[n] for n in names)):
            shown = ", ".join(f"{n}={values[n]!r}" for n in names)
            raise HyperparameterError(f"{algo}: {shown} is out of range: {what}")

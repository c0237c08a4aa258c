"""What the compiled loop needs to know about an algorithm, read once from the built model.

``LoopSpec`` holds the static part (shapes, hyperparameters that do not change, the network's
layout as indices into the parameter list), which the program is traced for; the per-update
schedules (learning rate, clip range) are arrays fed to the program, as PureJaxRL feeds its
``linear_schedule``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gymnasium import spaces

from rlgrad import nn
from rlgrad.rl.functional import FUNCTIONAL_ENVS, FunctionalVectorEnv

__all__ = ["EnvSide", "LoopSpec", "Layer", "OptSide", "loop_spec", "optimizer_args", "refuse_env"]

#: (weight index, bias index, activation name or None) into the parameter list
Layer = tuple[int, int, str | None]
_ACTS = {nn.Tanh: "tanh", nn.ReLU: "relu"}


class EnvSide(Protocol):
    """What ``program.env_step`` and ``initial_state`` read of a spec (``LoopSpec``, DQN's)."""

    @property
    def func_env(self) -> Any: ...
    @property
    def n_envs(self) -> int: ...
    @property
    def max_steps(self) -> int | None: ...
    @property
    def low(self) -> tuple[float, ...] | None: ...
    @property
    def high(self) -> tuple[float, ...] | None: ...


class OptSide(Protocol):
    """What ``program._clip_grads`` and ``program._opt_step`` read of a spec."""

    @property
    def max_grad_norm(self) -> float | None: ...
    @property
    def optimizer(self) -> str: ...
    @property
    def opt_args(self) -> tuple[float, ...]: ...


@dataclass(frozen=True)
class LoopSpec:
    """Hashable (the cache key of the compiled program): the env by its class, bounds as tuples."""

    func_env: Any = field(compare=False)  # FuncEnvs hold no state: equal when of one class
    env_cls: type
    n_envs: int
    n_steps: int
    max_steps: int | None
    discrete: bool
    act_shape: tuple[int, ...]
    low: tuple[float, ...] | None  # Box actions: the clip before the env step
    high: tuple[float, ...] | None
    pi: tuple[Layer, ...]  # the actor's layers, its head last
    vf: tuple[Layer, ...]  # the critic's layers, its head last
    log_std: int | None
    gamma: float
    gae_lambda: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float | None
    normalize_advantage: bool
    ppo: bool  # PPO's clipped surrogate and shuffled minibatch epochs; else one full step
    surrogate: Any  # PPO's clipped surrogate loss (rlgrad.rl.ppo: read from the class, no import)
    n_epochs: int
    batch_size: int
    clip_vf: bool
    clip_vf_max: bool  # PureJaxRL's value loss: the larger of the clipped and unclipped errors
    clipped_values: Any  # PPO's clip of the values (rlgrad.rl.ppo, read from the class)
    optimizer: str  # "adam" or "rmsprop" (PyTorch's form)
    opt_args: tuple[float, ...]  # adam: (b1, b2, eps); rmsprop: (alpha, eps)

    @property
    def rows(self) -> int:
        return self.n_envs * self.n_steps


def refuse_env(algo: str, env: Any) -> ValueError:
    ids = ", ".join(sorted(FUNCTIONAL_ENVS))
    return ValueError(f"{algo}(compile_loop=True) needs a functional environment, got "
                      f"{type(env).__name__}: pass one of the ids {ids} (or 'rlgrad/<id>'), or "
                      "leave compile_loop False for any Gymnasium environment")


def optimizer_args(algo: str, optimizer: Any) -> tuple[str, tuple[float, ...]]:
    """("adam", (b1, b2, eps)) or ("rmsprop", (alpha, eps)): what ``program._opt_step`` runs."""
    opt = type(optimizer).__name__
    g = optimizer.param_groups[0]
    if opt == "Adam":
        return "adam", (*g["betas"], g["eps"])
    if opt == "RMSprop" and not g.get("momentum") and not g.get("centered"):
        return "rmsprop", (g["alpha"], g["eps"])
    raise ValueError(f"{algo}(compile_loop=True) runs Adam or RMSprop, got {opt}")


def _chain(policy: Any, seq: Any, head: Any, index: dict[int, int]) -> tuple[Layer, ...]:
    layers: list[Layer] = []
    mods = list(seq) if seq is not None else []
    for i, m in enumerate(mods):
        if type(m) is nn.Linear:
            nxt = mods[i + 1] if i + 1 < len(mods) else None
            act = _ACTS.get(type(nxt)) if nxt is not None else None
            if nxt is not None and type(nxt) is not nn.Linear and act is None:
                raise ValueError(f"compile_loop: activation {type(nxt).__name__} is not supported "
                                 "(Tanh or ReLU); use activation_fn='tanh' or 'relu'")
            layers.append((index[id(m.weight)], index[id(m.bias)], act))
    layers.append((index[id(head.weight)], index[id(head.bias)], None))
    return tuple(layers)


def loop_spec(model: Any) -> LoopSpec:
    """The spec of an on-policy model (PPO, A2C, REINFORCE) whose env is functional."""
    algo = type(model).__name__
    env = model.vector_env
    if not isinstance(env, FunctionalVectorEnv):
        raise refuse_env(algo, env)
    if getattr(model, "env_runners", 0):
        raise ValueError(f"{algo}(compile_loop=True) steps its envs inside the program: set "
                         "env_runners=0 (Ray env runners are for the ordinary path)")
    pol = model.policy
    if pol._trunk is not None or not pol._plain_mlp or pol.multi or model.normalizer is not None:
        raise ValueError(f"{algo}(compile_loop=True) runs the MLP policy on vector observations "
                         "without normalize=True; leave compile_loop False for this setup")
    params = list(model.optimizer.param_groups[0]["params"])
    index = {id(p): i for i, p in enumerate(params)}
    space = model.action_space
    box = isinstance(space, spaces.Box)
    ppo = hasattr(model, "clip_range")
    if ppo and model.target_kl is not None:
        raise ValueError(f"{algo}(compile_loop=True) does not stop epochs early: set target_kl=None")
    opt, args = optimizer_args(algo, model.optimizer)
    return LoopSpec(
        func_env=env.func_env, env_cls=type(env.func_env), n_envs=env.num_envs, n_steps=model.n_steps,
        max_steps=env.max_episode_steps, discrete=pol.discrete, act_shape=tuple(pol.action_shape),
        low=tuple(space.low.ravel().tolist()) if box else None,
        high=tuple(space.high.ravel().tolist()) if box else None,
        pi=_chain(pol, pol.pi_net, pol.action_net, index),
        vf=_chain(pol, pol.vf_net, pol.value_net, index),
        log_std=index[id(pol.log_std)] if box else None,
        gamma=model.gamma, gae_lambda=model.gae_lambda, ent_coef=model.ent_coef,
        vf_coef=model.vf_coef, max_grad_norm=model.max_grad_norm,
        normalize_advantage=model.normalize_advantage, ppo=ppo,
        surrogate=getattr(type(model), "clipped_surrogate", None),
        n_epochs=model.n_epochs if ppo else 1,
        batch_size=model.batch_size if ppo else env.num_envs * model.n_steps,
        clip_vf=ppo and model.clip_range_vf is not None,
        clip_vf_max=bool(getattr(model, "clip_vf_max", False)),
        clipped_values=getattr(type(model), "clipped_values", None), optimizer=opt, opt_args=args)

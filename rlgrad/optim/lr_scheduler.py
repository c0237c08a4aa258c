"""Learning-rate schedules, in both forms RL code uses.

* PyTorch-style schedulers that own an optimizer and change its ``lr`` on ``step()``:
  ``LambdaLR``, ``LinearLR``, ``ConstantLR``, ``StepLR``, ``MultiStepLR``, ``ExponentialLR``,
  ``CosineAnnealingLR``, ``OneCycleLR`` and ``ReduceLROnPlateau`` (``step(metric)``), with
  ``get_last_lr``, ``state_dict``/``load_state_dict``. Each computes its learning rate in closed
  form from ``base_lr`` and the step count; PyTorch's "chainable" forms multiply the current
  ``lr`` instead, which agrees up to rounding unless the user edits ``lr`` between steps.
* Stable-Baselines3-style schedules: plain functions of ``progress_remaining`` (1 at the start
  of training, 0 at the end): ``constant_schedule``, ``linear_schedule``; apply one with
  ``update_learning_rate(optimizer, schedule(progress_remaining))``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat

from rlgrad.optim.optimizer import Optimizer
from rlgrad.tensor import Tensor
from rlgrad.tracer import replayed

__all__ = [
    "LRScheduler", "LambdaLR", "LinearLR", "ConstantLR", "StepLR", "MultiStepLR", "ExponentialLR",
    "CosineAnnealingLR", "OneCycleLR", "ReduceLROnPlateau", "constant_schedule", "linear_schedule",
    "MultiplicativeLR", "PolynomialLR", "CosineAnnealingWarmRestarts", "SequentialLR",
    "update_learning_rate", "Schedule", "CyclicLR", "ChainedScheduler",
]

Schedule = Callable[[float], float]


def constant_schedule(value: float) -> Schedule:
    """``f(progress_remaining) = value``."""
    value = float(value)

    def schedule(progress_remaining: float) -> float:
        return value

    return schedule


def linear_schedule(start: float, end: float = 0.0, end_fraction: float = 1.0) -> Schedule:
    """From ``start`` (progress_remaining = 1) to ``end``, reached after ``end_fraction`` of
    training and kept afterwards (SB3's ``get_linear_fn``; ``linear_schedule(3e-4)`` anneals to 0)."""
    if not 0 < end_fraction <= 1:
        raise ValueError(f"end_fraction must be in (0, 1], got {end_fraction}")
    start, end = float(start), float(end)

    def schedule(progress_remaining: float) -> float:
        done = 1.0 - float(progress_remaining)
        if done >= end_fraction:
            return end
        return start + done * (end - start) / end_fraction

    return schedule


def update_learning_rate(optimizer: Optimizer, lr: float) -> None:
    """Set ``lr`` in every parameter group."""
    for g in optimizer.param_groups:
        g["lr"] = float(lr)


class LRScheduler:
    """Base of the PyTorch-style schedulers: ``lr = base_lr * factor(epoch)`` for each group."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def factor(self, epoch: int) -> float:
        raise NotImplementedError

    def lrs_at(self, epoch: int) -> list[float]:
        """Each group's learning rate at ``epoch`` (``base_lr * factor(epoch)`` unless overridden)."""
        f = self.factor(epoch)
        return [base * f for base in self.base_lrs]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    @replayed  # under rlgrad.jit: made again by the compiled step, at its place
    def step(self) -> None:
        self.last_epoch += 1
        for g, lr in zip(self.optimizer.param_groups, self.lrs_at(self.last_epoch)):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs),
                "_last_lr": list(self._last_lr)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_epoch = int(state_dict["last_epoch"])
        self.base_lrs = list(state_dict["base_lrs"])
        self._last_lr = list(state_dict.get("_last_lr", self.base_lrs))


class LambdaLR(LRScheduler):
    """``lr = base_lr * lr_lambda(epoch)``."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float],
                 last_epoch: int = -1) -> None:
        self.lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        return float(self.lr_lambda(epoch))


class LinearLR(LRScheduler):
    """Factor moving linearly from ``start_factor`` to ``end_factor`` over ``total_iters`` steps."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        frac = min(epoch, self.total_iters) / self.total_iters if self.total_iters else 1.0
        return self.start_factor + (self.end_factor - self.start_factor) * frac


class ConstantLR(LRScheduler):
    """``factor`` for the first ``total_iters`` steps, then 1 (PyTorch's ``ConstantLR``)."""

    def __init__(self, optimizer: Optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR: factor must be in [0, 1], got {factor}")
        self.constant_factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        return self.constant_factor if epoch < self.total_iters else 1.0


class StepLR(LRScheduler):
    """``lr = base_lr * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        if int(step_size) <= 0:
            raise ValueError(f"StepLR: step_size must be a positive integer, got {step_size}")
        self.step_size, self.gamma = int(step_size), gamma
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        return self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """``lr = base_lr * gamma ** (number of milestones <= epoch)``; a milestone listed twice counts
    twice, as in PyTorch."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        return self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    """``lr = base_lr * gamma ** epoch``."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        return self.gamma ** epoch


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (base_lr - eta_min) (1 + cos(pi epoch / T_max)) / 2`` (PyTorch's closed
    form; past ``T_max`` the cosine goes back up, as PyTorch's does)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1) -> None:
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lrs_at(self, epoch: int) -> list[float]:
        c = (1 + math.cos(math.pi * epoch / self.T_max)) / 2
        return [self.eta_min + (base - self.eta_min) * c for base in self.base_lrs]


class MultiplicativeLR(LRScheduler):
    """``lr`` multiplied by ``lr_lambda(epoch)`` at each step from the first on."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Callable[[int], float],
                 last_epoch: int = -1) -> None:
        self.lr_lambda, self._product, self._at = lr_lambda, 1.0, 0
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        while self._at < epoch:  # the product of the factors of the steps taken (one per step)
            self._at += 1
            self._product *= float(self.lr_lambda(self._at))
        return self._product


class PolynomialLR(LRScheduler):
    """``lr = base_lr * (1 - min(epoch, total_iters) / total_iters) ** power``."""

    def __init__(self, optimizer: Optimizer, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1) -> None:
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def factor(self, epoch: int) -> float:
        return (1.0 - min(epoch, self.total_iters) / self.total_iters) ** self.power


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing restarted every ``T_0`` steps, each period ``T_mult`` times the last (SGDR)."""

    def __init__(self, optimizer: Optimizer, T_0: int, T_mult: int = 1,  # noqa: N803
                 eta_min: float = 0.0, last_epoch: int = -1) -> None:
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_0, self.T_mult, self.eta_min = T_0, T_mult, eta_min
        super().__init__(optimizer, last_epoch)

    def lrs_at(self, epoch: int) -> list[float]:
        t_cur, t_i = epoch, self.T_0
        while t_cur >= t_i:  # (exact in integers, where torch's log form rounds)
            t_cur, t_i = t_cur - t_i, t_i * self.T_mult
        c = (1 + math.cos(math.pi * t_cur / t_i)) / 2
        return [self.eta_min + (base - self.eta_min) * c for base in self.base_lrs]


class SequentialLR(LRScheduler):
    """``schedulers[i]`` from ``milestones[i - 1]`` on, each restarted at its milestone."""

    def __init__(self, optimizer: Optimizer, schedulers: Sequence[LRScheduler],
                 milestones: Sequence[int], last_epoch: int = -1) -> None:
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be one "
                             f"more than the number of milestone points, but got number of "
                             f"schedulers {len(schedulers)} and the number of milestones to be equal "
                             f"to {len(milestones)}")
        for i, sch in enumerate(schedulers):
            if sch.optimizer is not optimizer:
                raise ValueError(f"Sequential Schedulers expects all schedulers to belong to the same "
                                 f"optimizer, but got scheduler at index {i} to be different")
        self._schedulers, self._milestones = list(schedulers), [int(m) for m in milestones]
        super().__init__(optimizer, last_epoch)

    def lrs_at(self, epoch: int) -> list[float]:
        i = bisect.bisect_right(self._milestones, epoch)
        start = self._milestones[i - 1] if i else 0
        return self._schedulers[i].lrs_at(epoch - start)


def _per_group(name: str, optimizer: Optimizer, value: Any) -> list[Any]:
    """One value per parameter group: a list/tuple of that length, or one value repeated."""
    n = len(optimizer.param_groups)
    if isinstance(value, list | tuple):
        if len(value) != n:
            raise ValueError(f"{name} must have one value per parameter group: got {len(value)} "
                             f"values for {n} groups")
        return list(value)
    return [value] * n


def _anneal(strategy: str, start: float, end: float, pct: float) -> float:
    if strategy == "cos":
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
    return (end - start) * pct + start


class _MomentumCycle(LRScheduler):
    """What OneCycleLR and CyclicLR share with ``cycle_momentum``: the optimizer's momentum (or
    Adam's beta1) set per group, and each group's ``base_momentum``/``max_momentum``."""

    use_beta1: bool

    def _init_momentum(self, optimizer: Optimizer, base: float | Sequence[float],
                       top: float | Sequence[float], last_epoch: int
                       ) -> tuple[list[float], list[float]]:
        if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
            raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` "
                             "option enabled")
        self.use_beta1 = "betas" in optimizer.defaults
        lows = _per_group("base_momentum", optimizer, base)
        highs = _per_group("max_momentum", optimizer, top)
        if last_epoch == -1:
            for hi, lo, g in zip(highs, lows, optimizer.param_groups):
                self._set_momentum(g, hi)
                g.update(max_momentum=hi, base_momentum=lo)
        return lows, highs

    def _set_momentum(self, group: dict[str, Any], value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value


class OneCycleLR(_MomentumCycle):
    """PyTorch's 1cycle policy: from ``max_lr / div_factor`` up to ``max_lr`` over ``pct_start``
    of ``total_steps``, then down to ``initial_lr / final_div_factor`` (``three_phase``: down to
    the initial lr first, then to the minimum). ``cycle_momentum`` moves the momentum (SGD) or
    beta1 (Adam-like) the opposite way, between ``max_momentum`` and ``base_momentum``."""

    def __init__(self, optimizer: Optimizer, max_lr: float | Sequence[float], total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum: Any = 0.85, max_momentum: Any = 0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.total_steps = _one_cycle_total(total_steps, epochs, steps_per_epoch)
        if not 0 <= pct_start <= 1:
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError("anneal_strategy must be one of 'cos' or 'linear', instead got "
                             f"{anneal_strategy!r}")
        self.anneal_strategy = anneal_strategy
        up = float(pct_start * self.total_steps) - 1
        last = self.total_steps - 1
        # (end_step, start_lr, end_lr, start_momentum, end_momentum): keys of each group
        self._phases = ([(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                         (float(2 * pct_start * self.total_steps) - 2, "max_lr", "initial_lr",
                          "base_momentum", "max_momentum"),
                         (last, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
                        if three_phase else
                        [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                         (last, "max_lr", "min_lr", "base_momentum", "max_momentum")])
        if last_epoch == -1:
            for m, g in zip(_per_group("max_lr", optimizer, max_lr), optimizer.param_groups):
                g.update(initial_lr=m / div_factor, max_lr=m, min_lr=m / div_factor / final_div_factor)
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self._init_momentum(optimizer, base_momentum, max_momentum, last_epoch)
        super().__init__(optimizer, last_epoch)

    def lrs_at(self, epoch: int) -> list[float]:
        """The learning rates at ``epoch``; with ``cycle_momentum`` it also sets each group's
        momentum (or beta1), as PyTorch's ``get_lr`` does."""
        if epoch > self.total_steps:
            raise ValueError(f"Tried to step {epoch} times. The specified number of total steps "
                             f"is {self.total_steps}")
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if epoch <= end or i == len(self._phases) - 1:
                    pct = (epoch - start) / (end - start)
                    lrs.append(_anneal(self.anneal_strategy, g[lr0], g[lr1], pct))
                    if self.cycle_momentum:
                        self._set_momentum(g, _anneal(self.anneal_strategy, g[m0], g[m1], pct))
                    break
                start = end
        return lrs


_CYCLIC_SCALES: dict[str, tuple[Callable[[float, float], float], str]] = {
    "triangular": (lambda x, gamma: 1.0, "cycle"),
    "triangular2": (lambda x, gamma: 1 / (2.0 ** (x - 1)), "cycle"),
    "exp_range": (lambda x, gamma: gamma ** x, "iterations"),
}


class CyclicLR(_MomentumCycle):
    """PyTorch's cyclical learning rate: up from ``base_lr`` to ``max_lr`` in ``step_size_up``
    steps and down in ``step_size_down``, the amplitude scaled per cycle (``triangular2``: halved)
    or per step (``exp_range``: ``gamma ** step``) or by ``scale_fn``; ``cycle_momentum`` moves
    the momentum (or beta1) the opposite way between ``max_momentum`` and ``base_momentum``."""

    def __init__(self, optimizer: Optimizer, base_lr: float | Sequence[float],
                 max_lr: float | Sequence[float], step_size_up: int = 2000,
                 step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn: Callable[[float], float] | None = None,
                 scale_mode: str = "cycle", cycle_momentum: bool = True,
                 base_momentum: float | Sequence[float] = 0.8, max_momentum: float | Sequence[float] = 0.9,
                 last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        if scale_fn is None and mode not in _CYCLIC_SCALES:
            raise ValueError(f"mode is invalid and scale_fn is None: mode must be one of "
                             f"{', '.join(_CYCLIC_SCALES)}, got {mode!r}")
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, g in zip(base_lrs, optimizer.param_groups):
                g["lr"] = lr
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size, self.step_ratio = up + down, up / (up + down)
        self.mode, self.gamma = mode, gamma
        if scale_fn is None:
            fn, self.scale_mode = _CYCLIC_SCALES[mode]
            self._scale = lambda x: fn(x, gamma)
        else:
            self._scale, self.scale_mode = scale_fn, scale_mode
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:  # torch's CyclicLR keeps the two lists (its OneCycleLR does not)
            self.base_momentums, self.max_momentums = self._init_momentum(
                optimizer, base_momentum, max_momentum, last_epoch)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def lrs_at(self, epoch: int) -> list[float]:
        """The learning rates at ``epoch``; with ``cycle_momentum`` it also sets each group's
        momentum (or beta1), as PyTorch's ``get_lr`` does."""
        cycle = math.floor(1 + epoch / self.total_size)
        x = 1.0 + epoch / self.total_size - cycle
        rise = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self._scale(cycle if self.scale_mode == "cycle" else epoch)
        lrs = [lo + (hi - lo) * rise * scale for lo, hi in zip(self.base_lrs, self.max_lrs)]
        if self.cycle_momentum:
            for g, lo, hi in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums):
                self._set_momentum(g, hi - (hi - lo) * rise * scale)
        return lrs


class ChainedScheduler:
    """Steps every scheduler of ``schedulers`` at each ``step()`` (their factors compose)."""

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Optimizer | None = None) -> None:
        if not schedulers:
            raise ValueError("ChainedScheduler expects at least one scheduler")
        self.optimizer = optimizer if optimizer is not None else schedulers[0].optimizer
        for i, sch in enumerate(schedulers):
            if sch.optimizer is not self.optimizer:
                raise ValueError(f"ChainedScheduler expects all schedulers to belong to the same "
                                 f"optimizer, but got scheduler at index {i} to be different")
        self._schedulers = list(schedulers)
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def step(self) -> None:
        """Each scheduler one epoch on; the rates multiply: ``base * prod(lr_i / base_i)`` (rlgrad's
        schedulers give closed forms, torch's chain each onto the current rate: the same product)."""
        lrs: list[float] | None = None
        for sch in self._schedulers:
            sch.last_epoch += 1
            ratios = [lr / base for lr, base in zip(sch.lrs_at(sch.last_epoch), sch.base_lrs)]
            lrs = [b * r for b, r in zip(sch.base_lrs, ratios)] if lrs is None else \
                [lr * r for lr, r in zip(lrs, ratios)]
        assert lrs is not None
        for g, lr in zip(self.optimizer.param_groups, lrs):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]
        for sch in self._schedulers:
            sch._last_lr = list(self._last_lr)

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)


def _one_cycle_total(total_steps: int | None, epochs: int | None,
                     steps_per_epoch: int | None) -> int:
    if total_steps is not None:
        if not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        return total_steps
    if epochs is not None and steps_per_epoch is not None:
        for name, v in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"Expected positive integer {name}, but got {v}")
        return epochs * steps_per_epoch
    raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")


class ReduceLROnPlateau:
    """Multiply each group's ``lr`` by ``factor`` once the metric passed to ``step(metric)`` has
    not improved for more than ``patience`` steps (PyTorch's rules: ``mode`` min/max,
    ``threshold_mode`` rel/abs, ``cooldown`` steps ignored after a cut, ``min_lr`` floor, a cut
    smaller than ``eps`` skipped)."""

    def __init__(self, optimizer: Optimizer, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr: float | Sequence[float] = 0.0, eps: float = 1e-8) -> None:
        if factor >= 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor should be < 1.0, got {factor}")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got "
                             f"{threshold_mode!r}")
        self.optimizer = optimizer
        self.min_lrs = [float(v) for v in _per_group("min_lr", optimizer, min_lr)]
        self.mode, self.factor, self.patience = mode, factor, patience
        self.threshold, self.threshold_mode = threshold, threshold_mode
        self.cooldown, self.eps = cooldown, eps
        self.last_epoch = 0
        self.best = math.inf if mode == "min" else -math.inf
        self.cooldown_counter = self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def is_better(self, a: float, best: float) -> bool:
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel"
                        else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if self.threshold_mode == "rel"
                    else best + self.threshold)

    @replayed  # under rlgrad.jit: made again by the compiled step, at its place
    def step(self, metrics: SupportsFloat) -> None:
        # a loss Tensor is read as a number (detached: under jit it is still being traced)
        current = float(metrics.detach() if isinstance(metrics, Tensor) else metrics)
        self.last_epoch += 1
        if self.is_better(current, self.best):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0  # bad steps during the cooldown do not count
        if self.num_bad_epochs > self.patience:
            for g, floor in zip(self.optimizer.param_groups, self.min_lrs):
                old = float(g["lr"])
                new = max(old * self.factor, floor)
                if old - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.__dict__.items()
                if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update({k: v for k, v in state_dict.items() if k != "optimizer"})

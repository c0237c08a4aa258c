"""SGD, Adam, AdamW, RMSprop, Adagrad, RAdam and NAdam, with PyTorch's arguments and update rules.

``reference.py`` holds each update in its plain form (PyTorch's formulas, ten lines); everything
here is an optimization of those, tested against them (tests/engine/test_reference_paths.py): the same
arithmetic up to rounding, plus Adam's flush of tiny moments (``_adam_math``).

Each update runs in place on ``p._value`` with ``out=`` ufuncs and one scratch array per parameter
(kept in the state under ``"_buf"``, never saved), so a step allocates nothing in steady state
except where a gradient must be combined with weight decay.

When every parameter of a group has a gradient, the group's state lives in flat arrays
(``_FlatPath``), and Adam/AdamW and plain RMSprop update it in one C pass
(``rlgrad/optim/_fused.c``, optional) instead of ~13 NumPy passes: the same operations in the
same order, so the same bits. ``RLGRAD_FUSED=0`` turns it off.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from rlgrad.creation import _empty_aligned
from rlgrad.optim import reference
from rlgrad.optim.optimizer import Optimizer, _check_hparams
from rlgrad.tensor import mark_written
from rlgrad.tracer import replayed
from rlgrad.typing import Params

try:  # the flat updates in one pass (C, built by setup.py when a compiler is there): same bits
    from rlgrad.optim import _fused
except ImportError:  # pragma: no cover - depends on the install
    _fused = None
if os.environ.get("RLGRAD_FUSED", "1") == "0":
    _fused = None

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "RMSpropTFLike", "Adagrad", "RAdam", "NAdam", "Adamax",
           "Adadelta"]


def _scratch(st: dict[str, Any], like: np.ndarray) -> np.ndarray:
    buf = st.get("_buf")
    if buf is None or buf.shape != like.shape or buf.dtype != like.dtype:
        buf = st["_buf"] = np.empty_like(like)
    return buf


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (PyTorch's form: ``buf = m buf +
    (1 - dampening) g``, first step ``buf = g``), Nesterov momentum and L2 weight decay."""

    def __init__(self, params: Params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False) -> None:
        _check_hparams(lr=lr, momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    def _update_group(self, group: dict[str, Any]) -> None:
        lr, mom, damp = group["lr"], group["momentum"], group["dampening"]
        wd, nesterov, maximize = group["weight_decay"], group["nesterov"], group["maximize"]
        state = self.state  # reference.sgd, with a scratch buffer
        for p in group["params"]:
            gt = p.grad
            if gt is None:
                continue
            g, x = gt._value, p._value
            st = state.get(p)
            if st is None:
                st = state[p] = {}
            buf = _scratch(st, x)
            if maximize:  # before the decay, as PyTorch: the decay still shrinks the weights
                g = -g
            if wd:
                g = g + wd * x
            if mom:
                mb = st.get("momentum_buffer")
                if mb is None:
                    mb = st["momentum_buffer"] = np.array(g, dtype=x.dtype, copy=True)
                else:
                    mb *= mom
                    if damp:
                        np.multiply(g, 1 - damp, out=buf)
                        mb += buf
                    else:
                        mb += g
                if nesterov:
                    np.multiply(mb, mom, out=buf)
                    buf += g
                    d = buf
                else:
                    d = mb
            else:
                d = g
            np.multiply(d, lr, out=buf)
            x -= buf


def _adam_math(g: np.ndarray, m: np.ndarray, v: np.ndarray, vmax: np.ndarray | None,
               buf: np.ndarray, t: int, lr: float, b1: float, b2: float, eps: float) -> None:
    """``reference.adam`` after the gradient's sign and weight decay: update the moments in place
    and leave the parameter step (to subtract) in ``buf``. Optimized with ``out=`` ufuncs and
    ``sqrt(1 - b2**t)`` folded into the scalars (rounding differs from the reference's), plus the
    flush of tiny moments (a deviation, below). ``_fused.c`` does the same operations in the same
    order: keep the two in step."""
    np.subtract(g, m, out=buf)  # m <- m + (1 - b1)(g - m), PyTorch's lerp
    buf *= 1 - b1
    m += buf
    v *= b2  # v <- b2 v + (1 - b2) g^2
    np.multiply(g, g, out=buf)
    buf *= 1 - b2
    v += buf
    if t % 50 == 0:
        # The flush (not in PyTorch, nor in reference.adam). Moments of parameters whose
        # gradient stays 0 (dead ReLU units) decay geometrically into the subnormal range,
        # where float arithmetic is ~10x slower (measured: Adam 1.1 ms instead of 0.14 ms on a
        # 67k-parameter DQN). Zeroing moments below tiny * 1e13 every 50 steps keeps them from
        # ever becoming subnormal; it changes a result only where a moment is that small.
        floor = np.finfo(m.dtype).tiny * 1e13
        for a in (m, v):
            np.abs(a, out=buf)
            np.copyto(a, 0, where=buf < floor)
    if vmax is not None:  # amsgrad
        np.maximum(vmax, v, out=vmax)
        v = vmax
    bc1 = 1 - b1**t
    bc2_sqrt = math.sqrt(1 - b2**t)
    # lr/bc1 * m / (sqrt(v)/bc2_sqrt + eps), with bc2_sqrt moved into the scalars (one op less)
    np.sqrt(v, out=buf)
    buf += eps * bc2_sqrt
    np.divide(m, buf, out=buf)
    buf *= lr * bc2_sqrt / bc1


class _FlatGroup:
    """One parameter group's optimizer state in flat arrays (one per state key; the
    per-parameter state entries are views into them, so ``state_dict`` and ``load_state_dict``
    see no difference), and for the NumPy path a flat gradient and update array."""

    def __init__(self, params: list[Any], dtype: np.dtype, keys: tuple[str, ...],
                 version: int) -> None:
        self.params, self.dtype, self.keys, self.version = list(params), dtype, keys, version
        self.shapes = [p._value.shape for p in params]
        self.offsets = [0]
        for p in params:
            self.offsets.append(self.offsets[-1] + p._value.size)
        n = self.offsets[-1]
        self.arrays = {k: _empty_aligned(n, dtype) for k in keys}
        for a in self.arrays.values():
            a.fill(0)
        self.g: np.ndarray | None = None  # the NumPy path's arrays, made on first use
        self.buf: np.ndarray | None = None
        self.updates: list[np.ndarray] = []  # per-parameter views of buf
        self.step = 0
        self.state: dict = {}
        self.states: list[dict[str, Any]] = []

    def gather(self, grads: list[np.ndarray], maximize: bool,
               scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """The NumPy path's input: the gradients copied into ``g`` (times ``scale``, negated to
        maximize), and ``buf`` for the update (the fused path needs neither)."""
        if self.g is None:
            n = self.offsets[-1]
            self.g, self.buf = _empty_aligned(n, self.dtype), _empty_aligned(n, self.dtype)
            self.updates = [self.buf[a:b].reshape(s)
                            for a, b, s in zip(self.offsets[:-1], self.offsets[1:], self.shapes)]
        np.concatenate(grads, axis=None, out=self.g)  # axis=None: flattened, no reshape calls
        if scale != 1.0:  # each element as g * scale rounds it (the sign does not change that)
            np.multiply(self.g, self.dtype.type(scale), out=self.g)
        if maximize:
            np.negative(self.g, out=self.g)
        assert self.buf is not None  # made with g
        return self.g, self.buf

    def apply_updates(self) -> None:
        """Subtract each parameter's slice of ``buf``, the step the NumPy path left there."""
        for p, u in zip(self.params, self.updates):
            x = p._value
            np.subtract(x, u, out=x)


class _FlatPath:
    """The fast path of an optimizer for groups of many small parameters (RL networks), where
    NumPy's per-call cost dominates: when every parameter of a group has a gradient, the state
    lives in flat arrays (``_FlatGroup``) and the update runs once over all of them: in one C
    pass (``_fused``) where the optimizer has one, else as NumPy ufuncs on the gradients gathered
    with one concatenate, each parameter then taking its slice of the update. The arithmetic is
    the per-parameter path's, element for element: all give the same bits (and the per-parameter
    path is ``reference.py``'s updates up to rounding).

    Subclasses give the state keys of a group (``_flat_keys``), their initial value
    (``_flat_init``) and whether a group can take the path (``_flat_applies``).
    """

    state: dict[Any, dict[str, Any]]
    param_groups: list[dict[str, Any]]
    _version: int
    _flat: dict[int, _FlatGroup]

    def _flat_keys(self, group: dict[str, Any]) -> tuple[str, ...]:
        raise NotImplementedError

    def _flat_init(self, key: str, group: dict[str, Any]) -> float:
        return 0.0

    def _flat_applies(self, group: dict[str, Any]) -> bool:
        return True

    def _current_flat(self, group: dict[str, Any]) -> _FlatGroup | None:
        fl = self._flat.get(id(group))
        if fl is not None and (fl.version != self._version or fl.state is not self.state
                               or len(fl.params) != len(group["params"])
                               or fl.keys != self._flat_keys(group)):
            fl = None
        return fl

    @replayed  # under rlgrad.jit: made again by the compiled step, at its place
    def step_arrays(self, grads: Any, scale: float = 1.0) -> None:
        # one group on the flat path: the arrays go straight to the update, scaled inside it
        if len(self.param_groups) == 1:
            group = self.param_groups[0]
            flat = self._flat_gather(group, grads)
            if flat is not None:
                self._flat_update(group, *flat, scale)
                mark_written(*group["params"])
                return
        super().step_arrays(grads, scale)  # type: ignore[misc]  # a mixin: Optimizer, next in the MRO, has it

    def _flat_update(self, group: dict[str, Any], fl: _FlatGroup, grads: list[np.ndarray],
                     scale: float = 1.0) -> None:
        raise NotImplementedError

    def _flat_gather(self, group: dict[str, Any], given: Any = None
                     ) -> tuple[_FlatGroup, list[np.ndarray]] | None:
        """The group's flat state, the step counter advanced, and this step's gradient arrays
        (``given``, else the parameters' ``.grad``); None if the path does not apply.
        ``fl.gather(grads, maximize)`` copies them into ``fl.g`` for the NumPy arithmetic; the
        fused one reads them where they are."""
        if not self._flat_applies(group):
            self._flat.pop(id(group), None)  # per-parameter steps may now differ: rebuild later
            return None
        params = group["params"]
        fl = self._current_flat(group)
        if given is not None:
            grads = list(given)
            if len(grads) != len(params) or fl is None or any(
                    g.shape != s or g.dtype != fl.dtype for g, s in zip(grads, fl.shapes)) or any(
                    a is not b for a, b in zip(fl.params, params)):
                return None  # built (or rebuilt) from .grad by the general path first
        else:
            grads = []
            for i, p in enumerate(params):
                gt = p.grad
                if gt is None:
                    self._flat.pop(id(group), None)
                    return None
                g = gt._value
                if fl is not None and (fl.params[i] is not p or g.shape != fl.shapes[i]
                                       or g.dtype != fl.dtype):
                    fl = None
                grads.append(g)
        if fl is None:
            fl = self._build_flat(group)
            if fl is None:
                return None
        t = fl.step = fl.step + 1
        for st in fl.states:  # the per-parameter entries (no Tensor hashing on the hot path)
            st["step"] = t
        return fl, grads

    def _build_flat(self, group: dict[str, Any]) -> _FlatGroup | None:
        params = group["params"]
        dtype = params[0]._value.dtype
        if any(p._value.dtype != dtype for p in params):
            return None
        states = [self.state.get(p) for p in params]
        steps = {st["step"] for st in states if st is not None}
        if len(steps) > 1 or (steps and any(st is None for st in states)):
            return None  # parameters at different steps: keep per-parameter updates
        keys = self._flat_keys(group)
        fl = _FlatGroup(params, dtype, keys, self._version)
        fl.state = self.state
        fl.step = steps.pop() if steps else 0
        for key in keys:
            init = self._flat_init(key, group)
            if init:
                fl.arrays[key].fill(init)
        for i, (p, st) in enumerate(zip(params, states)):
            a, b, shape = fl.offsets[i], fl.offsets[i + 1], fl.shapes[i]
            if st is None:
                st = self.state[p] = {"step": fl.step}
            for key in keys:
                view = fl.arrays[key][a:b].reshape(shape)
                if key in st:
                    view[...] = st[key]  # keep the state built so far (or just loaded)
                st[key] = view
            st.pop("_buf", None)
            fl.states.append(st)
        self._flat[id(group)] = fl
        return fl


class Adam(_FlatPath, Optimizer):
    """Adam (Kingma & Ba) with PyTorch's defaults; ``weight_decay`` is an L2 term added to the
    gradient (use ``AdamW`` for decoupled decay); ``amsgrad`` keeps the max second moment."""

    _decoupled = False

    def __init__(self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        _check_hparams(lr=lr, eps=eps, weight_decay=weight_decay)
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Invalid betas {betas}: each must be in [0, 1)")
        self._flat: dict[int, _FlatGroup] = {}
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad, maximize=maximize))

    def _flat_keys(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())

    def _flat_applies(self, group: dict[str, Any]) -> bool:
        return not (group["weight_decay"] and not self._decoupled)  # L2: per parameter

    def _update_group(self, group: dict[str, Any]) -> None:
        flat = self._flat_gather(group)
        if flat is not None:
            self._flat_update(group, *flat)
            return
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        wd, amsgrad, maximize = group["weight_decay"], group["amsgrad"], group["maximize"]
        decoupled = self._decoupled
        state = self.state
        for p in group["params"]:
            gt = p.grad
            if gt is None:
                continue
            g, x = gt._value, p._value
            st = state.get(p)
            if st is None:
                st = state[p] = {"step": 0, "exp_avg": np.zeros_like(x),
                                 "exp_avg_sq": np.zeros_like(x)}
            if amsgrad and "max_exp_avg_sq" not in st:
                st["max_exp_avg_sq"] = np.zeros_like(x)
            buf = _scratch(st, x)
            if maximize:
                g = -g
            if wd:
                if decoupled:
                    x *= 1 - lr * wd
                else:
                    g = g + wd * x
            t = st["step"] = st["step"] + 1
            _adam_math(g, st["exp_avg"], st["exp_avg_sq"],
                       st["max_exp_avg_sq"] if amsgrad else None, buf, t, lr, b1, b2, eps)
            x -= buf

    def _flat_update(self, group: dict[str, Any], fl: _FlatGroup, grads: list[np.ndarray],
                     scale: float = 1.0) -> None:
        lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
        wd, t, a = group["weight_decay"], fl.step, fl.arrays
        # decoupled decay (AdamW) shrinks first; the L2 form takes the per-parameter path
        shrink = 1 - lr * wd if wd else 1.0
        if _fused is not None:
            # _adam_math's scalars, computed the same way; the floor as a float32/64 value
            bc1, bc2_sqrt = 1 - b1**t, math.sqrt(1 - b2**t)
            floor = float(np.finfo(fl.dtype).tiny * 1e13) if t % 50 == 0 else 0.0
            if _fused.adam([p._value for p in group["params"]], grads, a["exp_avg"],
                           a["exp_avg_sq"], a.get("max_exp_avg_sq"), 1 - b1, b2, 1 - b2,
                           eps * bc2_sqrt, lr * bc2_sqrt / bc1, shrink, floor,
                           group["maximize"], scale):
                return
        if wd:
            for p in group["params"]:
                p._value *= shrink
        g, buf = fl.gather(grads, group["maximize"], scale)
        _adam_math(g, a["exp_avg"], a["exp_avg_sq"], a.get("max_exp_avg_sq"), buf, t, lr, b1, b2,
                   eps)
        fl.apply_updates()


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before the Adam step);
    PyTorch's default ``weight_decay=0.01``."""

    _decoupled = True

    def __init__(self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)


class RMSprop(_FlatPath, Optimizer):
    """RMSprop with PyTorch's arguments.

    ``tf_style=True`` gives the TensorFlow / Stable-Baselines3 ``RMSpropTFLike`` variant used for
    A2C: the squared-gradient average starts at one and epsilon goes inside the square root,
    ``g / sqrt(v + eps)``, instead of PyTorch's ``g / (sqrt(v) + eps)``.
    """

    def __init__(self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, *,
                 maximize: bool = False, tf_style: bool = False) -> None:
        _check_hparams(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum)
        self._flat: dict[int, _FlatGroup] = {}
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize,
                                      tf_style=tf_style))

    def _flat_keys(self, group: dict[str, Any]) -> tuple[str, ...]:
        return (("square_avg",) + (("grad_avg",) if group["centered"] else ())
                + (("momentum_buffer",) if group["momentum"] > 0 else ()))

    def _flat_init(self, key: str, group: dict[str, Any]) -> float:
        return 1.0 if key == "square_avg" and group["tf_style"] else 0.0

    def _flat_applies(self, group: dict[str, Any]) -> bool:
        return not group["weight_decay"]  # the L2 term needs each parameter: per parameter

    def _flat_update(self, group: dict[str, Any], fl: _FlatGroup, grads: list[np.ndarray],
                     scale: float = 1.0) -> None:
        a = fl.arrays
        if (_fused is not None and not group["centered"] and not group["momentum"]
                and _fused.rmsprop([p._value for p in group["params"]], grads, a["square_avg"],
                                   group["alpha"], 1 - group["alpha"], group["eps"],
                                   group["lr"], group["tf_style"], group["maximize"], scale)):
            return
        g, buf = fl.gather(grads, group["maximize"], scale)
        _rmsprop_math(g, a["square_avg"], a.get("grad_avg"), a.get("momentum_buffer"), buf,
                      group)
        fl.apply_updates()

    def _update_group(self, group: dict[str, Any]) -> None:
        flat = self._flat_gather(group)
        if flat is not None:
            self._flat_update(group, *flat)
            return
        wd, mom, centered = group["weight_decay"], group["momentum"], group["centered"]
        maximize, tf = group["maximize"], group["tf_style"]
        state = self.state
        for p in group["params"]:
            gt = p.grad
            if gt is None:
                continue
            g, x = gt._value, p._value
            st = state.get(p)
            if st is None:
                st = state[p] = {"step": 0,
                                 "square_avg": np.ones_like(x) if tf else np.zeros_like(x)}
            buf = _scratch(st, x)
            if maximize:
                g = -g
            if wd:
                g = g + wd * x
            st["step"] += 1
            ga = mb = None
            if centered:
                ga = st.get("grad_avg")
                if ga is None:
                    ga = st["grad_avg"] = np.zeros_like(x)
            if mom > 0:
                mb = st.get("momentum_buffer")
                if mb is None:
                    mb = st["momentum_buffer"] = np.zeros_like(x)
            _rmsprop_math(g, st["square_avg"], ga, mb, buf, group)
            x -= buf


def _rmsprop_math(g: np.ndarray, sq: np.ndarray, ga: np.ndarray | None, mb: np.ndarray | None,
                  buf: np.ndarray, group: dict[str, Any]) -> None:
    """``reference.rmsprop`` after the gradient's sign and weight decay, with ``out=`` ufuncs:
    update the averages (and momentum) in place and leave the parameter step (to subtract) in
    ``buf``; ``ga`` for ``centered``, ``mb`` for ``momentum``. ``_fused.c`` does the same
    operations in the same order for the plain case (no centering, no momentum)."""
    lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
    sq *= alpha
    np.multiply(g, g, out=buf)
    buf *= 1 - alpha
    sq += buf
    if ga is not None:
        ga *= alpha
        np.multiply(g, 1 - alpha, out=buf)
        ga += buf
        np.multiply(ga, ga, out=buf)
        np.subtract(sq, buf, out=buf)
    else:
        np.copyto(buf, sq)
    if group["tf_style"]:
        buf += eps
        np.sqrt(buf, out=buf)
    else:
        np.sqrt(buf, out=buf)
        buf += eps
    np.divide(g, buf, out=buf)  # g / avg
    if mb is not None:
        mb *= group["momentum"]
        mb += buf
        np.multiply(mb, lr, out=buf)
    else:
        buf *= lr


class RMSpropTFLike(RMSprop):
    """Stable-Baselines3's ``RMSpropTFLike``: ``RMSprop(..., tf_style=True)``."""

    def __init__(self, params: Params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False) -> None:
        super().__init__(params, lr, alpha, eps, weight_decay, momentum, centered, tf_style=True)


class _PerParam(Optimizer):
    """The per-parameter loop of Adagrad, RAdam and NAdam (no flat path: they are rare in RL
    code): the gradient's sign and weight decay here, then the subclass's ``_math`` updates its
    state in place and leaves the step to subtract in a scratch buffer (``out=`` ufuncs)."""

    _l2_only = False  # Adagrad: weight decay is always an L2 term

    def _new_state(self, x: np.ndarray, group: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _math(self, g: np.ndarray, x: np.ndarray, st: dict[str, Any], buf: np.ndarray,
              group: dict[str, Any]) -> None:
        raise NotImplementedError

    def _update_group(self, group: dict[str, Any]) -> None:
        lr, wd = group["lr"], group["weight_decay"]
        decoupled = not self._l2_only and group["decoupled_weight_decay"]
        for p in group["params"]:
            gt = p.grad
            if gt is None:
                continue
            g, x = gt._value, p._value
            st = self.state.get(p)
            if st is None:
                st = self.state[p] = self._new_state(x, group)
            buf = _scratch(st, x)
            if group["maximize"]:
                g = -g
            if wd and decoupled:
                x *= 1 - lr * wd
            elif wd:
                g = g + wd * x
            st["step"] += 1
            self._math(g, x, st, buf, group)
            x -= buf


def _check_betas(betas: tuple[float, float]) -> None:
    if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
        raise ValueError(f"Invalid betas {betas}: each must be in [0, 1)")


def _moments(g: np.ndarray, m: np.ndarray, v: np.ndarray, buf: np.ndarray, b1: float,
             b2: float) -> None:
    """Adam's moments in place: ``m`` lerps to ``g``, ``v <- b2 v + (1 - b2) g^2``."""
    np.subtract(g, m, out=buf)
    buf *= 1 - b1
    m += buf
    v *= b2
    np.multiply(g, g, out=buf)
    buf *= 1 - b2
    v += buf


class Adagrad(_PerParam):
    """Adagrad with PyTorch's arguments (``reference.adagrad``)."""

    _l2_only = True

    def __init__(self, params: Params, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, *, maximize: bool = False) -> None:
        _check_hparams(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay, eps=eps,
                       initial_accumulator_value=initial_accumulator_value)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize))

    def _new_state(self, x: np.ndarray, group: dict[str, Any]) -> dict[str, Any]:
        return {"step": 0, "sum": np.full_like(x, group["initial_accumulator_value"])}

    def _math(self, g: np.ndarray, x: np.ndarray, st: dict[str, Any], buf: np.ndarray,
              group: dict[str, Any]) -> None:
        clr = group["lr"] / (1 + (st["step"] - 1) * group["lr_decay"])
        s = st["sum"]
        np.multiply(g, g, out=buf)
        s += buf
        np.sqrt(s, out=buf)
        buf += group["eps"]
        np.divide(g, buf, out=buf)
        buf *= clr


class Adamax(_PerParam):
    """Adamax with PyTorch's arguments (``reference.adamax``): Adam with the infinity norm."""

    _l2_only = True

    def __init__(self, params: Params, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, *, maximize: bool = False) -> None:
        _check_hparams(lr=lr, eps=eps, weight_decay=weight_decay)
        _check_betas(betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def _new_state(self, x: np.ndarray, group: dict[str, Any]) -> dict[str, Any]:
        return {"step": 0, "exp_avg": np.zeros_like(x), "exp_inf": np.zeros_like(x)}

    def _math(self, g: np.ndarray, x: np.ndarray, st: dict[str, Any], buf: np.ndarray,
              group: dict[str, Any]) -> None:
        (b1, b2), m, u = group["betas"], st["exp_avg"], st["exp_inf"]
        np.subtract(g, m, out=buf)
        buf *= 1 - b1
        m += buf
        u *= b2
        np.abs(g, out=buf)
        buf += group["eps"]
        np.maximum(u, buf, out=u)
        np.divide(m, u, out=buf)
        buf *= group["lr"] / (1 - b1 ** st["step"])


class Adadelta(_PerParam):
    """Adadelta with PyTorch's arguments (``reference.adadelta``)."""

    _l2_only = True

    def __init__(self, params: Params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, *, maximize: bool = False) -> None:
        _check_hparams(lr=lr, eps=eps, weight_decay=weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def _new_state(self, x: np.ndarray, group: dict[str, Any]) -> dict[str, Any]:
        return {"step": 0, "square_avg": np.zeros_like(x), "acc_delta": np.zeros_like(x)}

    def _math(self, g: np.ndarray, x: np.ndarray, st: dict[str, Any], buf: np.ndarray,
              group: dict[str, Any]) -> None:
        rho, eps, sq, acc = group["rho"], group["eps"], st["square_avg"], st["acc_delta"]
        sq *= rho
        sq += (1 - rho) * g * g
        np.add(acc, eps, out=buf)
        buf /= sq + eps
        np.sqrt(buf, out=buf)
        buf *= g  # buf: the step, delta
        acc *= rho
        acc += (1 - rho) * buf * buf
        buf *= group["lr"]


class RAdam(_PerParam):
    """RAdam with PyTorch's arguments, ``decoupled_weight_decay`` included (``reference.radam``)."""

    def __init__(self, params: Params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False, *, maximize: bool = False) -> None:
        _check_hparams(lr=lr, eps=eps, weight_decay=weight_decay)
        _check_betas(betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _new_state(self, x: np.ndarray, group: dict[str, Any]) -> dict[str, Any]:
        return {"step": 0, "exp_avg": np.zeros_like(x), "exp_avg_sq": np.zeros_like(x)}

    def _math(self, g: np.ndarray, x: np.ndarray, st: dict[str, Any], buf: np.ndarray,
              group: dict[str, Any]) -> None:
        (b1, b2), t, lr = group["betas"], st["step"], group["lr"]
        m, v = st["exp_avg"], st["exp_avg_sq"]
        _moments(g, m, v, buf, b1, b2)
        bc1, bc2 = 1 - b1**t, 1 - b2**t
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * b2**t / bc2
        if rho_t > 5.0:  # the variance of the adaptive term is tractable: rectify it
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf
                             / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            np.sqrt(v, out=buf)
            buf += group["eps"]
            np.divide(m, buf, out=buf)
            buf *= lr * math.sqrt(bc2) * rect / bc1
        else:
            np.multiply(m, lr / bc1, out=buf)


class NAdam(_PerParam):
    """NAdam with PyTorch's arguments and momentum schedule (``reference.nadam``)."""

    def __init__(self, params: Params, lr: float = 2e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, maximize: bool = False) -> None:
        _check_hparams(lr=lr, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay)
        _check_betas(betas)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    def _new_state(self, x: np.ndarray, group: dict[str, Any]) -> dict[str, Any]:
        return {"step": 0, "mu_product": 1.0, "exp_avg": np.zeros_like(x),
                "exp_avg_sq": np.zeros_like(x)}

    def _math(self, g: np.ndarray, x: np.ndarray, st: dict[str, Any], buf: np.ndarray,
              group: dict[str, Any]) -> None:
        (b1, b2), t, lr, md = group["betas"], st["step"], group["lr"], group["momentum_decay"]
        m, v = st["exp_avg"], st["exp_avg_sq"]
        mu = b1 * (1.0 - 0.5 * 0.96 ** (t * md))
        mu_next = b1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * md))
        prod = st["mu_product"] = st["mu_product"] * mu
        _moments(g, m, v, buf, b1, b2)
        np.divide(v, 1 - b2**t, out=buf)
        np.sqrt(buf, out=buf)
        buf += group["eps"]  # buf: the denominator
        # the Nesterov step: the gradient's part and the momentum's, over one denominator
        x -= (lr * (1 - mu) / (1 - prod)) * g / buf
        np.divide(m, buf, out=buf)
        buf *= lr * mu_next / (1 - prod * mu_next)


class _ByReference(Optimizer):
    """Optimizers rare in RL code, run by their plain form in ``reference.py`` itself (no
    faster path to keep in step with it): ``_ref`` with the group's hyperparameters ``_keys``."""

    _keys: tuple[str, ...] = ()
    _ref: Callable[..., None]  # a staticmethod of reference.py

    def _update_group(self, group: dict[str, Any]) -> None:
        kw = {k: group[k] for k in self._keys}
        for p in group["params"]:
            if p.grad is None:
                continue
            self._ref(p._value, p.grad._value, self.state.setdefault(p, {}), **kw)


class Rprop(_ByReference):
    """Rprop with PyTorch's arguments (``reference.rprop``): full-batch training only (the
    gradient's sign decides, so minibatch noise breaks it)."""

    _keys = ("lr", "etas", "step_sizes", "maximize")
    _ref = staticmethod(reference.rprop)

    def __init__(self, params: Params, lr: float = 1e-2, etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50.0), *, maximize: bool = False) -> None:
        _check_hparams(lr=lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]} (need 0 < etaminus < 1 < etaplus)")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes),
                                      maximize=maximize))


class ASGD(_ByReference):
    """Averaged SGD with PyTorch's arguments (``reference.asgd``); the averaged parameters are
    ``state[p]["ax"]``."""

    _keys = ("lr", "lambd", "alpha", "t0", "weight_decay", "maximize")
    _ref = staticmethod(reference.asgd)

    def __init__(self, params: Params, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75,
                 t0: float = 1e6, weight_decay: float = 0.0, *, maximize: bool = False) -> None:
        _check_hparams(lr=lr, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0,
                                      weight_decay=weight_decay, maximize=maximize))

"""``rlgrad.jit`` never returns a stale result: PyTorch-style programs (wrapping arguments with
``rlgrad.tensor``, modules and distributions on wrapped inputs, in-place updates of captured
state, whole optimizer steps) give eager execution's results call after call, bit for bit, or
jit refuses them while tracing, naming the user's line.

Each program is built twice from the same seed: one copy runs eagerly, the other under jit; both
get the same five changing inputs, and their outputs and their state (parameters, gradients,
optimizer state) must be equal after every call."""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import nn
from rlgrad.distributions import Categorical, Normal
from rlgrad.jit_check import CheckError
from rlgrad.tensor import TraceError
from rlgrad.tracer import replayed
from rlgrad.tree_util import register_dataclass

RNG = np.random.default_rng(0)


def _inputs(*shapes: tuple[int, ...], n: int = 5, dtype: Any = np.float32) -> list[tuple]:
    rng = np.random.default_rng(sum(map(sum, shapes)) + n)
    return [tuple(rng.standard_normal(s).astype(dtype) for s in shapes) for _ in range(n)]


def _arrays(tree: Any) -> list[np.ndarray]:
    """The leaves of an output as arrays (eager returns Tensors, jit arrays)."""
    if tree is None:
        return []
    if isinstance(tree, dict):
        return [a for k in sorted(tree) for a in _arrays(tree[k])]
    if isinstance(tree, list | tuple):
        return [a for t in tree for a in _arrays(t)]
    if isinstance(tree, rlgrad.Tensor):
        return [np.array(tree._value)]
    return [np.array(tree)]


def _assert_same(eager: list[np.ndarray], jitted: list[np.ndarray], what: str, call: int) -> None:
    assert len(eager) == len(jitted), f"{what}: {len(eager)} arrays eagerly, {len(jitted)} under jit"
    for i, (e, j) in enumerate(zip(eager, jitted)):
        assert e.shape == j.shape and e.dtype == j.dtype, f"{what} {i}, call {call}: {e} vs {j}"
        np.testing.assert_array_equal(j, e, err_msg=f"{what} {i} differs at call {call}")


Program = Callable[[], tuple[Callable[..., Any], Callable[[], Any]]]


def check_program(make: Program, inputs: list[tuple], compile_fn: Callable = rlgrad.jit) -> None:
    """``make()`` -> (step, state): two copies, one eager, one compiled, agree on every call."""
    eager_fn, eager_state = make()
    jit_src, jit_state = make()
    jitted = compile_fn(jit_src)
    _assert_same(_arrays(eager_state()), _arrays(jit_state()), "initial state", 0)
    for call, args in enumerate(inputs):
        out_e = _arrays(eager_fn(*args))
        out_j = _arrays(jitted(*args))
        _assert_same(out_e, out_j, "output", call)
        _assert_same(_arrays(eager_state()), _arrays(jit_state()), "state", call)


def pure(fn: Callable[..., Any]) -> Program:
    return lambda: (fn, lambda: None)


def _seeded_linear(n_in: int, n_out: int, seed: int = 0) -> nn.Linear:
    rlgrad.manual_seed(seed)
    return nn.Linear(n_in, n_out)


def _net_program(body: Callable[[nn.Module, Any], Any], n_in: int = 3) -> Program:
    def make() -> tuple[Callable, Callable]:
        net = _seeded_linear(n_in, 4)
        return (lambda x: body(net, x)), lambda: [p._value for p in net.parameters()]

    return make


def _grad_of_wrapped(x: np.ndarray) -> Any:
    t = rlgrad.tensor(x, requires_grad=True)
    (g,) = rlgrad.autograd.grad((t ** 3).sum(), [t])
    return g


# ---- 1. making a tensor from a traced value ----------------------------------------------------
WRAPPING: dict[str, Program] = {
    "tensor": pure(lambda x: rlgrad.tensor(x) * 2),
    "Tensor": pure(lambda x: rlgrad.Tensor(x) * 2),
    "tensor_float64": pure(lambda x: rlgrad.tensor(x, dtype=rlgrad.float64) * 2),
    "tensor_int_cast": pure(lambda x: rlgrad.tensor(x * 3, dtype=rlgrad.int64) + 1),
    "as_tensor": pure(lambda x: rlgrad.as_tensor(x) * 2),
    "as_tensor_dtype": pure(lambda x: rlgrad.as_tensor(x, dtype=rlgrad.float64) - 1),
    "from_numpy": pure(lambda x: rlgrad.from_numpy(x) * 2),
    "tensor_of_list": pure(lambda x: rlgrad.tensor([rlgrad.tensor(x)[0], rlgrad.tensor(x)[1]]) * 2),
    "float_cast": pure(lambda x: rlgrad.tensor(x).double().float() + 1),
    "to_dtype": pure(lambda x: rlgrad.tensor(x).to(rlgrad.float64) * 3),
    "type_cast": pure(lambda x: rlgrad.tensor(x).type(rlgrad.float64) * 3),
    "rnp_asarray": pure(lambda x: rlgrad.numpy.asarray(rlgrad.tensor(x)) ** 2),
    "tensor_requires_grad": pure(_grad_of_wrapped),
    "tensor_of_tensor_sum": pure(lambda x: rlgrad.tensor(rlgrad.tensor(x).sum()) * 2),
    "as_tensor_of_list": pure(lambda x: rlgrad.as_tensor([rlgrad.tensor(x)[2], rlgrad.tensor(x)[0]])),
    "new_tensor": pure(lambda x: rlgrad.zeros(1, dtype=rlgrad.float64).new_tensor(rlgrad.tensor(x)) + 1),
    "linear_on_wrapped": _net_program(lambda net, x: net(rlgrad.tensor(x))),
    "linear_on_Tensor": _net_program(lambda net, x: net(rlgrad.Tensor(x)).relu()),
    "categorical_log_prob": pure(
        lambda x: Categorical(logits=rlgrad.tensor(x)).log_prob(rlgrad.tensor(1))),
    "categorical_entropy": pure(lambda x: Categorical(logits=rlgrad.tensor(x)).entropy()),
    "normal_log_prob": pure(
        lambda x: Normal(rlgrad.tensor(x), 1.0).log_prob(rlgrad.tensor(x) * 0.5).sum()),
    "normal_scale_wrapped": pure(
        lambda x: Normal(0.0, rlgrad.tensor(x).exp()).log_prob(rlgrad.tensor(x))),
}


@pytest.mark.parametrize("name", sorted(WRAPPING))
def test_wrapping_a_traced_value_stays_traced(name: str) -> None:
    check_program(WRAPPING[name], _inputs((3,)))


def test_masked_logits_on_wrapped_inputs() -> None:
    def masked(logits: np.ndarray, mask: np.ndarray) -> Any:
        lg = rlgrad.tensor(logits).masked_fill(~rlgrad.tensor(mask), -1e8)
        return Categorical(logits=lg).probs

    rng = np.random.default_rng(1)
    inputs = [(rng.standard_normal(4).astype(np.float32), rng.random(4) > 0.4) for _ in range(5)]
    for _, m in inputs:
        m[0] = True  # one legal action at least
    check_program(pure(masked), inputs)


# ---- 2. in-place updates of captured state -------------------------------------------------------
def _params_state(net: nn.Module, opt: Any = None) -> Callable[[], list]:
    """Parameters, their gradients and the optimizer's per-parameter state."""
    def state() -> list:
        out: list = []
        for p in net.parameters():
            out += [p._value, None if p.grad is None else p.grad._value]
            if opt is not None:
                s = opt.state.get(p, {})
                out += [s[k] for k in sorted(s) if not k.startswith("_")]
        return out

    return state


def _training_step(opt_name: str, clip: float | None = None, zero: str = "before",
                   loss_kind: str = "mse", **opt_kw: Any) -> Program:
    """A whole PyTorch-style step: zero_grad, forward on wrapped inputs, backward, optional
    clipping, step."""
    def make() -> tuple[Callable, Callable]:
        rlgrad.manual_seed(3)
        net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))
        opt = getattr(rlgrad.optim, opt_name)(net.parameters(), **opt_kw)

        def step(x: np.ndarray, y: np.ndarray) -> Any:
            if zero == "before":
                opt.zero_grad()
            elif zero == "module":
                net.zero_grad()
            out = net(rlgrad.tensor(x))
            if loss_kind == "mse":
                loss = ((out - rlgrad.tensor(y)) ** 2).mean()
            else:
                loss = nn.functional.smooth_l1_loss(out, rlgrad.as_tensor(y))
            loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(net.parameters(), clip)
            opt.step()
            if zero == "after":
                opt.zero_grad(set_to_none=False)
            return loss

        return step, _params_state(net, opt)

    return make


TRAINING: dict[str, Program] = {
    "sgd": _training_step("SGD", lr=0.1),
    "sgd_momentum_clip": _training_step("SGD", clip=0.5, lr=0.1, momentum=0.9),
    "sgd_nesterov_wd": _training_step("SGD", lr=0.05, momentum=0.9, nesterov=True,
                                      weight_decay=0.01),
    "adam": _training_step("Adam", lr=1e-2),
    "adam_clip": _training_step("Adam", clip=0.1, lr=1e-2),
    "adam_huber": _training_step("Adam", loss_kind="huber", lr=1e-2),
    "adam_zero_after": _training_step("Adam", zero="after", lr=1e-2),
    "adam_accumulate": _training_step("Adam", zero="never", lr=1e-3),
    "adam_module_zero_grad": _training_step("Adam", zero="module", lr=1e-3),
    "adamw": _training_step("AdamW", clip=1.0, lr=1e-2, weight_decay=0.1),
    "rmsprop": _training_step("RMSprop", lr=1e-2),
    "rmsprop_clip": _training_step("RMSprop", clip=0.5, lr=1e-2, alpha=0.99, eps=1e-5),
    "rmsprop_centered": _training_step("RMSprop", lr=1e-2, centered=True, momentum=0.5),
}


@pytest.mark.parametrize("name", sorted(TRAINING))
def test_training_step_under_jit_is_eager(name: str) -> None:
    check_program(TRAINING[name], _inputs((5, 3), (5, 2)))


@pytest.mark.parametrize("name", ["adam_clip", "rmsprop_clip", "sgd"])
def test_training_step_under_compile_is_eager(name: str) -> None:
    check_program(TRAINING[name], _inputs((5, 3), (5, 2)),
                  compile_fn=lambda f: rlgrad.compile(f, mode="max-autotune", fullgraph=True))


def test_the_issue_repro_linear_one_weight() -> None:
    """issue 30: Linear(1, 1), weight 1, lr 0.5: losses [1, 0.5, 0] eagerly, weight -0.5."""
    net = nn.Linear(1, 1, bias=False)
    with rlgrad.no_grad():
        net.weight.fill_(1.0)
    opt = rlgrad.optim.SGD(net.parameters(), lr=0.5)

    @rlgrad.compile
    def step(x: np.ndarray) -> Any:
        opt.zero_grad()
        loss = net(rlgrad.tensor(x)).sum()  # d loss / d weight = 1
        loss.backward()
        opt.step()
        return loss

    losses = [float(step(np.ones((1, 1), np.float32))) for _ in range(3)]
    assert losses == [1.0, 0.5, 0.0]
    assert float(net.weight._value[0, 0]) == -0.5


def _manual(update: Callable[[Any, Any], None]) -> Program:
    """A step that updates its captured parameter by hand, under no_grad."""
    def make() -> tuple[Callable, Callable]:
        P = rlgrad.tensor(np.linspace(-1, 1, 3).astype(np.float32), requires_grad=True)

        def step(x: np.ndarray) -> Any:
            loss = (P * rlgrad.tensor(x)).sum() ** 2
            (g,) = rlgrad.autograd.grad(loss, [P])
            with rlgrad.no_grad():
                update(P, g)
            return loss

        return step, lambda: [P._value]

    return make


def _data_assign(P: Any, g: Any) -> None:
    P.data = P.data - 0.1 * g


def _setitem(P: Any, g: Any) -> None:
    P.data[1] = P[1] - g[1]


INPLACE: dict[str, Program] = {
    "sub_": _manual(lambda P, g: P.sub_(0.1 * g)),
    "add_alpha": _manual(lambda P, g: P.add_(g, alpha=-0.1)),
    "isub": _manual(lambda P, g: P.__isub__(0.1 * g)),
    "imul": _manual(lambda P, g: P.__imul__(0.5 + 0 * g)),
    "mul_div": _manual(lambda P, g: P.mul_(0.9).div_(1.1)),
    "data_sub_": _manual(lambda P, g: P.data.sub_(0.1 * g)),
    "data_assign": _manual(_data_assign),
    "copy_": _manual(lambda P, g: P.copy_(P - 0.1 * g)),
    "data_copy_": _manual(lambda P, g: P.data.copy_(0.5 * P.data + g)),
    "clamp_": _manual(lambda P, g: P.sub_(g).clamp_(-0.5, 0.5)),
    "lerp_": _manual(lambda P, g: P.lerp_(g, 0.25)),
    "setitem": _manual(_setitem),
    "fill_": _manual(lambda P, g: P.fill_(g.sum())),
    "zero_": _manual(lambda P, g: P.zero_().add_(g)),
}


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_update_of_captured_state_is_replayed(name: str) -> None:
    check_program(INPLACE[name], _inputs((3,)))


def _target_update(kind: str) -> Program:
    """A DQN/SAC step: the online net trains, the target follows (Polyak or hard copy)."""
    def make() -> tuple[Callable, Callable]:
        net = _seeded_linear(3, 2, seed=5)
        target = _seeded_linear(3, 2, seed=6)
        opt = rlgrad.optim.Adam(net.parameters(), lr=1e-2)

        def step(x: np.ndarray) -> Any:
            obs = rlgrad.tensor(x)
            with rlgrad.no_grad():
                tgt = target(obs).max(dim=1)[0]
            loss = ((net(obs).max(dim=1)[0] - tgt - 1.0) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if kind == "polyak":
                rlgrad.optim.polyak_update(net.parameters(), target.parameters(), 0.1)
            elif kind == "soft_update":
                rlgrad.optim.soft_update(target, net, 0.3)
            elif kind == "hard":
                rlgrad.optim.hard_update(target, net)
            else:  # the PyTorch idiom
                with rlgrad.no_grad():
                    for p, tp in zip(net.parameters(), target.parameters()):
                        tp.data.copy_(0.2 * p.data + 0.8 * tp.data)
            return loss, tgt

        return step, lambda: _params_state(net, opt)() + [p._value for p in target.parameters()]

    return make


@pytest.mark.parametrize("kind", ["polyak", "soft_update", "hard", "data_copy"])
def test_target_network_updates_are_replayed(kind: str) -> None:
    check_program(_target_update(kind), _inputs((4, 3)))


@pytest.mark.parametrize("returns", ["nothing", "a tensor"])
def test_a_step_without_arguments_or_outputs_runs_once_per_call(returns: str) -> None:
    """A soft target update written as its own function (CleanRL's, LeanRL's ``torch.compile``
    of it): no argument, and nothing returned. The first call used to make the update twice (once
    tracing, once replaying), since the trace's outputs, None, read as 'no call made'."""
    def make() -> tuple[Any, Any]:
        net, target = _seeded_linear(3, 2), _seeded_linear(3, 2, seed=1)

        def soft() -> Any:
            with rlgrad.no_grad():
                for p, tp in zip(net.parameters(), target.parameters()):
                    tp.data.copy_(0.2 * p.data + 0.8 * tp.data)
            return None if returns == "nothing" else target.weight.sum()

        def nudge() -> None:  # the online net moves between updates, as training moves it
            with rlgrad.no_grad():
                net.weight.add_(1.0)

        return soft, nudge, target

    eager, nudge_e, target_e = make()
    compiled, nudge_c, target_c = make()
    compiled = rlgrad.compile(compiled)
    for _ in range(4):
        nudge_e()
        nudge_c()
        a, b = eager(), compiled()
        np.testing.assert_array_equal(target_c.weight._value, target_e.weight._value)
        assert (a is None and b is None) or float(a) == float(b)


def test_an_in_place_write_into_a_buffer_made_in_the_step_raises_at_trace_time() -> None:
    """``buf = zeros(...); buf.add_(s)`` inside a jitted step: the compiled step would keep the
    trace's buffer, so the writes piled up from call to call ([1], [2], [3] where eager gives [1]
    each time). Now refused at trace time, through a view too; reading such a buffer is fine."""
    def write(s: Any) -> Any:
        buf = rlgrad.zeros(2, 3)
        buf.add_(s)
        return buf * 1

    def through_a_view(s: Any) -> Any:
        buf = rlgrad.zeros(2, 3)
        buf[0].add_(s[0])
        return buf * 1

    def read(s: Any) -> Any:
        return (rlgrad.zeros(2, 3) + s) * 2

    for fn in (write, through_a_view):
        with pytest.raises(TraceError, match=r"add_ at .*test_jit_stale.py:\d+ writes into a "
                                             r"buffer made inside the jitted function"):
            rlgrad.jit(fn)(rlgrad.ones(2, 3))
    f = rlgrad.jit(read)
    for k in range(1, 4):
        np.testing.assert_array_equal(np.asarray(f(rlgrad.ones(2, 3) * k)), np.full((2, 3), 2.0 * k))


def test_scheduler_step_inside_the_step_is_replayed() -> None:
    def make() -> tuple[Callable, Callable]:
        net = _seeded_linear(3, 2)
        opt = rlgrad.optim.SGD(net.parameters(), lr=0.5)
        sched = rlgrad.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 / (1 + k))

        def step(x: np.ndarray) -> Any:
            opt.zero_grad()
            loss = net(rlgrad.tensor(x)).pow(2).mean()
            loss.backward()
            opt.step()
            sched.step()
            return loss

        return step, _params_state(net, opt)

    check_program(make, _inputs((4, 3)))


def test_gradient_accumulation_across_calls_retraces_when_grad_state_changes() -> None:
    """No zero_grad in the step: eager adds into the .grad the caller left; the first call
    finds None, later ones an array, so the step is traced again for them."""
    check_program(TRAINING["adam_accumulate"], _inputs((5, 3), (5, 2)))
    make = TRAINING["adam_accumulate"]
    step, _ = make()
    jitted = rlgrad.jit(step)
    for args in _inputs((5, 3), (5, 2), n=3):
        jitted(*args)
    assert len(jitted._cache) == 1  # one program per key, replaced when the .grad state changed


def test_module_zero_grad_is_replayed_so_the_step_is_traced_once() -> None:
    step, _ = TRAINING["adam_module_zero_grad"]()
    traces = []
    jitted = rlgrad.jit(lambda *a: traces.append(1) or step(*a), check=False)
    for args in _inputs((5, 3), (5, 2)):
        jitted(*args)
    assert len(traces) == 1


# ---- 3. what cannot be traced raises while tracing, naming the line; check mode -----------------
def _line_of(fn: Callable, offset: int) -> str:
    return rf"test_jit_stale.py:{fn.__code__.co_firstlineno + offset}\b"


def _branch(x: np.ndarray) -> Any:
    t = rlgrad.tensor(x)
    if t.sum() > 0:  # Python control flow on a traced value
        return t
    return -t


def _item(x: np.ndarray) -> Any:
    t = rlgrad.tensor(x)
    return t * t.max().item()


def _float(x: np.ndarray) -> Any:
    t = rlgrad.tensor(x)
    return t * float(t.mean())


def _asarray(x: np.ndarray) -> Any:
    return rlgrad.tensor(np.asarray(rlgrad.tensor(x)) * 2)


@pytest.mark.parametrize(("fn", "what"), [(_branch, r"bool\(\)"), (_item, r"item\(\)"),
                                          (_float, r"float\(\)"), (_asarray, "a NumPy conversion")])
def test_reading_a_traced_value_raises_at_trace_time_naming_the_line(fn: Callable, what: str) -> None:
    offset = 1 if fn is _asarray else 2
    with pytest.raises(TraceError, match=rf"rlgrad.jit: {what}.* at .*"
                                                          rf"{_line_of(fn, offset)}"):
        rlgrad.jit(fn)(np.ones(3, np.float32))


def test_a_replayed_call_returning_a_python_value_is_refused() -> None:
    read_lr = replayed(lambda opt: opt.param_groups[0]["lr"])
    opt = rlgrad.optim.SGD([rlgrad.zeros(2, requires_grad=True)], lr=0.5)

    def step(x: np.ndarray) -> Any:
        return rlgrad.tensor(x) * read_lr(opt)

    with pytest.raises(TraceError, match=r"returned a float.* freeze"):
        rlgrad.jit(step)(np.ones(2, np.float32))


def test_shape_and_dtype_changes_retrace() -> None:
    calls = []

    def f(x: np.ndarray) -> Any:
        calls.append(x.shape)
        return rlgrad.tensor(x).sum(0) * 2

    jf = rlgrad.jit(f, check=False)
    for x in (np.ones((2, 3), np.float32), np.ones((4, 3), np.float32), np.ones((2, 3)),
              np.full((2, 3), 2, np.float32)):
        out = jf(x)
        np.testing.assert_array_equal(out, x.sum(0) * 2)
        assert out.dtype == x.dtype
    assert len(jf._cache) == 3 and len(calls) == 3


def test_check_mode_catches_what_the_trace_cannot_see() -> None:
    """A Python value read while tracing is frozen into the step (as in jax.jit): replaying it
    after it changed is stale; check=True runs the eager function beside and says so."""
    scale = [1.0]

    def f(x: np.ndarray) -> Any:
        return rlgrad.tensor(x) * scale[0]

    x = np.arange(3, dtype=np.float32)
    plain, checked = rlgrad.jit(f, check=False), rlgrad.jit(f, check=True)
    for jf in (plain, checked):
        jf(x)
        jf(x)
    scale[0] = 2.0
    np.testing.assert_array_equal(plain(x), x)  # the frozen value: what check mode is for
    with pytest.raises(CheckError, match=r"output differs from eager execution: "
                                                          r"max \|difference\| 2 at flat index 2"):
        checked(x)


def test_check_mode_from_the_environment_keeps_the_state_eager(monkeypatch: Any) -> None:
    monkeypatch.setenv("RLGRAD_JIT_CHECK", "1")
    make = TRAINING["adam_clip"]
    step, state = make()
    jitted = rlgrad.jit(step)
    assert jitted.check
    eager_step, eager_state = make()
    for args in _inputs((5, 3), (5, 2)):
        _assert_same(_arrays(eager_step(*args)), _arrays(jitted(*args)), "output", 0)
    _assert_same(_arrays(eager_state()), _arrays(state()), "state", 5)


def test_check_mode_catches_a_write_no_api_records() -> None:
    """An update the replay misses (a write into ._value, which no API records) shows as a
    difference from eager execution."""
    P = rlgrad.tensor(np.ones(3, np.float32))

    def step(x: np.ndarray) -> Any:
        y = rlgrad.tensor(x) * P
        P._value += 1.0  # library-internal write: not replayed
        return y

    jf = rlgrad.jit(step, check=True)
    jf(np.ones(3, np.float32))
    with pytest.raises(CheckError, match="differs from eager"):
        jf(np.ones(3, np.float32))


# ---- 4. pytrees ----------------------------------------------------------------------------------
Params = namedtuple("Params", "w b")


@register_dataclass
@dataclasses.dataclass
class Batch:
    obs: np.ndarray
    mask: np.ndarray


def test_namedtuple_arguments_and_outputs() -> None:
    def f(p: Params, x: np.ndarray) -> Params:
        return Params(rlgrad.tensor(p.w) * rlgrad.tensor(x), rlgrad.tensor(p.b) + 1)

    jf = rlgrad.jit(f)
    for x in (np.ones(2), np.arange(2.0)):
        out = jf(Params(np.full(2, 3.0), np.zeros(2)), x)
        assert type(out) is Params
        np.testing.assert_array_equal(out.w, 3.0 * x)
        np.testing.assert_array_equal(out.b, [1.0, 1.0])


def test_registered_dataclass_arguments_and_outputs() -> None:
    def f(b: Batch) -> Batch:
        logits = rlgrad.tensor(b.obs).masked_fill(~rlgrad.tensor(b.mask), -1e9)
        return Batch(Categorical(logits=logits).probs, b.mask)

    jf = rlgrad.jit(f)
    rng = np.random.default_rng(2)
    for _ in range(3):
        b = Batch(rng.standard_normal((2, 3)), np.array([[True, False, True]] * 2))
        out = jf(b)
        assert type(out) is Batch
        np.testing.assert_array_equal(out.obs, f(b).obs._value)
        assert out.obs[0, 1] == 0.0


def test_none_leaves_are_empty_subtrees() -> None:
    f = rlgrad.jit(lambda x, bias: rlgrad.tensor(x) * 2 if bias is None else rlgrad.tensor(x) + bias)
    np.testing.assert_array_equal(f(np.ones(2), None), [2.0, 2.0])
    np.testing.assert_array_equal(f(np.ones(2), np.full(2, 3.0)), [4.0, 4.0])
    np.testing.assert_array_equal(f(np.full(2, 5.0), None), [10.0, 10.0])
    g = rlgrad.jit(lambda p, x: {"y": rlgrad.tensor(x) * 2, "none": None})
    assert g(None, np.ones(1))["none"] is None


def test_none_used_as_a_value_is_one_clear_line() -> None:
    def f(scale: Any, x: np.ndarray) -> Any:
        return rlgrad.tensor(x) * scale

    with pytest.raises(TypeError, match=r"rlgrad.jit: .*NoneType.* at .*test_jit_stale.py:\d+: an "
                                        r"argument is None, which jit passes on as None"):
        rlgrad.jit(f)(None, np.ones(2))


def test_an_argument_that_is_not_an_array_is_one_clear_line() -> None:
    with pytest.raises(TypeError, match=r"holds a 'object' value, not an array: pass it in "
                                        r"static_argnums, or register its class"):
        rlgrad.jit(lambda o, x: x)(object(), np.ones(2))


def test_keyword_arguments() -> None:
    f = rlgrad.jit(lambda x, *, scale, shift=None: rlgrad.tensor(x) * scale
                   + (0 if shift is None else shift))
    np.testing.assert_array_equal(f(np.ones(2), scale=np.array(3.0)), [3.0, 3.0])
    np.testing.assert_array_equal(f(np.ones(2), scale=np.array(2.0)), [2.0, 2.0])
    np.testing.assert_array_equal(f(np.ones(2), scale=np.array(2.0), shift=np.ones(2)), [3.0, 3.0])


def test_value_and_grad_with_aux_under_jit() -> None:
    def loss(w: Any, x: np.ndarray) -> tuple[Any, dict]:
        pred = w * x
        return rlgrad.numpy.sum(pred ** 2), {"pred": pred}

    vg = rlgrad.value_and_grad(loss, has_aux=True)
    jvg = rlgrad.jit(vg)
    for s in (1.0, 2.0, -0.5):
        w, x = np.full(3, s), np.arange(3.0)
        (value, aux), g = jvg(w, x)
        assert value == np.sum((w * x) ** 2)
        np.testing.assert_array_equal(aux["pred"], w * x)
        np.testing.assert_array_equal(g, 2 * w * x * x)  # closed form
        (ev, eaux), eg = vg(w, x)
        assert ev == value and np.array_equal(eg, g) and np.array_equal(eaux["pred"], aux["pred"])


# ---- 5. whole RL updates, PyTorch-style ----------------------------------------------------------
def _rl_update(kind: str) -> Program:
    """One update of a small RL learner as a PyTorch user writes it, on a batch of (obs, actions,
    returns, action masks) given as arrays and wrapped inside."""
    def make() -> tuple[Callable, Callable]:
        rlgrad.manual_seed(11)
        pi = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
        vf = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
        opt = rlgrad.optim.Adam(list(pi.parameters()) + list(vf.parameters()), lr=3e-3)
        opt_v = rlgrad.optim.RMSprop(vf.parameters(), lr=1e-3)
        target = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
        target.load_state_dict(pi.state_dict())

        def update(obs: np.ndarray, act: np.ndarray, ret: np.ndarray, mask: np.ndarray) -> Any:
            o, a = rlgrad.tensor(obs), rlgrad.as_tensor(act).long()
            r, m = rlgrad.from_numpy(ret), rlgrad.tensor(mask)
            logits = pi(o).masked_fill(~m, -1e8)
            if kind == "reinforce":
                dist = Categorical(logits=logits)
                loss = -(dist.log_prob(a) * r).mean() - 0.01 * dist.entropy().mean()
            elif kind == "a2c":
                v = vf(o).squeeze(-1)
                adv = (r - v).detach()
                loss = -(Categorical(logits=logits).log_prob(a) * adv).mean() \
                    + 0.5 * ((r - v) ** 2).mean()
            elif kind == "ppo":
                old = Categorical(logits=target(o).masked_fill(~m, -1e8)).log_prob(a).detach()
                ratio = (Categorical(logits=logits).log_prob(a) - old).exp()
                loss = -rlgrad.min(ratio * r, ratio.clamp(0.8, 1.2) * r).mean()
            else:  # dqn: masked greedy target from the target network, Huber loss
                with rlgrad.no_grad():
                    nxt = target(o).masked_fill(~m, -1e8).max(dim=1)[0]
                q = pi(o).gather(1, a.unsqueeze(1)).squeeze(1)
                loss = nn.functional.smooth_l1_loss(q, r + 0.9 * nxt)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(pi.parameters(), 0.5)
            opt.step()
            if kind == "a2c":  # a second optimizer over a part of the parameters
                opt_v.zero_grad()
                (vf(o).squeeze(-1) - r).pow(2).mean().backward()
                opt_v.step()
            if kind in ("ppo", "dqn"):
                rlgrad.optim.polyak_update(pi.parameters(), target.parameters(), 0.05)
            return loss, logits.softmax(-1)

        def state() -> list:
            return (_params_state(pi, opt)() + _params_state(vf, opt_v)()
                    + [p._value for p in target.parameters()])

        return update, state

    return make


def _rl_batches(n: int = 5) -> list[tuple]:
    rng = np.random.default_rng(4)
    out = []
    for _ in range(n):
        mask = rng.random((6, 3)) > 0.3
        mask[:, 0] = True
        act = np.array([rng.choice(np.flatnonzero(row)) for row in mask])
        out.append((rng.standard_normal((6, 4)).astype(np.float32), act,
                    rng.standard_normal(6).astype(np.float32), mask))
    return out


@pytest.mark.parametrize("kind", ["reinforce", "a2c", "ppo", "dqn"])
def test_rl_updates_under_compile_are_eager(kind: str) -> None:
    check_program(_rl_update(kind), _rl_batches(), compile_fn=rlgrad.compile)


def test_boolean_mask_indexing_of_a_traced_value_raises_at_trace_time() -> None:
    """A data-dependent shape cannot be replayed: refused while tracing, never stale."""
    def f(x: np.ndarray, mask: np.ndarray) -> Any:
        return rlgrad.tensor(x)[rlgrad.tensor(mask)].sum()

    with pytest.raises(RuntimeError, match="boolean mask"):
        rlgrad.jit(f)(np.ones(3), np.array([True, False, True]))


def test_sampling_inside_the_step_raises_at_trace_time() -> None:
    with pytest.raises(RuntimeError, match=r"sample\(\) inside the traced function"):
        rlgrad.jit(lambda x: Categorical(logits=rlgrad.tensor(x)).sample())(np.zeros(3))


def test_enough_programs() -> None:
    """issue 30 asks for at least 50 PyTorch-style programs compared with eager execution."""
    n = len(WRAPPING) + 1 + len(TRAINING) + 3 + len(INPLACE) + 4 + 1 + 1 + 4
    assert n >= 50, n


def _randn_noise(x: np.ndarray) -> Any:
    return rlgrad.tensor(x) + rlgrad.randn_like(rlgrad.tensor(x))


def _copy_by_state_dict(x: np.ndarray) -> Any:
    net, target = _seeded_linear(2, 2), _seeded_linear(2, 2, seed=1)
    target.load_state_dict(net.state_dict())
    return target(rlgrad.tensor(x))


@pytest.mark.parametrize(("fn", "what"), [(_randn_noise, "a random draw"),
                                          (_copy_by_state_dict, r"state_dict\(\)")])
def test_what_a_step_would_freeze_is_refused_naming_the_line(fn: Callable, what: str) -> None:
    line = _line_of(fn, 2 if fn is _copy_by_state_dict else 1)
    with pytest.raises(TraceError, match=rf"rlgrad.jit: {what} at .*{line}"):
        rlgrad.jit(fn)(np.ones(2, np.float32))


def test_one_gradient_for_two_leaves_gives_each_its_own_grad() -> None:
    """``a + b`` hands one gradient to both leaves: eagerly each .grad is its own array, so an
    in-place edit of one leaves the other as it was; the same under jit."""
    def make() -> tuple[Callable, Callable]:
        a = rlgrad.tensor(np.ones(2, np.float32), requires_grad=True)
        b = rlgrad.tensor(np.full(2, 2.0, np.float32), requires_grad=True)

        def step(x: np.ndarray) -> Any:
            a.grad = b.grad = None
            loss = ((a + b) * rlgrad.tensor(x)).sum()
            loss.backward()
            with rlgrad.no_grad():
                a.grad.mul_(2.0)
                b.sub_(0.1 * b.grad)
            return loss

        return step, lambda: [a, a.grad, b, b.grad]

    check_program(make, _inputs((2,)))


def test_compile_as_torch_spells_it() -> None:
    """torch.compile's forms: bare decorator, decorator with options, a Module returned as it is
    (its calls must stay differentiable by a backward() outside), disable=True."""
    @rlgrad.compile(mode="reduce-overhead", dynamic=False, backend="inductor", options={})
    def double(x: np.ndarray) -> Any:
        return rlgrad.tensor(x) * 2

    for x in (np.ones(2), np.arange(2.0)):
        np.testing.assert_array_equal(double(x), 2 * x)
    assert isinstance(double, rlgrad.jit)
    net = nn.Linear(2, 1)
    assert rlgrad.compile(net) is net
    f = lambda x: x  # noqa: E731
    assert rlgrad.compile(f, disable=True) is f


def test_lower_shows_the_replayed_calls() -> None:
    step, _ = TRAINING["adam_clip"]()
    src = rlgrad.jit(step).lower(*_inputs((5, 3), (5, 2), n=1)[0])
    for call in ("Optimizer.zero_grad, replayed", "clip_grad_norm_, replayed",
                 "Optimizer.step, replayed", ".grad = "):
        assert call in src, src


def _manual_sgd(clear: str) -> Program:
    """Hand-written SGD: .grad cleared by the step's own code, backward, p -= lr * p.grad."""
    def make() -> tuple[Callable, Callable]:
        net = _seeded_linear(3, 2, seed=8)

        def step(x: np.ndarray) -> Any:
            for p in net.parameters():
                if clear == "none":
                    p.grad = None
                elif p.grad is not None and clear == "zero_":
                    p.grad.zero_()
                elif p.grad is not None:  # the caller's .grad, decayed: read at every call
                    p.grad.mul_(0.5)
            loss = net(rlgrad.tensor(x)).pow(2).mean()
            loss.backward()
            with rlgrad.no_grad():
                for p in net.parameters():
                    p -= 0.1 * p.grad
            return loss

        return step, _params_state(net)

    return make


@pytest.mark.parametrize("clear", ["none", "zero_", "decay"])
def test_hand_written_sgd_clearing_grads_in_the_step(clear: str) -> None:
    check_program(_manual_sgd(clear), _inputs((4, 3)))
    step, _ = _manual_sgd(clear)()
    traces: list = []
    jitted = rlgrad.jit(lambda x: traces.append(1) or step(x), check=False)
    for (x,) in _inputs((4, 3)):
        jitted(x)
    assert len(traces) <= 2  # the first call finds no .grad, the next ones the step's


def test_adding_into_a_grad_the_step_assigned_itself_is_refused() -> None:
    net = _seeded_linear(3, 2)
    outside = [rlgrad.zeros_like(p) for p in net.parameters()]

    def step(x: np.ndarray) -> Any:
        for p, g in zip(net.parameters(), outside):
            p.grad = g
        loss = net(rlgrad.tensor(x)).sum()
        loss.backward()
        return loss

    with pytest.raises(TraceError, match=r"adds into a .grad that the jitted function assigned"):
        rlgrad.jit(step)(np.ones((2, 3), np.float32))


def _step_arrays_program(opt_name: str, **kw: Any) -> Program:
    """rlgrad.rl's form of a step: gradients from autograd.grad, handed over as arrays."""
    def make() -> tuple[Callable, Callable]:
        rlgrad.manual_seed(9)
        net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2))
        params = list(net.parameters())
        opt = getattr(rlgrad.optim, opt_name)(params, **kw)

        def step(x: np.ndarray, y: np.ndarray) -> Any:
            loss = ((net(rlgrad.tensor(x)) - rlgrad.tensor(y)) ** 2).mean()
            grads = rlgrad.autograd.grad(loss, params)
            opt.step_arrays([g._value for g in grads], scale=0.5)
            return loss

        return step, _params_state(net, opt)

    return make


@pytest.mark.parametrize(("opt_name", "kw"), [("SGD", {"lr": 0.1, "momentum": 0.9}),
                                              ("Adam", {"lr": 1e-2}), ("RMSprop", {"lr": 1e-2})])
def test_step_arrays_under_jit_is_eager(opt_name: str, kw: dict) -> None:
    check_program(_step_arrays_program(opt_name, **kw), _inputs((5, 3), (5, 2)))


def test_init_fill_inside_the_step_is_replayed() -> None:
    """nn.init.zeros_ on a bias inside the step, after the optimizer moved it: redone each call."""
    def make() -> tuple[Callable, Callable]:
        net = _seeded_linear(3, 2, seed=2)
        opt = rlgrad.optim.SGD(net.parameters(), lr=0.1)

        def step(x: np.ndarray) -> Any:
            nn.init.zeros_(net.bias)
            opt.zero_grad()
            loss = net(rlgrad.tensor(x)).pow(2).mean()
            loss.backward()
            opt.step()
            return loss

        return step, _params_state(net, opt)

    check_program(make, _inputs((4, 3)))

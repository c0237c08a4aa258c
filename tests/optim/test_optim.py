"""rlgrad.optim: each update against its formula for several steps (float64), against PyTorch when
installed, state_dict round trips, gradient clipping, schedules and target-network updates."""

from __future__ import annotations

import math

import numpy as np
import pytest

import rlgrad
from rlgrad import nn, optim
from rlgrad.serialization import StateDictError

SHAPES = [(3, 2), (2,), (4,)]
STEPS = 5


def make_params(seed: int = 0) -> list[rlgrad.Tensor]:
    rng = np.random.default_rng(seed)
    return [rlgrad.tensor(rng.standard_normal(s), requires_grad=True) for s in SHAPES]


def grad_sequence(seed: int = 1) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s) for s in SHAPES] for _ in range(STEPS)]


def run(opt_cls, kwargs: dict, seed: int = 0) -> list[np.ndarray]:
    params = make_params(seed)
    opt = opt_cls(params, **kwargs)
    for grads in grad_sequence():
        for p, g in zip(params, grads):
            p.grad = rlgrad.tensor(g)
        opt.step()
    return [p._value for p in params]


# ---- reference formulas, written the way the papers / PyTorch docs state them --------------
def ref_sgd(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
            maximize=False):
    p, buf = p.copy(), None
    for g in grads:
        g = -g if maximize else g
        g = g + weight_decay * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
    return p


def ref_adam(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
             decoupled=False, maximize=False):
    b1, b2 = betas
    p, m, v, vmax = p.copy(), np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        g = -g if maximize else g
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vmax = np.maximum(vmax, v)
        mhat = m / (1 - b1**t)
        vhat = (vmax if amsgrad else v) / (1 - b2**t)
        p = p - lr * mhat / (np.sqrt(vhat) + eps)
    return p


def ref_rmsprop(p, grads, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                centered=False, tf_style=False):
    p = p.copy()
    sq = np.ones_like(p) if tf_style else np.zeros_like(p)
    ga, buf = np.zeros_like(p), np.zeros_like(p)
    for g in grads:
        g = g + weight_decay * p
        sq = alpha * sq + (1 - alpha) * g * g
        var = sq
        if centered:
            ga = alpha * ga + (1 - alpha) * g
            var = sq - ga * ga
        avg = np.sqrt(var + eps) if tf_style else np.sqrt(var) + eps
        if momentum:
            buf = momentum * buf + g / avg
            p = p - lr * buf
        else:
            p = p - lr * g / avg
    return p


def check_against(ref, opt_cls, kwargs, ref_kwargs=None):
    got = run(opt_cls, kwargs)
    init = make_params()
    seq = grad_sequence()
    for i, p0 in enumerate(init):
        want = ref(p0._value, [step[i] for step in seq], **(ref_kwargs or kwargs))
        np.testing.assert_allclose(got[i], want, rtol=1e-12, atol=1e-12)
        assert not np.allclose(got[i], p0._value)  # the update did something


@pytest.mark.parametrize("kw", [
    dict(lr=0.1),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.01),
    dict(lr=0.05, momentum=0.9, nesterov=True),
    dict(lr=0.1, maximize=True, momentum=0.5),
])
def test_sgd_matches_formula(kw):
    check_against(ref_sgd, optim.SGD, kw)


@pytest.mark.parametrize("kw", [
    dict(lr=0.01),
    dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6),
    dict(lr=0.01, weight_decay=0.1),
    dict(lr=0.01, amsgrad=True),
    dict(lr=0.01, maximize=True),
])
def test_adam_matches_formula(kw):
    check_against(ref_adam, optim.Adam, kw)


@pytest.mark.parametrize("kw", [dict(lr=0.01), dict(lr=0.01, weight_decay=0.3, amsgrad=True)])
def test_adamw_matches_formula(kw):
    check_against(ref_adam, optim.AdamW, kw, {**kw, "weight_decay": kw.get("weight_decay", 0.01),
                                              "decoupled": True})


@pytest.mark.parametrize("kw", [
    dict(lr=0.01),
    dict(lr=0.01, centered=True, weight_decay=0.05),
    dict(lr=0.01, momentum=0.9),
    dict(lr=0.01, alpha=0.9, eps=1e-5, tf_style=True),
    dict(lr=0.01, centered=True, momentum=0.5, tf_style=True),
])
def test_rmsprop_matches_formula(kw):
    check_against(ref_rmsprop, optim.RMSprop, kw)


def test_rmsprop_tf_like_first_step_is_lr_times_gradient_scale():
    # square_avg starts at one: the first update is lr * g / sqrt(alpha + (1-alpha) g^2 + eps)
    p = rlgrad.tensor(np.array([1.0]), requires_grad=True)
    opt = optim.RMSpropTFLike([p], lr=0.1, alpha=0.99, eps=1e-5)
    p.grad = rlgrad.tensor(np.array([2.0]))
    opt.step()
    assert p._value[0] == pytest.approx(1.0 - 0.1 * 2.0 / math.sqrt(0.99 + 0.01 * 4 + 1e-5), rel=1e-14)
    # PyTorch's form divides by sqrt(v) + eps, with v starting at zero: about 10x the step
    q = rlgrad.tensor(np.array([1.0]), requires_grad=True)
    opt2 = optim.RMSprop([q], lr=0.1, alpha=0.99, eps=1e-5)
    q.grad = rlgrad.tensor(np.array([2.0]))
    opt2.step()
    assert q._value[0] == pytest.approx(1.0 - 0.1 * 2.0 / (math.sqrt(0.04) + 1e-5), rel=1e-14)


def test_adam_skips_parameters_without_gradient_and_keeps_own_step_counts():
    params = make_params()
    opt = optim.Adam(params, lr=0.01)
    seq = grad_sequence()
    missing = {1: 1, 3: 0}  # step -> index of the parameter that gets no gradient that step
    used: list[list[np.ndarray]] = [[] for _ in params]
    init = [p._value.copy() for p in params]
    for k, grads in enumerate(seq):
        for i, (p, g) in enumerate(zip(params, grads)):
            p.grad = None if missing.get(k) == i else rlgrad.tensor(g)
            if p.grad is not None:
                used[i].append(g)
        opt.step()
    for i, p in enumerate(params):
        np.testing.assert_allclose(p._value, ref_adam(init[i], used[i], 0.01), rtol=1e-12, atol=1e-12)
        assert opt.state[p]["step"] == len(used[i])


def test_float32_parameters_stay_float32_and_match_float64_closely():
    p32 = rlgrad.tensor(np.linspace(-1, 1, 6, dtype=np.float32), requires_grad=True)
    opt = optim.Adam([p32], lr=0.01)
    grads = grad_sequence()
    for step in grads:
        p32.grad = rlgrad.tensor(np.resize(step[0], 6).astype(np.float32))
        opt.step()
    assert p32.dtype == np.float32 and opt.state[p32]["exp_avg"].dtype == np.float32
    ref = ref_adam(np.linspace(-1, 1, 6), [np.resize(s[0], 6).astype(np.float32).astype(np.float64)
                                          for s in grads], 0.01)
    np.testing.assert_allclose(p32._value, ref, rtol=1e-5, atol=1e-6)


def test_param_groups_have_their_own_hyperparameters():
    a, b = make_params()[:2]
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1, momentum=0.0)
    a0, b0 = a._value.copy(), b._value.copy()
    a.grad = rlgrad.tensor(np.ones_like(a._value))
    b.grad = rlgrad.tensor(np.ones_like(b._value))
    opt.step()
    np.testing.assert_allclose(a._value, a0 - 0.1)
    np.testing.assert_allclose(b._value, b0 - 1.0)
    assert opt.param_groups[1]["momentum"] == 0.0
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})


def test_zero_grad_and_a_training_loop_on_a_model():
    model = nn.Linear(2, 1, dtype=np.float64)
    model.load_state_dict({"weight": np.zeros((1, 2)), "bias": np.zeros(1)})
    opt = optim.Adam(model.parameters(), lr=0.1)
    x = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    y = x @ np.array([[2.0], [-1.0]]) + 0.5
    for _ in range(400):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 1e-4
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    nn.functional.mse_loss(model(x), y).backward()
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad._value.any() for p in model.parameters())


def test_optimizing_the_input_of_a_frozen_model():
    model = nn.Linear(3, 1, dtype=np.float64).requires_grad_(False)
    w = model.weight._value.copy()
    x = rlgrad.tensor(np.zeros((1, 3)), requires_grad=True)
    opt = optim.SGD([x], lr=0.1)
    for _ in range(50):
        opt.zero_grad()
        out = model(x)
        (-out.sum()).backward()  # ascend the output: the input moves along the weight
        opt.step()
    np.testing.assert_allclose(x._value, 50 * 0.1 * w)
    np.testing.assert_array_equal(model.weight._value, w)


def test_optimizer_argument_errors():
    p = make_params()[0]
    with pytest.raises(TypeError, match="single Tensor"):
        optim.Adam(p)
    with pytest.raises(TypeError, match="model.parameters()"):
        optim.Adam(nn.Linear(1, 1))
    with pytest.raises(ValueError, match="non-leaf"):
        optim.Adam([p * 2])
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.Adam([p], lr=-1)


def test_state_dict_resume_is_exact(tmp_path):
    for cls, kw in [(optim.Adam, dict(lr=0.01, amsgrad=True)), (optim.SGD, dict(lr=0.1, momentum=0.9)),
                    (optim.RMSprop, dict(lr=0.01, centered=True, momentum=0.3, tf_style=True))]:
        seq = grad_sequence()
        a = make_params()
        opt_a = cls(a, **kw)
        for grads in seq[:3]:
            for p, g in zip(a, grads):
                p.grad = rlgrad.tensor(g)
            opt_a.step()
        path = tmp_path / f"{cls.__name__}.ckpt"
        rlgrad.save({"params": [p._value for p in a], "opt": opt_a.state_dict()}, path)
        ck = rlgrad.load(path)
        b = [rlgrad.tensor(arr, requires_grad=True) for arr in ck["params"]]
        opt_b = cls(b, lr=123.0)
        opt_b.load_state_dict(ck["opt"])
        assert opt_b.param_groups[0]["lr"] == kw["lr"]
        for grads in seq[3:]:
            for pa, pb, g in zip(a, b, grads):
                pa.grad = rlgrad.tensor(g)
                pb.grad = rlgrad.tensor(g)
            opt_a.step()
            opt_b.step()
        for pa, pb in zip(a, b):
            np.testing.assert_array_equal(pa._value, pb._value)


def test_state_dict_layout_and_misshaped_state():
    params = make_params()
    opt = optim.Adam(params, lr=0.01)
    for p, g in zip(params, grad_sequence()[0]):
        p.grad = rlgrad.tensor(g)
    opt.step()
    sd = opt.state_dict()
    assert sd["param_groups"][0]["params"] == [0, 1, 2]
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq"} and sd["state"][0]["step"] == 1
    sd["state"][0]["exp_avg"][...] = 99.0  # a copy: the optimizer is unaffected
    assert opt.state[params[0]]["exp_avg"].max() < 99
    sd["state"][1]["exp_avg_sq"] = np.zeros(5)
    with pytest.raises(StateDictError) as e:
        opt.load_state_dict(sd)
    assert ("size mismatch for state.1.exp_avg_sq: shape (5,) in the state dict, but the "
            "parameter has shape (2,)") in str(e.value)
    with pytest.raises(StateDictError, match="it has 2 parameter groups, this optimizer has 1"):
        opt.load_state_dict({"state": {}, "param_groups": [sd["param_groups"][0]] * 2})


def test_loaded_state_is_used_by_the_flat_fast_path():
    a, b = make_params(), make_params()
    opt_a, opt_b = optim.Adam(a, lr=0.01), optim.Adam(b, lr=0.01)
    seq = grad_sequence()
    for grads in seq[:2]:
        for p, g in zip(a, grads):
            p.grad = rlgrad.tensor(g)
        opt_a.step()
    for p, q in zip(a, b):
        q._value[...] = p._value
    for p, g in zip(b, seq[0]):  # one step so that b has a flat layout of its own first
        p.grad = rlgrad.tensor(g)
    opt_b.step()
    for p, q in zip(a, b):
        q._value[...] = p._value
    opt_b.load_state_dict(opt_a.state_dict())
    for grads in seq[2:]:
        for p, q, g in zip(a, b, grads):
            p.grad, q.grad = rlgrad.tensor(g), rlgrad.tensor(g)
        opt_a.step()
        opt_b.step()
    for p, q in zip(a, b):
        np.testing.assert_array_equal(p._value, q._value)


# ---- against PyTorch ----------------------------------------------------------------------
@pytest.mark.parametrize("name,kw", [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1)),
    ("Adam", dict(lr=0.01, betas=(0.85, 0.99), weight_decay=0.02)),
    ("Adam", dict(lr=0.01, amsgrad=True, eps=1e-6)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, weight_decay=0.1)),
])
def test_against_pytorch(name, kw):
    torch = pytest.importorskip("torch")
    init, seq = make_params(), grad_sequence()
    tparams = [torch.tensor(p._value.copy(), requires_grad=True) for p in init]
    topt = getattr(torch.optim, name)(tparams, **kw)
    for grads in seq:
        for p, g in zip(tparams, grads):
            p.grad = torch.tensor(g)
        topt.step()
    got = run(getattr(optim, name), kw)
    for ours, theirs in zip(got, tparams):
        np.testing.assert_allclose(ours, theirs.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_adam_float32_against_pytorch_on_a_model():
    torch = pytest.importorskip("torch")
    ours = nn.MLP([3, 8, 2])
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    theirs.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in ours.state_dict().items()})
    opt, topt = optim.Adam(ours.parameters(), lr=0.01), torch.optim.Adam(theirs.parameters(), lr=0.01)
    rng = np.random.default_rng(0)
    for _ in range(10):
        x = rng.standard_normal((16, 3)).astype(np.float32)
        y = rng.standard_normal((16, 2)).astype(np.float32)
        loss = nn.functional.mse_loss(ours(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        tloss = torch.nn.functional.mse_loss(theirs(torch.from_numpy(x)), torch.from_numpy(y))
        topt.zero_grad()
        tloss.backward()
        topt.step()
        assert loss.item() == pytest.approx(tloss.item(), rel=1e-4)
    for k, v in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[k], v.numpy(), rtol=1e-4, atol=1e-5)


# ---- clipping, schedules, target updates ---------------------------------------------------
def test_clip_grad_norm_scales_globally_and_returns_the_norm():
    a = rlgrad.tensor(np.zeros(2), requires_grad=True)
    b = rlgrad.tensor(np.zeros(1), requires_grad=True)
    a.grad, b.grad = rlgrad.tensor(np.array([3.0, 0.0])), rlgrad.tensor(np.array([4.0]))
    norm = optim.clip_grad_norm_([a, b], max_norm=1.0)
    assert float(norm) == pytest.approx(5.0)
    np.testing.assert_allclose(a.grad._value, [3 / (5 + 1e-6), 0.0])
    np.testing.assert_allclose(b.grad._value, [4 / (5 + 1e-6)])
    norm = optim.clip_grad_norm_([a, b], max_norm=10.0)  # below the limit: unchanged
    assert norm.item() == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(b.grad._value, [4 / (5 + 1e-6)])
    a.grad = rlgrad.tensor(np.array([-7.0, 1.0]))
    assert float(nn.utils.clip_grad_norm_([a, b], 1.0, norm_type=math.inf)) == pytest.approx(7.0)
    with pytest.raises(RuntimeError, match="non-finite"):
        a.grad = rlgrad.tensor(np.array([np.inf, 1.0]))
        optim.clip_grad_norm_([a], 1.0, error_if_nonfinite=True)


def test_clip_grad_norm_never_writes_into_a_shared_gradient_array():
    x = rlgrad.tensor(np.ones(3), requires_grad=True)
    y = rlgrad.tensor(np.ones(3), requires_grad=True)
    ((x + y) * 10.0).sum().backward()  # both gradients may be the very same array
    optim.clip_grad_norm_([x, y], max_norm=1.0)
    expected = 10.0 / (math.sqrt(600.0) + 1e-6)
    np.testing.assert_allclose(x.grad._value, expected)
    np.testing.assert_allclose(y.grad._value, expected)


def test_sb3_style_schedules():
    lin = optim.linear_schedule(3e-4)
    assert lin(1.0) == pytest.approx(3e-4) and lin(0.5) == pytest.approx(1.5e-4) and lin(0.0) == 0.0
    expl = optim.linear_schedule(1.0, 0.05, end_fraction=0.1)  # DQN's exploration schedule
    assert expl(1.0) == 1.0 and expl(0.95) == pytest.approx(0.525) and expl(0.5) == 0.05
    assert optim.constant_schedule(0.2)(0.3) == 0.2
    opt = optim.SGD(make_params(), lr=1.0)
    optim.update_learning_rate(opt, lin(0.5))
    assert opt.param_groups[0]["lr"] == pytest.approx(1.5e-4)


def test_pytorch_style_schedulers():
    opt = optim.SGD(make_params(), lr=1.0)
    sched = optim.LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=4)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(5):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    np.testing.assert_allclose(lrs, [1.0, 0.75, 0.5, 0.25, 0.0, 0.0])
    opt2 = optim.SGD(make_params(), lr=0.3)
    c = optim.ConstantLR(opt2, factor=0.5, total_iters=2)
    got = [opt2.param_groups[0]["lr"]]
    for _ in range(3):
        c.step()
        got.append(opt2.param_groups[0]["lr"])
    np.testing.assert_allclose(got, [0.15, 0.15, 0.3, 0.3])
    opt3 = optim.SGD(make_params(), lr=2.0)
    lam = optim.LambdaLR(opt3, lambda e: 0.5**e)
    lam.step()
    lam.step()
    assert opt3.param_groups[0]["lr"] == pytest.approx(0.5)
    state = lam.state_dict()
    lam2 = optim.LambdaLR(optim.SGD(make_params(), lr=2.0), lambda e: 0.5**e)
    lam2.load_state_dict(state)
    lam2.step()
    assert lam2.get_last_lr()[0] == pytest.approx(0.25)


def test_polyak_and_hard_update():
    src, dst = nn.Linear(2, 2, dtype=np.float64), nn.Linear(2, 2, dtype=np.float64)
    s0, d0 = src.weight._value.copy(), dst.weight._value.copy()
    arr = dst.weight._value
    optim.polyak_update(src.parameters(), dst.parameters(), tau=0.25)
    np.testing.assert_allclose(dst.weight._value, 0.75 * d0 + 0.25 * s0)
    assert dst.weight._value is arr  # in place
    optim.soft_update(dst, src, tau=0.5)  # target first
    np.testing.assert_allclose(dst.weight._value, 0.5 * (0.75 * d0 + 0.25 * s0) + 0.5 * s0)
    optim.hard_update(dst, src)
    np.testing.assert_array_equal(dst.state_dict()["bias"], src.state_dict()["bias"])
    with pytest.raises(ValueError, match="tau must be in"):
        optim.polyak_update(src, dst, tau=1.5)
    with pytest.raises(ValueError, match="shape"):
        optim.hard_update(nn.Linear(2, 3), src)


def test_optimizer_state_from_a_checkpoint_of_another_model_names_the_file(tmp_path):
    small, big = nn.Linear(2, 1), nn.Linear(3, 1)
    opt = optim.Adam(small.parameters())
    nn.functional.mse_loss(small(np.ones((1, 2))), np.zeros((1, 1), dtype=np.float32)).backward()
    opt.step()
    path = tmp_path / "run.ckpt"
    rlgrad.save({"optimizer": opt.state_dict()}, path)
    with pytest.raises(StateDictError) as e:
        optim.Adam(big.parameters()).load_state_dict(rlgrad.load(path)["optimizer"])
    msg = str(e.value)
    assert f"Adam (from checkpoint '{path}', key 'optimizer')" in msg
    assert "size mismatch for state.0.exp_avg: shape (1, 2) in the state dict" in msg

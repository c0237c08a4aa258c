"""Schedulers and the Adagrad/RAdam/NAdam optimizers against torch 2.x: the same inputs give the
same learning rates (and momenta) over 100+ steps, and the same parameters over 50 steps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad import optim

torch = pytest.importorskip("torch")


def _pair(opt_name: str = "SGD", **kw):
    """The same two-group optimizer in rlgrad and torch."""
    rp = [rlgrad.tensor(np.ones(3), requires_grad=True), rlgrad.tensor(np.ones(2), requires_grad=True)]
    tp = [torch.ones(3, dtype=torch.float64, requires_grad=True),
          torch.ones(2, dtype=torch.float64, requires_grad=True)]
    r = getattr(optim, opt_name)([{"params": [rp[0]]}, {"params": [rp[1]], "lr": 0.05}], lr=0.1, **kw)
    t = getattr(torch.optim, opt_name)([{"params": [tp[0]]}, {"params": [tp[1]], "lr": 0.05}],
                                       lr=0.1, **kw)
    return r, t


def _momenta(opt, key):
    return [g["betas"][0] if key == "betas" else g[key] for g in opt.param_groups]


SCHEDULES = [
    ("StepLR", dict(step_size=7, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[10, 30, 30, 80], gamma=0.3)),
    ("ExponentialLR", dict(gamma=0.97)),
    ("CosineAnnealingLR", dict(T_max=40, eta_min=1e-3)),
    ("CosineAnnealingLR", dict(T_max=25)),
]


@pytest.mark.parametrize("name,kw", SCHEDULES)
def test_scheduler_lrs_match_torch(name, kw):
    r_opt, t_opt = _pair()
    rs, ts = getattr(optim, name)(r_opt, **kw), getattr(torch.optim.lr_scheduler, name)(t_opt, **kw)
    for _ in range(130):
        np.testing.assert_allclose(rs.get_last_lr(), ts.get_last_lr(), rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose([g["lr"] for g in r_opt.param_groups],
                                   [g["lr"] for g in t_opt.param_groups], rtol=1e-9, atol=1e-15)
        r_opt.step()
        t_opt.step()
        rs.step()
        ts.step()


@pytest.mark.parametrize("opt_name,kw", [
    ("SGD", dict(momentum=0.9)),
    ("Adam", {}),
])
@pytest.mark.parametrize("sched_kw", [
    dict(max_lr=0.5, total_steps=120),
    dict(max_lr=[0.5, 0.2], epochs=10, steps_per_epoch=12, anneal_strategy="linear",
         pct_start=0.25),
    dict(max_lr=0.3, total_steps=101, three_phase=True, div_factor=10.0, final_div_factor=100.0),
    dict(max_lr=0.3, total_steps=100, cycle_momentum=False),
])
def test_one_cycle_matches_torch(opt_name, kw, sched_kw):
    r_opt, t_opt = _pair(opt_name, **kw)
    rs, ts = optim.OneCycleLR(r_opt, **sched_kw), torch.optim.lr_scheduler.OneCycleLR(t_opt, **sched_kw)
    key = "betas" if opt_name == "Adam" else "momentum"
    total = sched_kw.get("total_steps") or 120
    for _ in range(total - 1):
        np.testing.assert_allclose(rs.get_last_lr(), ts.get_last_lr(), rtol=1e-12, atol=1e-16)
        np.testing.assert_allclose(_momenta(r_opt, key), _momenta(t_opt, key), rtol=1e-12)
        r_opt.step()
        t_opt.step()
        rs.step()
        ts.step()
    np.testing.assert_allclose(rs.get_last_lr(), ts.get_last_lr(), rtol=1e-12, atol=1e-16)
    rs.step()  # torch allows exactly total_steps steps after the constructor's
    with pytest.raises(ValueError, match="Tried to step"):
        rs.step()


def test_one_cycle_bad_input():
    r_opt, _ = _pair("SGD")
    with pytest.raises(ValueError, match="total_steps OR"):
        optim.OneCycleLR(r_opt, max_lr=0.1)
    with pytest.raises(ValueError, match="anneal_strategy"):
        optim.OneCycleLR(r_opt, max_lr=0.1, total_steps=10, anneal_strategy="exp")
    with pytest.raises(ValueError, match="momentum or beta1"):
        optim.OneCycleLR(_no_momentum_opt(), max_lr=0.1, total_steps=10)


def _no_momentum_opt():
    class Plain(optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, dict(lr=0.1))

        def _update_group(self, group):
            pass

    return Plain([rlgrad.tensor(np.ones(2), requires_grad=True)])


METRICS = np.concatenate([np.linspace(1.0, 0.5, 20), np.full(30, 0.5), np.linspace(0.5, 0.49, 20),
                          0.49 + 0.01 * np.sin(np.arange(60))])


@pytest.mark.parametrize("kw", [
    {},
    dict(mode="max", factor=0.5, patience=3, threshold=0.01, threshold_mode="abs", cooldown=2),
    dict(patience=2, cooldown=3, min_lr=[0.02, 0.001], factor=0.3),
    dict(patience=0, min_lr=0.0999, eps=1e-12),
    dict(patience=1, threshold=0.0, threshold_mode="abs", factor=0.9),
])
def test_reduce_on_plateau_matches_torch(kw):
    r_opt, t_opt = _pair()
    rs = optim.ReduceLROnPlateau(r_opt, **kw)
    ts = torch.optim.lr_scheduler.ReduceLROnPlateau(t_opt, **kw)
    sign = -1.0 if kw.get("mode") == "max" else 1.0
    for m in METRICS:
        rs.step(sign * m)
        ts.step(sign * m)
        assert rs.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12)
        assert (rs.num_bad_epochs, rs.cooldown_counter) == (ts.num_bad_epochs, ts.cooldown_counter)


def test_reduce_on_plateau_bad_input():
    r_opt, _ = _pair()
    with pytest.raises(ValueError, match="factor"):
        optim.ReduceLROnPlateau(r_opt, factor=1.0)
    with pytest.raises(ValueError, match="mode"):
        optim.ReduceLROnPlateau(r_opt, mode="up")
    with pytest.raises(ValueError, match="one value per parameter group"):
        optim.ReduceLROnPlateau(r_opt, min_lr=[0.1])


@pytest.mark.parametrize("make", [
    lambda o: optim.StepLR(o, 5, 0.5),
    lambda o: optim.CosineAnnealingLR(o, 30),
    lambda o: optim.OneCycleLR(o, max_lr=1.0, total_steps=50),
])
def test_scheduler_state_dict_resumes(make):
    a_opt, _ = _pair("SGD", momentum=0.9)
    a = make(a_opt)
    for _ in range(13):
        a.step()
    sd = a.state_dict()
    b_opt, _ = _pair("SGD", momentum=0.9)
    b_opt.load_state_dict(a_opt.state_dict())
    b = make(b_opt)
    b.load_state_dict(sd)
    for _ in range(20):
        a.step()
        b.step()
        assert a.get_last_lr() == b.get_last_lr()


def test_plateau_state_dict_resumes():
    a_opt, _ = _pair()
    a = optim.ReduceLROnPlateau(a_opt, patience=2)
    for m in METRICS[:40]:
        a.step(m)
    b_opt, _ = _pair()
    b_opt.load_state_dict(a_opt.state_dict())
    b = optim.ReduceLROnPlateau(b_opt)
    b.load_state_dict(a.state_dict())
    for m in METRICS[40:]:
        a.step(m)
        b.step(m)
        assert a.get_last_lr() == b.get_last_lr()


# ---- Adagrad, RAdam, NAdam ------------------------------------------------------------------
from rlgrad.optim import reference  # noqa: E402

OPTIMIZERS = [
    ("Adagrad", reference.adagrad, {}),
    ("Adagrad", reference.adagrad, dict(lr_decay=0.01, weight_decay=0.1,
                                         initial_accumulator_value=0.5, eps=1e-6)),
    ("Adagrad", reference.adagrad, dict(maximize=True)),
    ("RAdam", reference.radam, {}),
    ("RAdam", reference.radam, dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.1)),
    ("RAdam", reference.radam, dict(weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("NAdam", reference.nadam, {}),
    ("NAdam", reference.nadam, dict(lr=0.01, momentum_decay=0.01, weight_decay=0.1)),
    ("NAdam", reference.nadam, dict(weight_decay=0.1, decoupled_weight_decay=True, maximize=True,
                                    betas=(0.5, 0.9))),
    ("Adamax", reference.adamax, {}),
    ("Adamax", reference.adamax, dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.1, maximize=True)),
    ("Adadelta", reference.adadelta, {}),
    ("Adadelta", reference.adadelta, dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1, maximize=True)),
]


def _grad(x: np.ndarray, k: int, noise: np.ndarray) -> np.ndarray:
    """A gradient that depends on where the parameter is, so trajectories must agree."""
    return np.sin(3 * x) + x + noise[k % len(noise)].reshape(x.shape)


@pytest.fixture
def torch_float64():
    """torch keeps scalar state (NAdam's ``mu_product``) in the default dtype; rlgrad in a Python
    float. With float64 as torch's default the two agree to rounding."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("name,ref,kw", OPTIMIZERS)
def test_optimizer_matches_torch_and_its_reference(name, ref, kw, torch_float64):
    rng = np.random.default_rng(0)
    x0 = [rng.normal(size=(4, 3)), rng.normal(size=5)]
    noise = [rng.normal(size=(20, *x.shape)) for x in x0]
    rp = [rlgrad.tensor(x.copy(), requires_grad=True) for x in x0]
    tp = [torch.tensor(x.copy(), requires_grad=True) for x in x0]
    refp, refst = [x.copy() for x in x0], [{}, {}]
    r = getattr(optim, name)([{"params": [rp[0]]}, {"params": [rp[1]], "lr": 0.003}], **kw)
    t = getattr(torch.optim, name)([{"params": [tp[0]]}, {"params": [tp[1]], "lr": 0.003}], **kw)
    lrs = [kw.get("lr", r.defaults["lr"]), 0.003]
    for k in range(60):
        for i in range(2):
            rp[i].grad = rlgrad.tensor(_grad(rp[i].detach().numpy(), k, noise[i]))
            tp[i].grad = torch.tensor(_grad(tp[i].detach().numpy(), k, noise[i]))
            ref(refp[i], _grad(refp[i], k, noise[i]), refst[i], **{**kw, "lr": lrs[i]})
        r.step()
        t.step()
        for i in range(2):
            np.testing.assert_allclose(rp[i].detach().numpy(), tp[i].detach().numpy(), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(rp[i].detach().numpy(), refp[i], rtol=1e-10, atol=1e-12)
    for i in range(2):  # the state too, under torch's names
        for key, v in t.state[tp[i]].items():
            np.testing.assert_allclose(np.asarray(r.state[rp[i]][key]), np.asarray(v), rtol=1e-10)


@pytest.mark.parametrize("name", ["Adagrad", "RAdam", "NAdam", "Adamax", "Adadelta"])
def test_optimizer_state_dict_resumes_and_float32(name):
    rng = np.random.default_rng(1)
    x0 = rng.normal(size=6).astype(np.float32)
    a_p, b_p = rlgrad.tensor(x0.copy(), requires_grad=True), rlgrad.tensor(x0.copy(), requires_grad=True)
    a = getattr(optim, name)([a_p], lr=0.01)
    for k in range(5):
        a_p.grad = rlgrad.tensor(np.sin(a_p.detach().numpy() + k))
        a.step()
    b_p._value[...] = a_p.detach().numpy()
    b = getattr(optim, name)([b_p], lr=0.5)
    b.load_state_dict(a.state_dict())
    for k in range(5):
        for p, o in ((a_p, a), (b_p, b)):
            p.grad = rlgrad.tensor(np.sin(p.detach().numpy() + k))
            o.step()
    assert a_p.dtype == rlgrad.float32
    np.testing.assert_array_equal(a_p.detach().numpy(), b_p.detach().numpy())


@pytest.mark.parametrize("name,kw", [("Adagrad", dict(lr_decay=-1.0)), ("RAdam", dict(betas=(1.0, 0.9))),
                                     ("NAdam", dict(momentum_decay=-0.1)), ("NAdam", dict(eps=-1.0)),
                                     ("Adamax", dict(betas=(0.9, 1.0))), ("Adadelta", dict(rho=1.5))])
def test_optimizer_bad_hyperparameters(name, kw):
    with pytest.raises(ValueError, match="Invalid"):
        getattr(optim, name)([rlgrad.tensor(np.ones(2), requires_grad=True)], **kw)


def _training_run(jit: bool, opt_name: str, sched_name: str) -> tuple[np.ndarray, list[float]]:
    """Parameters and lrs after 8 steps of a step function that steps the scheduler inside."""
    rlgrad.random.seed(0)
    net = rlgrad.nn.Linear(3, 2)
    opt = getattr(optim, opt_name)(net.parameters(), lr=0.1)
    sched = (optim.OneCycleLR(opt, max_lr=0.5, total_steps=10) if sched_name == "OneCycleLR"
             else optim.ReduceLROnPlateau(opt, patience=0, factor=0.5, threshold=0.5))

    def step(x: Any) -> Any:
        opt.zero_grad()
        loss = (net(x) ** 2).mean()
        loss.backward()
        opt.step()
        if sched_name == "OneCycleLR":
            sched.step()
        else:
            sched.step(loss)
        return loss

    f = rlgrad.jit(step) if jit else step
    lrs = []
    for k in range(8):
        f(rlgrad.tensor(np.random.default_rng(k).normal(size=(4, 3))))
        lrs.append(opt.param_groups[0]["lr"])
    return net.weight.detach().numpy().copy(), lrs


@pytest.mark.parametrize("opt_name,sched_name", [("Adam", "OneCycleLR"), ("SGD", "ReduceLROnPlateau")])
def test_scheduler_inside_a_jitted_step_is_eagers(opt_name, sched_name):
    w_eager, lr_eager = _training_run(False, opt_name, sched_name)
    w_jit, lr_jit = _training_run(True, opt_name, sched_name)
    assert lr_jit == lr_eager and len(set(lr_eager)) > 2
    np.testing.assert_allclose(w_jit, w_eager, rtol=1e-6)


@pytest.mark.parametrize("opt_name, kw", [
    ("SGD", {"lr": -1.0}), ("SGD", {"momentum": -1.0}), ("SGD", {"weight_decay": -1.0}),
    ("Adam", {"eps": -1.0}), ("RMSprop", {"alpha": -1.0}), ("RMSprop", {"momentum": -1.0}),
])
def test_invalid_hyperparameters_say_what_torch_says(opt_name: str, kw: dict[str, float]) -> None:
    """A negative hyperparameter raises ValueError whose message starts with torch's own, so
    code (and SB3's tests) matching torch's text match rlgrad's."""
    with pytest.raises(ValueError) as theirs:
        getattr(torch.optim, opt_name)([torch.zeros(2, requires_grad=True)], **{"lr": 0.1, **kw})
    with pytest.raises(ValueError) as ours:
        getattr(optim, opt_name)([rlgrad.zeros(2, requires_grad=True)], **{"lr": 0.1, **kw})
    assert str(ours.value).startswith(str(theirs.value)), (str(ours.value), str(theirs.value))
    assert "\n" not in str(ours.value)

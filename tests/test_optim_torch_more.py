"""Schedulers and the Adagrad/RAdam/NAdam optimizers against torch 2.x: the same inputs give the
same learning rates (and momenta) over 100+ steps, and the same parameters over 50 steps."""

from __future__ import annotations

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

"""CyclicLR (each mode, momentum cycling for SGD and Adam's beta1, per-group bounds) and
ChainedScheduler against torch.optim.lr_scheduler: the same learning rates and momenta at every
step."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad import optim

torch = pytest.importorskip("torch")


def _opts(name: str, **kw: float) -> tuple:
    x = np.ones(3)
    mk = lambda lib, mod: getattr(mod, name)(  # noqa: E731
        [{"params": [lib.tensor(x.copy(), requires_grad=True)]},
         {"params": [lib.tensor(x.copy(), requires_grad=True)], "lr": 0.5}], **kw)
    return mk(rlgrad, optim), mk(torch, torch.optim)


def _momenta(opt: object) -> list:
    return [g.get("momentum", g.get("betas", (None,))[0]) for g in opt.param_groups]


@pytest.mark.parametrize(("opt", "kw"), [
    ("SGD", dict(mode="triangular", step_size_up=4)),
    ("SGD", dict(mode="triangular2", step_size_up=3, step_size_down=5)),
    ("Adam", dict(mode="exp_range", gamma=0.95, step_size_up=4, max_momentum=[0.95, 0.9])),
    ("SGD", dict(scale_fn=lambda x: 0.5 ** x, scale_mode="iterations", step_size_up=2,
                 base_lr=[0.01, 0.02], max_lr=[0.1, 0.3])),
    ("SGD", dict(cycle_momentum=False, step_size_up=5)),
])
def test_cyclic_lr_matches_torch(opt: str, kw: dict) -> None:
    r, t = _opts(opt, lr=0.1, **({"momentum": 0.9} if opt == "SGD" else {}))
    kw = {"base_lr": 0.01, "max_lr": 0.1, **kw}
    rs = optim.lr_scheduler.CyclicLR(r, **kw)
    ts = torch.optim.lr_scheduler.CyclicLR(t, **kw)
    for _ in range(30):
        np.testing.assert_allclose(rs.get_last_lr(), ts.get_last_lr(), rtol=1e-12)
        if kw.get("cycle_momentum", True):
            np.testing.assert_allclose(_momenta(r), _momenta(t), rtol=1e-12)
        r.step()
        t.step()
        rs.step()
        ts.step()


def test_cyclic_lr_bad_input() -> None:
    r, _ = _opts("Adagrad", lr=0.1)
    with pytest.raises(ValueError, match="momentum"):
        optim.lr_scheduler.CyclicLR(r, 0.01, 0.1)
    with pytest.raises(ValueError, match="mode"):
        optim.lr_scheduler.CyclicLR(r, 0.01, 0.1, mode="sawtooth", cycle_momentum=False)


def test_chained_scheduler_matches_torch() -> None:
    r, t = _opts("SGD", lr=0.1)
    rs = optim.lr_scheduler.ChainedScheduler([optim.lr_scheduler.ExponentialLR(r, 0.9),
                                              optim.lr_scheduler.StepLR(r, 3, 0.5)])
    ts = torch.optim.lr_scheduler.ChainedScheduler([torch.optim.lr_scheduler.ExponentialLR(t, 0.9),
                                                    torch.optim.lr_scheduler.StepLR(t, 3, 0.5)])
    for _ in range(10):
        r.step()
        t.step()
        rs.step()
        ts.step()
        np.testing.assert_allclose(rs.get_last_lr(), ts.get_last_lr(), rtol=1e-12)

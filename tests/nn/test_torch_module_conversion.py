"""torch's layers assigned into an rlgrad network become rlgrad's layer of the same name, equal
to them (arguments, weights, buffers, mode): SB3 extractors written with ``th.nn`` layers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
import rlgrad.nn as nn

th = pytest.importorskip("torch")


class Holder(nn.Module):
    def __init__(self, **children: Any) -> None:
        super().__init__()
        for name, child in children.items():
            setattr(self, name, child)


def _trained_batch_norm() -> Any:
    bn = th.nn.BatchNorm1d(5, eps=1e-3, momentum=0.2).double()
    with th.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-1, 1)
    bn(th.randn(32, 5, dtype=th.float64) * 3 + 1)  # moves the running statistics
    return bn


def test_a_torch_batch_norm_becomes_rlgrad_s_with_its_state_and_outputs() -> None:
    th.manual_seed(0)
    bn = _trained_batch_norm()
    holder = Holder(bn=bn)
    ours = holder.bn
    assert type(ours) is nn.BatchNorm1d and ours.eps == 1e-3 and ours.momentum == 0.2
    assert set(holder.state_dict()) == {f"bn.{k}" for k in bn.state_dict()}
    x = np.random.default_rng(0).standard_normal((8, 5))
    for training in (True, False):
        bn.train(training)
        holder.bn.train(training)
        want = bn(th.tensor(x)).detach().numpy()
        got = ours(rlgrad.tensor(x)).detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ours.running_mean.numpy(), bn.running_mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(ours.running_var.numpy(), bn.running_var.numpy(), rtol=1e-12)


def test_a_torch_sequential_of_layers_converts_child_by_child() -> None:
    th.manual_seed(1)
    seq = th.nn.Sequential(th.nn.Flatten(), th.nn.Linear(6, 4), th.nn.ReLU(),
                           th.nn.Linear(4, 2, bias=False)).double()
    holder = Holder(net=seq, drop=th.nn.Dropout(0.3).eval())
    assert [type(m).__name__ for m in holder.net] == ["Flatten", "Linear", "ReLU", "Linear"]
    assert holder.net[3].bias is None and holder.drop.p == 0.3 and not holder.drop.training
    x = np.random.default_rng(1).standard_normal((3, 2, 3))
    want = seq(th.tensor(x)).detach().numpy()
    np.testing.assert_allclose(holder.net(rlgrad.tensor(x)).detach().numpy(), want, rtol=1e-12)
    assert len(list(holder.parameters())) == 3  # trained by rlgrad's optimizers


def test_a_torch_module_with_its_own_forward_is_refused_in_one_line() -> None:
    class Custom(th.nn.Module):
        def forward(self, x: Any) -> Any:
            return x

    with pytest.raises(TypeError, match=r"^Holder.c: .*Custom is a torch module with its own code"):
        Holder(c=Custom())

"""Issue 29's audit: ``torch.utils.data``'s samplers, ``BatchSampler``, ``ConcatDataset`` and
``IterableDataset`` in ``DataLoader``; ``nn.init.dirac_`` and ``sparse_``; ``nn.Upsample`` and its
two fixed-mode forms. Against torch where the result is deterministic, by their defining
property where it is drawn (the random streams differ)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlgrad
from rlgrad.nn import init
from rlgrad.utils import data as rd

torch = pytest.importorskip("torch")
from torch.utils import data as td  # noqa: E402

X = np.arange(20.0).reshape(10, 2)
Y = np.arange(10)


def _batches(loader: Any) -> list:
    return [[np.asarray(t.numpy()).tolist() for t in b] for b in loader]


def test_deterministic_loaders_match_torch() -> None:
    for lib, mk in ((rd, rlgrad.tensor), (td, torch.tensor)):
        ds = lib.TensorDataset(mk(X), mk(Y))
        seq = lib.DataLoader(ds, batch_size=4, sampler=lib.SequentialSampler(ds))
        bs = lib.DataLoader(ds, batch_sampler=lib.BatchSampler(lib.SequentialSampler(ds), 3,
                                                               drop_last=True))
        cat = lib.ConcatDataset([ds, lib.TensorDataset(mk(X[:3] * -1), mk(Y[:3]))])
        yield_ = (_batches(seq), len(seq), _batches(bs), len(bs), len(cat),
                  [np.asarray(v.numpy()).tolist() for v in cat[11]],
                  [np.asarray(v.numpy()).tolist() for v in cat[-1]],
                  list(lib.BatchSampler(range(7), 3, drop_last=False)),
                  len(lib.BatchSampler(range(7), 3, False)))
        if lib is rd:
            got = yield_
        else:
            want = yield_
    assert got == want


class _Stream(rd.IterableDataset):
    def __iter__(self):  # noqa: ANN204
        for i in range(7):
            yield rlgrad.tensor([float(i), float(i * i)])


class _TorchStream(td.IterableDataset):
    def __iter__(self):  # noqa: ANN204
        for i in range(7):
            yield torch.tensor([float(i), float(i * i)], dtype=torch.float32)


def test_iterable_dataset_batches_in_order_as_torch() -> None:
    for kw in ({"batch_size": 3}, {"batch_size": 3, "drop_last": True}, {"batch_size": None}):
        got = [b.numpy().tolist() for b in rd.DataLoader(_Stream(), **kw)]
        want = [b.numpy().tolist() for b in td.DataLoader(_TorchStream(), **kw)]
        assert got == want
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        rd.DataLoader(_Stream(), shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        rd.DataLoader(rd.TensorDataset(rlgrad.tensor(X)), batch_size=2,
                      batch_sampler=rd.BatchSampler(range(10), 2, False))


def test_random_samplers_draw_what_they_promise() -> None:
    ds = rd.TensorDataset(rlgrad.tensor(X))
    rlgrad.manual_seed(0)
    perm = list(rd.RandomSampler(ds))
    assert sorted(perm) == list(range(10)) and perm != list(range(10))
    assert len(list(rd.RandomSampler(ds, num_samples=25))) == 25
    assert sorted(list(rd.RandomSampler(ds, num_samples=25))[:10]) == list(range(10))
    draws = list(rd.RandomSampler(ds, replacement=True, num_samples=500))
    assert set(draws) <= set(range(10)) and len(set(draws)) == 10
    assert sorted(rd.SubsetRandomSampler([7, 2, 5])) == [2, 5, 7]
    w = [0.0, 1.0, 3.0]
    counts = np.bincount(list(rd.WeightedRandomSampler(w, 4000)), minlength=3)
    assert counts[0] == 0 and abs(counts[2] / counts[1] - 3.0) < 0.4
    assert sorted(rd.WeightedRandomSampler(w, 2, replacement=False)) == [1, 2]
    assert list(rd.WeightedRandomSampler(w, 3, replacement=False))[2] == 0  # (torch: zero weight last)
    for bad in (lambda: rd.WeightedRandomSampler(w, 4, replacement=False),
                lambda: td.WeightedRandomSampler(w, 4, replacement=False)):
        with pytest.raises(RuntimeError, match="without replacement"):
            list(bad())
    gen = rlgrad.Generator().manual_seed(3)
    loader = rd.DataLoader(ds, batch_size=4, sampler=rd.RandomSampler(ds, generator=gen))
    rows = np.concatenate([b[0].numpy() for b in loader])
    assert sorted(rows[:, 0].tolist()) == X[:, 0].tolist()


def test_dirac_and_sparse_init_match_torch() -> None:
    for shape, groups in (((4, 2, 3), 1), ((6, 3, 3, 3), 2), ((2, 2, 1, 3, 3), 1)):
        got = init.dirac_(rlgrad.empty(*shape), groups=groups)
        want = torch.nn.init.dirac_(torch.empty(*shape), groups=groups)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    w = init.sparse_(rlgrad.empty(20, 6), sparsity=0.3, std=0.5, generator=np.random.default_rng(0))
    assert w.dtype == np.float32
    assert all((w.numpy()[:, c] == 0).sum() == 6 for c in range(6))
    with pytest.raises(ValueError, match="Only tensors with 3, 4, or 5 dimensions"):
        init.dirac_(rlgrad.empty(3, 3))
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions"):
        init.sparse_(rlgrad.empty(3), 0.1)


def test_upsample_modules_match_torch() -> None:
    x = np.random.default_rng(1).normal(size=(1, 2, 3, 4))
    for make in (lambda nn: nn.Upsample(scale_factor=2),
                 lambda nn: nn.Upsample(size=(5, 7), mode="bilinear"),
                 lambda nn: nn.UpsamplingNearest2d(scale_factor=3),
                 lambda nn: nn.UpsamplingBilinear2d(size=(4, 6))):
        xr, xt = rlgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        got, want = make(rlgrad.nn)(xr), make(torch.nn)(xt)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
        (got * got).sum().backward()
        (want * want).sum().backward()
        np.testing.assert_allclose(xr.grad.numpy(), xt.grad.numpy(), rtol=1e-10, atol=1e-12)

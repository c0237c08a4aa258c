"""rlgrad.utils.data against torch.utils.data: the same batches (values, dtypes, shapes) for
the same dataset, the fast TensorDataset path against the per-sample default_collate path."""

from __future__ import annotations

import numpy as np
import pytest

import rlgrad
from rlgrad.utils.data import DataLoader, Dataset, TensorDataset, default_collate

torch = pytest.importorskip("torch")
tdata = torch.utils.data

OBS = np.random.default_rng(0).normal(size=(23, 4)).astype(np.float32)
ACT = np.random.default_rng(1).integers(0, 3, size=23)


def _np(x):
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def _same_batches(r_loader, t_loader):
    r_batches, t_batches = list(r_loader), list(t_loader)
    assert len(r_batches) == len(t_batches) == len(r_loader) == len(t_loader)
    for rb, tb in zip(r_batches, t_batches):
        assert type(rb) is type(tb) and len(rb) == len(tb)
        for r, t in zip(rb, tb):
            assert _np(r).dtype == _np(t).dtype
            np.testing.assert_array_equal(_np(r), _np(t))


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (5, False), (5, True), (23, True),
                                                  (64, False), (64, True)])
def test_tensor_dataset_batches_match_torch(batch_size, drop_last):
    r_ds = TensorDataset(rlgrad.tensor(OBS), rlgrad.tensor(ACT))
    t_ds = tdata.TensorDataset(torch.tensor(OBS), torch.tensor(ACT))
    assert len(r_ds) == len(t_ds) == 23
    for a, b in zip(r_ds[3], t_ds[3]):
        np.testing.assert_array_equal(_np(a), _np(b))
    _same_batches(DataLoader(r_ds, batch_size=batch_size, drop_last=drop_last),
                  tdata.DataLoader(t_ds, batch_size=batch_size, drop_last=drop_last))


class Pairs(Dataset):
    """A plain map-style dataset: numpy rows, Python ints and floats."""

    def __getitem__(self, i):
        return OBS[i], int(ACT[i]), float(i) / 2

    def __len__(self):
        return len(OBS)


class TorchPairs(tdata.Dataset):
    __getitem__ = Pairs.__getitem__
    __len__ = Pairs.__len__


def test_default_collate_matches_torch():
    _same_batches(DataLoader(Pairs(), batch_size=4), tdata.DataLoader(TorchPairs(), batch_size=4))
    r = default_collate([{"a": 1.0, "b": [True, 2]}, {"a": 2.0, "b": [False, 3]}])
    t = tdata.default_collate([{"a": 1.0, "b": [True, 2]}, {"a": 2.0, "b": [False, 3]}])
    assert r.keys() == t.keys()
    for x, y in [(r["a"], t["a"]), (r["b"][0], t["b"][0]), (r["b"][1], t["b"][1])]:
        assert _np(x).dtype == _np(y).dtype
        np.testing.assert_array_equal(_np(x), _np(y))


@pytest.mark.parametrize("drop_last", [False, True])
def test_fast_path_is_the_per_sample_path(drop_last):
    """TensorDataset's one-gather batches are default_collate's of its rows, gradient included."""
    x = rlgrad.tensor(OBS.astype(np.float64), requires_grad=True)
    ds = TensorDataset(x, rlgrad.tensor(ACT))
    gen_a, gen_b = rlgrad.random.Generator(7), rlgrad.random.Generator(7)
    fast = DataLoader(ds, batch_size=6, shuffle=True, generator=gen_a, drop_last=drop_last)
    plain = DataLoader(ds, batch_size=6, shuffle=True, generator=gen_b, drop_last=drop_last,
                       collate_fn=default_collate)
    for (fx, fa), (px, pa) in zip(fast, plain):
        np.testing.assert_array_equal(fx.detach().numpy(), px.detach().numpy())
        np.testing.assert_array_equal(fa.numpy(), pa.numpy())
    (fx * 2).sum().backward()
    g_fast = x.grad.numpy().copy()
    x.grad = None
    (px * 2).sum().backward()
    np.testing.assert_array_equal(g_fast, x.grad.numpy())


def test_shuffle_is_a_seeded_permutation_per_epoch():
    ds = TensorDataset(np.arange(23))
    loader = DataLoader(ds, batch_size=5, shuffle=True, generator=rlgrad.random.Generator(3))
    epoch1 = np.concatenate([b[0].numpy() for b in loader])
    epoch2 = np.concatenate([b[0].numpy() for b in loader])
    assert sorted(epoch1) == list(range(23)) and sorted(epoch2) == list(range(23))
    assert not np.array_equal(epoch1, epoch2)  # a new permutation each pass
    again = DataLoader(ds, batch_size=5, shuffle=True, generator=np.random.default_rng(3))
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in again]), epoch1)
    rlgrad.random.seed(11)
    g1 = [b[0].numpy() for b in DataLoader(ds, batch_size=4, shuffle=True)]
    rlgrad.random.seed(11)
    g2 = [b[0].numpy() for b in DataLoader(ds, batch_size=4, shuffle=True)]
    np.testing.assert_array_equal(np.concatenate(g1), np.concatenate(g2))


def test_batch_size_none_sampler_and_import_path():
    ds = TensorDataset(np.arange(5.0), np.arange(5))
    items = list(DataLoader(ds, batch_size=None))
    assert len(items) == 5 and items[2][0].item() == 2.0
    picked = list(DataLoader(ds, batch_size=2, sampler=[4, 0, 2]))
    np.testing.assert_array_equal(picked[0][0].numpy(), [4.0, 0.0])
    assert len(picked) == 2
    import rlgrad.utils as ru
    assert ru.data.DataLoader is DataLoader


def test_bad_input():
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(np.zeros((3, 2)), np.zeros(4))
    ds = TensorDataset(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(ds, batch_size=0)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, sampler=[0], shuffle=True)
    with pytest.raises(TypeError, match="map-style"):
        DataLoader(iter([1, 2]))
    with pytest.raises(TypeError, match="generator"):
        list(DataLoader(ds, shuffle=True, generator=5))

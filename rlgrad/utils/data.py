"""``rlgrad.utils.data``: ``TensorDataset`` and ``DataLoader`` as ``torch.utils.data`` has them,
for behaviour cloning and offline RL scripts (``from rlgrad.utils.data import DataLoader``).

Loading runs in the calling process: ``num_workers``, ``pin_memory`` and the like are accepted
for compatibility and change nothing (the data are arrays in memory already). Shuffling draws a
permutation from ``generator`` (an ``rlgrad.random.Generator`` or NumPy one; the global
generator when None) at each pass: the same seed gives the same batches, though not torch's
(its random stream differs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from rlgrad.creation import stack, tensor
from rlgrad.random import numpy_generator
from rlgrad.tensor import Tensor

__all__ = ["Dataset", "TensorDataset", "DataLoader", "default_collate", "Subset", "random_split"]


class Dataset:
    """Base of map-style datasets: ``__getitem__(index)`` and ``__len__``."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


class TensorDataset(Dataset):
    """Samples ``(t[i] for t in tensors)``: tensors (or arrays) of equal first dimension."""

    def __init__(self, *tensors: Any) -> None:
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        self.tensors = tuple(t if isinstance(t, Tensor) else tensor(t) for t in tensors)
        sizes = [t.shape[0] if t.shape else None for t in self.tensors]
        if None in sizes or len(set(sizes)) != 1:
            raise ValueError(f"Size mismatch between tensors: first dimensions {sizes} (each "
                             "tensor needs one row per sample)")

    def __getitem__(self, index: Any) -> tuple[Any, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order (torch's)."""

    def __init__(self, dataset: Any, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset: Any, lengths: Sequence[float], generator: Any = None) -> list[Subset]:
    """torch's: ``dataset`` cut into disjoint random subsets of the given lengths, or of the given
    fractions of it (the remainder dealt one by one from the first, as torch does)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
    else:
        sizes = [int(v) for v in lengths]
    if sum(sizes) != n:
        raise ValueError(f"random_split: the lengths {list(lengths)} do not add up to the "
                         f"dataset's {n} samples (or fractions to 1)")
    perm = numpy_generator(generator).permutation(n).tolist()
    out, start = [], 0
    for size in sizes:
        out.append(Subset(dataset, perm[start:start + size]))
        start += size
    return out


def default_collate(batch: Sequence[Any]) -> Any:
    """torch's rule: Tensors and arrays are stacked into a Tensor, Python numbers become a
    float64/int64/bool Tensor, tuples and lists are collated position by position (a list
    out), dicts key by key; anything else is returned as the list it was."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch))
    if isinstance(elem, np.ndarray | np.generic):
        return tensor(np.stack([np.asarray(b) for b in batch]))
    if isinstance(elem, bool | int | float):
        dtype = bool if isinstance(elem, bool) else np.int64 if isinstance(elem, int) else np.float64
        return tensor(np.asarray(batch, dtype=dtype))
    if isinstance(elem, Mapping):
        return {k: default_collate([b[k] for b in batch]) for k in elem}
    if isinstance(elem, tuple | list) and not isinstance(elem, str):
        if any(len(b) != len(elem) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]
    return list(batch)


class DataLoader:
    """Batches of a dataset: ``batch_size`` samples (``None``: one sample at a time, not
    collated), in order or ``shuffle``d (see the module's note on ``generator``), the last short
    batch dropped with ``drop_last``; ``collate_fn`` (default ``default_collate``) makes a
    batch from a list of samples; ``sampler`` (an iterable of indices) replaces the order."""

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler: Any = None, batch_sampler: Any = None, num_workers: int = 0,
                 collate_fn: Callable[[list[Any]], Any] | None = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn: Any = None,
                 generator: Any = None, **_ignored: Any) -> None:
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            raise ValueError("DataLoader: batch_sampler is not supported; use batch_size, shuffle "
                             "and drop_last (or sampler)")
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError(f"DataLoader needs a map-style dataset (__getitem__ and __len__), got "
                            f"{type(dataset).__name__}")
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, bool(shuffle)
        self.sampler, self.collate_fn, self.drop_last = sampler, collate_fn, drop_last
        self.generator, self.num_workers = generator, num_workers

    def _order(self) -> np.ndarray:
        if self.sampler is not None:
            return np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
        n = len(self.dataset)
        return numpy_generator(self.generator).permutation(n) if self.shuffle else np.arange(n)

    def _batches(self) -> Iterator[np.ndarray]:
        order = self._order()
        if self.batch_size is None:
            yield from order
            return
        stop = len(order) - len(order) % self.batch_size if self.drop_last else len(order)
        for i in range(0, stop, self.batch_size):
            yield order[i:i + self.batch_size]

    def __iter__(self) -> Iterator[Any]:
        ds, collate = self.dataset, self.collate_fn
        for idx in self._batches():
            if self.batch_size is None:
                sample = ds[int(idx)]
                yield collate(sample) if collate is not None else sample
            elif collate is None and type(ds) is TensorDataset:
                # fast path: one gather per tensor, what default_collate of the rows gives
                yield [t[idx] for t in ds.tensors]
            else:
                yield (collate or default_collate)([ds[int(i)] for i in idx])

    def __len__(self) -> int:
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

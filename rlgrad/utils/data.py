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

__all__ = ["Dataset", "TensorDataset", "DataLoader", "default_collate", "Subset", "random_split",
           "IterableDataset", "ConcatDataset", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler"]


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
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None
                                          or drop_last):
            raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, "
                             "sampler, and drop_last")
        if isinstance(dataset, IterableDataset):
            if shuffle:
                raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle "
                                 f"option, but got shuffle={shuffle}")
            if sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler and "
                                 "batch_sampler options")
        elif not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise TypeError(f"DataLoader needs a map-style dataset (__getitem__ and __len__) or an "
                            f"IterableDataset, got {type(dataset).__name__}")
        self.batch_sampler = batch_sampler
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, bool(shuffle)
        self.sampler, self.collate_fn, self.drop_last = sampler, collate_fn, drop_last
        self.generator, self.num_workers = generator, num_workers

    def _order(self) -> np.ndarray:
        if self.sampler is not None:
            return np.fromiter((int(i) for i in self.sampler), dtype=np.int64)
        n = len(self.dataset)
        return numpy_generator(self.generator).permutation(n) if self.shuffle else np.arange(n)

    def _batches(self) -> Iterator[Any]:
        if self.batch_sampler is not None:
            yield from (np.asarray(list(b), dtype=np.int64) for b in self.batch_sampler)
            return
        order = self._order()
        if self.batch_size is None:
            yield from order
            return
        stop = len(order) - len(order) % self.batch_size if self.drop_last else len(order)
        for i in range(0, stop, self.batch_size):
            yield order[i:i + self.batch_size]

    def _iterable(self) -> Iterator[Any]:
        """An IterableDataset's samples in batches of ``batch_size`` (the last one short unless
        ``drop_last``), collated."""
        collate = self.collate_fn or (default_collate if self.batch_size is not None else None)
        if self.batch_size is None:
            yield from (collate(x) if collate else x for x in self.dataset)
            return
        batch: list = []
        for x in self.dataset:
            batch.append(x)
            if len(batch) == self.batch_size:
                yield collate(batch)
                batch = []
        if batch and not self.drop_last:
            yield collate(batch)

    def __iter__(self) -> Iterator[Any]:
        ds, collate = self.dataset, self.collate_fn
        if isinstance(ds, IterableDataset):
            yield from self._iterable()
            return
        for idx in self._batches():
            if self.batch_size is None and self.batch_sampler is None:
                sample = ds[int(idx)]
                yield collate(sample) if collate is not None else sample
            elif collate is None and type(ds) is TensorDataset:
                # fast path: one gather per tensor, what default_collate of the rows gives
                yield [t[idx] for t in ds.tensors]
            else:
                yield (collate or default_collate)([ds[int(i)] for i in idx])

    def __len__(self) -> int:
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        n = len(self.sampler) if self.sampler is not None else len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)


class IterableDataset(Dataset):
    """Base of iterable-style datasets: ``__iter__`` yields the samples (a stream, a generator
    of transitions); ``DataLoader`` batches them in the order they come."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError


class ConcatDataset(Dataset):
    """The datasets one after the other: index ``i`` falls in the first whose cumulative length
    exceeds it."""

    def __init__(self, datasets: Sequence[Any]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self) -> int:
        return int(self.cumulative_sizes[-1])

    def __getitem__(self, idx: int) -> Any:
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        k = int(np.searchsorted(self.cumulative_sizes, idx, side="right"))
        start = int(self.cumulative_sizes[k - 1]) if k else 0
        return self.datasets[k][idx - start]


class Sampler:
    """Base of the samplers: an iterable of dataset indices (``DataLoader(sampler=...)``)."""

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source: Any) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A permutation of the indices (``replacement=False``) or ``num_samples`` draws with
    replacement, from ``generator`` (rlgrad's global one when None): not torch's numbers."""

    def __init__(self, data_source: Any, replacement: bool = False, num_samples: int | None = None,
                 generator: Any = None) -> None:
        if num_samples is not None and (not isinstance(num_samples, int) or num_samples <= 0):
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={num_samples}")
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        rng, n = numpy_generator(self.generator), len(self.data_source)
        if self.replacement:
            return iter(rng.integers(0, n, self.num_samples).tolist())
        reps = -(-self.num_samples // n) if n else 0
        return iter(np.concatenate([rng.permutation(n) for _ in range(reps)] or [np.zeros(0, int)])
                    [:self.num_samples].tolist())

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """``indices`` in a random order (without replacement)."""

    def __init__(self, indices: Sequence[int], generator: Any = None) -> None:
        self.indices, self.generator = indices, generator

    def __iter__(self) -> Iterator[int]:
        order = numpy_generator(self.generator).permutation(len(self.indices))
        return (self.indices[int(i)] for i in order)

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn in proportion to ``weights`` (with or without replacement)."""

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator: Any = None) -> None:
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={num_samples}")
        w = np.asarray(weights._value if isinstance(weights, Tensor) else weights, np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {w.shape}")
        if not replacement and num_samples > len(w):
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        self.weights, self.num_samples = w, num_samples
        self.replacement, self.generator = replacement, generator

    def __iter__(self) -> Iterator[int]:
        rng, w = numpy_generator(self.generator), self.weights
        if self.replacement:
            return iter(rng.choice(len(w), self.num_samples, replace=True, p=w / w.sum()).tolist())
        # without replacement: the weighted ones first, then (as torch) the zero-weight ones
        nz, zero = np.flatnonzero(w > 0), np.flatnonzero(w <= 0)
        k = min(self.num_samples, len(nz))
        first = rng.choice(nz, k, replace=False, p=w[nz] / w[nz].sum())
        rest = rng.permutation(zero)[:self.num_samples - k]
        return iter(np.concatenate([first, rest]).tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler`` (the last one short unless ``drop_last``)."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for i in self.sampler:
            batch.append(int(i))
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

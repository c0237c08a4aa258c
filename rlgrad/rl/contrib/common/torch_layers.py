"""``sb3_contrib.common.torch_layers``: ``BatchRenorm`` and ``BatchRenorm1d``
(``rlgrad.rl.batch_renorm``)."""

from rlgrad.rl.batch_renorm import BatchRenorm, BatchRenorm1d

__all__ = ["BatchRenorm", "BatchRenorm1d"]

"""JAX's ``tree_util`` names for rlgrad's pytrees (lists, tuples, namedtuples, dicts and the
classes registered here), as the transforms and ``rlgrad.jit`` flatten them."""

from __future__ import annotations

from rlgrad.transforms import register_dataclass, register_pytree_node, tree_flatten, tree_unflatten

__all__ = ["register_dataclass", "register_pytree_node", "tree_flatten", "tree_unflatten"]

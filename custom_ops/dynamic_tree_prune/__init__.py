"""DynamicTreePrune: entropy-driven candidate selection on the draft side (docs/design.md §3)."""

from specdec.custom_ops.dynamic_tree_prune.reference import SCHEMA, dynamic_tree_prune

__all__ = ["SCHEMA", "dynamic_tree_prune"]

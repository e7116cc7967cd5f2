"""Rewrite rules that put the custom ops of domain com.endpoint.ai into a graph.

Each rule is a module with a `check` that says why a graph does not qualify (None when it
does), an `apply` that rewrites it and returns its manifest record, and its `ROLE`. Surgery
applies them to the exported graphs; compile applies them again to each bucket variant.
"""

from types import ModuleType

from specdec.pipeline.passes import prune_pass, verify_pass

PASSES: tuple[ModuleType, ...] = (prune_pass, verify_pass)
BY_ROLE: dict[str, ModuleType] = {rule.ROLE: rule for rule in PASSES}

__all__ = ["BY_ROLE", "PASSES", "prune_pass", "verify_pass"]

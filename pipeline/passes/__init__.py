"""Rewrite rules that put the custom ops of domain com.endpoint.ai into a graph.

Each rule is a module with a `check` that says why a graph does not qualify (None when it
does), an `apply` that rewrites it and returns its manifest record, and its `ROLE`. Surgery
applies them to the exported graphs; compile applies them again to each bucket variant.
"""

from types import ModuleType
from typing import Any

import onnx

from specdec.pipeline.errors import BundleError
from specdec.pipeline.passes import prune_pass, verify_pass

PASSES: tuple[ModuleType, ...] = (prune_pass, verify_pass)
BY_ROLE: dict[str, ModuleType] = {rule.ROLE: rule for rule in PASSES}



def reinsert(model: onnx.ModelProto, role: str, op: str, attributes: dict[str, Any], where: str) -> None:
    """Put `role`'s custom op back into a graph compile rebuilt (`where` names it in the error):
    the source bundle had it, so a graph that no longer qualifies is a bug, not bad input."""
    rule = BY_ROLE[role]
    reason = rule.check(model)
    if reason is not None:
        raise BundleError(f"cannot re-insert {op} into {where}: {reason}", "report this with SPECDEC_DEBUG=1 output")
    rule.apply(model, **attributes)


__all__ = ["BY_ROLE", "PASSES", "prune_pass", "reinsert", "verify_pass"]

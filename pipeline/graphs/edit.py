"""Two protobuf edits every graph-rewriting stage needs (surgery, quantize, compile)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx
from onnx import helper


def retain(field: Any, keep: Callable[[Any], bool]) -> int:
    """Keep the items of a repeated protobuf field for which `keep` is true; return how many went."""
    kept = [item for item in field if keep(item)]
    removed = len(field) - len(kept)
    if removed:
        del field[:]
        field.extend(kept)
    return removed


def ensure_opset(model: onnx.ModelProto, domain: str, version: int) -> None:
    """Import `domain` at `version` unless the model already imports it."""
    if not any(o.domain == domain for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(domain, version))

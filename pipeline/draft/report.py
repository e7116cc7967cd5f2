"""`draft_report.json`: what the draft costs and how well it drafts.

Sizes are counted from the saved tensors: `shared_bytes` are the draft tensors identical to the
target's (embedding, head, final norm: a bundle stores them once), `own_bytes` the rest, which is
what the draft adds to a bundle. Quality is measured on held-out rows of the distillation data
(distill.evaluate).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from specdec.pipeline.bundle.owned import DRAFT_REPORT

REPORT_NAME = DRAFT_REPORT
SCHEMA = "specdec.draft/1"


def tensor_digest(tensor: torch.Tensor) -> str:
    data = tensor.detach().contiguous().cpu()
    return hashlib.sha256(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"").hexdigest() + \
        f":{data.dtype}:{tuple(data.shape)}"


def _unique(model: Any) -> dict[str, torch.Tensor]:
    """Parameters by name, a tied weight counted once (as a checkpoint stores it)."""
    seen: set[int] = set()
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        tensors[name] = tensor
    return tensors


def sizes(target: Any, draft: Any) -> dict[str, int]:
    """Parameter and byte counts, with the draft's tensors split into shared with the target and its own."""
    target_digests = {tensor_digest(t) for t in _unique(target).values()}
    shared = own = shared_params = own_params = 0
    for tensor in _unique(draft).values():
        nbytes = tensor.numel() * tensor.element_size()
        if tensor_digest(tensor) in target_digests:
            shared, shared_params = shared + nbytes, shared_params + tensor.numel()
        else:
            own, own_params = own + nbytes, own_params + tensor.numel()
    target_tensors = _unique(target).values()
    return {"params": shared_params + own_params, "own_params": own_params, "shared_bytes": shared,
            "own_bytes": own, "target_params": sum(t.numel() for t in target_tensors),
            "target_bytes": sum(t.numel() * t.element_size() for t in target_tensors)}


def write(directory: Path, report: dict[str, Any]) -> Path:
    path = directory / REPORT_NAME
    path.write_text(json.dumps({"schema": SCHEMA, **report}, indent=2) + "\n")
    return path


def read(directory: Path) -> dict[str, Any] | None:
    """The report of a draft directory (None: not a specdec draft)."""
    try:
        data = json.loads((directory / REPORT_NAME).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not (isinstance(data, dict) and str(data.get("schema", "")).startswith("specdec.draft/")):
        return None
    return data

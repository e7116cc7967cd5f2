"""Prompt files (JSONL): shared by `specdec generate` and `specdec bench`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specdec.pipeline.errors import InputError


@dataclass(frozen=True)
class PromptItem:
    id: str
    text: str | None = None
    input_ids: list[int] | None = None
    scenario: str | None = None  # code / chat / creative / knowledge, used by bench's enable rule


def load_prompts(path: Path) -> list[PromptItem]:
    """JSONL lines with `id` and `text` or `input_ids` (an `id` defaults to the line number)."""
    if not path.is_file():
        raise InputError(f"prompts file '{path}' does not exist", "pass a JSONL file with one prompt per line")
    items: list[PromptItem] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number} is not valid JSON ({exc.msg})",
                             "write one JSON object per line") from exc
        if not isinstance(record, dict) or ("text" not in record and "input_ids" not in record):
            raise InputError(f"{path}:{number} has neither 'text' nor 'input_ids'",
                             'write lines like {"id": "p1", "text": "..."}')
        ids = record.get("input_ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
            raise InputError(f"{path}:{number}: 'input_ids' must be a list of integers", "fix the line")
        if ids == [] or (ids is None and not record.get("text")):
            raise InputError(f"{path}:{number} is an empty prompt", "give it some text or input_ids, or remove it")
        items.append(PromptItem(str(record.get("id", number)), record.get("text"), ids, record.get("scenario")))
    if not items:
        raise InputError(f"prompts file '{path}' has no prompts", "add one JSON object per line")
    return items

"""The user's distillation text: plain text, or JSONL lines with `text` or `input_ids`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.inputs.text import read_text_file


def read_tokens(path: Path, tokenizer: Any, vocab_size: int, key: str = "calib") -> list[int]:
    name = setting(key)
    text = read_text_file(path, f"{name} file")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InputError(f"{name} file '{path}' is empty", "pass a file with text to distil on")
    if path.suffix != ".jsonl" and not lines[0].lstrip().startswith("{"):
        ids: list[int] = tokenizer.encode(text, add_special_tokens=False)
    else:
        ids = []
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict) or not ("text" in record or "input_ids" in record):
                raise InputError(f"{name} file '{path}' line {number} is not a JSON object with 'text' or "
                                 "'input_ids'", "write one JSON object per line")
            values = record.get("input_ids")
            if values is None:
                ids += tokenizer.encode(str(record["text"]) + "\n\n", add_special_tokens=False)
            elif isinstance(values, list) and all(isinstance(v, int) and 0 <= v < vocab_size for v in values):
                ids += values
            else:
                raise InputError(f"{name} file '{path}' line {number}: input_ids must be token ids below "
                                 f"{vocab_size}", "tokenize with the target's tokenizer or pass 'text'")
    if len(ids) < 16:
        raise InputError(f"{name} file '{path}' holds only {len(ids)} tokens", "pass at least a paragraph of text")
    return ids

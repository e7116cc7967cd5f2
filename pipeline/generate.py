"""`specdec generate`: decode prompts from any bundle, speculatively or plainly."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import GenerationError, InputError
from specdec.pipeline.runtime.config import DecodeConfig
from specdec.pipeline.runtime.engine import Engine
from specdec.pipeline.runtime.graph import SessionOptions
from specdec.pipeline.runtime.stats import Reply
from specdec.pipeline.text import TextCodec


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
        items.append(PromptItem(str(record.get("id", number)), record.get("text"), ids, record.get("scenario")))
    if not items:
        raise InputError(f"prompts file '{path}' has no prompts", "add one JSON object per line")
    return items


class Generator:
    """An engine plus the bundle's tokenizer."""

    def __init__(self, bundle: Path, threads: int = 0) -> None:
        self.engine = Engine(bundle, SessionOptions(threads=threads))
        self.codec = TextCodec(self.engine.info.tokenizer_dir)

    def prompt_ids(self, item: PromptItem, config: DecodeConfig, truncate: bool) -> list[int]:
        ids = item.input_ids if item.input_ids is not None else self.codec.encode(item.text or "")
        if not ids:
            raise GenerationError(f"prompt '{item.id}' is empty", "pass some text or input_ids")
        limit = self.engine.max_context - min(config.max_new_tokens, self.engine.max_context // 2) - 1
        if truncate and len(ids) > limit:
            ids = ids[-limit:]
        return ids

    def run(self, item: PromptItem, config: DecodeConfig, *, truncate: bool = False,
            on_text: Callable[[str], None] | None = None) -> tuple[Reply, str]:
        ids = self.prompt_ids(item, config, truncate)
        stream = self.codec.stream()
        sink = (lambda tokens: on_text(stream.push(tokens))) if on_text else None
        reply = self.engine.generate(ids, config, on_tokens=sink)
        if on_text:
            on_text(stream.flush())
        return reply, self.codec.decode(reply.output_ids)

    def run_all(self, items: list[PromptItem], config: DecodeConfig, *, truncate: bool = False
                ) -> Iterator[dict[str, Any]]:
        for item in items:
            reply, text = self.run(item, config, truncate=truncate)
            yield {"id": item.id, "input_ids": reply.prompt_ids, "output_ids": reply.output_ids, "text": text,
                   "stats": reply.as_dict()}


def write_jsonl(records: list[dict[str, Any]], path: Path) -> None:
    """Write atomically: a crash leaves the old file or none, never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            for record in records:
                out.write(json.dumps(record) + "\n")
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise

"""Bench prompts: a JSONL file, or the demo pair's held-out prompts, tokenized on the host."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.prompts import load_prompts
from specdec.pipeline.text import TextCodec

# Used when no file is given and the demo prompts are not installed: one per scenario.
FALLBACK = (
    ("code", "def fibonacci(n):\n    "),
    ("chat", "Hello! Can you explain what a software license is?"),
    ("creative", "Once upon a time, in a quiet town by the sea,"),
    ("knowledge", "The GNU General Public License is"),
)


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    ids: list[int]
    scenario: str | None = None


def default_prompts_file() -> Path | None:
    path = Path(str(resources.files("specdec.pipeline.demo") / "eval_prompts.jsonl"))
    return path if path.is_file() else None


def load_bench_prompts(path: Path | None, codec: TextCodec, limit: int | None) -> list[BenchPrompt]:
    source = path or default_prompts_file()
    items: list[tuple[str, list[int], str | None]]
    if source is None:
        items = [(name, codec.encode(text), name) for name, text in FALLBACK]
    else:
        items = [(p.id, p.input_ids if p.input_ids is not None else codec.encode(p.text or ""), p.scenario)
                 for p in load_prompts(source)]
    prompts = [BenchPrompt(str(i), ids, scenario) for i, ids, scenario in items if ids]
    if not prompts:
        raise InputError(f"no usable prompts in '{source}'", f"pass {setting('prompts')} with non-empty prompts")
    if limit is not None:
        if limit < 1:
            raise InputError(f"{setting('limit')} must be at least 1", "use 1 or more")
        prompts = prompts[:limit]
    return prompts

"""Prompt files (JSONL), shared by `specdec generate`, `bench` and `tune`, and the bench's default prompts.

Bench and tune prompts are tokenized on the host: a JSONL file, or the demo pair's held-out prompts.
A line gives `text`, `input_ids` or chat `messages`; messages, and `text` under `--chat` (as one user
message), go through the bundle's chat template (pipeline/inputs/chat.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.inputs.chat import Message, check_messages
from specdec.pipeline.inputs.text import TextCodec, read_text_file

# Prompts tune calibrates on (bench's tune and `specdec tune` alike): without --calib, the last ones of the file,
# which `bench --limit N` (the first N) does not measure.
CALIBRATION_PROMPTS = 4


@dataclass(frozen=True)
class PromptItem:
    id: str
    text: str | None = None
    input_ids: list[int] | None = None
    scenario: str | None = None  # code / chat / creative / knowledge, used by bench's enable rule
    messages: list[Message] | None = None  # a chat: rendered with the bundle's chat template


def prompt_tokens(item: PromptItem, codec: TextCodec, chat: bool = False) -> list[int]:
    """The prompt's token ids: `input_ids` as given; messages (and text when `chat`) through the chat template."""
    if item.input_ids is not None:
        return item.input_ids
    if item.messages is not None:
        return codec.encode_chat(item.messages)
    if chat:
        return codec.encode_chat([{"role": "user", "content": item.text or ""}])
    return codec.encode(item.text or "")


def load_prompts(path: Path) -> list[PromptItem]:
    """JSONL lines with `id` and `text` or `input_ids` (an `id` defaults to the line number)."""
    if not path.is_file():
        raise InputError(f"prompts file '{path}' does not exist", "pass a JSONL file with one prompt per line")
    items: list[PromptItem] = []
    for number, line in enumerate(read_text_file(path, "prompts file").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number} is not valid JSON ({exc.msg})",
                             "write one JSON object per line") from exc
        kinds = [key for key in ("text", "input_ids", "messages") if isinstance(record, dict) and key in record]
        if not kinds:
            raise InputError(f"{path}:{number} has none of 'text', 'input_ids' or 'messages'",
                             'write lines like {"id": "p1", "text": "..."}')
        if len(kinds) > 1:
            raise InputError(f"{path}:{number} has both '{kinds[0]}' and '{kinds[1]}'", "give one of them per line")
        messages = check_messages(record["messages"], f"{path}:{number}") if "messages" in record else None
        ids = record.get("input_ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
            raise InputError(f"{path}:{number}: 'input_ids' must be a list of integers", "fix the line")
        if ids == [] or (ids is None and messages is None and not record.get("text")):
            raise InputError(f"{path}:{number} is an empty prompt", "give it some text or input_ids, or remove it")
        items.append(PromptItem(str(record.get("id", number)), record.get("text"), ids, record.get("scenario"),
                                messages))
    if not items:
        raise InputError(f"prompts file '{path}' has no prompts", "add one JSON object per line")
    return items


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


def prompt_room(context: int, max_new_tokens: int) -> int:
    """The most prompt tokens that leave a reply of `max_new_tokens` room in `context` positions; a reply
    longer than half the context never pushes the prompt below half of it (the reply then stops at the
    context's end). The one rule bench and generate fit prompts by."""
    return context - min(max_new_tokens, context // 2) - 1


def fit_prompts(prompts: list[BenchPrompt], context: int, max_new_tokens: int) -> tuple[list[BenchPrompt], list[str]]:
    """The end of each prompt that fits `prompt_room`, and a note naming the prompts that were cut."""
    room = prompt_room(context, max_new_tokens)
    long = [p.id for p in prompts if len(p.ids) > room]
    notes = [f"{len(long)} prompt(s) longer than {room} tokens were cut to their last {room} "
             f"({', '.join(long[:4])})"] if long else []
    return [BenchPrompt(p.id, p.ids[-room:], p.scenario) for p in prompts], notes


def default_prompts_file() -> Path | None:
    path = Path(str(resources.files("specdec.pipeline.demo") / "eval_prompts.jsonl"))
    return path if path.is_file() else None


def default_chat_requests() -> Path | None:
    """Chat requests of every kind (questions, summaries, rewrites, extraction, code) as `messages`: the
    demo's prompt file, what a chat model is calibrated on when the user names no prompts."""
    path = Path(str(resources.files("specdec.pipeline.demo") / "smollm2" / "prompts.jsonl"))
    return path if path.is_file() else None


def load_bench_prompts(path: Path | None, codec: TextCodec, limit: int | None,
                       chat: bool = False) -> list[BenchPrompt]:
    source = path or default_prompts_file()
    prompts_in = ([PromptItem(name, text, scenario=name) for name, text in FALLBACK] if source is None
                  else load_prompts(source))
    items = [(p.id, prompt_tokens(p, codec, chat), p.scenario) for p in prompts_in]
    prompts = [BenchPrompt(str(i), ids, scenario) for i, ids, scenario in items if ids]
    if not prompts:
        raise InputError(f"no usable prompts in '{source}'", f"pass {setting('prompts')} with non-empty prompts")
    if limit is not None:
        if limit < 1:
            raise InputError(f"{setting('limit')} must be at least 1", "use 1 or more")
        prompts = prompts[:limit]
    return prompts

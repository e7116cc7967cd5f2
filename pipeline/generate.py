"""`specdec generate`: decode prompts from any bundle, speculatively or plainly."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import GenerationError, InputError
from specdec.pipeline.profiles import ScenarioProfile
from specdec.pipeline.runtime.config import DecodeConfig, PruneParams
from specdec.pipeline.runtime.controllers import build_chain
from specdec.pipeline.runtime.engine import Engine, RoundController
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
            on_text: Callable[[str], None] | None = None, controller: RoundController | None = None
            ) -> tuple[Reply, str]:
        ids = self.prompt_ids(item, config, truncate)
        stream = self.codec.stream()
        sink = (lambda tokens: on_text(stream.push(tokens))) if on_text else None
        reply = self.engine.generate(ids, config, on_tokens=sink, controller=controller)
        if on_text:
            on_text(stream.flush())
        return reply, self.codec.decode(reply.output_ids)

    def run_all(self, items: list[PromptItem], config: DecodeConfig, *, truncate: bool = False,
                controller: RoundController | None = None) -> Iterator[dict[str, Any]]:
        for item in items:
            reply, text = self.run(item, config, truncate=truncate, controller=controller)
            yield {"id": item.id, "input_ids": reply.prompt_ids, "output_ids": reply.output_ids, "text": text,
                   "stats": reply.as_dict()}


def scenario_config(config: DecodeConfig, scenario: ScenarioProfile | None, depth: int | None,
                    width: int | None) -> DecodeConfig:
    """Apply a scenario template's prune parameters and tree shape; explicit options win."""
    prune = config.prune if scenario is None else PruneParams(
        entropy_low=scenario.entropy_low, entropy_high=scenario.entropy_high, beta_base=scenario.beta_base,
        rho_min=scenario.rho_min, rho_max=scenario.rho_max, max_k=config.prune.max_k)
    template_depth = scenario.depth if scenario and scenario.depth else DecodeConfig.depth
    template_width = scenario.width if scenario and scenario.width else DecodeConfig.width
    return dataclasses.replace(config, prune=prune, depth=depth or template_depth, width=width or template_width)


def host_controllers(names: tuple[str, ...], scenario: ScenarioProfile | None, beta_base: float
                     ) -> RoundController | None:
    """Controllers for decoding on this machine: its thermal zones, no battery."""
    from specdec.pipeline.bench.controls import controller_spec
    from specdec.pipeline.profiles import load_device

    profile = load_device("local-cpu")
    zones = [str(p) for p in sorted(Path(profile.sensors.thermal_dir).glob("thermal_zone*/temp"))]
    return build_chain(controller_spec(names, profile, scenario, beta_base), zones, None)


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

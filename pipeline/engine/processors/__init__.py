"""Logits processors that stay exact under speculation (docs/constrained.md).

`build` turns a reply's DecodeConfig into its `Constraints` (base.py) through the registry
`PROCESSORS`: each entry says whether the config asks for it and builds its processor. Compiled
ban lists and grammars are cached per engine (`ProcessorCache`), so a batch of replies compiles once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from specdec.pipeline.engine.processors.ban import BanList, BanProcessor
from specdec.pipeline.engine.processors.base import Constraints, Processor
from specdec.pipeline.engine.processors.grammar import Grammar, GrammarProcessor
from specdec.pipeline.engine.processors.vocab import token_texts
from specdec.pipeline.records.decode import DecodeConfig

__all__ = ["PROCESSORS", "Constraints", "Processor", "ProcessorCache", "build", "processor_names"]


@dataclass
class ProcessorCache:
    """What processors compile once per bundle: ban lists by phrases, grammars by their source."""

    tokenizer_json: Path
    vocab: int
    bans: dict[tuple[str, ...], BanList] = field(default_factory=dict)
    grammars: dict[tuple[str | None, str | None], Grammar] = field(default_factory=dict)

    def ban_list(self, phrases: tuple[str, ...]) -> BanList:
        if phrases not in self.bans:
            self.bans[phrases] = BanList(phrases, token_texts(self.tokenizer_json, self.vocab))
        return self.bans[phrases]

    def grammar(self, json_schema: str | None, regex: str | None) -> Grammar:
        key = (json_schema, regex)
        if key not in self.grammars:
            self.grammars[key] = Grammar(self.tokenizer_json, self.vocab, json_schema=json_schema, regex=regex)
        return self.grammars[key]


@dataclass(frozen=True)
class ProcessorKind:
    wanted: Callable[[DecodeConfig], bool]
    make: Callable[[DecodeConfig, ProcessorCache], Processor]


# In the order they are applied (the order does not change a mask: masks are ANDed).
PROCESSORS: dict[str, ProcessorKind] = {
    "ban": ProcessorKind(lambda c: bool(c.ban),
                         lambda c, cache: BanProcessor(cache.ban_list(c.ban), c.ban_policy)),
    "grammar": ProcessorKind(lambda c: c.json_schema is not None or c.regex is not None,
                             lambda c, cache: GrammarProcessor(cache.grammar(c.json_schema, c.regex))),
}


def processor_names(config: DecodeConfig) -> list[str]:
    """What results.json records: the processors a config runs, with the ban policy."""
    names = {"ban": f"ban ({config.ban_policy.value}, {len(config.ban)} phrases)",
             "grammar": "json_schema" if config.json_schema is not None else "regex"}
    return [names[name] for name, kind in PROCESSORS.items() if kind.wanted(config)]


def build(config: DecodeConfig, cache: ProcessorCache) -> Constraints | None:
    """The reply's constraints, or None when the config asks for none."""
    processors = [kind.make(config, cache) for kind in PROCESSORS.values() if kind.wanted(config)]
    return Constraints(processors, cache.vocab) if processors else None

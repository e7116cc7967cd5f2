"""llguidance grammars as processors: masks follow each path, end-of-sequence once complete, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specdec.pipeline.engine.processors import ProcessorCache, build
from specdec.pipeline.engine.processors.grammar import Grammar, GrammarProcessor
from specdec.pipeline.engine.processors.vocab import load_tokenizer, token_texts
from specdec.pipeline.errors import InputError
from specdec.pipeline.records.decode import DecodeConfig

TOKENIZER = Path(__file__).resolve().parents[4] / "pipeline" / "demo" / "target" / "tokenizer.json"
VOCAB = 2048


def _ids(text: str) -> list[int]:
    return list(load_tokenizer(TOKENIZER, VOCAB).tokenize_str(text))  # type: ignore[attr-defined]


def _allowed_texts(processor: GrammarProcessor, extra: list[int]) -> set[str]:
    mask = processor.allowed(extra)
    assert mask is not None
    texts = token_texts(TOKENIZER, VOCAB)
    return {texts[i] for i in np.flatnonzero(mask)}


def test_regex_masks_follow_the_path_and_end_with_eos() -> None:
    processor = GrammarProcessor(Grammar(TOKENIZER, VOCAB, regex="(yes|no)"))
    first = _allowed_texts(processor, [])
    assert {"y", "n"} <= first and all(t and ("yes".startswith(t) or "no".startswith(t)) for t in first)
    path = _ids("ye")
    assert _allowed_texts(processor, path) == {"s"}
    assert processor.allowed(_ids("x")) is None  # a path that leaves the grammar: never accepted anyway
    processor.advance(_ids("yes"))
    mask = processor.allowed([])
    assert mask is not None and np.flatnonzero(mask).tolist() == [0]  # complete: only end-of-sequence
    processor.advance([0])  # the end-of-sequence token the mask allowed


def test_the_committed_state_survives_tree_lookups() -> None:
    processor = GrammarProcessor(Grammar(TOKENIZER, VOCAB, regex="[0-9]{3}"))
    processor.advance(_ids("1"))
    for path in ([], _ids("2"), _ids("23"), _ids("x")):
        processor.allowed(path)
    assert _allowed_texts(processor, _ids("2")) >= {"3"}
    assert np.flatnonzero(processor.allowed(_ids("23"))).tolist() == [0]  # type: ignore[arg-type]


def test_json_schema_is_compact_and_bad_schemas_are_input_errors() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    processor = GrammarProcessor(Grammar(TOKENIZER, VOCAB, json_schema=json.dumps(schema)))
    assert _allowed_texts(processor, _ids("{")) == {'"'}  # no whitespace after the brace
    with pytest.raises(InputError, match="json-schema|json_schema"):
        DecodeConfig(json_schema="{not json")
    with pytest.raises(InputError, match="regex"):
        build(DecodeConfig(regex="(unclosed"), ProcessorCache(TOKENIZER, VOCAB))
    with pytest.raises(InputError, match="one of them"):
        DecodeConfig(json_schema="{}", regex="a")

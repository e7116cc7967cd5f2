"""On the trained demo pair: constrained speculative decoding equals constrained plain decoding.

- a ban list made of phrases the unconstrained greedy reply contains: no reply contains one,
  speculative == plain, and the draft's acceptance stays within 10 % of the unconstrained run;
- a JSON schema: every reply parses and validates, speculative == plain; a regex likewise.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.stats import PROCESS, Reply
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.records.decode import DecodeConfig

PROMPTS = Path(__file__).resolve().parents[4] / "pipeline" / "demo" / "eval_prompts.jsonl"
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "size", "kind"],
          "properties": {"name": {"type": "string", "maxLength": 16},
                         "size": {"type": "integer", "minimum": 0, "maximum": 999},
                         "kind": {"enum": ["class", "function", "module"]}}}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):  # type: ignore[no-untyped-def]
    bundle = export_bundle(ExportConfig(target="demo-tiny", output=tmp_path_factory.mktemp("demo") / "bundle"))
    engine = Engine(bundle.path)
    return engine, TextCodec(engine.info.tokenizer_dir)


def _prompts(codec: TextCodec, every: int) -> list[list[int]]:
    """Every k-th prompt with the file's scenarios taken one after another, so any k spreads over them."""
    records = [json.loads(line) for line in PROMPTS.read_text().splitlines()]
    scenarios = list(dict.fromkeys(r["scenario"] for r in records))
    records.sort(key=lambda r: (scenarios.index(r["scenario"]), r["id"]))
    return [codec.encode(r["text"]) for r in records[::every]]


def _mean_accepted(replies: list[Reply]) -> float:
    rounds = [r for reply in replies for r in reply.speculative_rounds]
    return sum(r.accepted_len for r in rounds) / len(rounds)


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["model", "model+lookup"])
def test_banned_phrases_never_appear_and_speculation_stays_exact(demo, drafter: str) -> None:  # type: ignore[no-untyped-def]
    engine, codec = demo
    free, banned = [], []
    for ids in _prompts(codec, 2):
        plain = engine.generate(ids, DecodeConfig(max_new_tokens=40, speculative=False))
        text = codec.decode(plain.output_ids)
        phrases = tuple(sorted({w for w in text.split() if len(w) >= 4}, key=len, reverse=True)[:3]) or (text[:4],)
        assert any(p in text for p in phrases)
        free.append(engine.generate(ids, DecodeConfig(max_new_tokens=40, drafter=drafter)))  # type: ignore[arg-type]
        config = DecodeConfig(max_new_tokens=40, ban=phrases, drafter=drafter)  # type: ignore[arg-type]
        spec = engine.generate(ids, config)
        reference = engine.generate(ids, DecodeConfig(max_new_tokens=40, ban=phrases, speculative=False))
        assert spec.output_ids == reference.output_ids
        assert not any(p in codec.decode(spec.output_ids) for p in phrases)
        assert any(r.stage_ns(PROCESS) > 0 for r in spec.rounds)
        banned.append(spec)
    assert _mean_accepted(banned) >= 0.9 * _mean_accepted(free)


@pytest.mark.slow
def test_refuse_policy_stops_where_plain_decoding_would(demo) -> None:  # type: ignore[no-untyped-def]
    engine, codec = demo
    ids = _prompts(codec, 6)[0]
    text = codec.decode(engine.generate(ids, DecodeConfig(max_new_tokens=40, speculative=False)).output_ids)
    phrase = sorted(text.split(), key=len)[-1]
    replies = [engine.generate(ids, DecodeConfig(max_new_tokens=40, ban=(phrase,), ban_policy="refuse",  # type: ignore[arg-type]
                                                 speculative=speculative)) for speculative in (True, False)]
    assert replies[0].output_ids == replies[1].output_ids
    assert replies[0].stop_reason == "refused"
    assert phrase not in codec.decode(replies[0].output_ids)
    assert text.startswith(codec.decode(replies[0].output_ids))  # refuse does not change the distribution


@pytest.mark.slow
def test_every_json_reply_validates_and_speculation_stays_exact(demo) -> None:  # type: ignore[no-untyped-def]
    engine, codec = demo
    schema = json.dumps(SCHEMA)
    for ids in _prompts(codec, 4):
        spec = engine.generate(ids, DecodeConfig(max_new_tokens=64, json_schema=schema))
        plain = engine.generate(ids, DecodeConfig(max_new_tokens=64, json_schema=schema, speculative=False))
        assert spec.output_ids == plain.output_ids
        assert spec.stop_reason == "eos"
        jsonschema.validate(json.loads(codec.decode(spec.output_ids)), SCHEMA)


@pytest.mark.slow
def test_regex_replies_match_and_sampling_stays_exact(demo) -> None:  # type: ignore[no-untyped-def]
    engine, codec = demo
    pattern = r"(def|class) [a-z_]{1,12}\((self)?\)"
    for seed, ids in enumerate(_prompts(codec, 8)):
        config = {"max_new_tokens": 32, "regex": pattern, "temperature": 0.8, "seed": seed}
        spec = engine.generate(ids, DecodeConfig(mode="match", **config))  # type: ignore[arg-type]
        plain = engine.generate(ids, DecodeConfig(speculative=False, **config))  # type: ignore[arg-type]
        assert spec.output_ids == plain.output_ids
        assert re.fullmatch(pattern, codec.decode(spec.output_ids))

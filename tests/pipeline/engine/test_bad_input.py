"""Bad input to the engine and generate: clear errors, clean stops."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.errors import BundleError, InputError
from specdec.pipeline.generate.stage import Generator
from specdec.pipeline.inputs.prompts import PromptItem, load_prompts
from specdec.pipeline.records.decode import DecodeConfig


def test_empty_prompt(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    with pytest.raises(InputError, match="prompt is empty"):
        engine.generate([], DecodeConfig())
    with pytest.raises(InputError, match="prompt 'x' is empty"):  # before decoding: bad input (exit 2)
        Generator(bundle_factory("llama")).prepare([PromptItem("x", text="")], DecodeConfig(), truncate=False)


def test_prompt_longer_than_context(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    bundle = bundle_factory("llama")
    engine = Engine(bundle.path)
    with pytest.raises(InputError, match="context is 512.*--truncate"):
        engine.generate([5] * 600, DecodeConfig())
    generator = Generator(bundle)
    long = PromptItem("long", text="the quick brown fox " * 400)
    with pytest.raises(InputError, match=r"prompt 'long' has \d+ tokens but the bundle's context is 512") as caught:
        generator.prepare([PromptItem("short", text="hi"), long], DecodeConfig(), truncate=False)
    assert "quick" not in caught.value.one_line()  # the count, never the text
    ids = generator.prepare([PromptItem("long", input_ids=[5] * 600)], DecodeConfig(max_new_tokens=4), truncate=True)
    reply, _ = generator.run(ids[0], DecodeConfig(max_new_tokens=4))
    assert len(reply.prompt_ids) < 512 and len(reply.output_ids) == 4


@pytest.mark.parametrize("speculative", [True, False])
def test_context_full_mid_reply_stops_cleanly(bundle_factory, speculative: bool) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    reply = engine.generate([5] * 500, DecodeConfig(max_new_tokens=100, speculative=speculative))
    assert reply.stop_reason == "max_context"
    assert len(reply.prompt_ids) + len(reply.output_ids) == 513  # the last token is emitted, never fed
    plain = engine.generate([5] * 500, DecodeConfig(max_new_tokens=100, speculative=False))
    assert reply.output_ids == plain.output_ids


def test_bundle_missing_a_graph(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "b"
    shutil.copytree(bundle_factory("llama").path, copy)
    (copy / "draft.onnx").unlink()
    with pytest.raises(BundleError, match="missing its draft graph 'draft.onnx'"):
        Engine(copy)


def test_bundle_without_draft_cannot_speculate(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "b"
    shutil.copytree(bundle_factory("llama").path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    del manifest["graphs"]["draft"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    engine = Engine(copy)
    with pytest.raises(BundleError, match="no draft graph.*--no-speculation"):
        engine.generate([1, 2], DecodeConfig())
    assert len(engine.generate([1, 2], DecodeConfig(max_new_tokens=3, speculative=False)).output_ids) == 3


def test_unknown_mode_and_bad_options() -> None:
    with pytest.raises(InputError, match="unknown mode 'beam'.*greedy, match, rrs"):
        DecodeConfig(mode="beam")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="mode greedy needs temperature 0"):
        DecodeConfig(mode="greedy", temperature=0.5)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="top_p must be in"):
        DecodeConfig(top_p=0.0)


def test_token_outside_vocabulary(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(bundle_factory("llama").path)
    with pytest.raises(InputError, match="outside the vocabulary"):
        engine.generate([10_000], DecodeConfig())


def test_prompts_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_prompts(tmp_path / "none.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "text": "ok"}\n{"id": 2}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2 has none of 'text', 'input_ids' or 'messages'"):
        load_prompts(bad)
    bad.write_text("not json\n")
    with pytest.raises(InputError, match="bad.jsonl:1 is not valid JSON"):
        load_prompts(bad)

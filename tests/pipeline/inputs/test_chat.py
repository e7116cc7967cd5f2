"""Chat prompts: messages and --chat through the bundle's own chat template, in generate and bench."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.errors import BundleError, InputError
from specdec.pipeline.inputs.prompts import load_bench_prompts, load_prompts, prompt_tokens
from specdec.pipeline.inputs.text import TextCodec

runner = CliRunner()
TEMPLATE = ("{% for m in messages %}{% if m.role == 'system' %}system: {% endif %}{{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}reply:{% endif %}")


@pytest.fixture(scope="module")
def chat_bundle(bundle_factory):  # type: ignore[no-untyped-def]
    return bundle_factory("llama", chat_template=TEMPLATE)


def test_messages_and_chat_text_use_the_bundles_template(chat_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    codec = TextCodec(chat_bundle.tokenizer_dir)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "m", "messages": [{"role": "system", "content": "be brief"},
                                                            {"role": "user", "content": "the quick"}]}) + "\n"
                       + json.dumps({"id": "t", "text": "the quick"}) + "\n")
    chat, text = load_prompts(prompts)
    assert prompt_tokens(chat, codec) == codec.tokenizer.encode("system: be brief\nthe quick\nreply:",
                                                                add_special_tokens=False).ids
    assert prompt_tokens(text, codec) == codec.encode("the quick")
    assert prompt_tokens(text, codec, chat=True) == codec.tokenizer.encode("the quick\nreply:",
                                                                           add_special_tokens=False).ids
    bench = load_bench_prompts(prompts, codec, None, chat=True)
    assert [p.ids for p in bench] == [prompt_tokens(chat, codec), prompt_tokens(text, codec, chat=True)]


def test_generate_and_bench_take_chat_prompts(chat_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "m", "messages": [{"role": "user", "content": "the quick"}]}) + "\n")
    replies = tmp_path / "r.jsonl"
    result = runner.invoke(app, ["generate", str(chat_bundle.path), "--prompts", str(prompts), "-o", str(replies),
                                 "-n", "8"])
    assert result.exit_code == 0, result.output
    codec = TextCodec(chat_bundle.tokenizer_dir)
    record = json.loads(replies.read_text())
    assert record["input_ids"] == codec.tokenizer.encode("the quick\nreply:", add_special_tokens=False).ids
    streamed = runner.invoke(app, ["generate", str(chat_bundle.path), "--prompt", "the quick", "--chat", "-n", "8",
                                   "--no-speculation"])
    assert streamed.exit_code == 0, streamed.output
    assert streamed.output.startswith("the quick") and record["text"] in streamed.output
    bench = runner.invoke(app, ["bench", str(chat_bundle.path), "--prompts", str(prompts), "--chat", "-n", "6",
                                "--no-tune", "--no-cooldown", "-o", str(tmp_path / "bench")])
    assert bench.exit_code == 0, bench.output


def test_a_bundle_without_a_template_says_so(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plain = bundle_factory("llama")
    with pytest.raises(BundleError, match="has no chat template"):
        TextCodec(plain.tokenizer_dir).encode_chat([{"role": "user", "content": "hi"}])
    result = runner.invoke(app, ["generate", str(plain.path), "--prompt", "the quick", "--chat", "-n", "4"])
    assert result.exit_code == 3
    assert "has no chat template" in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(("line", "match"), [
    ({"messages": []}, "'messages' must be a non-empty list"),
    ({"messages": [{"role": "user"}]}, "message 1 needs string 'role' and 'content'"),
    ({"messages": [{"role": "user", "content": "x"}], "text": "y"}, "has both 'text' and 'messages'"),
    ({"id": "x"}, "has none of 'text', 'input_ids' or 'messages'"),
])
def test_bad_messages(tmp_path: Path, line: dict[str, object], match: str) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps(line) + "\n")
    with pytest.raises(InputError, match=match):
        load_prompts(prompts)

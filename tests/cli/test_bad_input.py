"""Bad inputs through the CLI: one line, the documented exit code, before any long work, nothing left.

The bench cases (baselines, a read-only results directory, tree budgets on compiled buckets) are in
tests/pipeline/bench/test_bad_input.py, next to the compiled bundle they need.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.engine.controllers import NAMES as CONTROLLER_NAMES
from specdec.pipeline.generate import stage as generate_module

runner = CliRunner()


def _one_line_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert "Traceback" not in output
    return lines[0]


def _no_decoding(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    calls: list[object] = []
    monkeypatch.setattr(generate_module.Generator, "run", lambda *a, **k: calls.append(a) or pytest.fail("decoded"))
    return calls


@pytest.fixture
def prompts(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"id": "a", "text": "def add"}\n{"id": "b", "input_ids": [5, 6, 7]}\n')
    return path


# ---- 1. an output that cannot be written: exit 2, one line, before the work -----------------------

def test_read_only_outputs(bundle_factory, pair_factory, prompts: Path, readonly_dir: Path,  # type: ignore[no-untyped-def]
                           monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = str(bundle_factory("llama").path)
    target, draft = pair_factory("llama")
    calls = _no_decoding(monkeypatch)
    for argv in (["surgery", bundle, "-o", "RO/out"],
                 ["export", str(target), "--draft", str(draft), "-o", "RO/deeper/out"],
                 ["generate", bundle, "--prompts", str(prompts), "-o", "RO/replies.jsonl"],
                 ["runtime", "build", "--cache-dir", "RO/cache"]):
        result = runner.invoke(app, [a.replace("RO", str(readonly_dir)) for a in argv])
        assert result.exit_code == 2, (argv, result.output)
        line = _one_line_error(result.output)
        assert "is on a read-only filesystem" in line and str(readonly_dir) in line, line
    assert calls == []  # generate failed before the first reply
    assert list(readonly_dir.iterdir()) == []


# ---- 2. generate on a corrupt bundle: exit 3 like inspect, compile and bench ------------------------

def test_generate_verifies_every_hash(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    copy = tmp_path / "bundle"
    shutil.copytree(bundle_factory("llama").path, copy)
    graph = copy / "target.onnx"
    data = bytearray(graph.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(b ^ 0xFF for b in data[middle:middle + 16])
    graph.write_bytes(bytes(data))
    for argv in (["generate", str(copy), "--prompt", "hello", "-n", "4"], ["inspect", str(copy)]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 3, result.output
        assert "'target.onnx'" in _one_line_error(result.output) and "sha256 differs" in result.output


# ---- 4. nothing is overwritten silently ---------------------------------------------------------------

def test_generate_refuses_to_overwrite_replies(bundle_factory, prompts: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = str(bundle_factory("llama").path)
    replies = tmp_path / "replies.jsonl"
    earlier = json.dumps({"id": "old", "input_ids": [1], "output_ids": [2], "text": "x", "stats": {}}) + "\n"
    replies.write_text(earlier)  # replies an earlier run wrote: --force may replace them (only them)
    with monkeypatch.context() as patched:
        calls = _no_decoding(patched)
        refused = runner.invoke(app, ["generate", bundle, "--prompts", str(prompts), "-o", str(replies)])
        assert refused.exit_code == 2 and "already exists" in _one_line_error(refused.output)
        assert "--force" in refused.output and calls == []
    assert replies.read_text() == earlier
    forced = runner.invoke(app, ["generate", bundle, "--prompts", str(prompts), "-o", str(replies), "-n", "3",
                                 "--force"])
    assert forced.exit_code == 0, forced.output
    assert [json.loads(line)["id"] for line in replies.read_text().splitlines()] == ["a", "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.jsonl", "replies.jsonl"]


def test_force_does_not_delete_a_users_directory(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    result = runner.invoke(app, ["surgery", str(bundle_factory("llama").path), "-o", str(mine), "--force"])
    assert result.exit_code == 2
    line = _one_line_error(result.output)
    assert "is not a specdec bundle or bench results directory (thesis.tex)" in line, line
    assert (mine / "thesis.tex").read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


# ---- 5. compile fits the profile's default context to the model ----------------------------------

def test_compile_clamps_the_profiles_default_context(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = str(bundle_factory("llama").path)  # 512 positions; local-cpu's compile.max_context is 1024
    explicit = runner.invoke(app, ["compile", bundle, "-o", str(tmp_path / "c"), "--max-context", "1024"])
    assert explicit.exit_code == 2
    assert "--max-context 1024 exceeds the target's 512 positions" in _one_line_error(explicit.output)
    result = runner.invoke(app, ["compile", bundle, "-o", str(tmp_path / "c"), "--format", "onnx"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "note: the profile local-cpu's max context (1024) exceeds the model's 512 positions: compiled for 512" \
        in result.output
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert manifest["buckets"]["max_context"] == 512


# ---- 6. prompts: empty is bad input, too long is reported by its size ------------------------------

def test_bad_prompts(bundle_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    bundle = str(bundle_factory("llama").path)
    calls = _no_decoding(monkeypatch)
    empty = runner.invoke(app, ["generate", bundle, "--prompt", ""])
    assert empty.exit_code == 2 and "--prompt is empty" in _one_line_error(empty.output)
    long_text = "the quick brown fox jumps " * 400
    long = runner.invoke(app, ["generate", bundle, "--prompt", long_text])
    assert long.exit_code == 2
    line = _one_line_error(long.output)  # nothing echoed before it
    assert re.search(r"prompt 'prompt' has \d+ tokens but the bundle's context is 512", line), line
    assert "--truncate" in line and "quick brown" not in long.output
    file = tmp_path / "p.jsonl"
    file.write_text('{"id": "a", "text": "fine"}\n{"id": "b", "text": ""}\n')
    batch = runner.invoke(app, ["generate", bundle, "--prompts", str(file), "-o", str(tmp_path / "r.jsonl")])
    assert batch.exit_code == 2 and "p.jsonl:2 is an empty prompt" in _one_line_error(batch.output)
    file.write_text(json.dumps({"id": "fine", "text": "hi"}) + "\n" + json.dumps({"id": "big", "text": long_text}))
    batch = runner.invoke(app, ["generate", bundle, "--prompts", str(file), "-o", str(tmp_path / "r.jsonl")])
    assert batch.exit_code == 2 and "prompt 'big' has" in _one_line_error(batch.output)
    assert calls == [] and not (tmp_path / "r.jsonl").exists()  # every prompt is checked before the first reply


# ---- 7. first-run polish --------------------------------------------------------------------------

def test_stats_without_speculation_show_a_dash_and_keep_prompt_ids(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    file = tmp_path / "p.jsonl"
    ids = ["refactor-the-parser-0001", "explain-the-licence-0002"]
    file.write_text("".join(json.dumps({"id": i, "text": "def add"}) + "\n" for i in ids))
    result = runner.invoke(app, ["generate", str(bundle_factory("llama").path), "--prompts", str(file), "-o",
                                 str(tmp_path / "r.jsonl"), "-n", "3", "--no-speculation", "--stats"],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    for prompt_id in ids:
        assert prompt_id in result.output  # whole, on one line, at 80 columns
    rows = [line for line in result.output.splitlines() if any(i in line for i in ids)]
    assert rows and all(line.count("—") == 2 and "0.00" not in line for line in rows), rows


def test_profile_names_fit_80_columns() -> None:
    result = runner.invoke(app, ["profiles", "list"], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and "…" not in result.output
    for name in ("snapdragon-8gen3", "android-generic", "dimensity-9300", "local-cpu", "pixel-8", "knowledge"):
        assert re.search(rf"│ {name}\s+│", result.output), name


def test_one_spelling_for_the_adb_server_and_every_controller_in_help() -> None:
    for command in ("bench", "tune", "devices"):
        shown = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
        assert "--adb-host" in shown and "-H" in shown and "--adb-port" in shown and "-P" in shown, command
    shown = " ".join(runner.invoke(app, ["generate", "--help"], env={"COLUMNS": "200"}).output.split())
    for name in CONTROLLER_NAMES:
        assert name in shown.split("--controllers", 1)[1].split("--", 1)[0], name


def test_warnings_have_one_style() -> None:
    """Library code logs, commands print: both read `warning: ...`."""
    import logging

    from specdec.cli import console

    console.setup_logging(verbose=False)
    with pytest.MonkeyPatch.context() as patched:
        printed: list[str] = []
        patched.setattr(console.err, "print", lambda text, *a, **k: printed.append(str(text)))
        logging.getLogger("specdec.test").warning("the sky is [falling]")
        console.warn("the sky is [falling]")
    assert len(printed) == 2 and printed[0] == printed[1] and printed[0].startswith("[yellow]warning[/]: ")


def test_gguf_files_specdec_cannot_export_are_one_line(tmp_path: Path) -> None:
    from support.tiny_gguf import write_llama

    falcon = write_llama(tmp_path / "falcon.gguf", architecture="falcon")
    refused = runner.invoke(app, ["export", str(falcon), "-o", str(tmp_path / "a")])
    assert refused.exit_code == 4 and "holds a 'falcon' model" in _one_line_error(refused.output)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(write_llama(tmp_path / "whole.gguf").read_bytes()[:5000])
    unreadable = runner.invoke(app, ["export", str(cut), "-o", str(tmp_path / "b")])
    assert unreadable.exit_code == 2 and "cannot read target GGUF file" in _one_line_error(unreadable.output)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()

"""Hostile inputs besides bundles and outputs: text files that are not UTF-8 text, arguments that are
not UTF-8, an ASCII-only stdout, settings that cannot work, constraints no reply can meet, checkpoints whose
weights do not match their config. Each is one line with the documented exit code (README), before any work,
nothing written, the input unchanged."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hostile import BAD_INPUT, UNSUPPORTED, one_line, snapshot
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.generate import stage as generate_module

runner = CliRunner()
BAD_UTF8 = b'{"id": "a", "text": "fine"}\n{"id": "b", "text": "caf\xe9"}\n'


@pytest.fixture
def no_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generate_module.Generator, "run", lambda *a, **k: pytest.fail("decoded"))


def test_text_files_that_are_not_utf8_text(bundle_factory, bench_bundle_cpu, tmp_path: Path,  # type: ignore[no-untyped-def]
                                           no_decoding: None) -> None:
    bundle, compiled = str(bundle_factory("llama").path), str(bench_bundle_cpu.path)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(BAD_UTF8)
    binary = tmp_path / "calib.bin"
    binary.write_bytes(bytes(range(128)) * 64)  # ASCII, but NUL bytes: binary
    before = snapshot(tmp_path)
    cases = [
        (["generate", bundle, "--prompts", str(bad), "-o", str(tmp_path / "r.jsonl")], "line 2 is not valid UTF-8"),
        (["bench", compiled, "--prompts", str(bad), "-o", str(tmp_path / "b")], "line 2 is not valid UTF-8"),
        (["tune", compiled, "--calib", str(bad), "-o", str(tmp_path / "t")], "line 2 is not valid UTF-8"),
        (["quantize", bundle, "--calib", str(bad), "-o", str(tmp_path / "q")], "line 2 is not valid UTF-8"),
        (["quantize", bundle, "--calib", str(binary), "-o", str(tmp_path / "q")],
         "--calib file '" + str(binary) + "' line 1 holds a NUL byte: the file is binary"),
    ]
    for argv, needle in cases:
        line = one_line(runner.invoke(app, argv), BAD_INPUT)
        assert needle in line, (argv, line)
        assert "NUL" in line or f"'{bad}' line 2 is not valid UTF-8 (byte 0xe9 at column 25)" in line, line
        assert snapshot(tmp_path) == before, argv


def test_arguments_that_are_not_utf8(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What `specdec inspect $'b\\xffx'` passes Python (surrogate escapes): onnxruntime and the tokenizer take
    UTF-8 only, so it is refused in one line."""
    bundle = str(bundle_factory("llama").path)
    for argv, needle in ((["inspect", str(tmp_path / "b\udcffx")], "BUNDLE '"),
                         (["surgery", bundle, "-o", str(tmp_path / "o\udcffut")], "--output '"),
                         (["generate", bundle, "--prompt", "caf\udce9"], "--prompt 'caf\\xe9'")):
        line = one_line(runner.invoke(app, argv), BAD_INPUT)
        assert needle in line and "is not valid UTF-8" in line, line
    assert list(tmp_path.iterdir()) == []


def test_an_ascii_only_stdout_gets_escapes(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    """PYTHONIOENCODING=ascii: the echoed prompt and the reply are written with escapes, not a traceback."""
    ascii_runner = CliRunner(charset="ascii")
    result = ascii_runner.invoke(app, ["generate", str(bundle_factory("llama").path), "--prompt", "héllo wörld",
                                       "-n", "4"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("h\\xe9llo w\\xf6rld")


@pytest.mark.parametrize("argv,needle", [
    (["generate", "BUNDLE", "--prompt", "hi", "--threads", "-2"], "--threads -2 is negative"),
    (["generate", "BUNDLE", "--prompt", "hi", "--regex", "a[^\\s\\S]b"],
     "no reply can satisfy --regex: it matches no text this bundle's tokenizer can write"),
    (["compile", "BUNDLE", "-o", "OUT", "--kv-cache", "window", "--kv-sinks", "-3"], "--kv-sinks -3 is negative"),
    (["compile", "BUNDLE", "-o", "OUT", "--kv-cache", "window", "--kv-window", "-3"],
     "--kv-window -3 must be at least 1"),
    (["compile", "BUNDLE", "-o", "OUT", "--max-context", "1"], "--max-context 1 is too small"),
])
def test_settings_that_cannot_work(bundle_factory, tmp_path: Path, no_decoding: None,  # type: ignore[no-untyped-def]
                                   argv: list[str], needle: str) -> None:
    argv = [a.replace("BUNDLE", str(bundle_factory("llama").path)).replace("OUT", str(tmp_path / "out"))
            for a in argv]
    line = one_line(runner.invoke(app, argv), BAD_INPUT)
    assert needle in line, line
    assert list(tmp_path.iterdir()) == []


def test_ids_outside_the_vocabulary_are_bad_input(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "input_ids": [5, 99999]}) + "\n")
    line = one_line(runner.invoke(app, ["generate", str(bundle_factory("llama").path), "--prompts", str(prompts),
                                        "-o", str(tmp_path / "r.jsonl")]), BAD_INPUT)
    assert "prompt 'a' holds token id 99999, outside the vocabulary (0..319)" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.jsonl"]


def _checkpoint(source: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "target"
    shutil.copytree(source, copy)
    return copy


def _config(checkpoint: Path, **changes: object) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    config.update(changes)
    (checkpoint / "config.json").write_text(json.dumps(config))


CHECKPOINTS = {
    "more layers than weights": (lambda c: _config(c, num_hidden_layers=4), BAD_INPUT,
                                 "do not match its config.json: 18 tensors missing from the weights "
                                 "(model.layers.2.input_layernorm.weight"),
    "fewer layers than weights": (lambda c: _config(c, num_hidden_layers=1), BAD_INPUT,
                                  "tensors not in the config (model.layers.1."),
    "truncated safetensors": (lambda c: (c / "model.safetensors").write_bytes(
        (c / "model.safetensors").read_bytes()[:5000]), BAD_INPUT,
        "model.safetensors' is damaged or incomplete ("),
    "no tokenizer": (lambda c: [(c / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json")], BAD_INPUT,
                     "has no tokenizer files"),
    "unknown model_type": (lambda c: _config(c, model_type="frobnicator"), UNSUPPORTED,
                           "is a 'frobnicator' model, which neither transformers nor specdec knows"),
}


@pytest.fixture
def transformers_warns() -> Iterator[None]:
    """transformers as CI machines run it: CI=1 makes it hand its records to the root logger, where the
    CLI's handler prints them, and its level is the WARNING default when it was imported before any CLI
    call set TRANSFORMERS_VERBOSITY. Its loading report of missing weights must still not reach the user
    beside specdec's one line."""
    import logging

    from transformers.utils import logging as hf_logging

    library = logging.getLogger("transformers")
    level, propagate = hf_logging.get_verbosity(), library.propagate
    hf_logging.set_verbosity_warning()
    hf_logging.enable_propagation()
    yield
    hf_logging.set_verbosity(level)
    library.propagate = propagate


@pytest.mark.parametrize("case", CHECKPOINTS)
def test_checkpoints_whose_files_do_not_fit(pair_factory, tmp_path: Path, case: str,  # type: ignore[no-untyped-def]
                                            monkeypatch: pytest.MonkeyPatch, transformers_warns: None) -> None:
    from transformers.utils import logging as hf_logging

    spoil, code, needle = CHECKPOINTS[case]
    checkpoint = _checkpoint(pair_factory("llama")[0], tmp_path)
    spoil(checkpoint)
    before = snapshot(tmp_path)
    # the CLI hides transformers' loading bar (setup_logging); this process imported transformers before that
    monkeypatch.setattr(hf_logging, "_tqdm_active", False)
    line = one_line(runner.invoke(app, ["export", str(checkpoint), "-o", str(tmp_path / "out"), "--no-validate"]),
                    code, after_progress=True)
    assert needle in line, line
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("case", ["more layers than weights", "truncated safetensors"])
def test_draft_reads_checkpoints_by_the_same_rules(pair_factory, tmp_path: Path, case: str,  # type: ignore[no-untyped-def]
                                                   monkeypatch: pytest.MonkeyPatch, transformers_warns: None) -> None:
    from transformers.utils import logging as hf_logging

    spoil, code, needle = CHECKPOINTS[case]
    checkpoint = _checkpoint(pair_factory("llama")[0], tmp_path)
    spoil(checkpoint)
    before = snapshot(tmp_path)
    monkeypatch.setattr(hf_logging, "_tqdm_active", False)
    line = one_line(runner.invoke(app, ["draft", str(checkpoint), "-o", str(tmp_path / "out"), "--steps", "1"]), code)
    assert needle in line, line
    assert snapshot(tmp_path) == before


def test_a_damaged_gguf_file_given_to_export(tmp_path: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    line = one_line(runner.invoke(app, ["export", str(gguf), "-o", str(tmp_path / "out")]), BAD_INPUT)
    assert "cannot read target GGUF file" in line and "truncated or not a GGUF file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]

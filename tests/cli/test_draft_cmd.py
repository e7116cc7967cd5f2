"""`specdec draft` through the CLI: bad options are one line naming the flag, with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize("args, flag", [
    (["--ffn", "100"], "--ffn"),
    (["--heads", "3"], "--heads"),
    (["--kind", "pruned", "--layers", "9"], "--layers"),
    (["--size", "1.5"], "--size"),
    (["--size", "0.2", "--layers", "2"], "--layers"),
    (["--minutes", "0"], "--minutes"),
    (["--steps", "0"], "--steps"),
    (["--kind", "pruned", "--resume"], "--resume"),
    (["--calib", "missing.txt"], "--calib"),
])
def test_bad_options_are_one_line(args: list[str], flag: str, tmp_path: Path) -> None:
    out = tmp_path / "draft"
    result = runner.invoke(app, ["draft", "demo-tiny", "-o", str(out), *args])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and flag in lines[0], result.output
    assert not out.exists()


def test_unsupported_target_is_one_line(tmp_path: Path) -> None:
    from support.tiny_models import make_model, make_tokenizer, save

    tokenizer = make_tokenizer()
    target = save(make_model("gpt2", len(tokenizer)), tokenizer, tmp_path / "gpt2")
    result = runner.invoke(app, ["draft", str(target), "-o", str(tmp_path / "d"), "--kind", "pruned"])
    assert result.exit_code == 4 and "cannot prune a gpt2 target" in result.output, result.output
    result = runner.invoke(app, ["draft", str(target), "-o", str(tmp_path / "d")])  # the default kind: feature
    assert result.exit_code == 4 and "--kind feature cannot train on a gpt2 target" in result.output, result.output


def test_the_default_kind_is_feature_unless_a_pruning_option_is_given() -> None:
    from specdec.pipeline.draft.config import DraftMethod, default_kind

    assert default_kind({"layers": 2, "steps": 10, "size": None}) is DraftMethod.feature
    for key in ("size", "heads", "ffn"):
        assert default_kind({key: 1}) is DraftMethod.pruned


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["draft", "demo-tiny", "-o", str(tmp_path / "d")])
    assert result.exit_code == 2 and "already exists" in result.output
    result = runner.invoke(app, ["draft", "demo-tiny", "-o", str(tmp_path / "d"), "--force"])
    assert result.exit_code == 2 and "notes.txt" in result.output
    assert (tmp_path / "d" / "notes.txt").read_text() == "mine"

"""`specdec draft` through the CLI: bad options are one line naming the flag, with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
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
    (["--eval-prompts", "missing.jsonl"], "--eval-prompts"),
    (["--kind", "pruned", "--eval-prompts", "missing.jsonl"], "--eval-prompts"),
    (["--kind", "pruned", "--torch-device", "cpu"], "--torch-device"),
    pytest.param(["--torch-device", "cuda"], "--torch-device cuda",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU here")),
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


def test_the_feature_table_shows_acceptance_on_the_users_prompts_after_the_held_out_figures() -> None:
    from rich.console import Console

    from specdec.cli.draft_cmd import feature_table

    quality = {"alpha1": 0.635, "positions": 8737, "alpha_cond": [0.64, 0.42, 0.34, 0.26],
               "chain": {"5": {"tokens_per_round": 1.91}}}
    report = {"sizes": {"own_params": 8_923_968, "own_bytes": 35_761_408}, "quality": quality,
              "quality_eval_prompts": {**quality, "alpha1": 0.451, "positions": 2966, "rows": 36,
                                       "file": "/x/prompts.jsonl", "chain": {"5": {"tokens_per_round": 1.56}}},
              "data": {"rows": 1535, "answer_tokens": 192508, "dtype": "bfloat16"},
              "draft": {"feature_layer": 29, "vocab_size": 8192, "target_vocab_size": 49152,
                        "heldout_vocab_coverage": 0.98},
              "training": {"steps": 594}, "minutes": 50.4, "clock": "wall"}
    console = Console(width=200, record=True)
    console.print(feature_table(report))
    lines = [" ".join(line.split()) for line in console.export_text().splitlines()]
    held_out = next(i for i, line in enumerate(lines) if "held-out first-token acceptance" in line)
    mine = next(i for i, line in enumerate(lines) if "first-token acceptance on prompts.jsonl" in line)
    assert held_out < mine and "0.451 over 2966 positions (36 answers)" in lines[mine]
    assert "1.56" in lines[mine + 2] and "1.91" in lines[mine - 1]
    del report["quality_eval_prompts"]
    console = Console(width=200, record=True)
    console.print(feature_table(report))
    assert "prompts.jsonl" not in console.export_text()

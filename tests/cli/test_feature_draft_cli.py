"""export (a feature draft) -> inspect -> generate through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from support.tiny_models import make_feature_draft
from typer.testing import CliRunner

from specdec.cli.app import app

runner = CliRunner()


def test_export_inspect_generate_with_a_feature_draft(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, _ = pair_factory("llama")
    draft = make_feature_draft(target, tmp_path / "feature", vocab_step=4)
    out = tmp_path / "bundle"
    result = runner.invoke(app, ["export", str(target), "--draft", str(draft), "-o", str(out)])
    assert result.exit_code == 0, result.output
    shown = runner.invoke(app, ["inspect", str(out)], env={"COLUMNS": "220"})
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "draft: feature draft: reads the target's layer 1 output (before the final norm, width 64)" in text
    assert "its vocabulary: 80 of the target's 320 tokens (draft_vocab.npy)" in text
    assert "hidden_states" in text and "hidden_out" in text
    summary = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).output)
    assert summary["draft"] == {"kind": "feature", "vocab_size": 80, "target_vocab_size": 320,
                                "vocab_file": "draft_vocab.npy", "feature_layer": 1, "hidden_size": 64}
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "input_ids": [5, 6, 7, 8, 5, 6, 7, 8, 5]}\n')
    outputs = {}
    for drafter in ("plain", "model", "model+lookup"):
        flags = ["--no-speculation"] if drafter == "plain" else ["--drafter", drafter]
        done = runner.invoke(app, ["generate", str(out), "--prompts", str(prompts), "-o", str(tmp_path / drafter),
                                   "-n", "16", "--stats", *flags], env={"COLUMNS": "240"})
        assert done.exit_code == 0, done.output
        outputs[drafter] = json.loads((tmp_path / drafter).read_text())["output_ids"]
    assert outputs["model"] == outputs["model+lookup"] == outputs["plain"]


def test_a_model_draft_export_shows_its_kind(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    summary = json.loads(runner.invoke(app, ["inspect", str(bundle_factory("llama").path), "--json"]).output)
    assert summary["draft"]["kind"] == "model" and summary["draft"]["vocab_file"] is None

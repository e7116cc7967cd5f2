"""export -> inspect -> generate through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from specdec.cli.app import app

runner = CliRunner()


def test_export_inspect_generate(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, draft = pair_factory("gpt2")
    out = tmp_path / "bundle"
    result = runner.invoke(app, ["export", str(target), "--draft", str(draft), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "validated" in result.output
    again = runner.invoke(app, ["export", str(target), "--draft", str(draft), "-o", str(out)])
    assert again.exit_code == 2 and "--force" in again.output

    shown = runner.invoke(app, ["inspect", str(out)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0
    for needle in ("target.onnx", "draft.onnx", "gpt2", "attention_mask", "present.{0..1}.key|value", "lineage",
                   "tokenizer"):
        assert needle in shown.output, needle
    summary = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).output)
    assert summary["stages"] == ["export"] and set(summary["graphs"]) == {"target", "draft"}

    streamed = runner.invoke(app, ["generate", str(out), "--prompt", "the quick", "-n", "12", "--stats"],
                             env={"COLUMNS": "200"})
    assert streamed.exit_code == 0, streamed.output
    assert streamed.output.startswith("the quick") and "mean accepted" in streamed.output

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "text": "def add"}\n{"id": "b", "input_ids": [5, 6, 7]}\n')
    replies = tmp_path / "r.jsonl"
    batch = runner.invoke(app, ["generate", str(out), "--prompts", str(prompts), "-o", str(replies), "-n", "10"])
    assert batch.exit_code == 0, batch.output
    records = [json.loads(line) for line in replies.read_text().splitlines()]
    assert [r["id"] for r in records] == ["a", "b"]
    assert records[1]["input_ids"] == [5, 6, 7] and len(records[1]["output_ids"]) == 10
    assert set(records[0]["stats"]) >= {"rounds", "mean_accepted_len", "acceptance_rate"}
    plain = runner.invoke(app, ["generate", str(out), "--prompts", str(prompts), "-o", str(tmp_path / "p.out"),
                                "-n", "10", "--no-speculation"])
    assert plain.exit_code == 0
    plain_records = [json.loads(line) for line in (tmp_path / "p.out").read_text().splitlines()]
    assert [r["output_ids"] for r in plain_records] == [r["output_ids"] for r in records]
    adaptive = runner.invoke(app, ["generate", str(out), "--prompts", str(prompts), "-o", str(tmp_path / "a.out"),
                                   "-n", "10", "--scenario", "code", "--controllers", "all"])
    assert adaptive.exit_code == 0, adaptive.output
    adaptive_records = [json.loads(line) for line in (tmp_path / "a.out").read_text().splitlines()]
    assert [r["output_ids"] for r in adaptive_records] == [r["output_ids"] for r in records]
    unknown = runner.invoke(app, ["generate", str(out), "--prompt", "x", "--controllers", "turbo"])
    assert unknown.exit_code == 2 and "unknown controller" in unknown.output


def test_generate_with_each_drafter_and_a_target_only_bundle(pair_factory, bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "input_ids": [5, 6, 7, 8, 5, 6, 7, 8, 5]}\n')
    paired = bundle_factory("llama").path
    outputs = {}
    for drafter in ("plain", "model", "lookup", "model+lookup"):
        flags = ["--no-speculation"] if drafter == "plain" else ["--drafter", drafter]
        result = runner.invoke(app, ["generate", str(paired), "--prompts", str(prompts), "-o", str(tmp_path / drafter),
                                     "-n", "16", "--stats", *flags], env={"COLUMNS": "240"})
        assert result.exit_code == 0, result.output
        assert (f"drafter {drafter} (" if drafter != "plain" else "speculative False (") in result.output
        assert ("lookup acc/prop" in result.output) == (drafter in ("lookup", "model+lookup"))
        outputs[drafter] = json.loads((tmp_path / drafter).read_text())["output_ids"]
    assert len(set(map(tuple, outputs.values()))) == 1  # greedy: the same tokens whoever drafts

    target, _ = pair_factory("llama")
    alone = tmp_path / "alone"
    exported = runner.invoke(app, ["export", str(target), "-o", str(alone), "--no-validate"])
    assert exported.exit_code == 0 and "target only" in exported.output, exported.output
    summary = json.loads(runner.invoke(app, ["inspect", str(alone), "--json"]).output)
    assert set(summary["graphs"]) == {"target"}
    fitted = runner.invoke(app, ["generate", str(alone), "--prompts", str(prompts), "-o", str(tmp_path / "f"),
                                 "-n", "16", "--stats"], env={"COLUMNS": "200"})
    assert fitted.exit_code == 0 and "warning" not in fitted.output, fitted.output  # lookup: such a bundle's default
    assert "drafter lookup (bundle (no draft graph; defaults said model))" in " ".join(fitted.output.split())
    assert json.loads((tmp_path / "f").read_text())["output_ids"] == outputs["plain"]
    refused = runner.invoke(app, ["generate", str(alone), "--prompt", "the", "--drafter", "model"])
    assert refused.exit_code == 3
    assert "no draft graph, so --drafter model cannot run — pass --drafter lookup" in " ".join(refused.output.split())

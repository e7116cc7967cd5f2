"""Bad bench input: outputs and baselines are checked before any device work; one tree-budget rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.bench.trace import IN_GRAPH_NOTE
from specdec.pipeline.errors import InputError
from specdec.pipeline.ondevice import session as device_session
from specdec.pipeline.settings.decode_options import DecodeOptions

runner = CliRunner()


@pytest.fixture
def no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the bench gets as far as opening the device."""
    monkeypatch.setattr(device_session, "open_device", lambda *a, **k: pytest.fail("the device was opened"))


@pytest.fixture(scope="module")
def small_run(bench_bundle, tmp_path_factory):  # type: ignore[no-untyped-def]
    """One short bench (no plan): its results.json serves as a baseline, its outputs are checked below."""
    prompts = tmp_path_factory.mktemp("p") / "prompts.jsonl"
    prompts.write_text('{"id": "a", "input_ids": [5, 6, 7]}\n')
    return run_bench(BenchConfig(output=tmp_path_factory.mktemp("bench") / "out", prompts=prompts, tune=False,
                                 decode=DecodeOptions(max_new_tokens=6)), bench_bundle)


def test_read_only_results_directory(bench_bundle, readonly_dir: Path, no_device: None) -> None:  # type: ignore[no-untyped-def]
    result = runner.invoke(app, ["bench", str(bench_bundle.path), "--out", str(readonly_dir / "results")])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "is on a read-only filesystem — choose --output on a writable filesystem" in lines[0]
    assert list(readonly_dir.iterdir()) == []


def test_existing_results_and_users_files(bench_bundle, small_run, tmp_path: Path, no_device: None) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="already exists"):
        run_bench(BenchConfig(output=small_run.output), bench_bundle)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.md").write_text("mine")
    with pytest.raises(InputError, match=r"not a specdec bundle or bench results directory \(notes.md\)"):
        run_bench(BenchConfig(output=tmp_path / "mine", force=True), bench_bundle)
    with pytest.raises(InputError, match="lies inside the input"):
        run_bench(BenchConfig(output=bench_bundle.path / "results"), bench_bundle)
    assert (tmp_path / "mine" / "notes.md").read_text() == "mine"


def test_bad_baselines_fail_before_the_device(bench_bundle, tmp_path: Path, no_device: None) -> None:  # type: ignore[no-untyped-def]
    not_results = tmp_path / "other.json"
    not_results.write_text('{"hello": 1}')
    for baseline, message in ((tmp_path / "missing.json", "does not exist"),
                              (not_results, "is not a specdec results.json")):
        result = runner.invoke(app, ["bench", str(bench_bundle.path), "--out", str(tmp_path / "out"),
                                     "--baseline", str(baseline)])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and f"--baseline '{baseline}' {message}" in lines[0], lines
    with pytest.raises(InputError, match="max_regression_pct must be >= 0"):
        BenchConfig(output=tmp_path / "out", max_regression_pct=-1)
    assert not (tmp_path / "out").exists()


def test_a_baseline_of_another_setup_is_compared_with_a_warning(bench_bundle, small_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = json.loads((small_run.output / "results.json").read_text())
    data["config"]["prompts"], data["config"]["decode"]["max_new_tokens"] = 8, 64
    data["config"]["decode"]["temperature"], data["config"]["decode"]["mode"] = 0.8, "rrs"
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(data))
    same = tmp_path / "same.json"
    same.write_text((small_run.output / "results.json").read_text())
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "input_ids": [5, 6, 7]}\n')
    outcome = run_bench(BenchConfig(output=tmp_path / "out", prompts=prompts, tune=False, baseline=baseline,
                                    max_regression_pct=1000, decode=DecodeOptions(max_new_tokens=6)), bench_bundle)
    warning = next(w for w in outcome.results.warnings if w.startswith("baseline "))
    assert "prompts × tokens 8 × 64 (now 1 × 6)" in warning and "temperature 0.8 (now 0)" in warning
    assert "mode rrs (now greedy)" in warning and "bundle" not in warning and "device" not in warning
    assert any(g.gate.startswith("regression:") for g in outcome.gates)  # compared anyway
    assert warning in (tmp_path / "out" / "summary.md").read_text()
    again = run_bench(BenchConfig(output=tmp_path / "out2", prompts=prompts, tune=False, baseline=same,
                                  max_regression_pct=1000, decode=DecodeOptions(max_new_tokens=6)), bench_bundle)
    assert not any(w.startswith("baseline ") for w in again.results.warnings)


def test_summary_and_trace_explain_themselves(small_run) -> None:  # type: ignore[no-untyped-def]
    summary = (small_run.output / "summary.md").read_text()
    assert small_run.results.plan is None and "Why predicted and measured differ:" in summary
    trace = json.loads((small_run.output / "trace.json").read_text())
    # the bundle has BlockSparseVerify and the run is greedy: verification ran inside Target_Verify
    assert trace["otherData"]["verification"] == IN_GRAPH_NOTE
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "Accept_Reject_Sample (in Target_Verify: verified in the graph)" in names
    assert not any(e["ph"] == "X" and e["name"] == "Accept_Reject_Sample" for e in trace["traceEvents"])


def test_generate_clamps_a_tree_budget_beyond_the_buckets_like_bench(bench_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": text}) + "\n"
                               for i, text in enumerate(("def fib(n):", "the quick brown", "import os\n", "Once"))))
    result = runner.invoke(app, ["generate", str(bench_bundle.path), "--prompts", str(prompts), "-o",
                                 str(tmp_path / "r.jsonl"), "-n", "12", "--tree-budget", "1000", "--stats"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert text.count("warning: tree_budget 1000 (options) exceeds the largest compiled bucket; using 16") == 1
    assert "tree_budget 16 (buckets (clamped from 1000, options))" in text
    replies = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [r["id"] for r in replies] == ["p0", "p1", "p2", "p3"]
    assert all(r["stats"]["new_tokens"] >= 1 for r in replies)

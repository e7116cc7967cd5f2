"""`specdec bench --device local` end to end, and the CI gates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bench.analysis import HIGHER_IS_BETTER, LOWER_IS_BETTER
from specdec.pipeline.bench.gates import REGRESSION_FIGURES
from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.errors import InputError
from specdec.pipeline.records.codec import from_dict
from specdec.pipeline.records.results import BenchResults, Figures
from specdec.pipeline.settings.decode_options import DecodeOptions

runner = CliRunner()
STAGE_SLICES = {"Draft_Generate", "Prune_Controller", "Target_Verify", "KV_Commit"}


@pytest.fixture(scope="module")
def local_run(bench_bundle, tmp_path_factory):  # type: ignore[no-untyped-def]
    prompts = tmp_path_factory.mktemp("p") / "prompts.jsonl"
    prompts.write_text('{"id": "a", "input_ids": [5, 6, 7]}\n{"id": "b", "text": "the quick brown"}\n')
    out = tmp_path_factory.mktemp("bench") / "results"
    outcome = run_bench(BenchConfig(output=out, prompts=prompts, repeats=2, tune=False,
                                    decode=DecodeOptions(max_new_tokens=20)),
                        bench_bundle)
    return outcome


def test_results_json_has_every_figure(local_run) -> None:  # type: ignore[no-untyped-def]
    results = json.loads((local_run.output / "results.json").read_text())
    assert results["schema"] == "specdec.bench/4" and not results["partial"]
    f = results["figures"]
    for name in ("speedup", "tokens_per_s", "plain_tokens_per_s", "mean_accepted_len", "acceptance_rate",
                 "predicted_speedup", "cost_ratio_r", "fixed_call_ms", "ttft_ms", "peak_memory_mb"):
        assert isinstance(f[name], float), name
    assert f["speedup"] == pytest.approx(f["tokens_per_s"] / f["plain_tokens_per_s"])
    assert results["lossless"] == {"checked": True, "pairs": 4, "equal": True, "mismatches": [], "note": None}
    assert sum(results["details"]["accepted_len_histogram"].values()) == results["details"]["rounds"]["speculative"]
    assert set(results["details"]["stage_latency_ms"]) >= STAGE_SLICES
    assert results["enable_rule"]["recommendation"] in ("on", "off")
    # the host has no battery: power must be reported unavailable, never invented
    if f["energy_per_token_mj"] is None:
        assert "energy_per_token_mj" in results["unavailable"]


def test_memory_is_measured_per_mode_and_plotted(local_run) -> None:  # type: ignore[no-untyped-def]
    results = json.loads((local_run.output / "results.json").read_text())
    f, memory = results["figures"], results["memory"]
    assert f["plain_peak_memory_mb"] > 10 and f["peak_memory_mb"] > 10 and memory["peak_reset"]
    assert f["weights_mb"] > 0 and f["kv_bytes_per_token"] > 0 and f["kv_mb_end"] > 0
    assert memory["kv_policy"].startswith("full ")
    replies = memory["replies"]
    assert {r["mode"] for r in replies} == {"plain", "speculative"} and len(replies) == 8
    assert all(0 < r["kv_live_bytes"] <= r["kv_bytes"] and r["tokens"] > 3 for r in replies)
    assert (local_run.output / "memory.png").stat().st_size > 1000
    summary = (local_run.output / "summary.md").read_text()
    assert "Memory (KV full" in summary and "peak RSS plain" in summary


def test_results_json_reads_back_into_the_record(local_run) -> None:  # type: ignore[no-untyped-def]
    results = from_dict(BenchResults, json.loads((local_run.output / "results.json").read_text()))
    assert results == local_run.results
    assert results.config.decode.tree_budget == 16 and results.config.sources["tree_budget"] == "profile local-cpu"
    assert results.config.sources["max_new_tokens"] == "options" and results.config.sources["beta_base"] == "defaults"
    assert set(HIGHER_IS_BETTER | LOWER_IS_BETTER | set(REGRESSION_FIGURES)) <= set(Figures.names())


def test_a_tree_larger_than_the_buckets_is_clamped_with_a_note(bench_bundle, prompts_file: Path,  # type: ignore[no-untyped-def]
                                                                 tmp_path: Path) -> None:
    outcome = run_bench(BenchConfig(output=tmp_path / "out", prompts=prompts_file, limit=1,
                                    decode=DecodeOptions(max_new_tokens=6, tree_budget=40)), bench_bundle)
    assert outcome.results.config.decode.tree_budget == 16  # the largest target bucket
    assert outcome.results.config.sources["tree_budget"].startswith("buckets (clamped from 40, options")
    assert any("tree_budget 40 (options) exceeds the largest compiled bucket" in w for w in outcome.results.warnings)


def test_trace_is_chrome_trace_json_with_named_slices(local_run) -> None:  # type: ignore[no-untyped-def]
    trace = json.loads((local_run.output / "trace.json").read_text())
    events = trace["traceEvents"]
    slices = {e["name"] for e in events if e["ph"] == "X"}
    assert slices >= STAGE_SLICES
    assert any(e["ph"] == "C" and e["name"] == "accepted_len" for e in events)
    for event in events:
        assert {"ph", "pid"} <= set(event)
        if event["ph"] == "X":
            assert event["dur"] >= 0 and isinstance(event["ts"], float)
    thread_names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert thread_names >= STAGE_SLICES


def test_people_outputs(local_run) -> None:  # type: ignore[no-untyped-def]
    summary = (local_run.output / "summary.md").read_text()
    assert "Speedup" in summary and "Lossless: ✅ identical" in summary
    for png in ("latency_breakdown.png", "accepted_length.png"):
        assert (local_run.output / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_gates_pass_and_fail(bench_bundle, prompts_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    base = ["bench", str(bench_bundle.path), "--prompts", str(prompts_file), "-n", "8", "--limit", "2", "--no-tune"]
    ok = runner.invoke(app, [*base, "--out", str(tmp_path / "ok"), "--assert", "lossless",
                             "--assert", "mean_accepted_len>=1"])
    assert ok.exit_code == 0, ok.output
    failed = runner.invoke(app, [*base, "--out", str(tmp_path / "bad"), "--assert", "speedup>=1000"])
    assert failed.exit_code == 10, failed.output
    assert "gate 'speedup>=1000' failed: speedup = " in " ".join(failed.output.split())
    assert (tmp_path / "bad" / "results.json").exists()  # results are written even when a gate fails
    regression = runner.invoke(app, [*base, "--out", str(tmp_path / "reg"), "--baseline",
                                     str(_inflated_baseline(tmp_path / "ok" / "results.json", tmp_path)),
                                     "--max-regression", "5"])
    assert regression.exit_code == 10 and "regression:" in regression.output


def _inflated_baseline(results: Path, tmp_path: Path) -> Path:
    data = json.loads(results.read_text())
    data["figures"]["tokens_per_s"] *= 10  # a baseline ten times faster: this run regressed
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("kwargs,message", [
    ({"asserts": ("speed>=1",)}, "unknown figure 'speed'"),
    ({"asserts": ("speedup is fast",)}, "is not 'FIGURE OP NUMBER'"),
    ({"repeats": 0}, "repeats must be at least 1"),
    ({"profile": "pixel-8"}, "is for the adb transport"),
])
def test_bad_options_fail_before_running(bench_bundle, tmp_path: Path, kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=message):
        run_bench(BenchConfig(output=tmp_path / "out", **kwargs), bench_bundle)
    assert not (tmp_path / "out").exists()


# ---- drafters -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def copying_prompts(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("copy") / "prompts.jsonl"
    path.write_text('{"id": "a", "input_ids": [5, 6, 7, 8, 5, 6, 7, 8, 5, 6]}\n'
                    '{"id": "b", "input_ids": [9, 10, 11, 9, 10, 11, 9]}\n')
    return path


def test_bench_reports_drafters_by_source(bench_bundle, copying_prompts: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "r"
    result = runner.invoke(app, ["bench", str(bench_bundle.path), "-o", str(out), "--prompts", str(copying_prompts),
                                 "-n", "24", "--drafter", "model+lookup", "--lookup-max-ngram", "4", "--no-tune",
                                 "--assert", "lossless"])
    assert result.exit_code == 0, result.output
    results = from_dict(BenchResults, json.loads((out / "results.json").read_text()))
    decode = results.config.decode
    assert (decode.drafter.value, decode.lookup_max_ngram, results.config.sources["drafter"]) == \
        ("model+lookup", 4, "options")
    by_source = results.details.by_source
    assert by_source["lookup"].proposed > 0 and by_source["model"].proposed > 0
    lookup = by_source["lookup"]
    assert results.figures.lookup_acceptance == pytest.approx(lookup.accepted / lookup.proposed)
    assert results.lossless.equal
    assert "Drafter `model+lookup`, n-grams 1–4: model " in (out / "summary.md").read_text()
    trace = json.loads((out / "trace.json").read_text())["traceEvents"]
    assert {"Lookup"} <= {e["name"] for e in trace if e["ph"] == "X"}
    assert any(e["name"] == "accepted_by_source" for e in trace if e["ph"] == "C")
    rounds = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert all("by_source" in e for e in rounds if e["type"] == "round")


def test_bench_of_a_target_only_bundle_drafts_with_lookup(pair_factory, copying_prompts: Path,  # type: ignore[no-untyped-def]
                                                          tmp_path: Path) -> None:
    target, _ = pair_factory("llama")
    result = runner.invoke(app, ["export", str(target), "-o", str(tmp_path / "b"), "--no-validate"])
    assert result.exit_code == 0 and "target only" in result.output, result.output
    bundle = Bundle.load(tmp_path / "b")
    outcome = run_bench(BenchConfig(output=tmp_path / "r", prompts=copying_prompts, tune=False,
                                    decode=DecodeOptions(max_new_tokens=16)),
                        bundle)
    results = outcome.results
    assert results.config.decode.drafter.value == "lookup" and results.config.sources["drafter"].startswith("bundle")
    assert not any("needs a draft graph" in w for w in results.warnings)  # lookup is the bundle's own default
    assert results.lossless.equal and results.details.by_source["model"].proposed == 0
    assert "cost_ratio_r" in results.unavailable
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "the chain formula has no figure here (α = " in summary and "unavailable×" not in summary
    refused = runner.invoke(app, ["bench", str(bundle.path), "-o", str(tmp_path / "r2"), "--drafter", "model"])
    assert refused.exit_code == 3 and "--drafter lookup" in refused.output and not (tmp_path / "r2").exists()

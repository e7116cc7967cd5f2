"""`specdec tune` stores a plan; generate and bench use it; bench tunes a device it has no plan for."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.devices.local import LocalDevice
from specdec.pipeline.errors import BundleError
from specdec.pipeline.generate.stage import GenerateConfig, generate_settings
from specdec.pipeline.records.decode import DrafterKind
from specdec.pipeline.records.plan import device_key
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import load_device
from specdec.pipeline.tune import TuneConfig, tune_bundle

runner = CliRunner()


@pytest.fixture(scope="module")
def tuned(bench_bundle_cpu, tmp_path_factory):  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("tune") / "tuned"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in bench_bundle_cpu.path.rglob("*"))
    bundle, plan = tune_bundle(TuneConfig(output=out, decode=DecodeOptions(max_new_tokens=12)), bench_bundle_cpu)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in bench_bundle_cpu.path.rglob("*")) == before  # input intact
    return bundle, plan


def test_tune_writes_a_new_bundle_with_the_plan(tuned) -> None:  # type: ignore[no-untyped-def]
    bundle, plan = tuned
    assert bundle.stages()[-1] == "tune"
    model, abi = LocalDevice.identity()
    assert plan.device == device_key("local", model, abi, 0)
    stored = Bundle.load(bundle.path).manifest.plan
    assert stored is not None and stored.for_device(plan.device) == plan
    assert plan.verify_ms and plan.plain_step_ms > 0 and plan.calibration_rounds > 0
    assert plan.choice.predicted_speedup >= 1.0
    assert plan.kv_policy == "full float32"  # the policy its costs were measured under


def test_generate_uses_the_plan_and_flags_override(tuned) -> None:  # type: ignore[no-untyped-def]
    bundle, plan = tuned
    profile = load_device("local-cpu")
    settings = generate_settings(GenerateConfig(decode=DecodeOptions(max_new_tokens=8)), bundle, profile, None)
    planned = plan.decode_settings()
    for key, value in planned.items():
        assert getattr(settings.config, key) == value and settings.sources[key] == "plan"
    override = generate_settings(GenerateConfig(decode=DecodeOptions(tree_budget=3, depth=2, width=1,
                                                                     speculative=True)), bundle, profile,
                                 None)
    assert override.config.tree_budget == 3 and override.sources["tree_budget"] == "options"
    other_threads = generate_settings(GenerateConfig(threads=7), bundle, profile, None)
    assert "plan" not in other_threads.sources.values()  # a plan is for the thread count it was measured at


def test_bench_uses_a_stored_plan(tuned, prompts_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle, plan = tuned
    outcome = run_bench(BenchConfig(output=tmp_path / "out", prompts=prompts_file, limit=2,
                                    decode=DecodeOptions(max_new_tokens=10)), bundle)
    report = outcome.results.plan
    assert report is not None and report.source == "bundle" and report.tuned is None
    assert report.choice == plan.choice and report.explanation
    assert outcome.results.lossless.equal
    assert not any(e.get("type") == "tune" for e in outcome.run.events)  # type: ignore[union-attr]


def test_bench_tunes_first_without_a_plan(bench_bundle_cpu, prompts_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outcome = run_bench(BenchConfig(output=tmp_path / "out", prompts=prompts_file, limit=2,
                                    decode=DecodeOptions(max_new_tokens=10)),
                        bench_bundle_cpu)
    report = outcome.results.plan
    assert report is not None and report.source == "tuned on the device" and report.tuned is not None
    assert [t.name for t in report.terms] == ["tokens per round", "round ms", "plain step ms"]
    assert outcome.results.lossless.equal
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "**Plan** (tuned on the device" in summary and "Biggest difference" in summary


def test_cli_tune_and_bad_input(bench_bundle_cpu, bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = runner.invoke(app, ["tune", str(bench_bundle_cpu.path), "-o", str(tmp_path / "t"), "-n", "10"])
    assert result.exit_code == 0, result.output
    assert "plan for local/" in result.output and (tmp_path / "t" / "manifest.json").exists()
    again = runner.invoke(app, ["tune", str(bench_bundle_cpu.path), "-o", str(tmp_path / "t")])
    assert again.exit_code == 2 and "already exists" in again.output
    target_only = Bundle.load(bench_bundle_cpu.path)
    target_only.manifest.graphs.pop("draft")
    with pytest.raises(BundleError, match="no draft graph"):
        tune_bundle(TuneConfig(output=tmp_path / "x", decode=DecodeOptions(drafter=DrafterKind.model)), target_only)
    assert not (tmp_path / "x").exists()


def test_tune_without_a_draft_graph_plans_prompt_lookup(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from specdec.pipeline.export.stage import ExportConfig, export_bundle

    target, _ = pair_factory("llama")
    target_only = export_bundle(ExportConfig(target=str(target), output=tmp_path / "b"))
    _, plan = tune_bundle(TuneConfig(output=tmp_path / "t", decode=DecodeOptions(max_new_tokens=12)), target_only)
    assert set(plan.acceptance) == {"lookup(1-3)/w1", "lookup(1-3)/w2", "lookup(2-4)/w1", "lookup(2-4)/w2"}
    assert plan.choice.drafter in ("lookup", "none")


def test_bench_with_a_fixed_drafter_tunes_that_drafter(bench_bundle_cpu, tuned, prompts_file: Path,
                                                       tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle, plan = tuned
    other = next(d for d in ("lookup", "model") if d != plan.choice.drafter)
    # the stored plan is for another drafter: its tree is not used, the device tunes the asked one
    outcome = run_bench(BenchConfig(output=tmp_path / "out", prompts=prompts_file, limit=2,
                                    decode=DecodeOptions(max_new_tokens=10, drafter=DrafterKind(other))), bundle)
    report = outcome.results.plan
    assert report is not None and report.source == "tuned on the device" and report.tuned is not None
    assert {key.split("(")[0].split("/")[0] for key in report.tuned.acceptance} == {other}
    decode = outcome.results.config.decode
    assert decode.drafter is DrafterKind(other) and outcome.results.config.sources["drafter"] == "options"
    if report.choice.speculative:  # the tree the device ran is the tuned one, and the results say so
        assert decode.tree_budget == report.choice.budget
        assert outcome.results.config.sources["tree_budget"] == "plan (tuned on the device)"
    assert outcome.results.lossless.equal


def test_inspect_shows_the_plan(tuned) -> None:  # type: ignore[no-untyped-def]
    bundle, plan = tuned
    shown = runner.invoke(app, ["inspect", str(bundle.path)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert f"plan for {plan.device}" in shown.output and "verify cost:" in shown.output
    assert "under the KV policy full float32" in shown.output
    assert "compiled: cpu flavour" in shown.output
    assert runner.invoke(app, ["inspect", str(bundle.path), "--json"]).output.count(plan.device) >= 1

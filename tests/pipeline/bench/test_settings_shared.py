"""generate and bench resolve decode settings with one function and fit them to the buckets alike."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bench.stage import BenchConfig, decode_settings
from specdec.pipeline.generate import decode_settings as generate_settings
from specdec.pipeline.profiles import load_device, load_scenario
from specdec.pipeline.runtime.manifest import read_bundle


def test_generate_and_bench_agree(bench_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    profile = load_device("snapdragon-8gen3").model_copy(update={"transport": "local"})
    bench = decode_settings(BenchConfig(output=tmp_path, scenario="creative", tree_budget=40), profile, bench_bundle)
    options = {"max_new_tokens": 64, "temperature": 0.0, "seed": 0, "tree_budget": 40}  # what the CLI passes
    generate = generate_settings(read_bundle(bench_bundle.path), options, profile, load_scenario("creative"))
    assert generate.config == bench.config and generate.sources == bench.sources and generate.notes == bench.notes
    assert bench.config.tree_budget == 16 and bench.notes  # clamped to the largest bucket, with a note


def test_generate_on_a_compiled_bundle_clamps_instead_of_failing(bench_bundle) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(app, ["generate", str(bench_bundle.path), "--prompt", "the quick", "-n", "6",
                                      "--tree-budget", "40", "--stats"])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "exceeds the largest compiled bucket; using 16" in output
    assert "tree_budget 16 (buckets (clamped from 40, options))" in output


def test_cli_errors_name_flags_and_yaml_keys_stay_keys(bench_bundle) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(app, ["generate", str(bench_bundle.path), "--prompt", "x", "--top-p", "2"])
    assert result.exit_code == 2 and "--top-p must be in (0, 1]" in result.output
    result = CliRunner().invoke(app, ["bench", str(bench_bundle.path), "--repeats", "0"])
    assert result.exit_code == 2 and "--repeats must be at least 1" in result.output

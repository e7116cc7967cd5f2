"""generate and bench resolve decode settings with one function and fit them to the buckets alike."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bench import stage as bench_stage
from specdec.pipeline.generate import stage as generate
from specdec.pipeline.settings.resolve import ResolvedSettings, run_settings


class _Resolved(Exception):
    """Stops a command once it has resolved its settings."""


@pytest.mark.parametrize("flags", [
    [],
    ["--scenario", "creative", "--tree-budget", "40", "--depth", "3", "--drafter", "model+lookup",
     "--lookup-max-ngram", "4", "--temperature", "0.7", "--mode", "rrs", "--seed", "5", "-n", "12", "--tree-layout"],
])
def test_generate_and_bench_resolve_the_same_flags_alike(bench_bundle, monkeypatch: pytest.MonkeyPatch,
                                                         flags: list[str]) -> None:
    """What each command makes of the same flags, through the CLI: drift in a flag's name, default or
    parsing between the two commands shows up as different settings or sources."""
    seen: dict[str, ResolvedSettings] = {}

    def capture(command: str) -> Any:
        def resolve(*args: Any, **kwargs: Any) -> ResolvedSettings:
            seen[command] = run_settings(*args, **kwargs)
            raise _Resolved
        return resolve

    monkeypatch.setattr(generate, "run_settings", capture("generate"))
    monkeypatch.setattr(bench_stage, "run_settings", capture("bench"))
    runner = CliRunner()
    path = str(bench_bundle.path)
    for argv in (["generate", path, "--prompt", "x", *flags], ["bench", path, *flags]):
        result = runner.invoke(app, argv)
        assert isinstance(result.exception, _Resolved), result.output
    assert seen["generate"].config == seen["bench"].config
    assert seen["generate"].sources == seen["bench"].sources and seen["generate"].notes == seen["bench"].notes
    if flags:
        assert seen["bench"].config.tree_budget == 16 and seen["bench"].notes  # clamped to the largest bucket


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

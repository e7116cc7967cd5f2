"""Tables that fit the terminal: under 100 columns `inspect`'s graph table turns vertical and `generate
--stats` keeps fewer columns, so no header is cut ("tok…", "arch…") and no line runs past the width."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app

runner = CliRunner()


def _fits(output: str, columns: int) -> None:
    assert "…" not in output, output
    assert max(len(line) for line in output.splitlines()) <= columns, output


@pytest.mark.parametrize("columns", [80, 200])
def test_inspect_fits(bundle_factory, bench_bundle_cpu, columns: int) -> None:  # type: ignore[no-untyped-def]
    for bundle, files in ((bundle_factory("llama"), ("target.onnx", "draft.onnx")),
                          (bench_bundle_cpu, ("cpu/target.onnx (compiled from target.onnx)",))):
        result = runner.invoke(app, ["inspect", str(bundle.path)], env={"COLUMNS": str(columns)})
        assert result.exit_code == 0, result.output
        _fits(result.output, columns)
        text = " ".join(result.output.split())
        for needle in ("architecture", "precision", "kv heads × dim", "llama", "a runner opens", *files):
            assert needle in text, needle


@pytest.mark.parametrize("columns", [80, 200])
def test_generate_stats_fit(bundle_factory, columns: int) -> None:  # type: ignore[no-untyped-def]
    result = runner.invoke(app, ["generate", str(bundle_factory("llama").path), "--prompt", "the quick", "-n", "8",
                                 "--stats", "--drafter", "model+lookup"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    table = result.output[result.output.index("generation statistics"):result.output.index("settings:")]
    _fits(table, columns)
    for header in ("prompt", "tokens", "mean accepted", "tok/s", "stop"):
        assert header in table, header
    assert ("lookup acc/prop" in table) == (columns >= 100)  # the narrow table keeps what people compare

"""Progress without a terminal: plain lines a log can read (stage, k/n, elapsed, eta)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec.cli import console
from specdec.cli.app import app

runner = CliRunner()


def test_plain_lines_name_the_stage_the_step_and_the_time(capsys: pytest.CaptureFixture[str]) -> None:
    now = [100.0]
    progress = console.RichProgress(stage="quantize", interval=3600, clock=lambda: now[0])
    with progress.task("target: awq on 4 layers", total=4) as task:
        now[0] += 30
        task.advance()
        assert task.line() == "quantize: target: awq on 4 layers 1/4 elapsed 30s eta 1m30s"  # type: ignore[union-attr]
        now[0] += 3600
        task.advance(3)
        assert task.line() == "quantize: target: awq on 4 layers 4/4 elapsed 1h00m"  # type: ignore[union-attr]
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["quantize: target: awq on 4 layers 0/4 elapsed 0s", "✓ target: awq on 4 layers (1h00m)"]


def test_a_silent_call_still_gets_a_line_every_interval(capsys: pytest.CaptureFixture[str]) -> None:
    with console.RichProgress(stage="export", interval=0.05).task("exporting target (llama)"):
        time.sleep(0.3)  # one long call that never advances (torch.onnx.export)
    beats = [line for line in capsys.readouterr().err.splitlines() if line.startswith("export: exporting target")]
    assert len(beats) >= 3


def test_quantize_piped_to_a_file_prints_progress_lines(bundle_factory, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(console, "PLAIN_INTERVAL_S", 0.01)
    result = runner.invoke(app, ["quantize", str(bundle_factory("llama").path), "-o", str(tmp_path / "q"),
                                 "--method", "awq", "--calib-samples", "4", "--calib-seq-len", "32"],
                           env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    calibrating = r"quantize: target: calibrating \d+ layer inputs on 4 samples \d/4 elapsed \d+s( eta \d+s)?"
    assert any(re.fullmatch(calibrating, line) for line in lines), lines
    assert any(re.fullmatch(r"quantize: draft: awq on \d+ layers \d+/\d+ elapsed \d+s( eta \d+s)?", line)
               for line in lines), lines
    assert any(line.startswith("quantize: measuring quality before and after") for line in lines)


def test_running_out_of_memory_is_one_line(bundle_factory, tmp_path: Path,  # type: ignore[no-untyped-def]
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from specdec.pipeline.quantize import layer_stats

    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(layer_stats, "collect", exhausted)
    result = runner.invoke(app, ["quantize", str(bundle_factory("llama").path), "-o", str(tmp_path / "q"),
                                 "--method", "gptq", "--calib-samples", "2", "--calib-seq-len", "16"])
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error")]
    assert errors == ["error: out of memory — free memory (other processes), or ask for less: quantize "
                      "--calib-samples/--calib-seq-len, compile fewer buckets, bench fewer --threads"], result.output
    assert "Traceback" not in result.output and not (tmp_path / "q").exists()

"""`specdec pipeline [CONFIG.yaml]`."""

from __future__ import annotations

from pathlib import Path

import typer

from specdec.cli.console import RichProgress, err, note
from specdec.cli.render import quality_table, report_outcome
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.chain.stage import load_config, run_pipeline


def pipeline(
    config_file: Path = typer.Argument(None, help="Pipeline YAML (default: the built-in demo pair on this machine)."),
    output: Path = typer.Option(None, "--output", "--out", "-o",
                                help="Root directory of the stage outputs (overrides the file)."),
    no_bench: bool = typer.Option(False, "--no-bench", help="Stop after compile."),
) -> None:
    """export → surgery → quantize → compile → bench from one YAML (default: the demo pair).

    Each stage writes OUTPUT/NN-stage/; a stage whose inputs and settings did not change is reused."""
    config = load_config(config_file, output=output)
    if no_bench:
        config = config.without("bench")
    err.print(f"pipeline: {config.target} → {config.output}")

    def report(stage: str, bundle: Bundle, reused: bool) -> None:
        verb = "reused" if reused else "built"
        err.print(f"[green]✓[/] {stage}: {verb} [bold]{bundle.path}[/]")
        reports = bundle.manifest.reports
        if stage == "quantize" and reports.quantize is not None and bundle.manifest.quantization is not None:
            err.print(quality_table(reports.quantize, bundle.manifest.quantization))
        if stage == "compile" and not reused and reports.compile is not None:
            for text in reports.compile.notes:
                note(text)

    bundle, outcome = run_pipeline(config, RichProgress(stage="pipeline"), report)
    if outcome is None:
        err.print(f"done: {bundle.path}")
        return
    report_outcome(outcome)

"""`specdec export TARGET [--draft DRAFT | --no-draft] -o OUT`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specdec.cli import options
from specdec.cli.console import RichProgress, err
from specdec.pipeline.export import DType, ExportConfig, export_bundle


def export(
    target: Annotated[str, typer.Argument(
        help="Target: a Hugging Face checkpoint directory or hub id, a .gguf file (or a directory holding one), "
             "or a built-in: 'demo' (SmolLM2-135M-Instruct) or 'demo-tiny' (a tiny pair, for tests).")],
    output: options.BundleOutput,
    draft: str = typer.Option(
        None, "--draft", "-d",
        help="Draft checkpoint directory or .gguf file, or a feature draft (EAGLE-style, docs/draft.md; the target "
             "then also outputs its hidden states). Default with 'demo-tiny': its draft; otherwise none: a "
             "target-only bundle that speculates with --drafter lookup.",
    ),
    no_draft: bool = typer.Option(False, "--no-draft", help="Export the target alone (also for 'demo-tiny')."),
    opset: int = typer.Option(18, help="ONNX opset."),
    dtype: DType = typer.Option(DType.float32, help="Weight and activation dtype of the graphs."),
    force: options.Force = False,
    validate: bool = typer.Option(True, "--validate/--no-validate", help="Check ONNX against PyTorch after export."),
    share_tensors: bool = typer.Option(True, "--share-tensors/--no-share-tensors",
                                       help="Store tensors identical in target and draft once, in shared.data "
                                            "(--no-share-tensors: each graph holds its own copy)."),
    draft_vocab: Path = typer.Option(
        None, "--draft-vocab", dir_okay=False,
        help="A reduced vocabulary for a model draft: target token ids (.npy, or whitespace-separated text) its "
             "head keeps; it then proposes only those, and the target still verifies over every token. A feature "
             "draft carries its own."),
) -> None:
    """Export a Hugging Face or GGUF target (and draft, or a feature draft) to a validated ONNX bundle."""
    config = ExportConfig(target=target, draft=draft, no_draft=no_draft, output=output, opset=opset, dtype=dtype,
                          force=force, validate=validate, share_tensors=share_tensors, draft_vocab=draft_vocab)
    bundle = export_bundle(config, progress=RichProgress(stage="export"))
    export = bundle.manifest.reports.export
    report = export.validation if export is not None else None
    if isinstance(report, dict):
        worst = max((c["max_abs_diff"] for r in report.values() for c in r["checks"]), default=0.0)
        err.print(f"[green]validated[/]: ONNX matches PyTorch (max |diff| {worst:.2g})")
    if "draft" not in bundle.manifest.graphs:
        err.print("[yellow]target only[/]: no draft graph; speculate with `--drafter lookup`")
    err.print(f"wrote [bold]{bundle.path}[/] — see `specdec inspect {bundle.path}`")

"""`specdec surgery BUNDLE -o OUT`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specdec.cli import options
from specdec.cli.console import RichProgress, err
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.records.decode import PruneParams
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle


def surgery(
    bundle: Annotated[Path, typer.Argument(help="Bundle written by `specdec export`.")],
    output: options.BundleOutput,
    max_k: int = typer.Option(PruneParams.max_k, "--max-k", min=1,
                              help="Candidates per node DynamicTreePrune can keep (fixed)."),
    force: options.Force = False,
) -> None:
    """Insert the com.endpoint.ai custom ops as ONNX functions (stock onnxruntime runs them).

    DynamicTreePrune goes after the draft's logits, BlockSparseVerify after the target's."""
    result = surgery_bundle(SurgeryConfig(output=output, max_k=max_k, force=force), Bundle.load(bundle),
                           progress=RichProgress(stage="surgery"))
    ops = result.manifest.custom_ops
    placed = ", ".join(f"{record.op} → {role}" for role, record in (ops.graphs if ops else {}).items())
    err.print(f"[green]validated[/]: {placed} match their numpy references")
    err.print(f"wrote [bold]{result.path}[/]; stock onnxruntime runs it, no custom-op library needed")

"""Root of the `specdec` CLI. Commands live one per module and are registered here."""

from __future__ import annotations

import typer

from specdec import __version__
from specdec.cli import devices_cmd, export_cmd, generate_cmd, inspect_cmd, surgery_cmd
from specdec.cli.console import guarded, out, refresh_width, setup_logging

app = typer.Typer(
    name="specdec",
    help="Export, quantize, compile and benchmark lossless tree speculative decoding for on-device LLMs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        out.print(f"specdec {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each step (SPECDEC_DEBUG=1 for tracebacks)."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """specdec: target + draft LLM -> ONNX -> INT4 -> mobile graphs -> measured speculative decoding."""
    refresh_width()
    setup_logging(verbose)


app.command("export", help="Export a Hugging Face target + draft to a validated ONNX bundle.")(
    guarded(export_cmd.export)
)
app.command("inspect", help="Summarise a bundle: graphs, inputs/outputs, sizes, lineage, tokenizer.")(
    guarded(inspect_cmd.inspect)
)
app.command("surgery", help="Insert the com.endpoint.ai custom ops as ONNX functions (stock onnxruntime runs them).")(
    guarded(surgery_cmd.surgery)
)
app.command("generate", help="Stream text with speculative decoding from any bundle.")(
    guarded(generate_cmd.generate)
)

app.command("devices", help="List adb devices: model, Android, ABI, battery, Python/numpy/onnxruntime.")(
    guarded(devices_cmd.devices)
)


def main() -> None:
    app()

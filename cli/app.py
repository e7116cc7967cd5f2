"""Root of the `specdec` CLI. Commands live one per module and are registered here."""

from __future__ import annotations

import typer

from specdec import __version__
from specdec.cli import (
    bench_cmd,
    compile_cmd,
    devices_cmd,
    draft_cmd,
    export_cmd,
    generate_cmd,
    inspect_cmd,
    pipeline_cmd,
    profiles_cmd,
    quantize_cmd,
    runtime_cmd,
    surgery_cmd,
    tune_cmd,
)
from specdec.cli.console import guarded, ignore_stop_signals, out, refresh_width, setup_logging, tolerant_streams

app = typer.Typer(
    name="specdec",
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
    """Export, quantize, compile and benchmark lossless tree speculative decoding for on-device LLMs.

    A target and a draft LLM go from Hugging Face to ONNX, get the speculative-decoding custom ops,
    are quantized and compiled for the device, and are measured there against plain decoding."""
    refresh_width()
    tolerant_streams()
    setup_logging(verbose)


# in the order a user meets them; each command's help is its function's docstring (the first line is the
# one `specdec --help` lists), and a sub-app's is its callback's
COMMANDS = (
    ("pipeline", pipeline_cmd.pipeline),
    ("draft", draft_cmd.draft),
    ("export", export_cmd.export),
    ("surgery", surgery_cmd.surgery),
    ("quantize", quantize_cmd.quantize),
    ("compile", compile_cmd.compile_),
    ("tune", tune_cmd.tune),
    ("bench", bench_cmd.bench),
    ("generate", generate_cmd.generate),
    ("inspect", inspect_cmd.inspect),
    ("devices", devices_cmd.devices),
)
for _name, _function in COMMANDS:
    app.command(_name)(guarded(_function))
app.add_typer(profiles_cmd.app, name="profiles")
app.add_typer(runtime_cmd.app, name="runtime")


def main() -> None:
    try:
        app()
    finally:
        ignore_stop_signals()

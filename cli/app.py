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
    tolerant_streams()
    setup_logging(verbose)


# (name, module function, one-line help) in the order a user meets them
COMMANDS = (
    ("pipeline", pipeline_cmd.pipeline,
     "export → surgery → quantize → compile → bench from one YAML (default: the demo pair)."),
    ("draft", draft_cmd.draft,
     "Make a draft from the target: structured pruning + distillation, sharing the target's tensors."),
    ("export", export_cmd.export, "Export a Hugging Face target + draft to a validated ONNX bundle."),
    ("surgery", surgery_cmd.surgery,
     "Insert the com.endpoint.ai custom ops as ONNX functions (stock onnxruntime runs them)."),
    ("quantize", quantize_cmd.quantize,
     "Quantize weights to INT4 MatMulNBits (AWQ, GPTQ or RTN) with a quality report."),
    ("compile", compile_cmd.compile_,
     "Compile the graphs in a runtime flavour: fused cpu graphs, or static npu q × context variants."),
    ("tune", tune_cmd.tune,
     "Measure the device's cost curve and acceptance; store the tree that maximizes tokens/s as the plan."),
    ("bench", bench_cmd.bench,
     "Plain vs speculative decoding on a device: latency, acceptance, power, thermal, CI gates."),
    ("generate", generate_cmd.generate, "Stream text with speculative decoding from any bundle."),
    ("inspect", inspect_cmd.inspect, "Summarise a bundle: graphs, inputs/outputs, sizes, lineage, tokenizer."),
    ("devices", devices_cmd.devices,
     "List adb devices: model, Android, ABI, battery, device Python, portable runtime."),
)
for _name, _function, _help in COMMANDS:
    app.command(_name, help=_help)(guarded(_function))
app.add_typer(profiles_cmd.app, name="profiles", help="Device profiles and scenario templates: list, show.")
app.add_typer(runtime_cmd.app, name="runtime",
              help="The portable arm64 device runtime (no Python needed on the phone): build, info.")


def main() -> None:
    try:
        app()
    finally:
        ignore_stop_signals()

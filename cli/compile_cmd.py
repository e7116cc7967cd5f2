"""`specdec compile BUNDLE -o OUT`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specdec.cli import options
from specdec.cli.console import RichProgress, err, note
from specdec.cli.render import human_bytes, qdq_lines, readiness_table
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.compile import CompileConfig, OutputFormat, compile_bundle
from specdec.pipeline.compile.config import Activations
from specdec.pipeline.records.kv_policy import KVCache, KVDtype
from specdec.pipeline.records.manifest import GraphFlavour


def compile_(
    bundle: Annotated[Path, typer.Argument(help="Bundle to compile (exported, surgered and/or quantized).")],
    output: options.BundleOutput,
    profile: options.Profile = None,
    target: GraphFlavour = typer.Option(None, "--target", help="Graph flavour: cpu (fused contrib ops, KV in place) "
                                        "or npu (static standard-op buckets); the profile's compile.target."),
    buckets: str = typer.Option(None, "--buckets", help="Target tree-size buckets, e.g. 8,24,48,96 (profile's)."),
    draft_buckets: str = typer.Option(None, "--draft-buckets", help="Draft frontier buckets, e.g. 1,4,8,16."),
    max_context: int = typer.Option(None, "--max-context", help="KV buffer slots (profile's by default)."),
    prefill_chunk: int = typer.Option(None, "--prefill-chunk", help="Tokens per prefill call (profile's)."),
    context_buckets: str = typer.Option(None, "--context-buckets",
                                        help="npu: KV slots per context bucket, e.g. 128,256,512,1024 (profile's; "
                                        "capped at --max-context, which is always the last)."),
    format: OutputFormat = typer.Option(None, "--file-format", "--format",
                                        help="Graph file format: onnx, ort or both (npu default: onnx, whose "
                                             "variants share weights; ORT format repeats them per variant; cpu "
                                             "default: ort, the file the runner opens). --format is its old name "
                                             "(quantize's --format is the weight format)."),
    kv_cache: KVCache = typer.Option(None, "--kv-cache", help="KV cache policy: full (exact) or window (lossy: "
                                     "--kv-sinks first + --kv-window latest positions, replies past the context); "
                                     "the profile's compile.kv_cache."),
    kv_sinks: int = typer.Option(None, "--kv-sinks", help="window: first positions kept (profile's, 4)."),
    kv_window: int = typer.Option(None, "--kv-window", help="window: latest positions kept (profile's, 256)."),
    kv_dtype: KVDtype = typer.Option(None, "--kv-dtype", help="KV rows: float32 (exact), float16 (lossy, half "
                                     "the bytes) or int8 (lossy, a quarter, per-channel scales calibrated here); "
                                     "cpu flavour; the profile's."),
    kv_calib: Path = typer.Option(None, "--kv-calib", help="Text to measure a lossy KV policy on against the full "
                                  "cache (mismatch rate, perplexity): text, or JSONL with 'text' or 'input_ids' "
                                  "lines, 32 tokens or more (default: the built-in calibration text)."),
    activations: Activations = typer.Option(None, "--activations",
                                            help="npu, w8a8 bundles: dynamic (the bundle's per-row scales, "
                                            "MatMulInteger: exact w8a8, CPU provider) or static-qdq "
                                            "(QuantizeLinear/DequantizeLinear with scales calibrated on the "
                                            "bundle's calibration text: the form NPU providers take; lossy "
                                            "vs dynamic w8a8, measured). Default dynamic."),
    force: options.Force = False,
) -> None:
    """Compile the graphs in a runtime flavour: fused cpu graphs, or static npu q × context variants."""
    config = options.config_from(CompileConfig, locals(), buckets=options.parse_sizes(buckets, "buckets"),
                                 draft_buckets=options.parse_sizes(draft_buckets, "draft_buckets"),
                                 context_buckets=options.parse_sizes(context_buckets, "context_buckets"))
    result = compile_bundle(config, Bundle.load(bundle), progress=RichProgress(stage="compile"))
    report = result.manifest.reports.compile
    assert report is not None  # compile writes its report
    worst = max(report.max_abs_diff.values())
    if report.readiness is not None:
        err.print(readiness_table(report.readiness))
    for line in qdq_lines(report):
        note(line)
    for role, size in (report.sizes or {}).items():
        err.print(f"{role}: {size['variants']} variants over context buckets {report.context_buckets}, weights "
                  f"{human_bytes(size['shared_weights_bytes'])} shared by the onnx variants "
                  f"({human_bytes(size['inline_weights_bytes'])} if each held its own)")
    for text in report.notes:
        note(text)
    what = "every bucket matches" if report.flavour == GraphFlavour.npu.value else "the fused graphs match"
    if report.activations is not None:  # static-qdq: the tolerance includes what the lossy format itself moves
        what = "every bucket (static QDQ, lossy vs dynamic w8a8) is within its format's own measured difference from"
    err.print(f"[green]validated[/]: {what} the dynamic graph (max |diff| {worst:.2g}, relative)")
    invariance = report.invariance
    if invariance is not None:
        exact = "bitwise in trees" if invariance.tree else "bitwise in the exact (chain) layout" \
            if invariance.chain else "up to float rounding only"
        err.print(f"speculation on this target is exact {exact} (see `specdec inspect`)")
    policy = result.manifest.buckets.kv_policy if result.manifest.buckets is not None else None
    quality = report.kv_quality
    if policy is not None and policy.lossy and quality is not None:
        note(f"KV cache policy {policy.describe(result.manifest.graphs['target'].dtype)} is lossy: against the full "
             f"cache on {quality.tokens} calibration tokens, {quality.mismatch_rate:.1%} of greedy "
             f"tokens differ ({quality.mismatch_rate_past_reach:.1%} past its reach), perplexity "
             f"{quality.perplexity_full:.3f} -> {quality.perplexity_policy:.3f}")
    err.print(f"wrote [bold]{result.path}[/]")

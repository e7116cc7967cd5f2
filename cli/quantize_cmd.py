"""`specdec quantize BUNDLE -o OUT [--format nbits|w8a8|mixed [--mix CLASS=FORMAT,...]] --method awq|gptq|rtn`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specdec.cli import options
from specdec.cli.console import RichProgress, err
from specdec.cli.render import quality_table
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.quantize import QuantizeConfig, quantize_bundle
from specdec.pipeline.records.quantization import MIXED_FORMAT


def quantize(
    bundle: Annotated[Path, typer.Argument(help="Float bundle written by `specdec export` (or surgery).")],
    output: options.BundleOutput,
    graphs: str = typer.Option(None, "--graphs",
                               help="Graphs to quantize, comma-separated: target, draft or both (default: every graph "
                                    "the bundle has). `--graphs draft` keeps the target, and so the output, bit for "
                                    "bit as it was, and makes each draft call read about a third of the bytes."),
    format: str = typer.Option(None, "--format",
                               help="nbits: MatMulNBits int4 (int8 head and first block); w8a8: per-channel int8 "
                                    "weights x per-row uint8 activations (standard MatMulInteger, int32 sums): "
                                    "every row computed as if alone, a verify cost nearly flat in the tree size. "
                                    "Default: the profile's quantize.format (local-cpu: w8a8), or nbits when a "
                                    "setting only nbits has is given (--method awq/gptq, --group-size, ...). "
                                    "mixed: one of the two per layer class (--mix). "
                                    "A comma list (nbits,w8a8,mixed) also stores the target in the later formats, "
                                    "sharing the rest; `tune` measures each and its plan picks one."),
    mix: str = typer.Option(None, "--mix",
                            help="The mixed format's weight format per layer class, CLASS=FORMAT comma-separated; "
                                 "classes: attention (q/k/v/o projections), mlp (gate/up/down), head (output "
                                 "projection); formats: nbits, w8a8. Classes left out: attention=w8a8, mlp=nbits, "
                                 "head=nbits."),
    method: str = typer.Option(None, "--method",
                               help="awq | gptq | rtn, for both graphs (default: awq for nbits; w8a8 is rtn only)."),
    target_method: str = typer.Option(None, "--target-method", help="Override --method for the target."),
    draft_method: str = typer.Option(None, "--draft-method", help="Override --method for the draft."),
    group_size: int = typer.Option(None, "--group-size",
                                   help="Rows per scale (power of two >= 16); default 128 where the width allows, "
                                        "else 64 or 32."),
    symmetric: bool = typer.Option(False, "--symmetric/--asymmetric", help="Zero point fixed at the centre or fitted."),
    accuracy_level: int = typer.Option(0, "--accuracy-level",
                                       help="MatMulNBits compute: 0 = the graph's float type (trees, lossless); "
                                            "4 = int8 activations, faster on CPUs; the bundle then decodes in the "
                                            "exact layout (chains, no single-row calls) so speculative output stays "
                                            "identical to plain — the quality report checks it."),
    head_bits: int = typer.Option(8, "--head-bits", help="Bits of the target's output projection: 8 (default) or "
                                                          "4 (smaller; its perplexity cost is in the quality report)."),
    first_block_bits: int = typer.Option(8, "--first-block-bits",
                                         help="Bits of the target's first decoder block: 8 (default) or 4 (faster; "
                                              "onnxruntime-genai quantizes every block to 4)."),
    keep_float: list[str] = typer.Option(None, "--keep-float",
                                         help="Layer name pattern (fnmatch) to keep float; repeatable."),
    calib: options.CalibText = None,
    calib_samples: int = typer.Option(128, "--calib-samples", help="Calibration windows."),
    calib_seq_len: int = typer.Option(128, "--calib-seq-len", help="Tokens per calibration window."),
    eval_file: Path = typer.Option(None, "--eval", help="Text for perplexity (default: held-out calibration slice)."),
    eval_prompts: int = typer.Option(None, "--eval-prompts",
                                     help="Prompts of the quality report's engine check (default: 8 up to 40M "
                                          "parameters, fewer above, at least 1)."),
    eval_new_tokens: int = typer.Option(None, "--eval-new-tokens",
                                        help="Tokens per engine-check prompt (default: 32 up to 40M parameters, "
                                             "fewer above, at least 4)."),
    eval_windows: int = typer.Option(None, "--eval-windows",
                                     help="Most held-out windows scored for perplexity (default: 16 up to 40M "
                                          "parameters, fewer above, at least 2)."),
    max_ppl_increase: float = typer.Option(None, "--max-ppl-increase",
                                           help="Fail when a graph's perplexity rises by more than this percent."),
    quantize_embeddings: bool = typer.Option(
        None, "--quantize-embeddings/--float-embeddings",
        help="Embedding tables to GatherBlockQuantized (target 8, draft 4 bits), or keep them float (default: "
             "quantized for vocabularies of 32k tokens or more)."),
    w8a8_weight_bits: int = typer.Option(7, "--w8a8-weight-bits",
                                         help="w8a8 weight range: 7 (+-63, exact on every CPU) or 8 (+-127: only "
                                              "where no kernel sums pairs in saturating int16 — x86 with VNNI, "
                                              "arm64)."),
    profile: options.Profile = None,
    seed: options.Seed = None,
    force: options.Force = False,
) -> None:
    """Quantize the weights (the profile's format: w8a8 on local-cpu; or nbits, or mixed) with a quality report.

    w8a8: per-channel int8 weights × per-row uint8 activations (MatMulInteger, RTN); nbits: int4
    MatMulNBits with an int8 head and first block (AWQ, GPTQ or RTN); mixed: one of the two per
    layer class. --calib defaults to the built-in text; --seed chooses its calibration windows."""
    config = options.config_from(QuantizeConfig, locals(), build=QuantizeConfig.from_text,
                                 keep_float=tuple(keep_float or ()))
    result = quantize_bundle(config, Bundle.load(bundle), progress=RichProgress(stage="quantize"))
    report = result.manifest.reports.quantize
    assert result.manifest.quantization is not None and report is not None
    err.print(quality_table(report, result.manifest.quantization))
    calibration = report.calibration
    err.print(f"calibrated on {calibration.samples} × {calibration.seq_len} tokens of "
              f"{Path(calibration.source).name}; perplexity on {report.eval.tokens} tokens ({report.eval.source})")
    quantization = result.manifest.quantization
    ops = "standard MatMulInteger, exact by construction per row" if quantization.row_invariant else \
        "com.microsoft MatMulNBits and standard MatMulInteger, by layer class" \
        if quantization.format == MIXED_FORMAT else "com.microsoft MatMulNBits"
    for name, variant in result.manifest.variants.items():
        target = report.variants[name].graphs["target"]
        err.print(f"the target also in {name}: {variant.graph.file}, perplexity "
                  f"{target['perplexity_increase_pct']:+.2f} %, {target['bytes_after'] / 2**20:.1f} MiB "
                  "(`specdec tune` measures each format and the plan picks one)")
    err.print(f"wrote [bold]{result.path}[/]; stock onnxruntime runs it ({ops})")

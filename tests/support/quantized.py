"""Small quantize settings and helpers the quantize tests share: the tiny models need little
calibration text, and every test reads a graph's op types the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
from specdec.pipeline.quantize import QuantizeConfig, quantize_bundle

SMALL: dict[str, Any] = {"calib_samples": 8, "calib_seq_len": 32, "eval_prompts": 3, "eval_new_tokens": 12}


def op_types(path: Path) -> list[str]:
    return [node.op_type for node in onnx.load(str(path)).graph.node]


def quantized_and_fused(source: Bundle, root: Path, **config: Any) -> tuple[Bundle, Bundle]:
    """`source` quantized with `config` (plus SMALL) under root/q, then compiled for cpu under root/cpu."""
    quantized = quantize_bundle(QuantizeConfig.from_text(output=root / "q", **config, **SMALL), source)
    fused = compile_bundle(CompileConfig(output=root / "cpu", target=GraphFlavour.cpu, max_context=96,
                                         format=OutputFormat.onnx), quantized)
    return quantized, fused

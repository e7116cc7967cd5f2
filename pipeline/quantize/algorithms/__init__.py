"""Weight quantizers by method: each maps W[K, N] (+ calibration statistics) to codes, scales, zero points.

Why GPTQ and AWQ are implemented here, on the exported graph, instead of taken from a library:

- onnxruntime's `matmul_nbits_quantizer` GPTQ is silently broken on this stack: asymmetric GPTQ
  gives int4 codes bit-identical to RTN (its error-feedback loop reads a zero column) and
  symmetric GPTQ is worse than RTN. Its RTN packer is sound and is what `rtn` uses.
- GPTQModel and llm-compressor run on CPU but pin torch / transformers versions that fight ours,
  and neither writes MatMulNBits, so we would still own a packer from their formats (GPTQ v1
  zero-point offsets, AWQ's interleaved columns); AutoAWQ and onnx-neural-compressor's AWQ were
  worse than RTN here.
- Working on the exported graph's MatMul / Gemm weights gives one path for every architecture
  the exporter supports (Llama, Qwen2, GPT-2 ...), surgered bundles included, with calibration
  activations taken from the very graph that will run.
"""

from __future__ import annotations

from specdec.pipeline.quantize.algorithms import awq, gptq, rtn
from specdec.pipeline.quantize.algorithms.base import (
    ACTIVATIONS,
    HESSIAN,
    Algorithm,
    LayerStats,
    QuantResult,
    QuantSpec,
)
from specdec.pipeline.quantize.config import Method

ALGORITHMS: dict[Method, Algorithm] = {
    Method.rtn: Algorithm("rtn", frozenset(), rtn.quantize),
    Method.gptq: Algorithm("gptq", frozenset({HESSIAN}), gptq.quantize),
    Method.awq: Algorithm("awq", frozenset({ACTIVATIONS}), awq.quantize),
}

__all__ = ["ACTIVATIONS", "ALGORITHMS", "HESSIAN", "Algorithm", "LayerStats", "QuantResult", "QuantSpec", "awq", "gptq",
           "rtn"]

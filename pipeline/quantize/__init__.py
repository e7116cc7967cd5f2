"""Weight-only INT4/INT8 quantization of bundles into onnxruntime's MatMulNBits (RTN, GPTQ, AWQ)."""

from specdec.pipeline.quantize.config import Method, QuantizeConfig
from specdec.pipeline.quantize.stage import quantize_bundle

__all__ = ["Method", "QuantizeConfig", "quantize_bundle"]

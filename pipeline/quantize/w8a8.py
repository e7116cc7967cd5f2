"""The w8a8 weight format of `specdec quantize`: every linear layer to per-channel int8 weights
multiplied by per-row uint8 activations (standard MatMulInteger, `pipeline/graphs/int8_matmul.py`).

No calibration: the weights are rounded to nearest per output column and the activation scales
are computed from each row at run time. `--keep-float` patterns stay float as in the nbits format;
the head and first block settings (`--head-bits`, `--first-block-bits`) are the nbits format's
mixed precision and do not apply (every layer here is already 8-bit).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from specdec.pipeline.errors import InputError
from specdec.pipeline.graphs import int8_matmul
from specdec.pipeline.graphs.query import Layer, load_weight
from specdec.pipeline.progress import Progress
from specdec.pipeline.quantize.algorithms.base import relative_error
from specdec.pipeline.quantize.config import QuantizeConfig
from specdec.pipeline.quantize.layers import Rewrite, apply_rewrites
from specdec.pipeline.records.quantization import GraphQuantization, LayerQuantization


def quantize_graph(model: onnx.ModelProto, role: str, layers: list[Layer], config: QuantizeConfig,
                   progress: Progress, base_dir: Path | None = None) -> GraphQuantization:
    """Rewrite `layers` of `model` in place into w8a8 and return the graph's record; `base_dir`: where a
    structure-only model's external data lies (each layer's weight is read from there when its turn comes)."""
    rewrites, records = layer_rewrites(model, role, layers, config, progress, base_dir)
    apply_rewrites(model, rewrites)
    return GraphQuantization(
        method="rtn", group_size="channel", symmetric=True, accuracy_level=0, embeddings={},
        summary={"int4": 0, "int8": len(rewrites), "float": len(layers) - len(rewrites)}, layers=records,
        weight_bits=config.w8a8_weight_bits,
    )


def layer_rewrites(model: onnx.ModelProto, role: str, layers: list[Layer], config: QuantizeConfig, progress: Progress,
                   base_dir: Path | None = None) -> tuple[list[Rewrite], dict[str, LayerQuantization]]:
    """The w8a8 rewrite of each of `layers` (`--keep-float` ones excepted) and every layer's record; one
    float weight is in memory at a time, the int8 codes of those done so far beside it."""
    records: dict[str, LayerQuantization] = {}
    rewrites: list[Rewrite] = []
    with progress.task(f"{role}: w8a8 rtn on {len(layers)} layers", total=len(layers)) as task:
        for layer in layers:
            if config.bits_for(role, layer.name) is None:
                records[layer.name] = LayerQuantization(bits="float", reason="--keep-float")
                task.advance()
                continue
            if np.dtype(layer.dtype) != np.float32:
                # int32 sums past 65504 overflow a float16 rescale; the format keeps float32 activations
                raise InputError(f"{role} layer {layer.name} computes in {np.dtype(layer.dtype).name}; the w8a8 "
                                 "format needs a float32 graph", "export the bundle in float32, or use --format nbits")
            weight = load_weight(model, layer, base_dir)
            columns = int8_matmul.quantize_columns(weight, config.w8a8_weight_bits)
            error = relative_error(weight, columns.dequantized)
            records[layer.name] = LayerQuantization(bits=8, method="rtn", weight_rel_error=error)
            rewrites.append(Rewrite(layer, columns, None, 0))
            task.advance()
    return rewrites, records

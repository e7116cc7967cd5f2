"""How a bundle's graphs were quantized: the `quantization` section of a graph's manifest entry (written by
`specdec quantize`, read by compile, inspect and the engine)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from specdec.pipeline.records.codec import OMIT_DEFAULT


@dataclass
class LayerQuantization:
    """One linear layer or embedding table: its bits (4, 8 or "float") and how it got them."""

    bits: int | str
    reason: str | None = field(default=None, metadata=OMIT_DEFAULT)  # why it stayed float
    method: str | None = field(default=None, metadata=OMIT_DEFAULT)
    block_size: int | None = field(default=None, metadata=OMIT_DEFAULT)
    weight_rel_error: float | None = field(default=None, metadata=OMIT_DEFAULT)
    # what the algorithm reports (QuantResult.info): AWQ's scale search, GPTQ's damping
    alpha: float | None = field(default=None, metadata=OMIT_DEFAULT)
    loss_vs_rtn: float | None = field(default=None, metadata=OMIT_DEFAULT)
    search_rows: float | None = field(default=None, metadata=OMIT_DEFAULT)  # AWQ: the sample it searched on
    search_columns: float | None = field(default=None, metadata=OMIT_DEFAULT)
    damp: float | None = field(default=None, metadata=OMIT_DEFAULT)
    dead_inputs: float | None = field(default=None, metadata=OMIT_DEFAULT)
    # mixed graphs only: the weight format the layer got (nbits or w8a8; GraphQuantization.mix says why)
    format: str | None = field(default=None, metadata=OMIT_DEFAULT)

    @property
    def is_float(self) -> bool:
        return self.bits == "float"


@dataclass
class GraphQuantization:
    method: str
    group_size: int | str  # an int, or "auto" (128 where the width allows, else 64 or 32)
    symmetric: bool
    accuracy_level: int
    embeddings: dict[str, LayerQuantization]
    summary: dict[str, int]  # layers per precision: int4, int8, float
    layers: dict[str, LayerQuantization]
    # w8a8 and mixed: the w8a8 weights' range (7 bits: +-63, 8 bits: +-127; pipeline/graphs/int8_matmul.py says why)
    weight_bits: int | None = field(default=None, metadata=OMIT_DEFAULT)
    # mixed only: the weight format of each layer class (attention, mlp, head), as --mix asked
    mix: dict[str, str] | None = field(default=None, metadata=OMIT_DEFAULT)

    def has_w8a8_layers(self, graph_format: str) -> bool:
        """Does any layer multiply in w8a8 (the whole graph in that format, or a mixed graph's layer)?"""
        return graph_format == W8A8_FORMAT or any(layer.format == W8A8_FORMAT for layer in self.layers.values())


W8A8_FORMAT = "w8a8"
MIXED_FORMAT = "mixed"


class WeightFormat(str, enum.Enum):
    """How `specdec quantize` stores and multiplies the weights (docs/quantize.md); a record because
    device profiles name their default (profiles.QuantizeSpec) as well as the quantize stage.

    nbits: com.microsoft MatMulNBits, blockwise int4 (int8 for the head and first block), float
           or int8 (accuracy level 4) compute;
    w8a8:  per-channel int8 weights x per-row dynamic uint8 activations, standard MatMulInteger
           with int32 accumulation (pipeline/graphs/int8_matmul.py): row-invariant, exact by construction.
    mixed: one of those per layer class (attention projections, MLP, output head; `quantize --mix`),
           each layer's record names its format.
    """

    nbits = "nbits"
    w8a8 = W8A8_FORMAT
    mixed = MIXED_FORMAT


@dataclass
class Quantization:
    # the operator the weights are stored for: MatMulNBits, w8a8 (standard MatMulInteger) or mixed
    # (both, by layer class: each layer's record names its format)
    format: str
    domain: str
    graphs: dict[str, GraphQuantization]

    @property
    def weight_format(self) -> WeightFormat:
        """The `WeightFormat` the graphs are stored in (`format` names its operator)."""
        return {W8A8_FORMAT: WeightFormat.w8a8, MIXED_FORMAT: WeightFormat.mixed}.get(self.format, WeightFormat.nbits)

    @property
    def row_invariant(self) -> bool:
        """Every matmul computes a row alone exactly as in any batch (per-row scales, int32 sums)."""
        return self.format == W8A8_FORMAT

    def int8_activations(self, role: str) -> bool:
        """Does the graph round its activations to int8 (w8a8, MatMulNBits accuracy level 4)? Then a
        last-bit difference upstream can move a value across a rounding step."""
        graph = self.graphs.get(role)
        return graph is not None and (self.int8_matmuls(role) or graph.accuracy_level >= 4)

    def int8_matmuls(self, role: str) -> bool:
        """Does any of the graph's layers multiply in w8a8 (all of a w8a8 graph's, some of a mixed one's)?"""
        graph = self.graphs.get(role)
        return graph is not None and graph.has_w8a8_layers(self.format)



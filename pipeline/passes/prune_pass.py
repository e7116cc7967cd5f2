"""Draft side: DynamicTreePrune after `logits`, its scalars as graph inputs (docs/design.md §3)."""

from __future__ import annotations

import onnx

from specdec.custom_ops.registry import OPS
from specdec.pipeline.passes import graph_edit
from specdec.pipeline.records.manifest import CustomOpGraph

OP = OPS["DynamicTreePrune"]
ROLE = "draft"
SCALAR_INPUTS = ("temperature", "entropy_low", "entropy_high", "beta_base", "rho_min", "rho_max")


def check(model: onnx.ModelProto) -> str | None:
    """Why this graph cannot take the op, or None when it can."""
    return graph_edit.check_op_after_logits(model, OP.schema.name, SCALAR_INPUTS)


def apply(model: onnx.ModelProto, *, max_k: int) -> CustomOpGraph:
    logits = graph_edit.squeeze_batch_as_float(model, "logits", "prune")
    for name in SCALAR_INPUTS:
        graph_edit.add_input(model, name, "float", [])
    graph_edit.add_custom_node(model, OP.schema, [logits, *SCALAR_INPUTS], OP.function_protos(), max_k=max_k)
    q = graph_edit.output_shape(model, "logits")[1]  # type: ignore[index]
    outputs = {"cand_ids": ("int64", [q, max_k]), "cand_logprob": ("float", [q, max_k]), "keep": ("int64", [q]),
               "entropy": ("float", [q])}
    for name, (dtype, shape) in outputs.items():
        graph_edit.add_output(model, name, dtype, shape)
    return CustomOpGraph(op=OP.schema.name, attributes={"max_k": max_k}, inputs=list(SCALAR_INPUTS),
                         outputs=list(outputs))

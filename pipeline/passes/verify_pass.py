"""Target side: BlockSparseVerify after `logits`; only the accepted path leaves the graph (docs/design.md §3)."""

from __future__ import annotations

import onnx

from specdec.custom_ops.registry import OPS
from specdec.pipeline.passes import graph_edit
from specdec.pipeline.records.manifest import CustomOpGraph

OP = OPS["BlockSparseVerify"]
ROLE = "target"
# name -> (dtype, shape); `q` is the graph's sequence dimension
NEW_INPUTS: dict[str, tuple[str, list[int | str]]] = {
    "tree_parent": ("int64", ["q"]),
    "tree_depth": ("int64", ["q"]),
    "uniforms": ("double", ["q", 1]),  # column 0 drives the match draw; rrs runs on the host
    "temperature": ("float", []),
    "mode": ("int64", []),
    "top_k": ("int64", []),
    "top_p": ("float", []),
}


def check(model: onnx.ModelProto) -> str | None:
    """Why this graph cannot take the op, or None when it can."""
    reason = graph_edit.check_op_after_logits(model, OP.schema.name, list(NEW_INPUTS))
    if reason is None and "input_ids" not in {v.name for v in model.graph.input}:
        return "it has no 'input_ids' input (the tree tokens)"
    return reason


def apply(model: onnx.ModelProto) -> CustomOpGraph:
    q = graph_edit.output_shape(model, "logits")[1]  # type: ignore[index]
    logits = graph_edit.squeeze_batch_as_float(model, "logits", "verify")
    tokens = "verify_tree_tokens"
    axes = "verify_tokens_axes0"
    model.graph.initializer.append(onnx.helper.make_tensor(axes, onnx.TensorProto.INT64, [1], [0]))
    model.graph.node.append(onnx.helper.make_node("Squeeze", ["input_ids", axes], [tokens], name="verify_tokens"))
    for name, (dtype, shape) in NEW_INPUTS.items():
        graph_edit.add_input(model, name, dtype, [q if d == "q" else d for d in shape])
    inputs = [logits, tokens, "tree_parent", "tree_depth", "uniforms", "temperature", "mode", "top_k", "top_p"]
    graph_edit.add_custom_node(model, OP.schema, inputs, OP.function_protos())
    outputs = {"accepted": ("int64", [q]), "accepted_len": ("int64", []), "next_token": ("int64", [])}
    for name, (dtype, shape) in outputs.items():
        graph_edit.add_output(model, name, dtype, shape)
    return CustomOpGraph(op=OP.schema.name, attributes={}, inputs=list(NEW_INPUTS), outputs=list(outputs),
                         host_modes=["rrs"])

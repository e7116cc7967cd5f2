"""Small, explicit edits of an ONNX ModelProto shared by the surgery passes."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import TensorProto, helper

from specdec.custom_ops import DOMAIN, VERSION
from specdec.custom_ops.schema import OpSchema
from specdec.pipeline.graphs.edit import ensure_opset

DTYPES = {"float": TensorProto.FLOAT, "double": TensorProto.DOUBLE, "int64": TensorProto.INT64}


def output_shape(model: onnx.ModelProto, name: str) -> list[int | str] | None:
    for value in model.graph.output:
        if value.name == name:
            return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
    return None


def elem_type(model: onnx.ModelProto, name: str) -> int:
    for value in [*model.graph.output, *model.graph.input]:
        if value.name == name:
            return int(value.type.tensor_type.elem_type)
    raise KeyError(name)


def custom_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [node for node in model.graph.node if node.domain == DOMAIN]


def check_op_after_logits(model: onnx.ModelProto, op_name: str, new_inputs: Sequence[str]) -> str | None:
    """What every pass needs: a [1, q, vocab] `logits` output, no copy of the op yet, free input names."""
    shape = output_shape(model, "logits")
    if shape is None:
        return "it has no 'logits' output"
    if len(shape) != 3:
        return f"its 'logits' output has rank {len(shape)}, expected [1, q, vocab]"
    if any(node.op_type == op_name for node in custom_nodes(model)):
        return f"it already contains {op_name} (the bundle was surgered before)"
    taken = {v.name for v in model.graph.input} & set(new_inputs)
    if taken:
        return f"it already has inputs named {sorted(taken)}"
    return None


def add_input(model: onnx.ModelProto, name: str, dtype: str, shape: Sequence[int | str]) -> None:
    model.graph.input.append(helper.make_tensor_value_info(name, DTYPES[dtype], list(shape)))


def add_output(model: onnx.ModelProto, name: str, dtype: str, shape: Sequence[int | str]) -> None:
    model.graph.output.append(helper.make_tensor_value_info(name, DTYPES[dtype], list(shape)))


def squeeze_batch_as_float(model: onnx.ModelProto, source: str, prefix: str) -> str:
    """[1, q, ...] -> [q, ...] as float32 (fp16 graphs get a Cast: the op functions are float32)."""
    axes = f"{prefix}_axes0"
    model.graph.initializer.append(helper.make_tensor(axes, TensorProto.INT64, [1], [0]))
    squeezed = f"{prefix}_squeezed"
    model.graph.node.append(helper.make_node("Squeeze", [source, axes], [squeezed], name=f"{prefix}_Squeeze"))
    if elem_type(model, source) == TensorProto.FLOAT:
        return squeezed
    as_float = f"{prefix}_float"
    model.graph.node.append(helper.make_node("Cast", [squeezed], [as_float], to=TensorProto.FLOAT,
                                             name=f"{prefix}_Cast"))
    return as_float


def add_custom_node(model: onnx.ModelProto, schema: OpSchema, inputs: list[str],
                    functions: list[onnx.FunctionProto], **attributes: int) -> None:
    node = helper.make_node(schema.name, inputs, schema.output_names, domain=DOMAIN, name=schema.name)
    node.attribute.extend(helper.make_attribute(key, value) for key, value in attributes.items())
    model.graph.node.append(node)
    known = {(f.domain, f.name) for f in model.functions}
    model.functions.extend(f for f in functions if (f.domain, f.name) not in known)
    ensure_opset(model, DOMAIN, VERSION)

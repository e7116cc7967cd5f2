"""Tiny one-node models around a custom op, so its ONNX function runs in plain onnxruntime."""

from __future__ import annotations

from typing import Any

import onnx
import onnxruntime as ort
from onnx import helper

from specdec.custom_ops import DOMAIN, VERSION
from specdec.custom_ops.registry import OPS

_TYPES = {"float": onnx.TensorProto.FLOAT, "double": onnx.TensorProto.DOUBLE, "int64": onnx.TensorProto.INT64}


def single_op_model(name: str, **attributes: Any) -> onnx.ModelProto:
    op = OPS[name]
    schema = op.schema
    node = helper.make_node(schema.name, schema.input_names, schema.output_names, domain=DOMAIN, **attributes)

    def value(port: Any) -> onnx.ValueInfoProto:
        shape = [attributes.get(d, d) if isinstance(d, str) else d for d in port.shape]
        return helper.make_tensor_value_info(port.name, _TYPES[port.dtype], shape)

    inputs, outputs = [value(p) for p in schema.inputs], [value(p) for p in schema.outputs]
    graph = helper.make_graph([node], schema.name, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, VERSION)],
                              functions=op.function_protos())
    onnx.checker.check_model(model, full_check=True)
    return model


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

"""The custom ops by name: schema, numpy reference, and (lazily, it needs onnxscript) the function."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specdec.custom_ops.block_sparse_verify import SCHEMA as VERIFY_SCHEMA
from specdec.custom_ops.block_sparse_verify import block_sparse_verify
from specdec.custom_ops.dynamic_tree_prune import SCHEMA as PRUNE_SCHEMA
from specdec.custom_ops.dynamic_tree_prune import dynamic_tree_prune
from specdec.custom_ops.schema import OpSchema


@dataclass(frozen=True)
class CustomOp:
    schema: OpSchema
    reference: Callable[..., Any]
    function_module: str  # imported on demand: onnxscript is not a device dependency

    def function_protos(self) -> list[Any]:
        module = importlib.import_module(self.function_module)
        protos: list[Any] = module.function_protos()
        return protos


OPS: dict[str, CustomOp] = {
    PRUNE_SCHEMA.name: CustomOp(PRUNE_SCHEMA, dynamic_tree_prune, "specdec.custom_ops.dynamic_tree_prune.function"),
    VERIFY_SCHEMA.name: CustomOp(VERIFY_SCHEMA, block_sparse_verify, "specdec.custom_ops.block_sparse_verify.function"),
}

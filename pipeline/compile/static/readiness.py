"""Mobile-readiness of a compiled variant: EP coverage, dynamic dims, op types, sizes.

NNAPI and CoreML coverage come from onnxruntime's own mobile usability checker (the op lists it
ships), run on the graph with the custom-op functions inlined so their standard ops count.
XNNPACK and QNN have no such checker in onnxruntime: they are reported as not checked here.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import onnx

from specdec.custom_ops import DOMAIN
from specdec.pipeline.compile.static.graph import dynamic_dims

log = logging.getLogger(__name__)

UNCHECKED = {
    "XNNPACK": "not checked here: onnxruntime ships no partition checker for XNNPACK",
    "QNN": "not checked here: needs the QNN SDK and a Qualcomm device",
}


def _partition(model: onnx.ModelProto, provider: str) -> dict[str, Any]:
    from onnxruntime.tools.mobile_helpers import usability_checker as checker

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            if provider == "NNAPI":
                info = checker.check_nnapi_partitions(model, require_fixed_input_sizes=True)
            else:
                info = checker.check_coreml_partitions(model, True, "coreml_supported_mlprogram_ops.md")
    except Exception as exc:  # the checker asserts on graphs it does not understand
        return {"status": f"checker failed: {str(exc).splitlines()[0][:120]}"}
    share = info.num_supported_nodes / info.num_nodes if info.num_nodes else 0.0
    return {
        "supported_nodes": info.num_supported_nodes,
        "nodes": info.num_nodes,
        "share": round(share, 4),
        "partitions": info.num_partitions,
        "unsupported_ops": sorted(info.unsupported_ops),
        "suitability": info.suitability().name,
    }


def readiness(path: Path) -> dict[str, Any]:
    # The structure only: the checkers read op types, shapes and which inputs are initializers,
    # never their values. With the weights, the load, the inlined copy and the shape-inferred copy
    # held 16 GiB at the Llama-3.2-1B shape and the kernel killed the compile.
    model = onnx.load(str(path), load_external_data=False)
    from onnx import inliner

    inlined = inliner.inline_local_functions(model)
    with contextlib.suppress(Exception):  # shape info improves the checker; missing it is fine
        inlined = onnx.shape_inference.infer_shapes(inlined)
    ops = Counter(f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in inlined.graph.node)
    providers: dict[str, Any] = {name: _partition(inlined, name) for name in ("NNAPI", "CoreML")}
    providers.update({name: {"status": note} for name, note in UNCHECKED.items()})
    return {
        "file": path.name,
        "bytes": path.stat().st_size,
        "dynamic_dims": dynamic_dims(model),
        "op_types": dict(sorted(ops.items())),
        "custom_ops": sorted({n.op_type for n in model.graph.node if n.domain == DOMAIN}),
        "providers": providers,
    }

"""Low-level file helpers every stage shares: ONNX load/save with external data, which bundle files
belong to a graph, a graph's inputs and outputs as manifest records, and file hashes.

Host only (onnx is imported where a function needs it, so `sha256_file` stays cheap to import).
The attention-mask builder the stages share with the device lives in `runtime/runner.py`
(`build_mask`, `causal_mask`, `tree_mask`), because the device runtime cannot import onnx.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec.pipeline.records.manifest import TensorSpec

if TYPE_CHECKING:
    import onnx

# Weights identical in the target and the draft graph, stored once (pipeline/tensor_sharing.py).
SHARED_DATA = "shared.data"
# Protobuf caps one message at 2 GiB; graphs above 1 GiB keep their weights in a side file.
EXTERNAL_DATA_BYTES = 1 << 30
_HASH_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_graph(path: Path, *, weights: bool = True) -> onnx.ModelProto:
    """A graph with its external weights (`weights=False`: structure only, fast)."""
    import onnx

    return onnx.load(str(path), load_external_data=weights)


def save_graph(model: onnx.ModelProto, path: Path, *, keep_model: bool = False) -> None:
    """Save `model` to `path`, its weights to `path.data` when it is over 1 GiB.

    Saving with external data moves the weights out of the proto it is given; `keep_model=True`
    saves a copy instead, for callers that go on using `model`.
    """
    import onnx

    external = model.ByteSize() > EXTERNAL_DATA_BYTES
    if external and keep_model:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    onnx.save(model, str(path), save_as_external_data=external, location=f"{path.name}.data" if external else None)


def belongs_to(rel: str, graph_file: str) -> bool:
    """Whether bundle file `rel` is part of the graph `graph_file`: the graph or its external data."""
    return rel == graph_file or rel.startswith(graph_file + ".")


def graph_files(files: Iterable[str], graph_file_names: Iterable[str]) -> list[str]:
    """The files (bundle-relative paths) that belong to any of the graphs, sorted."""
    names = tuple(graph_file_names)
    return sorted(rel for rel in files if any(belongs_to(rel, name) for name in names))


def describe_io(path: Path) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """Inputs and outputs of a saved graph as manifest records."""
    import onnx

    model = load_graph(path, weights=False)

    def spec(value: Any) -> TensorSpec:
        tensor_type = value.type.tensor_type
        dims: list[int | str] = [d.dim_param if d.dim_param else int(d.dim_value) for d in tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type).name
        return TensorSpec(name=value.name, dtype=dtype, shape=dims)

    return [spec(v) for v in model.graph.input], [spec(v) for v in model.graph.output]

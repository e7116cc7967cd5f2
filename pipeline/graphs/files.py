"""Low-level file helpers every stage shares: ONNX load/save with external data, which bundle files
belong to a graph, a graph's inputs and outputs as manifest records, and file hashes.

Host only (onnx is imported where a function needs it, so `sha256_file` stays cheap to import).
The attention-mask builder the stages share with the device lives in `engine/runner.py`
(`build_mask`, `causal_mask`, `tree_mask`), because the device runtime cannot import onnx.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec.pipeline.errors import BundleError
from specdec.pipeline.records.bundle_paths import bundle_path_problem
from specdec.pipeline.records.manifest import TensorSpec

if TYPE_CHECKING:
    import onnx

# Weights identical in the target and the draft graph, stored once (pipeline/export/tensor_sharing.py).
SHARED_DATA = "shared.data"
# Protobuf caps one message at 2 GiB; graphs above 1 GiB keep their weights in a side file.
EXTERNAL_DATA_BYTES = 1 << 30
_INLINE_TENSOR_BYTES = 1024  # smaller tensors stay in the .onnx, as onnx.save does
_DATA_ALIGNMENT = 4096  # page size: onnxruntime maps aligned external weights
_HASH_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_graph(path: Path, *, weights: bool = True) -> onnx.ModelProto:
    """A graph with its external weights (`weights=False`: structure only, fast); BundleError naming the
    file when it is not an ONNX graph (a bundle's manifest may point anywhere inside it)."""
    import onnx
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

    try:
        # format pinned: onnx.load otherwise picks a text or JSON parser by the file's suffix, and a
        # manifest may name any file of the bundle (manifest.json itself)
        return onnx.load(str(path), format="protobuf", load_external_data=weights)
    except DecodeError as exc:
        raise BundleError(f"'{path}' is not an ONNX graph ({exc})", "re-create the bundle") from None


def _external_place(tensor: onnx.TensorProto, base_dir: Path) -> tuple[Path, int, int | None]:
    """(file, offset, length or None: to the end) of a tensor's external data, inside `base_dir`."""
    fields = {entry.key: entry.value for entry in tensor.external_data}
    root = base_dir.resolve()
    path = (root / fields.get("location", "")).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        raise BundleError(f"tensor '{tensor.name}' points at external data '{fields.get('location')}' that is not a "
                          f"file inside '{base_dir}'", "re-export the bundle")
    length = fields.get("length")
    return path, int(fields.get("offset", 0)), int(length) if length is not None else None


def read_external(tensor: onnx.TensorProto, base_dir: Path) -> Any:
    """A tensor stored in external data, as a numpy array read straight from its file.

    Not onnx's reader: onnx >= 1.19 refuses a data file with more than one hard link, and a
    calibration probe hard-links the source's data file while it runs (or for good, when its
    process was killed), which made the source unreadable to a second quantize."""
    import numpy as np
    from onnx import helper

    path, offset, length = _external_place(tensor, base_dir)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    count = (length // dtype.itemsize) if length is not None else -1
    return np.fromfile(path, dtype=dtype, count=count, offset=offset).reshape(tuple(tensor.dims))


def load_external_data(model: onnx.ModelProto, base_dir: Path) -> None:
    """Every external tensor of `model` read into it from `base_dir` (read_external's reader)."""
    from onnx import TensorProto
    from onnx.external_data_helper import uses_external_data

    for tensor in model.graph.initializer:
        if not uses_external_data(tensor):
            continue
        path, offset, length = _external_place(tensor, base_dir)
        with path.open("rb") as handle:
            handle.seek(offset)
            tensor.raw_data = handle.read() if length is None else handle.read(length)
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT


def external_bytes(path: Path, location: str) -> int:
    """Bytes of the graph's initializers stored in the external-data file `location` (structure only)."""
    total = 0
    for tensor in load_graph(path, weights=False).graph.initializer:
        fields = {entry.key: entry.value for entry in tensor.external_data}
        if fields.get("location") == location:
            total += int(fields.get("length", 0))
    return total


def proto_size(model: onnx.ModelProto) -> int:
    """The model's serialised size, summed per tensor, node and function: protobuf cannot measure or
    write one message past 2 GiB (`ByteSize()` itself raises EncodeError there), so the whole model
    is never asked."""
    graph = model.graph
    return int(sum(t.ByteSize() for t in graph.initializer) + sum(n.ByteSize() for n in graph.node)
               + sum(f.ByteSize() for f in model.functions))


def _copy_fields(target: Any, source: Any, skip: str) -> None:
    """Copy every set field of message `source` into `target` but `skip`."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def save_graph(model: onnx.ModelProto, path: Path) -> None:
    """Save `model` to `path`, its weights to `path.data` when it is over 1 GiB; `model` is not changed.

    Large graphs are written tensor by tensor: a skeleton (everything but the initializers' bytes)
    goes into the .onnx, each weight is appended to the .data file at a page-aligned offset (which
    lets onnxruntime map it instead of copying). Neither the whole proto nor a copy of the weights
    is ever built, so a 5 GB graph costs no memory beyond the model already held.
    """
    import onnx

    if proto_size(model) <= EXTERNAL_DATA_BYTES:
        onnx.save(model, str(path))
        return
    skeleton = onnx.ModelProto()
    _copy_fields(skeleton, model, "graph")
    _copy_fields(skeleton.graph, model.graph, "initializer")
    location = f"{path.name}.data"
    with (path.parent / location).open("wb") as data:
        for init in model.graph.initializer:
            stub = skeleton.graph.initializer.add()
            if init.data_location == onnx.TensorProto.EXTERNAL or len(init.raw_data) < _INLINE_TENSOR_BYTES:
                stub.CopyFrom(init)  # small tensors (and typed-field ones) stay in the proto
                continue
            _copy_fields(stub, init, "raw_data")
            offset = data.tell() + (-data.tell() % _DATA_ALIGNMENT)
            data.seek(offset)
            data.write(init.raw_data)
            stub.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(init.raw_data)))):
                entry = stub.external_data.add()
                entry.key, entry.value = key, value
    onnx.save(skeleton, str(path))


def external_files(path: Path) -> list[str]:
    """The external data files a saved graph refers to (locations relative to its directory), each
    inside the graph's directory by the bundle path policy (records.manifest.bundle_path_problem):
    callers copy them, so a location may direct no read or write out of the bundle."""
    return external_locations(load_graph(path, weights=False), path)


def external_locations(model: onnx.ModelProto, path: Path) -> list[str]:
    """`external_files` of a graph already loaded from `path` (structure only will do)."""
    found: list[str] = []
    tensors = [*model.graph.initializer,
               *(a.t for node in model.graph.node for a in node.attribute if a.HasField("t"))]
    for tensor in tensors:
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value not in found:
                problem = bundle_path_problem(entry.value)
                if problem is not None:
                    raise BundleError(f"'{path}' names external data '{entry.value}' that {problem}",
                                      "re-create the bundle")
                found.append(entry.value)
    return found


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

"""Tensors identical in the target and the draft graph, stored once.

A draft made by `specdec draft` holds the target's embedding, final norm and output head bit for
bit (and any pair may share tensors by chance of construction). After export, every initializer
whose bytes, dtype and shape occur in more than one graph moves to one external-data file,
`shared.data`, that both graphs reference through the ONNX external-data fields (location,
offset, length), which onnx and onnxruntime resolve relative to the graph file. Offsets are
page-aligned so onnxruntime can map the tensors. Everything else stays where it was (inline, or
in the graph's own data file, rewritten without the tensors that moved).

The graphs are read structure only and their external tensors one at a time, twice (once to
hash, once to copy): a 1B pair with a 1 GB shared embedding costs about one tensor of memory, not
both graphs' weights.

What this saves is disk and transfer to the device; each onnxruntime session still reads its own
copy into memory (sharing one in-memory copy across sessions is not done here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from specdec.pipeline.graphs.files import SHARED_DATA, load_graph
from specdec.pipeline.records.reports import SharedTensors

if TYPE_CHECKING:
    import onnx

ALIGNMENT = 4096
SIZE_THRESHOLD = 1024  # shapes and scalars stay inline
_PENDING = ".sharing"  # suffix of files written before they replace the ones still being read


@dataclass(frozen=True)
class Sharing:
    file: str | None  # None: nothing was identical
    tensors: int  # distinct tensors stored once
    bytes: int  # size of those tensors (what each extra reference saves)
    saved_bytes: int  # bytes the graphs no longer hold twice

    def record(self) -> SharedTensors:
        return SharedTensors(file=self.file, tensors=self.tensors, bytes=self.bytes, saved_bytes=self.saved_bytes)


def _external(tensor: onnx.TensorProto) -> dict[str, str] | None:
    """The tensor's external-data fields, or None when its bytes are inline."""
    import onnx

    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return None
    return {entry.key: entry.value for entry in tensor.external_data}


def _read(directory: Path, tensor: onnx.TensorProto) -> bytes:
    """The tensor's raw bytes, from the proto or from its external-data file."""
    fields = _external(tensor)
    if fields is None:
        return tensor.raw_data
    with (directory / fields["location"]).open("rb") as handle:
        handle.seek(int(fields.get("offset", 0)))
        return handle.read(int(fields["length"])) if "length" in fields else handle.read()


def _size(tensor: onnx.TensorProto) -> int:
    fields = _external(tensor)
    return len(tensor.raw_data) if fields is None else int(fields.get("length", SIZE_THRESHOLD))


def _key(directory: Path, tensor: onnx.TensorProto) -> bytes | None:
    if _size(tensor) < SIZE_THRESHOLD:
        return None
    raw = _read(directory, tensor)
    if len(raw) < SIZE_THRESHOLD:
        return None
    dims = ",".join(str(d) for d in tensor.dims)
    return hashlib.sha256(raw).digest() + f"{tensor.data_type}:{dims}".encode()


def _append(handle: BinaryIO, raw: bytes) -> int:
    """Write `raw` at the next page-aligned offset of `handle`; the offset."""
    offset = handle.tell() + (-handle.tell() % ALIGNMENT)
    handle.seek(offset)
    handle.write(raw)
    return offset


def _point(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    """Make the tensor's bytes those at `offset` of `location` (onnx's set_external_data needs them inline)."""
    import onnx

    tensor.ClearField("raw_data")
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def share_identical(directory: Path, files: Sequence[str]) -> Sharing:
    """Rewrite the graphs `files` in `directory` so that tensors they have in common live in SHARED_DATA."""
    import onnx

    models = {name: load_graph(directory / name, weights=False) for name in files}
    keys = {name: [_key(directory, tensor) for tensor in model.graph.initializer] for name, model in models.items()}
    owners: dict[bytes, set[str]] = {}
    for name, found in keys.items():
        for key in found:
            if key is not None:
                owners.setdefault(key, set()).add(name)
    common = {key for key, names in owners.items() if len(names) > 1}
    if not common:
        return Sharing(file=None, tensors=0, bytes=0, saved_bytes=0)
    where: dict[bytes, tuple[int, int]] = {}
    saved = 0
    pending: list[tuple[Path, Path]] = []  # (written, replaces): renamed once nothing reads the old files
    shared_path = directory / (SHARED_DATA + _PENDING)
    with shared_path.open("wb") as shared:
        for name, model in models.items():
            own = f"{name}.data"
            own_path = directory / (own + _PENDING)
            kept = 0
            with own_path.open("wb") as handle:
                for tensor, key in zip(model.graph.initializer, keys[name], strict=True):
                    if key in common:
                        assert key is not None
                        if key in where:
                            saved += where[key][1]
                        else:
                            raw = _read(directory, tensor)
                            where[key] = (_append(shared, raw), len(raw))
                        _point(tensor, SHARED_DATA, *where[key])
                    elif (_external(tensor) or {}).get("location") == own:
                        # the graph's own data file is rewritten without the tensors that moved
                        raw = _read(directory, tensor)
                        _point(tensor, own, _append(handle, raw), len(raw))
                        kept += 1
            if kept:
                pending.append((own_path, directory / own))
            else:
                own_path.unlink()
                pending.append((directory / own, directory / own))  # a stale data file is removed
    pending.append((shared_path, directory / SHARED_DATA))
    for written, replaces in pending:
        if written == replaces:
            replaces.unlink(missing_ok=True)
        else:
            written.replace(replaces)
    for name, model in models.items():
        onnx.save(model, str(directory / name))  # structure only: the weights are all external or small
    return Sharing(file=SHARED_DATA, tensors=len(where), bytes=sum(length for _, length in where.values()),
                   saved_bytes=saved)

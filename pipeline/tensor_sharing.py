"""Tensors identical in the target and the draft graph, stored once.

A draft made by `specdec draft` holds the target's embedding, final norm and output head bit for
bit (and any pair may share tensors by chance of construction). After export, every initializer
whose bytes, dtype and shape occur in more than one graph moves to one external-data file,
`shared.data`, that both graphs reference through the ONNX external-data fields (location,
offset, length), which onnx and onnxruntime resolve relative to the graph file. Offsets are
page-aligned so onnxruntime can map the tensors. Everything else stays inline.

What this saves is disk and transfer to the device; each onnxruntime session still reads its own
copy into memory (sharing one in-memory copy across sessions is not done here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specdec.pipeline.graph_io import SHARED_DATA, load_graph, save_graph

ALIGNMENT = 4096
SIZE_THRESHOLD = 1024  # shapes and scalars stay inline


@dataclass(frozen=True)
class Sharing:
    file: str | None  # None: nothing was identical
    tensors: int  # distinct tensors stored once
    bytes: int  # size of those tensors (what each extra reference saves)
    saved_bytes: int  # bytes the graphs no longer hold twice

    def record(self) -> dict[str, object]:
        return {"file": self.file, "tensors": self.tensors, "bytes": self.bytes, "saved_bytes": self.saved_bytes}


def _key(tensor: object) -> bytes | None:
    raw = getattr(tensor, "raw_data", b"")
    if len(raw) < SIZE_THRESHOLD:
        return None
    dims = ",".join(str(d) for d in getattr(tensor, "dims", ()))
    return hashlib.sha256(raw).digest() + f"{getattr(tensor, 'data_type', 0)}:{dims}".encode()


def share_identical(directory: Path, files: Sequence[str]) -> Sharing:
    """Rewrite the graphs `files` in `directory` so that tensors they have in common live in SHARED_DATA."""
    from onnx.external_data_helper import set_external_data

    models = {name: load_graph(directory / name) for name in files}
    owners: dict[bytes, set[str]] = {}
    for name, model in models.items():
        for tensor in model.graph.initializer:
            key = _key(tensor)
            if key is not None:
                owners.setdefault(key, set()).add(name)
    common = {key for key, names in owners.items() if len(names) > 1}
    if not common:
        return Sharing(file=None, tensors=0, bytes=0, saved_bytes=0)
    where: dict[bytes, tuple[int, int]] = {}
    size = saved = 0
    with (directory / SHARED_DATA).open("wb") as handle:
        for model in models.values():
            for tensor in model.graph.initializer:
                key = _key(tensor)
                if key not in common:
                    continue
                assert key is not None
                if key in where:
                    saved += len(tensor.raw_data)
                else:
                    padding = -size % ALIGNMENT
                    handle.write(b"\0" * padding + tensor.raw_data)
                    where[key] = (size + padding, len(tensor.raw_data))
                    size += padding + len(tensor.raw_data)
                set_external_data(tensor, SHARED_DATA, offset=where[key][0], length=where[key][1])
                tensor.ClearField("raw_data")
    for name, model in models.items():
        # the weights are all in memory now: the graph's own data file is written anew (large graphs)
        # or not at all (a graph back under the external-data threshold must not leave a stale one)
        (directory / f"{name}.data").unlink(missing_ok=True)
        save_graph(model, directory / name)
    return Sharing(file=SHARED_DATA, tensors=len(where), bytes=sum(length for _, length in where.values()),
                   saved_bytes=saved)

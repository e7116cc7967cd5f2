"""One external-data file per role that every static variant of the role reads its weights from.

Context buckets multiply the npu flavour's variants (query bucket × context bucket), but the
variants' large initializers are the same weights. Each is written once to the role's file,
deduplicated by content, and every variant's TensorProto points at it through the ONNX
external-data fields (location, offset, length), which onnx and onnxruntime resolve relative to
the graph file. onnx's own `convert_model_to_external_data` writes one data file per model and
never shares a tensor between models, hence this small writer.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import onnx
from onnx.external_data_helper import set_external_data

# Page-aligned offsets let onnxruntime map a tensor from the file instead of reading it into a copy.
ALIGNMENT = 4096
# Smaller tensors (shapes, scalars, the variant's own constants) stay inline, as in onnx's default.
SIZE_THRESHOLD = 1024


class SharedWeights:
    """Append-only, content-deduplicated external data for the variants of one role."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: BinaryIO = path.open("wb")
        self._where: dict[bytes, tuple[int, int]] = {}
        self._size = 0
        self.referenced_bytes = 0  # what the variants would hold inline without sharing

    def __enter__(self) -> SharedWeights:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._handle.close()

    @property
    def size(self) -> int:
        return self._size

    def externalize(self, model: onnx.ModelProto) -> int:
        """Move `model`'s large initializers into the shared file; returns how many were new."""
        added = 0
        for tensor in model.graph.initializer:
            if not tensor.HasField("raw_data") or len(tensor.raw_data) < SIZE_THRESHOLD:
                continue
            data = tensor.raw_data
            key = hashlib.sha256(data).digest()
            where = self._where.get(key)
            if where is None:
                where = self._append(data)
                self._where[key] = where
                added += 1
            self.referenced_bytes += len(data)
            set_external_data(tensor, self.path.name, offset=where[0], length=where[1])
            tensor.ClearField("raw_data")
        self._handle.flush()  # the variant is validated (read back) right after it is saved
        return added

    def _append(self, data: bytes) -> tuple[int, int]:
        padding = -self._size % ALIGNMENT
        self._handle.write(b"\0" * padding)
        offset = self._size + padding
        self._handle.write(data)
        self._size = offset + len(data)
        return offset, len(data)

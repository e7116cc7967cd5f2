"""Read what the runtime needs from a bundle's manifest.json, with the standard library only.

The full manifest model (`specdec.pipeline.bundle`) uses pydantic; the runtime also runs on
the phone, where only numpy and onnxruntime are assumed, so it reads the JSON directly and
its typed sections (custom ops, buckets, plan) through the same records the host writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import BundleError
from specdec.pipeline.records.codec import RecordError, parse
from specdec.pipeline.records.decoder import Decoder
from specdec.pipeline.records.manifest import MANIFEST_NAME, MANIFEST_SCHEMA, BucketTable, CustomOps, Quantization
from specdec.pipeline.records.plan import TunePlan

SUPPORTED_SCHEMA = MANIFEST_SCHEMA


@dataclass(frozen=True)
class GraphInfo:
    role: str
    file: Path
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    dtype: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    decoder: Decoder | None = None  # None: a bundle from before schema 4 (full attention)

    @property
    def window(self) -> int | None:
        """The attention window of the graph's windowed layers, None if it has none."""
        return self.decoder.window if self.decoder is not None else None


@dataclass(frozen=True)
class BundleInfo:
    path: Path
    graphs: dict[str, GraphInfo]
    eos_token_ids: tuple[int, ...]
    tokenizer_dir: Path
    stages: tuple[str, ...]
    custom_ops: CustomOps | None = None
    buckets: BucketTable | None = None  # set: a compiled bundle, run from its bucket graphs
    plan: TunePlan | None = None
    quantization: Quantization | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def max_context(self) -> int:
        return min(g.max_position_embeddings for g in self.graphs.values())


def read_bundle(path: str | Path) -> BundleInfo:
    root = Path(path)
    manifest_path = root / MANIFEST_NAME
    if not manifest_path.is_file():
        raise BundleError(f"'{root}' is not a specdec bundle (no {MANIFEST_NAME})",
                          "pass a directory written by `specdec export` or a later stage")
    try:
        raw = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as exc:
        raise BundleError(f"{manifest_path} is not valid JSON ({exc})", "re-create the bundle") from exc
    if not isinstance(raw, dict):
        raise BundleError(f"{manifest_path} is not a JSON object", "re-create the bundle")
    version = raw.get("schema_version")
    if not isinstance(version, int) or version > SUPPORTED_SCHEMA:
        raise BundleError(f"bundle '{root}' has schema {version}, this runtime reads {SUPPORTED_SCHEMA}",
                          "upgrade specdec")
    graphs: dict[str, GraphInfo] = {}
    for role, spec in raw.get("graphs", {}).items():
        try:
            decoder: Decoder | None = parse(Decoder | None, spec.get("decoder"), f"graphs.{role}.decoder")
        except RecordError as exc:
            raise BundleError(f"{manifest_path} is invalid at {exc}", "re-create the bundle") from None
        file = root / spec["file"]
        # a compiled bundle runs from its buckets; the device copy may leave the dynamic graphs out
        if not file.is_file() and not raw.get("buckets"):
            raise BundleError(f"bundle '{root}' is missing its {role} graph '{spec['file']}'",
                              "re-create the bundle")
        graphs[role] = GraphInfo(
            role=role,
            file=file,
            num_layers=int(spec["num_layers"]),
            num_kv_heads=int(spec["num_kv_heads"]),
            head_dim=int(spec["head_dim"]),
            vocab_size=int(spec["vocab_size"]),
            max_position_embeddings=int(spec["max_position_embeddings"]),
            dtype=str(spec["dtype"]),
            input_names=tuple(t["name"] for t in spec["inputs"]),
            output_names=tuple(t["name"] for t in spec["outputs"]),
            decoder=decoder,
        )
    if "target" not in graphs:
        raise BundleError(f"bundle '{root}' has no target graph", "re-create the bundle with `specdec export`")
    tokenizer = raw.get("tokenizer", {})
    try:
        custom_ops: CustomOps | None = parse(CustomOps | None, raw.get("custom_ops"), "custom_ops")
        buckets: BucketTable | None = parse(BucketTable | None, raw.get("buckets"), "buckets")
        plan: TunePlan | None = parse(TunePlan | None, raw.get("plan"), "plan")
        quantization: Quantization | None = parse(Quantization | None, raw.get("quantization"), "quantization")
    except RecordError as exc:
        raise BundleError(f"{manifest_path} is invalid at {exc}", "re-create the bundle") from None
    return BundleInfo(
        path=root,
        graphs=graphs,
        eos_token_ids=tuple(int(t) for t in tokenizer.get("eos_token_ids", [])),
        tokenizer_dir=root / tokenizer.get("dir", "tokenizer"),
        stages=tuple(entry.get("stage", "") for entry in raw.get("lineage", [])),
        custom_ops=custom_ops,
        buckets=buckets,
        plan=plan,
        quantization=quantization,
        raw=raw,
    )

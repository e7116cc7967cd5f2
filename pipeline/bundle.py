"""Artifact bundles: the directory every stage reads and writes (DESIGN §1).

A bundle is a directory holding `manifest.json`, `tokenizer/`, the graphs and whatever a later
stage adds. The manifest lists every file with its sha256, so a loader can say exactly which
file is corrupt, and a lineage entry per stage, so a result can be traced to its inputs.

Stages never touch their input bundle: `BundleWriter` builds the output in a hidden temporary
directory next to the destination and renames it into place only when the stage succeeded
(`pipeline/staging.py`, the one place that opens outputs, checks the destination first).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PlainSerializer, PlainValidator, SerializerFunctionWrapHandler, model_serializer

from specdec import __version__
from specdec.pipeline.errors import BundleError
from specdec.pipeline.graph_io import sha256_file
from specdec.pipeline.models import StrictModel, validate_model
from specdec.pipeline.records import codec
from specdec.pipeline.records.decoder import Decoder
from specdec.pipeline.records.manifest import (
    MANIFEST_NAME,
    MANIFEST_SCHEMA,
    BucketTable,
    CustomOps,
    Quantization,
    TensorSpec,
)
from specdec.pipeline.records.plan import TunePlan
from specdec.pipeline.runtime.manifest import BundleInfo, read_bundle
from specdec.pipeline.staging import StagedDirectory
from specdec.pipeline.staging import check_output_dir as check_output_path

log = logging.getLogger(__name__)

SCHEMA_VERSION = MANIFEST_SCHEMA
CUSTOM_OP_DOMAIN = "com.endpoint.ai"

__all__ = ["MANIFEST_NAME", "SCHEMA_VERSION", "Bundle", "BundleWriter", "FileEntry", "GraphSpec", "LineageEntry",
           "Manifest", "StagedDirectory", "StrictModel", "TensorSpec", "TokenizerSpec", "check_output_path",
           "fingerprint", "input_digests", "sha256_file"]


# Fields holding stdlib records (records/) are validated and dumped by records.codec, the reader
# the device runtime uses too, so host and device accept exactly the same JSON.
def _parsed(tp: Any) -> PlainValidator:
    return PlainValidator(lambda value: codec.parse(tp, value))


_DUMPED = PlainSerializer(codec.dump)
Tensors = Annotated[list[TensorSpec], _parsed(list[TensorSpec]), _DUMPED]


class GraphSpec(StrictModel):
    file: str
    architecture: str
    source: str
    dtype: Literal["float32", "float16"]
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    inputs: Tensors
    outputs: Tensors
    parameters: int = 0
    # How the decoder computes (records/decoder.py); None in bundles exported before schema 4.
    decoder: Annotated[Decoder | None, _parsed(Decoder | None), _DUMPED] = None


class TokenizerSpec(StrictModel):
    dir: str = "tokenizer"
    vocab_size: int
    eos_token_ids: list[int]
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    special_tokens: dict[str, str] = Field(default_factory=dict)


class FileEntry(StrictModel):
    sha256: str
    size: int


class LineageEntry(StrictModel):
    stage: str
    tool_version: str
    created: str
    config: dict[str, Any]
    inputs: dict[str, str]
    fingerprint: str


class Manifest(StrictModel):
    schema_version: int = SCHEMA_VERSION
    tool_version: str = __version__
    graphs: dict[str, GraphSpec]
    tokenizer: TokenizerSpec
    files: dict[str, FileEntry] = Field(default_factory=dict)
    lineage: list[LineageEntry] = Field(default_factory=list)
    # Stage reports (validation results, quantization quality, ...) keyed by stage name.
    reports: dict[str, Any] = Field(default_factory=dict)
    custom_ops: Annotated[CustomOps | None, _parsed(CustomOps | None), _DUMPED] = None  # surgery
    quantization: Annotated[Quantization | None, _parsed(Quantization | None), _DUMPED] = None  # quantize
    buckets: Annotated[BucketTable | None, _parsed(BucketTable | None), _DUMPED] = None  # compile: dispatch table
    # The planner's tuned plan (records/plan.py); left out of manifest.json while None.
    plan: Annotated[TunePlan | None, _parsed(TunePlan | None), _DUMPED] = None

    @model_serializer(mode="wrap")
    def _without_empty_plan(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if data.get("plan") is None:
            data.pop("plan", None)
        return data

    @property
    def fingerprint(self) -> str:
        """The last stage's fingerprint: equal fingerprints mean equal inputs and config."""
        return self.lineage[-1].fingerprint if self.lineage else ""


def fingerprint(stage: str, config: dict[str, Any], inputs: dict[str, str]) -> str:
    """Content hash of a stage invocation, used to reuse unchanged outputs."""
    payload = json.dumps(
        {"stage": stage, "config": config, "inputs": inputs, "tool_version": __version__},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class Bundle:
    """A loaded, verified bundle. Read-only by convention: stages copy, never modify.

    `Bundle.load` is the one way commands open a bundle, and it always checks every file's sha256:
    a corrupt bundle fails before any work (exit 3), whether it is inspected, compiled, benchmarked
    or decoded. The device runtime reads manifests on its own (runtime/manifest.py, no pydantic);
    the host verifies before it hands a bundle over (`runtime_info`, the bench's payload).
    """

    def __init__(self, path: Path, manifest: Manifest) -> None:
        self.path = path
        self.manifest = manifest

    @classmethod
    def load(cls, path: str | Path) -> Bundle:
        root = Path(path)
        if not root.is_dir():
            raise BundleError(
                f"bundle '{root}' does not exist or is not a directory",
                "pass the output directory of `specdec export` (or a later stage)",
            )
        manifest_path = root / MANIFEST_NAME
        if not manifest_path.is_file():
            raise BundleError(
                f"'{root}' has no {MANIFEST_NAME}, so it is not a specdec bundle",
                "create one with `specdec export TARGET --draft DRAFT -o DIR`",
            )
        try:
            raw = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as exc:
            raise BundleError(f"{manifest_path} is not valid JSON ({exc})", "re-create the bundle") from exc
        version = raw.get("schema_version") if isinstance(raw, dict) else None
        if not isinstance(version, int):
            raise BundleError(f"{manifest_path} has no schema_version", "re-create the bundle")
        if version > SCHEMA_VERSION:
            raise BundleError(
                f"bundle '{root}' was written by a newer specdec (schema {version}, this is {SCHEMA_VERSION})",
                "upgrade specdec to read it",
            )
        manifest = validate_model(Manifest, raw, source=f"{manifest_path} is invalid", fix="re-create the bundle",
                                  error=BundleError)
        bundle = cls(root, manifest)
        bundle.verify()
        return bundle

    def verify(self) -> None:
        """Check every listed file exists and matches its recorded sha256."""
        for rel, entry in self.manifest.files.items():
            file = self.path / rel
            if not file.is_file():
                raise BundleError(f"bundle '{self.path}' is missing '{rel}'", "re-create the bundle")
            if file.stat().st_size != entry.size or sha256_file(file) != entry.sha256:
                raise BundleError(
                    f"'{rel}' in bundle '{self.path}' is corrupt (sha256 differs from the manifest)",
                    "re-create the bundle or restore the file",
                )

    def graph_path(self, role: str) -> Path:
        spec = self.manifest.graphs.get(role)
        if spec is None:
            raise BundleError(
                f"bundle '{self.path}' has no '{role}' graph (it has: {', '.join(self.manifest.graphs) or 'none'})",
                "export the bundle with both a target and a draft",
            )
        path = self.path / spec.file
        if not path.is_file():
            raise BundleError(f"bundle '{self.path}' is missing '{spec.file}'", "re-create the bundle")
        return path

    def runtime_info(self) -> BundleInfo:
        """What the decoding engine reads from this (verified) bundle."""
        return read_bundle(self.path)

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / self.manifest.tokenizer.dir

    def stages(self) -> list[str]:
        return [entry.stage for entry in self.manifest.lineage]


class BundleWriter(StagedDirectory):
    """Builds a bundle in a temporary directory and renames it into place on `finish`."""

    def copy_from(self, bundle: Bundle, *, exclude: Collection[str] = ()) -> None:
        """Copy the source bundle's files (not hard links: later writes must not reach the input)."""
        for rel in bundle.manifest.files:
            if rel in exclude:
                continue
            target = self.dir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(bundle.path / rel, target)

    def finish(
        self,
        manifest: Manifest,
        *,
        stage: str,
        config: dict[str, Any],
        inputs: dict[str, str],
    ) -> Bundle:
        """Hash every file, append the lineage entry, write the manifest and move into place."""
        files: dict[str, FileEntry] = {}
        for file in sorted(p for p in self.dir.rglob("*") if p.is_file()):
            rel = file.relative_to(self.dir).as_posix()
            if rel == MANIFEST_NAME:
                continue
            files[rel] = FileEntry(sha256=sha256_file(file), size=file.stat().st_size)
        manifest = manifest.model_copy(deep=True)
        manifest.schema_version = SCHEMA_VERSION
        manifest.tool_version = __version__
        manifest.files = files
        manifest.lineage.append(
            LineageEntry(
                stage=stage,
                tool_version=__version__,
                created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                config=config,
                inputs=inputs,
                fingerprint=fingerprint(stage, config, inputs),
            )
        )
        (self.dir / MANIFEST_NAME).write_text(manifest.model_dump_json(indent=2) + "\n")
        self.commit()
        log.info("wrote bundle %s (%d files)", self.out, len(files))
        return Bundle(self.out, manifest)


def input_digests(bundle: Bundle) -> dict[str, str]:
    """What a stage records as its inputs: the source bundle's file hashes."""
    return {rel: entry.sha256 for rel, entry in bundle.manifest.files.items()}

"""Artifact bundles: the directory every stage reads and writes (docs/design.md §1).

A bundle is a directory holding `manifest.json`, `tokenizer/`, the graphs and whatever a later
stage adds. The manifest lists every file with its sha256, so a loader can say exactly which
file is corrupt, and a lineage entry per stage, so a result can be traced to its inputs.

Stages never touch their input bundle: `BundleWriter` builds the output in a hidden temporary
directory next to the destination and renames it into place only when the stage succeeded
(`pipeline/bundle/staging.py`, the one place that opens outputs, checks the destination first).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

from specdec import __version__
from specdec.pipeline.bundle.staging import StagedDirectory
from specdec.pipeline.engine.bundle_info import BundleInfo, bundle_info
from specdec.pipeline.errors import BundleError
from specdec.pipeline.graphs.files import (
    SHARED_DATA,
    external_bytes,
    external_locations,
    graph_files,
    load_graph,
    sha256_file,
)
from specdec.pipeline.records.bundle_paths import io_mismatch
from specdec.pipeline.records.manifest import (
    MANIFEST_NAME,
    MANIFEST_SCHEMA,
    FileEntry,
    GraphSpec,
    LineageEntry,
    Manifest,
    TensorSpec,
    TokenizerSpec,
    read_manifest,
)

log = logging.getLogger(__name__)

SWAPPED_FIX = "re-create the bundle (were its graph files swapped or replaced?)"

__all__ = ["MANIFEST_NAME", "MANIFEST_SCHEMA", "Bundle", "BundleWriter", "FileEntry", "GraphSpec", "LineageEntry",
           "Manifest", "StagedDirectory", "TensorSpec", "TokenizerSpec", "fingerprint", "input_digests",
           "sha256_file"]


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
    or decoded. The device runtime reads the manifest with the same reader and does not hash: the
    host verifies before it hands a bundle over (`runtime_info`, the bench's payload).
    """

    def __init__(self, path: Path, manifest: Manifest) -> None:
        self.path = path
        self.manifest = manifest
        self._io_checked: set[str] = set()  # roles whose graph file was checked against its entry

    @classmethod
    def load(cls, path: str | Path) -> Bundle:
        """The bundle at `path`, its manifest read (records.manifest.read_manifest) and every file verified."""
        root = Path(path)
        bundle = cls(root, read_manifest(root))
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
        if role not in self._io_checked:  # once per graph: a stage about to read it pays one structure parse
            model = load_graph(path, weights=False)  # BundleError if it is no ONNX graph
            found = [value.name for value in model.graph.input]
            mismatch = io_mismatch(role, spec.file, [t.name for t in spec.inputs], found)
            if mismatch is not None:
                raise BundleError(f"bundle '{self.path}': {mismatch}", SWAPPED_FIX)
            external_locations(model, path)  # BundleError if its external data would leave the bundle
            self._io_checked.add(role)
        return path

    def check_graphs(self) -> None:
        """Every graph file is an ONNX graph with the inputs its manifest entry lists (`graph_path`): what a
        stage that reads the graphs checks before any work, so a replaced or swapped file fails at once."""
        for role in self.manifest.graphs:
            self.graph_path(role)

    def runtime_info(self, weight_format: str | None = None) -> BundleInfo:
        """What the decoding engine reads from this (verified) bundle, its target in `weight_format`
        (None: the bundle's own; a tuned plan names the one it chose)."""
        return bundle_info(self.path, self.manifest.with_format(weight_format))

    def runner_files(self, weight_format: str | None = None) -> list[str]:
        """The files a runner opens: the compiled graphs of a compiled bundle, else the dynamic graphs
        (with the tensors target and draft share); of a bundle that carries its target in several weight
        formats, only `weight_format`'s (None: its own); and a reduced draft vocabulary's file, through
        which the engine maps the draft's candidates. What a device push carries besides the manifest."""
        manifest = self.manifest.with_format(weight_format)
        vocab = manifest.draft_spec.vocab
        extra = {vocab.file} if vocab is not None else set()
        if manifest.buckets is not None:
            return sorted({*manifest.buckets.files(), *extra})
        files = graph_files(manifest.files, (spec.file for spec in manifest.graphs.values()))
        # tensors target and draft share (export): the graphs reference them in SHARED_DATA
        return sorted({*files, *extra, *([SHARED_DATA] if SHARED_DATA in manifest.files else [])})

    def runner_bytes(self, weight_format: str | None = None) -> int:
        return sum(self.manifest.files[rel].size for rel in self.runner_files(weight_format))

    @property
    def context(self) -> int:
        """The positions a reply may reach: the compiled context (or past it under a window KV policy),
        else the graphs' own."""
        table = self.manifest.buckets
        if table is not None:
            return table.kv_policy.positions(table.max_context)
        return min(spec.max_position_embeddings for spec in self.manifest.graphs.values())

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

    def _drop_unreferenced_shared_data(self) -> None:
        """A stage that rewrote every graph with its weights inline copied the pair's shared tensor file
        along with the other files; nothing references it any more, so it is not carried on."""
        shared = self.dir / SHARED_DATA
        if not shared.is_file():
            return
        if not any(external_bytes(graph, SHARED_DATA) for graph in self.dir.rglob("*.onnx")):
            shared.unlink()
            log.info("%s: no graph references %s any more; not kept", self.out, SHARED_DATA)

    def finish(
        self,
        manifest: Manifest,
        *,
        stage: str,
        config: dict[str, Any],
        inputs: dict[str, str],
    ) -> Bundle:
        """Hash every file, append the lineage entry, write the manifest and move into place."""
        self._drop_unreferenced_shared_data()
        files: dict[str, FileEntry] = {}
        for file in sorted(p for p in self.dir.rglob("*") if p.is_file()):
            rel = file.relative_to(self.dir).as_posix()
            if rel == MANIFEST_NAME:
                continue
            files[rel] = FileEntry(sha256=sha256_file(file), size=file.stat().st_size)
        manifest = manifest.copy()
        manifest.schema_version = MANIFEST_SCHEMA
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
        (self.dir / MANIFEST_NAME).write_text(manifest.to_json())
        self.commit()
        log.info("wrote bundle %s (%d files)", self.out, len(files))
        return Bundle(self.out, manifest)


def input_digests(bundle: Bundle) -> dict[str, str]:
    """What a stage records as its inputs: the source bundle's file hashes."""
    return {rel: entry.sha256 for rel, entry in bundle.manifest.files.items()}

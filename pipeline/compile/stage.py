"""`specdec compile`: bucketed static-shape variants of both graphs, ORT format, dispatch table.

Target buckets cover the tree sizes one verification can take (plus 1 for plain decoding),
draft buckets the frontier sizes, and both get a prefill chunk. Every variant is simplified
(onnxsim), optimised (onnxruntime, basic level), gets its custom ops back, and is checked
against the dynamic graph before it is written.
"""

from __future__ import annotations

import itertools
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from specdec.pipeline import profiles
from specdec.pipeline.bundle import Bundle, BundleWriter, GraphSpec, input_digests
from specdec.pipeline.compile.optimize import ort_optimize, simplify, to_ort_format
from specdec.pipeline.compile.readiness import readiness
from specdec.pipeline.compile.static_graph import dynamic_dims, make_static, strip_custom_ops
from specdec.pipeline.compile.validate import validate_bucket
from specdec.pipeline.errors import BundleError, InputError, setting
from specdec.pipeline.graph_io import describe_io, load_graph
from specdec.pipeline.passes import BY_ROLE
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.records.manifest import BucketTable, BucketVariant, CustomOps, OutputFormat

log = logging.getLogger(__name__)

BUCKET_DIR = "buckets"
__all__ = ["BUCKET_DIR", "CompileConfig", "OutputFormat", "compile_bundle"]


@dataclass(frozen=True)
class CompileConfig:
    output: Path
    profile: str = "local-cpu"
    buckets: tuple[int, ...] | None = None  # target verification buckets; profile's when None
    draft_buckets: tuple[int, ...] | None = None
    max_context: int | None = None
    prefill_chunk: int | None = None
    format: OutputFormat = OutputFormat.both
    force: bool = False

    def resolve(self) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
        spec = profiles.load_device(self.profile).compile
        buckets = self.buckets or tuple(spec.buckets)
        draft = self.draft_buckets or tuple(spec.draft_buckets)
        context = self.max_context or spec.max_context
        chunk = self.prefill_chunk or spec.prefill_chunk
        for name, values in (("buckets", buckets), ("draft_buckets", draft)):
            if values[0] < 1 or any(b <= a for a, b in itertools.pairwise(values)):
                raise InputError(f"{setting(name)} must be increasing and at least 1, got {list(values)}",
                                 f"pass e.g. {setting('buckets')} 8,24,48,96")
        largest = max(*buckets, *draft, chunk)
        if context <= largest:
            raise InputError(f"{setting('max_context')} {context} is not larger than the largest bucket ({largest})",
                             f"raise {setting('max_context')} or use smaller buckets")
        return buckets, draft, context, chunk

    def record(self) -> dict[str, Any]:
        buckets, draft, context, chunk = self.resolve()
        return {"profile": self.profile, "buckets": list(buckets), "draft_buckets": list(draft),
                "max_context": context, "prefill_chunk": chunk, "format": self.format.value}


def _variant(source: Path, role: str, q: int, capacity: int, spec: GraphSpec, custom: CustomOps | None,
             scratch: Path) -> tuple[onnx.ModelProto, str]:
    model = load_graph(source)
    strip_custom_ops(model)
    make_static(model, q=q, capacity=capacity, num_kv_heads=spec.num_kv_heads, head_dim=spec.head_dim,
                vocab=spec.vocab_size)
    model, simplified = simplify(model)
    model = ort_optimize(model, scratch)
    record = custom.graphs.get(role) if custom is not None else None
    if record is not None:  # re-insert the custom op the source bundle had
        rule = BY_ROLE[role]
        reason = rule.check(model)
        if reason is not None:
            raise BundleError(f"cannot re-insert {record.op} into the {role} q={q} variant: {reason}",
                              "report this with SPECDEC_DEBUG=1 output")
        rule.apply(model, **record.attributes)
    left = dynamic_dims(model)
    if left:
        raise BundleError(f"{role} q={q} variant still has dynamic dims in {left}", "report this bug")
    return model, simplified


def compile_bundle(config: CompileConfig, source: Bundle, progress: Progress | None = None) -> Bundle:
    progress = progress or SilentProgress()
    if source.manifest.buckets:
        raise BundleError(f"bundle '{source.path}' is already compiled", "compile the bundle it was made from")
    buckets, draft_buckets, capacity, chunk = config.resolve()
    manifest = source.manifest.model_copy(deep=True)
    for role, spec in manifest.graphs.items():
        if capacity > spec.max_position_embeddings:
            raise InputError(f"{setting('max_context')} {capacity} exceeds the {role}'s "
                             f"{spec.max_position_embeddings} positions",
                             f"use {setting('max_context')} {spec.max_position_embeddings} or less")
    sizes = {"target": sorted({1, *buckets, chunk}), "draft": sorted({*draft_buckets, chunk})}
    table: dict[str, list[BucketVariant]] = {}
    validation: dict[str, float] = {}
    simplify_notes: dict[str, str] = {}
    with BundleWriter(config.output, force=config.force, sources=(source.path,)) as writer, \
            tempfile.TemporaryDirectory() as scratch:
        writer.copy_from(source)
        out_dir = writer.dir / BUCKET_DIR
        out_dir.mkdir()
        total = sum(len(v) for v in sizes.values())
        with progress.task("compiling bucket variants", total=total) as task:
            for role, qs in sizes.items():
                spec = manifest.graphs[role]
                rows = []
                for q in qs:
                    name = f"{role}_q{q}"
                    task.describe(f"compiling {name}")
                    model, note = _variant(source.graph_path(role), role, q, capacity, spec, manifest.custom_ops,
                                           Path(scratch))
                    path = out_dir / f"{name}.onnx"
                    onnx.save(model, str(path))
                    validation[name] = validate_bucket(source.graph_path(role), path, q=q, capacity=capacity,
                                                       dtype=spec.dtype)
                    simplify_notes[name] = note
                    inputs, outputs = describe_io(path)
                    rows.append(BucketVariant(q, f"{BUCKET_DIR}/{name}.onnx", None, inputs, outputs))
                    task.advance()
                table[role] = rows
        if config.format is not OutputFormat.onnx:
            with progress.task("converting to ORT format"):
                produced = to_ort_format(out_dir)
            for variants in table.values():
                for variant in variants:
                    if variant.stem not in produced:
                        raise BundleError(f"ORT conversion did not produce {variant.stem}.ort", "try --format onnx")
                    variant.ort_file = f"{BUCKET_DIR}/{variant.stem}.ort"
        with progress.task("checking mobile readiness"):
            ready = {v.stem: readiness(writer.dir / v.file) for variants in table.values() for v in variants}
        if config.format is OutputFormat.ort:
            for variants in table.values():
                for variant in variants:
                    (writer.dir / variant.file).unlink()
                    variant.file = variant.ort_file or variant.file
        manifest.buckets = BucketTable(max_context=capacity, prefill_chunk=chunk, format=config.format,
                                       profile=config.profile, graphs=table)
        manifest.reports["compile"] = {"max_abs_diff": validation, "simplify": simplify_notes, "readiness": ready}
        return writer.finish(manifest, stage="compile", config=config.record(), inputs=input_digests(source))

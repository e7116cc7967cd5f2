"""The npu flavour: static-shape bucket variants of both graphs over a fixed KV buffer (NNAPI/QNN-style).

Target buckets cover the tree sizes one verification can take (plus 1 for plain decoding),
draft buckets the frontier sizes, and both get a prefill chunk. Every variant is simplified
(onnxsim), optimised (onnxruntime, basic level), gets its custom ops back, and is checked
against the dynamic graph before it is written.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import onnx

from specdec.pipeline.bundle import Bundle, GraphSpec, Manifest
from specdec.pipeline.compile.optimize import ort_optimize, simplify, to_ort_format
from specdec.pipeline.compile.readiness import readiness
from specdec.pipeline.compile.static_graph import dynamic_dims, make_static, strip_custom_ops
from specdec.pipeline.compile.validate import validate_bucket
from specdec.pipeline.errors import BundleError
from specdec.pipeline.graph_io import describe_io, load_graph
from specdec.pipeline.passes import BY_ROLE
from specdec.pipeline.progress import Progress
from specdec.pipeline.records.manifest import BucketTable, BucketVariant, CustomOps, GraphFlavour, OutputFormat

BUCKET_DIR = "buckets"


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


def compile_static(source: Bundle, manifest: Manifest, out: Path, settings: Any, progress: Progress) -> None:
    """Write the bucket variants under `out`/buckets and set `manifest.buckets` and its report."""
    buckets, draft_buckets, capacity, chunk = settings.buckets, settings.draft_buckets, settings.max_context, \
        settings.prefill_chunk
    sizes = {"target": sorted({1, *buckets, chunk}), "draft": sorted({*draft_buckets, chunk})}
    sizes = {role: qs for role, qs in sizes.items() if role in manifest.graphs}
    table: dict[str, list[BucketVariant]] = {}
    validation: dict[str, float] = {}
    simplify_notes: dict[str, str] = {}
    out_dir = out / BUCKET_DIR
    out_dir.mkdir()
    with tempfile.TemporaryDirectory() as scratch:
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
    if settings.format is not OutputFormat.onnx:
        with progress.task("converting to ORT format"):
            produced = to_ort_format(out_dir)
        for variants in table.values():
            for variant in variants:
                if variant.stem not in produced:
                    raise BundleError(f"ORT conversion did not produce {variant.stem}.ort", "try --format onnx")
                variant.ort_file = f"{BUCKET_DIR}/{variant.stem}.ort"
    with progress.task("checking mobile readiness"):
        ready = {v.stem: readiness(out / v.file) for variants in table.values() for v in variants}
    if settings.format is OutputFormat.ort:
        for variants in table.values():
            for variant in variants:
                (out / variant.file).unlink()
                variant.file = variant.ort_file or variant.file
    manifest.buckets = BucketTable(max_context=capacity, prefill_chunk=chunk, format=settings.format,
                                   profile=settings.profile, graphs=table, flavour=GraphFlavour.npu)
    manifest.reports["compile"] = {"flavour": GraphFlavour.npu.value, "max_abs_diff": validation,
                                   "simplify": simplify_notes, "readiness": ready}

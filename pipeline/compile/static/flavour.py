"""The npu flavour: static-shape variants of both graphs per query bucket × context bucket (NNAPI/QNN-style).

Query buckets cover the tree sizes one verification can take (plus 1 for plain decoding) for
the target, the frontier sizes for the draft, and both get a prefill chunk. Context buckets are
the KV slots a variant attends over, so a short reply pays for a short buffer; the runtime moves
to the next bucket as the reply grows, the way phone NPU toolchains ship AR × CL variants.
Every variant is simplified (onnxsim), optimised (onnxruntime, basic level), gets its custom ops
back and is checked against the dynamic graph before it is written. The onnx variants of a role
share one weights file (shared_weights.py), so the bundle does not grow with the variant count;
ORT format cannot reference external data, so `--file-format ort|both` repeats the weights per variant.

A decoder with windowed layers keeps its second mask input (`sliding_attention_mask`, same shape
as `attention_mask`), which the runtime fills from the slots' positions: exact past the window.
Its windowed layers keep the context bucket's rows like every layer (one static KV shape per
variant, what these runtimes take); bounding them as the cpu flavour does would need variants
with a second, window-sized KV shape.

A window KV policy (records/kv_policy.py) is the same graphs over one context: a ring of
S + W + room-for-a-round slots (compile/config.py `window_slots`), in which the runtime places rows
and masks by position (engine/static_window.py).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from specdec.pipeline.bundle.store import Bundle, GraphSpec, Manifest
from specdec.pipeline.compile import kv_quality
from specdec.pipeline.compile.config import Activations, CompileSettings
from specdec.pipeline.compile.fused.validate import format_logits_error
from specdec.pipeline.compile.optimize import ort_optimize, simplify, to_ort_format
from specdec.pipeline.compile.static import qdq
from specdec.pipeline.compile.static.graph import dynamic_dims, make_static, strip_custom_ops
from specdec.pipeline.compile.static.readiness import readiness
from specdec.pipeline.compile.static.shared_weights import SharedWeights
from specdec.pipeline.compile.static.validate import BucketValidator
from specdec.pipeline.engine.bundle_info import read_bundle
from specdec.pipeline.errors import BundleError, setting
from specdec.pipeline.graphs.files import describe_io, load_graph
from specdec.pipeline.passes import reinsert
from specdec.pipeline.progress import Progress
from specdec.pipeline.records.codec import from_dict
from specdec.pipeline.records.manifest import BucketTable, BucketVariant, CustomOps, GraphFlavour, OutputFormat
from specdec.pipeline.records.reports import CompileReport

log = logging.getLogger(__name__)

BUCKET_DIR = "buckets"


def variant_grid(settings: CompileSettings, roles: list[str]) -> dict[str, list[tuple[int, int]]]:
    """(q, context) per role: every query bucket in every context bucket that can hold it."""
    queries = {"target": sorted({1, *settings.buckets, settings.prefill_chunk}),
               "draft": sorted({*settings.draft_buckets, settings.prefill_chunk})}
    return {role: [(q, context) for context in settings.context_buckets for q in queries[role] if q <= context]
            for role in roles}


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
        reinsert(model, role, record.op, record.attributes, f"the {role} q={q} variant")
    left = dynamic_dims(model)
    if left:
        raise BundleError(f"{role} q={q} variant still has dynamic dims in {left}", "report this bug")
    return model, simplified


def compile_static(source: Bundle, manifest: Manifest, out: Path, settings: CompileSettings,
                   progress: Progress) -> None:
    """Write the variants and shared weights under `out`/buckets; set `manifest.buckets` and its report."""
    grid = variant_grid(settings, [role for role in ("target", "draft") if role in manifest.graphs])
    written = _Written()
    out_dir = out / BUCKET_DIR
    out_dir.mkdir()
    plan = None
    with tempfile.TemporaryDirectory() as scratch, BucketValidator() as validator:
        if settings.activations is Activations.static_qdq:
            with progress.task("calibrating static activation scales (QDQ)"):
                plan = qdq.plan(source, list(grid), Path(scratch))
        with progress.task("compiling bucket variants", total=sum(len(v) for v in grid.values())) as task:
            for role, cells in grid.items():
                _compile_role(source, manifest, out, role, cells, plan, Path(scratch), validator, task, written)
    table, weights, sizes = written.table, written.weights, written.sizes
    with progress.task("checking mobile readiness"):
        ready = {v.stem: readiness(out / v.file) for variants in table.values() for v in variants}
    notes = []
    if settings.format is not OutputFormat.onnx:
        notes.append(_ort_size_note(sizes))
        log.info("%s", notes[-1])  # the CLI prints the report's notes
        with progress.task("converting to ORT format"):
            produced = to_ort_format(out_dir)
        for variants in table.values():
            for variant in variants:
                if variant.stem not in produced:
                    raise BundleError(f"ORT conversion did not produce {variant.stem}.ort",
                                      f"try {setting('format')} onnx")
                variant.ort_file = f"{BUCKET_DIR}/{variant.stem}.ort"
    if settings.format is OutputFormat.ort:  # the .ort files carry their weights: drop the onnx side
        for variants in table.values():
            for variant in variants:
                (out / variant.file).unlink()
                variant.file = variant.ort_file or variant.file
        for data in weights.values():
            (out / data).unlink()
        weights = {}
    manifest.buckets = BucketTable(max_context=settings.max_context, prefill_chunk=settings.prefill_chunk,
                                   format=settings.format, profile=settings.profile, graphs=table,
                                   flavour=GraphFlavour.npu, weights=weights, kv_policy=settings.kv_policy)
    report: dict[str, Any] = {"flavour": GraphFlavour.npu.value, "max_abs_diff": written.validation,
                              "simplify": written.simplify, "readiness": ready,
                              "context_buckets": list(settings.context_buckets), "sizes": sizes, "notes": notes}
    if plan is not None:  # the QDQ form's measurements, and what the MatMulInteger form's readiness was
        report["activations"] = {**plan.report, "readiness_matmulinteger": written.before_qdq,
                                 "validation": written.tolerances}
    elif written.tolerances:  # int8 compute: each variant's tolerance and the padded dynamic graph's own move
        report["validation"] = written.tolerances
    if settings.kv_policy.lossy:  # what the window costs against the full cache
        with progress.task("measuring the KV policy against the full cache"):
            info = read_bundle(source.path).graphs["target"]
            tokens = kv_quality.calibration_tokens(source.path / manifest.tokenizer.dir, settings.kv_calib,
                                                   info.vocab_size)
            report["kv_quality"] = kv_quality.measure_dynamic(info, settings.max_context, settings.kv_policy, tokens)
    manifest.reports.compile = from_dict(CompileReport, report, "reports.compile")


@dataclass
class _Written:
    """What compile_static collects over the roles' variants."""

    table: dict[str, list[BucketVariant]] = field(default_factory=dict)
    weights: dict[str, str] = field(default_factory=dict)
    validation: dict[str, float] = field(default_factory=dict)
    simplify: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, Any] = field(default_factory=dict)
    before_qdq: dict[str, Any] = field(default_factory=dict)  # variant -> readiness in MatMulInteger form
    tolerances: dict[str, Any] = field(default_factory=dict)  # int8 compute: each variant's tolerance and basis


def _compile_role(source: Bundle, manifest: Manifest, out: Path, role: str, cells: list[tuple[int, int]],
                  plan: qdq.QDQPlan | None, scratch: Path, validator: BucketValidator, task: Any,
                  written: _Written) -> None:
    """The role's variants, each validated against the dynamic graph; with a QDQ `plan`, rewritten
    into QDQ form (the first variant's MatMulInteger form is kept aside for the readiness comparison)."""
    spec = manifest.graphs[role]
    int8 = manifest.quantization is not None and manifest.quantization.int8_activations(role)
    logits_error = format_logits_error(manifest.reports, role)
    scales = plan.scales.get(role) if plan is not None else None
    form = plan.graphs[role] if plan is not None and scales else None
    out_dir = out / BUCKET_DIR
    written.weights[role] = f"{BUCKET_DIR}/{role}.weights"
    rows = []
    with SharedWeights(out / written.weights[role]) as shared:
        for index, (q, context) in enumerate(cells):
            name = f"{role}_q{q}_c{context}"
            task.describe(f"compiling {name}")
            model, note = _variant(source.graph_path(role), role, q, context, spec, manifest.custom_ops, scratch)
            if scales:
                if index == 0:
                    written.before_qdq[name] = _shares(model, scratch / f"{name}.matmulinteger.onnx")
                qdq.rewrite(model, scales)
            shared.externalize(model)
            path = out_dir / f"{name}.onnx"
            onnx.save(model, str(path))
            check = validator.check(source.graph_path(role), path, q=q, capacity=context, dtype=spec.dtype,
                                    window=spec.decoder.window if spec.decoder else None, int8_compute=int8,
                                    logits_error=logits_error, form=form)
            written.validation[name] = check.worst
            if check.padding_error is not None or check.format_error is not None:
                written.tolerances[name] = {"tolerance": check.tolerance, "format_error": check.format_error,
                                            "padding_error": check.padding_error}
            written.simplify[name] = note
            inputs, outputs = describe_io(path)
            rows.append(BucketVariant(q, f"{BUCKET_DIR}/{name}.onnx", None, inputs, outputs, context=context))
            task.advance()
        written.sizes[role] = {"variants": len(rows), "shared_weights_bytes": shared.size,
                               "inline_weights_bytes": shared.referenced_bytes,
                               "graph_bytes": sum((out / v.file).stat().st_size for v in rows)}
    written.table[role] = rows


def _shares(model: onnx.ModelProto, path: Path) -> dict[str, Any]:
    """The NNAPI and CoreML node shares of `model` as it is (written to `path` for the checker)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # saving with external data moves the tensors out of the proto it saves
    onnx.save(copy, str(path), save_as_external_data=True, location=f"{path.name}.data")
    report = readiness(path)
    return {provider: {key: report["providers"][provider].get(key) for key in ("share", "nodes", "partitions",
                                                                               "unsupported_ops")}
            for provider in ("NNAPI", "CoreML")}


def _ort_size_note(sizes: dict[str, Any]) -> str:
    variants = sum(role["variants"] for role in sizes.values())
    inline = sum(role["inline_weights_bytes"] for role in sizes.values())
    shared = sum(role["shared_weights_bytes"] for role in sizes.values())
    return (f"ORT format cannot reference a shared weights file: its {variants} variants repeat the weights "
            f"(about {inline / 2**20:.0f} MiB, against {shared / 2**20:.0f} MiB shared by the onnx variants); "
            f"use {setting('format')} onnx for the small bundle")

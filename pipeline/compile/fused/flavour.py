"""The cpu flavour of `specdec compile`: fused contrib-op graphs over an in-place KV buffer.

Per role: read the decoder's weights out of the bundle graph (weights.py), emit the fused graph
(builder.py), put back the custom op surgery inserted, save, and check it against the dynamic
graph the way the runtime will run it (validate.py). For the target, also measure which batch
invariance the graph has (engine/invariance.py): it decides whether speculation on it is
bitwise exact in the tree layout, or only in the exact (chain) layout.

A feature draft reads the target's own embedding table (and may hold more of its tensors, such as
the final norm), so its fused graph and the target's write their large initializers into one
content-deduplicated file, `cpu/shared.weights` (compile/static/shared_weights.py, as the npu
flavour's variants do): the bundle holds each shared tensor once. ORT format cannot reference
external data, so such bundles default to `--file-format onnx`; `ort` or `both` give each .ort file
its own copy, which the compile report says.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdec.pipeline.bundle.store import Bundle, Manifest
from specdec.pipeline.compile import kv_quality
from specdec.pipeline.compile.config import CompileSettings
from specdec.pipeline.compile.fused.builder import FeatureOutput, build_decoder, row_exact_linears
from specdec.pipeline.compile.fused.kv_int8 import calibrate_scales
from specdec.pipeline.compile.fused.validate import format_logits_error, validate_fused
from specdec.pipeline.compile.fused.weights import read_decoder
from specdec.pipeline.compile.optimize import to_ort_format
from specdec.pipeline.compile.static.shared_weights import SharedWeights
from specdec.pipeline.engine.bundle_info import bundle_info
from specdec.pipeline.engine.fused import FusedRunner
from specdec.pipeline.engine.graph import HIDDEN_OUT, HIDDEN_STATES, SessionOptions
from specdec.pipeline.engine.invariance import measure
from specdec.pipeline.errors import BundleError, setting
from specdec.pipeline.graphs.files import describe_io, load_graph, save_graph
from specdec.pipeline.passes import reinsert
from specdec.pipeline.progress import Progress
from specdec.pipeline.records.codec import from_dict
from specdec.pipeline.records.kv_policy import KVDtype
from specdec.pipeline.records.manifest import BucketTable, FusedGraph, GraphFlavour, OutputFormat
from specdec.pipeline.records.reports import CompileReport

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

FUSED_DIR = "cpu"
SHARED_WEIGHTS = "shared.weights"  # a feature draft's and its target's large initializers, each once


class _GraphFiles:
    """Saves the fused graphs: each with its own weights, or all of them over one `shared` file."""

    def __init__(self, shared: SharedWeights | None) -> None:
        self.shared = shared

    def save(self, model: onnx.ModelProto, path: Path) -> None:
        if self.shared is None:
            save_graph(model, path)
            return
        import onnx

        self.shared.externalize(model)  # moves the large tensors' bytes out of `model` (deduplicated)
        onnx.save(model, str(path))


@contextlib.contextmanager
def _graph_files(directory: Path, share: bool) -> Iterator[_GraphFiles]:
    if not share:
        yield _GraphFiles(None)
        return
    with SharedWeights(directory / SHARED_WEIGHTS) as shared:
        yield _GraphFiles(shared)


def _op_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts = Counter(f"{node.domain}.{node.op_type}" if node.domain else node.op_type for node in model.graph.node)
    return dict(sorted(counts.items()))


def _build(weights: Any, role: str, custom: Any, positions: int, feature: FeatureOutput | None,
           kv_scales: list[tuple[Any, Any]] | None = None, half_kv: bool = False) -> onnx.ModelProto:
    """The fused graph of `role` with the op surgery put after the logits, after the new logits. A
    w8a8 target's attention gets the pad row that makes its single-row calls exact (builder.py)."""
    pad_row = role == "target" and row_exact_linears(weights)
    model = build_decoder(weights, max_positions=positions, kv_scales=kv_scales, half_kv=half_kv,
                          attention_pad_row=pad_row, feature_output=feature)
    if custom is not None:
        reinsert(model, role, custom.op, custom.attributes, f"the fused {role} graph")
    return model


def feature_output(manifest: Manifest, role: str) -> FeatureOutput | None:
    """The layer output a role's fused graph returns besides its logits: with a feature draft, the
    target's `hidden_states` (the layer the draft reads) and the draft's `hidden_out` (its last layer)."""
    draft = manifest.draft_spec
    if not draft.is_feature:
        return None
    if role == "target":
        assert draft.feature_layer is not None
        return FeatureOutput(HIDDEN_STATES, draft.feature_layer)
    return FeatureOutput(HIDDEN_OUT, manifest.graphs[role].num_layers - 1)


def _kv_dtype_graph(weights: Any, role: str, custom: Any, positions: int, scales: list[tuple[Any, Any]] | None,
                    path: Path, info: Any, settings: CompileSettings, tokens: list[int],
                    report: dict[str, Any], feature: FeatureOutput | None, files: _GraphFiles) -> dict[str, int]:
    """Replace the float graph at `path` by its twin with int8 (`scales`) or float16 KV rows
    (measured against it for the target); the twin is written next to it first under the same
    file names, so its external data's location stays valid when it moves into place (over shared
    weights, whose file stays where it is, the twin is staged beside it under its own name)."""
    dtype = settings.kv_policy.dtype.value
    shared = files.shared is not None
    staged = path.with_name(f"{path.stem}.{dtype}{path.suffix}") if shared else path.parent / dtype / path.name
    staged.parent.mkdir(exist_ok=shared)
    model = _build(weights, role, custom, positions, feature, scales, half_kv=scales is None)
    ops = _op_counts(model)
    files.save(model, staged)
    del model
    if role == "target":
        report["kv_quality"] = kv_quality.measure(info, path, staged, settings.max_context, settings.kv_policy, tokens)
    if shared:
        staged.replace(path)
        return ops
    for old in path.parent.glob(f"{path.name}*"):  # the graph and its external data
        old.unlink()
    for new in staged.parent.iterdir():
        new.rename(path.parent / new.name)
    staged.parent.rmdir()
    return ops


def compile_fused(source: Bundle, manifest: Manifest, out: Path, settings: CompileSettings,
                  progress: Progress, roles: tuple[str, ...] | None = None, subdir: str = FUSED_DIR) -> None:
    """Write the fused graphs of `roles` (None: every graph) of `manifest` (the source's, or its view in
    another weight format) under `out`/`subdir` and set `manifest.buckets` and its report."""
    graphs: dict[str, FusedGraph] = {}
    validation: dict[str, float] = {}
    report: dict[str, Any] = {"flavour": GraphFlavour.cpu.value}
    (out / subdir).mkdir()
    dynamic = bundle_info(source.path, manifest).graphs
    chosen = {role: spec for role, spec in manifest.graphs.items() if roles is None or role in roles}
    share = manifest.draft_spec.is_feature and "draft" in chosen and "target" in chosen
    with progress.task("building fused cpu graphs", total=len(chosen)) as task, \
            _graph_files(out / subdir, share) as files:
        for role, spec in chosen.items():
            task.describe(f"building the fused {role} graph")
            if spec.decoder is None:
                raise BundleError(f"the {role} graph has no architecture record", "re-export the bundle")
            weights = read_decoder(load_graph(source.path / spec.file), num_kv_heads=spec.num_kv_heads,
                                   head_dim=spec.head_dim, dtype=spec.dtype, decoder=spec.decoder)
            # a window KV policy decodes past the context: its rotary tables reach the policy's positions
            positions = settings.kv_policy.positions(settings.max_context)
            custom = manifest.custom_ops.graphs.get(role) if manifest.custom_ops is not None else None
            feature = feature_output(manifest, role)
            model = _build(weights, role, custom, positions, feature)
            ops = _op_counts(model)
            path = out / subdir / f"{role}.onnx"
            files.save(model, path)
            del model
            info = replace(dynamic[role], file=path)
            runner = FusedRunner(info, path, settings.max_context, SessionOptions(threads=1))
            int8 = manifest.quantization is not None and manifest.quantization.int8_activations(role)
            validation[role] = validate_fused(dynamic[role], runner, vocab=spec.vocab_size, int8_compute=int8,
                                              hidden_size=manifest.draft_spec.hidden_size or 0,
                                              logits_error=format_logits_error(manifest.reports, role))
            if role == "target":
                report["invariance"] = measure(runner, spec.vocab_size).as_dict()
            tokens = (kv_quality.calibration_tokens(source.path / manifest.tokenizer.dir, settings.kv_calib,
                                                    spec.vocab_size) if settings.kv_policy.lossy else [])
            if settings.kv_policy.quantized:  # int8 rows: scales from the float graph's own keys and values
                scales = calibrate_scales(runner, tokens, settings.max_context)
                ops = _kv_dtype_graph(weights, role, custom, positions, scales, path, info, settings, tokens, report,
                                      feature, files)
            elif settings.kv_policy.dtype is KVDtype.float16:
                ops = _kv_dtype_graph(weights, role, custom, positions, None, path, info, settings, tokens, report,
                                      feature, files)
            elif settings.kv_policy.lossy and role == "target":  # what the window costs against the full cache
                report["kv_quality"] = kv_quality.measure(info, path, path, settings.max_context, settings.kv_policy,
                                                          tokens)
            inputs, outputs = describe_io(path)
            graphs[role] = FusedGraph(f"{subdir}/{role}.onnx", None, inputs, outputs, ops)
            task.advance()
    if settings.format is not OutputFormat.onnx:
        with progress.task("converting to ORT format"):
            produced = to_ort_format(out / subdir)
        for role, graph in graphs.items():
            if role not in produced:
                raise BundleError(f"ORT conversion did not produce {role}.ort", f"try {setting('format')} onnx")
            graph.ort_file = f"{subdir}/{role}.ort"
            if settings.format is OutputFormat.ort:  # the .ort holds the weights: the .onnx and its data go
                for written in (out / graph.file).parent.glob(f"{Path(graph.file).name}*"):
                    written.unlink()
                graph.file = graph.ort_file
        if share:
            report["notes"] = ["ORT format cannot reference external data: each .ort file holds its own copy of the "
                               "weights the target and the feature draft share (--file-format onnx stores them once)"]
    shared_files: dict[str, str] = {}
    if share and settings.format is OutputFormat.ort:
        (out / subdir / SHARED_WEIGHTS).unlink()  # no graph left reads it
    elif share:
        shared_files = {role: f"{subdir}/{SHARED_WEIGHTS}" for role in graphs}
    manifest.buckets = BucketTable(max_context=settings.max_context, prefill_chunk=0, format=settings.format,
                                   profile=settings.profile, graphs={}, flavour=GraphFlavour.cpu, fused=graphs,
                                   weights=shared_files, kv_policy=settings.kv_policy)
    report["max_abs_diff"] = validation
    manifest.reports.compile = from_dict(CompileReport, report, "reports.compile")

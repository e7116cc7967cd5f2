"""`specdec quantize`: target and draft weights into one of the formats of `WeightFormat`.

nbits (INT4/INT8 weight-only MatMulNBits), per graph: find the linear layers, decide each one's
bits (mixed-precision defaults and `--keep-float`) and block size, collect calibration statistics
from the float graph when the method needs them, quantize, pack and rewrite. The results must
pass `onnx.checker` (full) and are measured against the float bundle (quality.py). The w8a8
format (w8a8.py) rewrites every linear layer into per-channel int8 x per-row uint8 MatMulInteger
instead; the mixed format does one or the other per layer class (`--mix attention=w8a8,mlp=nbits`).
Everything else in the bundle (tokenizer, custom-op functions) is copied unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from specdec.pipeline.bundle.store import MANIFEST_NAME, Bundle, BundleWriter, GraphSpec, Manifest, input_digests
from specdec.pipeline.engine.graph import Graph
from specdec.pipeline.errors import BundleError, InputError, setting
from specdec.pipeline.graphs.files import describe_io, graph_files, load_external_data, load_graph, save_graph
from specdec.pipeline.graphs.query import Layer, find_layers, load_weight
from specdec.pipeline.inputs import calibration
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.quantize import layer_stats, quality, w8a8
from specdec.pipeline.quantize.algorithms import ALGORITHMS, LayerStats, QuantResult, QuantSpec, rtn
from specdec.pipeline.quantize.config import AUTO_GROUP_SIZES, LARGE_VOCAB, QuantizeConfig, WeightFormat
from specdec.pipeline.quantize.embeddings import apply_embeddings, find_embeddings, load_table
from specdec.pipeline.quantize.layers import Rewrite, apply_rewrites
from specdec.pipeline.quantize.packing import pack
from specdec.pipeline.records.codec import from_dict
from specdec.pipeline.records.manifest import TargetVariant
from specdec.pipeline.records.quantization import (
    MIXED_FORMAT,
    W8A8_FORMAT,
    GraphQuantization,
    LayerQuantization,
    Quantization,
)
from specdec.pipeline.records.reports import QuantizeReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LayerPlan:
    layer: Layer
    bits: int | None  # None: stays float
    block_size: int | None
    reason: str = ""
    weight_format: WeightFormat = WeightFormat.nbits  # the mixed format's w8a8 layers: w8a8 (block_size None)


def _check_bundle(bundle: Bundle) -> None:
    if bundle.manifest.quantization:
        raise BundleError(f"bundle '{bundle.path}' is already quantized",
                          "quantize the float bundle it came from (quantizing twice compounds the rounding error)")
    if bundle.manifest.buckets:
        raise BundleError(f"bundle '{bundle.path}' is compiled", "quantize before compile: run `specdec quantize` "
                          "on the bundle you passed to `specdec compile`")


def _block_size(width: int, group_size: int | None) -> int | None:
    if group_size is not None:
        return group_size if width % group_size == 0 else None
    return next((size for size in AUTO_GROUP_SIZES if width % size == 0), None)


def plan_graph(layers: list[Layer], role: str, config: QuantizeConfig) -> list[LayerPlan]:
    plans: list[LayerPlan] = []
    for layer in layers:
        bits = config.bits_for(role, layer.name)
        if bits is None:
            plans.append(LayerPlan(layer, None, None, "--keep-float"))
            continue
        if config.weight_format is WeightFormat.mixed and config.format_for(role, layer.name) is WeightFormat.w8a8:
            plans.append(LayerPlan(layer, 8, None, weight_format=WeightFormat.w8a8))
            continue
        block = _block_size(layer.K, config.group_size)
        if block is None:
            wanted = config.group_size or "/".join(map(str, AUTO_GROUP_SIZES))
            plans.append(LayerPlan(layer, None, None, f"group size {wanted} does not divide its width {layer.K}"))
            log.warning("%s: %s layer %s stays float (group size %s does not divide K = %d)", role, layer.op,
                        layer.name, wanted, layer.K)
            continue
        plans.append(LayerPlan(layer, bits, block))
    return plans


def _check_group_size(plans: dict[str, list[LayerPlan]], config: QuantizeConfig) -> None:
    candidates = [p for graph in plans.values() for p in graph
                  if p.reason != "--keep-float" and p.weight_format is WeightFormat.nbits]
    if candidates and not any(p.bits is not None for p in candidates):
        widths = ", ".join(str(w) for w in sorted({p.layer.K for p in candidates}))
        group = config.group_size or "/".join(map(str, AUTO_GROUP_SIZES))
        raise InputError(f"group size {group} divides no layer (widths: {widths})",
                         f"pass a {setting('group_size')} that divides the layer widths, or leave it out for auto")


def _quantize_graph(model: onnx.ModelProto, source: Path, role: str, spec: GraphSpec, plans: list[LayerPlan],
                    config: QuantizeConfig, data: calibration.CalibrationData, workdir: Path,
                    progress: Progress) -> GraphQuantization:
    rewrites, layer_records = _nbits_rewrites(model, source, role, spec, plans, config, data, workdir, progress)
    apply_rewrites(model, rewrites)
    # the float weights that are left (embeddings, norms) come in now that the layers' are gone
    load_external_data(model, source.parent)
    return _nbits_record(model, role, spec, plans, layer_records, config)


def _nbits_record(model: onnx.ModelProto, role: str, spec: GraphSpec, plans: list[LayerPlan],
                  layer_records: dict[str, LayerQuantization], config: QuantizeConfig) -> GraphQuantization:
    return GraphQuantization(
        method=config.method_for(role).value,
        group_size=config.group_size or "auto",
        symmetric=config.symmetric,
        accuracy_level=config.accuracy_level,
        embeddings=_quantize_embeddings(model, role, spec, config),
        summary={label: sum(1 for r in layer_records.values() if r.bits == value)
                 for label, value in (("int4", 4), ("int8", 8), ("float", "float"))},
        layers={p.layer.name: layer_records[p.layer.name] for p in plans},
    )


def _nbits_rewrites(model: onnx.ModelProto, source: Path, role: str, spec: GraphSpec, plans: list[LayerPlan],
                    config: QuantizeConfig, data: calibration.CalibrationData, workdir: Path,
                    progress: Progress) -> tuple[list[Rewrite], dict[str, LayerQuantization]]:
    """The MatMulNBits rewrite of each planned layer (calibrated on the float graph where the method needs
    it) and every layer's record; the weights are read one layer at a time."""
    method = config.method_for(role)
    algorithm = ALGORITHMS[method]
    todo = [p for p in plans if p.bits is not None]
    wanted: dict[str, frozenset[str]] = {}
    widths: dict[str, int] = {}
    for plan in todo:
        if algorithm.needs:
            wanted[plan.layer.input] = wanted.get(plan.layer.input, frozenset()) | algorithm.needs
            widths[plan.layer.input] = plan.layer.K
    passes = layer_stats.plan_passes(wanted, widths) if wanted else []
    rewrites: list[Rewrite] = []
    layer_records = {p.layer.name: LayerQuantization(bits="float", reason=p.reason) for p in plans
                     if p.bits is None}
    with progress.task(f"{role}: {method.value} on {len(todo)} layers", total=len(todo)) as task:
        batches = [(wanted_now, [p for p in todo if p.layer.input in wanted_now]) for wanted_now in passes]
        batches.append(({}, [p for p in todo if p.layer.input not in wanted]))
        for wanted_now, members in batches:
            stats: dict[str, LayerStats] = {}
            if wanted_now:
                with progress.task(f"{role}: calibrating {len(wanted_now)} layer inputs on "
                                   f"{data.windows.shape[0]} samples", total=data.windows.shape[0]) as windows, \
                        calibration.probe_graph(source, role, spec, list(wanted_now), workdir) as graph:
                    stats = layer_stats.collect(graph, wanted_now, data.windows, config.seed, windows.advance,
                                                features=data.features if calibration.reads_features(spec) else None)
            readers = Counter(plan.layer.input for plan in members)
            for plan in members:
                rewrite, record = _quantize_layer(model, plan, stats.get(plan.layer.input), config, method.value,
                                                  algorithm.run, source.parent)
                rewrites.append(rewrite)
                layer_records[plan.layer.name] = record
                readers[plan.layer.input] -= 1
                if readers[plan.layer.input] == 0:  # its last reader is done: up to 256 MiB (x^T x of 8192 inputs)
                    stats.pop(plan.layer.input, None)
                task.advance()
    return rewrites, layer_records


def _quantize_layer(model: onnx.ModelProto, plan: LayerPlan, stats: LayerStats | None, config: QuantizeConfig,
                    method: str, run: Callable[[np.ndarray, QuantSpec, LayerStats | None], QuantResult],
                    base_dir: Path) -> tuple[Rewrite, LayerQuantization]:
    assert plan.bits is not None and plan.block_size is not None
    layer = plan.layer
    weight = load_weight(model, layer, base_dir)
    spec = QuantSpec(plan.bits, plan.block_size, config.symmetric, layer.dtype)
    result = run(weight, spec, stats)
    packed = pack(result.codes, result.scales, None if config.symmetric else result.zero_points, bits=plan.bits,
                  block_size=plan.block_size)
    # the algorithm's own figures (QuantResult.info) are record fields too: an unknown one is an error
    record = from_dict(LayerQuantization, {
        "bits": plan.bits, "method": method, "block_size": plan.block_size,
        "weight_rel_error": result.relative_error(weight, plan.block_size),
        **{key: float(value) for key, value in result.info.items()}})
    return Rewrite(layer, packed, result.input_scale, config.accuracy_level), record


def _quantize_embeddings(model: onnx.ModelProto, role: str, spec: GraphSpec,
                         config: QuantizeConfig) -> dict[str, LayerQuantization]:
    """Gather tables into GatherBlockQuantized (RTN) where `config.embeddings_on` says so, else float.

    The target's table gets 8 bits (rows are read exactly once per token: int8's ~0.3% weight error
    is below the head's and the first block's), the draft's 4 (it only proposes). A feature draft's
    table is the target's own (its rows are the target's vocabulary, whatever the draft's head
    covers): it is quantized as the target's, to the same codes, which a compiled bundle then stores
    once for both graphs (compile/fused/flavour.py)."""
    records: dict[str, LayerQuantization] = {}
    replacements = []
    feature = calibration.reads_features(spec)
    on = config.embeddings_on(spec.vocab_size)
    for table in find_embeddings(model):
        if feature:
            on = config.embeddings_on(table.V)
        bits = config.embedding_bits_for("target" if feature else role, table.name) if on else None
        block = _block_size(table.K, config.group_size)
        if bits is None or block is None:
            reason = ("--keep-float" if on and bits is None else
                      f"group size does not divide its width {table.K}" if bits is not None else
                      "--float-embeddings" if config.quantize_embeddings is False else
                      f"vocabulary under {LARGE_VOCAB}: stays float without --quantize-embeddings")
            records[table.name] = LayerQuantization(bits="float", reason=reason)
            continue
        weight = load_table(model, table)
        result = rtn.quantize(weight, QuantSpec(bits, block, config.symmetric, table.dtype))
        packed = pack(result.codes, result.scales, None if config.symmetric else result.zero_points, bits=bits,
                      block_size=block)
        replacements.append((table, packed))
        records[table.name] = LayerQuantization(bits=bits, method="rtn", block_size=block,
                                                weight_rel_error=result.relative_error(weight, block))
    apply_embeddings(model, replacements)
    return records


def _quantize_graph_w8a8(model: onnx.ModelProto, source: Path, role: str, spec: GraphSpec, plans: list[LayerPlan],
                         config: QuantizeConfig, data: calibration.CalibrationData, workdir: Path,
                         progress: Progress) -> GraphQuantization:
    record = w8a8.quantize_graph(model, role, [plan.layer for plan in plans], config, progress, source.parent)
    load_external_data(model, source.parent)  # as in _quantize_graph: the rest, now the layers are gone
    record.embeddings = _quantize_embeddings(model, role, spec, config)
    return record


def _quantize_graph_mixed(model: onnx.ModelProto, source: Path, role: str, spec: GraphSpec, plans: list[LayerPlan],
                          config: QuantizeConfig, data: calibration.CalibrationData, workdir: Path,
                          progress: Progress) -> GraphQuantization:
    """The mixed format: the nbits rewrites of the classes `--mix` gives nbits (calibrated on the float
    graph as in that format), the w8a8 rewrites of the others, applied together. Each float weight is
    read once, when its layer's turn comes; each layer's record names the format it got."""
    w8a8_plans = [p for p in plans if p.weight_format is WeightFormat.w8a8]
    nbits_plans = [p for p in plans if p.weight_format is WeightFormat.nbits]
    rewrites, records = _nbits_rewrites(model, source, role, spec, nbits_plans, config, data, workdir, progress)
    more, more_records = w8a8.layer_rewrites(model, role, [p.layer for p in w8a8_plans], config, progress,
                                             source.parent)
    apply_rewrites(model, rewrites + more)
    load_external_data(model, source.parent)
    for plan in plans:
        record = (more_records if plan.weight_format is WeightFormat.w8a8 else records)[plan.layer.name]
        if not record.is_float:
            record.format = plan.weight_format.value
        records[plan.layer.name] = record
    graph = _nbits_record(model, role, spec, plans, records, config)
    graph.weight_bits = config.w8a8_weight_bits if more else None
    graph.mix = {kind.value: chosen.value for kind, chosen in config.layer_formats.items()}
    return graph


# (graph, its source file for streamed calibration probes, role, ...)
GraphQuantizer = Callable[[onnx.ModelProto, Path, str, GraphSpec, list[LayerPlan], QuantizeConfig,
                           calibration.CalibrationData, Path, Progress], GraphQuantization]
# format -> (how a graph is quantized, the manifest's format and domain)
FORMATS: dict[WeightFormat, tuple[GraphQuantizer, str, str]] = {
    WeightFormat.nbits: (_quantize_graph, "MatMulNBits", "com.microsoft"),
    WeightFormat.w8a8: (_quantize_graph_w8a8, W8A8_FORMAT, "ai.onnx"),
    WeightFormat.mixed: (_quantize_graph_mixed, MIXED_FORMAT, "com.microsoft"),  # its nbits layers' domain
}


def quantize_bundle(config: QuantizeConfig, source: Bundle, progress: Progress | None = None) -> Bundle:
    from specdec.pipeline.inputs.text import TextCodec

    progress = progress or SilentProgress()
    _ = config.weight_format  # the profile's format when none was given: a bad profile fails before any work
    for path, key in ((config.calib, "calib"), (config.eval_file, "eval_file")):
        if path is not None and not path.is_file():
            raise InputError(f"{setting(key)} file '{path}' does not exist", "pass a text or JSONL file")
    _check_bundle(source)
    source.check_graphs()
    manifest = source.manifest.copy()
    context = min(spec.max_position_embeddings for spec in manifest.graphs.values())
    if config.calib_seq_len > context:
        raise InputError(f"{setting('calib_seq_len')} {config.calib_seq_len} exceeds the bundle's context of "
                         f"{context} tokens", f"pass {setting('calib_seq_len')} {min(128, context)} or less")
    roles = config.roles_in(manifest.graphs)
    missing = [role for role in roles if role not in manifest.graphs]
    if missing:
        raise InputError(f"bundle '{source.path}' has no {' or '.join(missing)} graph to quantize",
                         f"pass {setting('graphs')} {','.join(manifest.graphs)} (or leave it out: every graph)")
    with BundleWriter(config.output, force=config.force,
                      sources=(source.path, config.calib, config.eval_file)) as writer:
        # Plans need the graphs' structure only; each graph's weights are loaded when its turn comes, so
        # one float graph is in memory at a time (the probes read the weights from the source's files).
        _, format_name, domain = FORMATS[config.weight_format]
        plans = {role: plan_graph(find_layers(load_graph(source.graph_path(role), weights=False)), role, config)
                 for role in roles}
        if config.weight_format is not WeightFormat.w8a8:  # w8a8 is per channel: any width
            _check_group_size(plans, config)
        codec = TextCodec(source.tokenizer_dir)
        parameters = max(s.parameters for s in manifest.graphs.values())
        prompts, new_tokens = quality.engine_check_size(parameters, config.eval_prompts, config.eval_new_tokens)
        data = calibration.prepare(calib=config.calib, eval_file=config.eval_file, samples=config.calib_samples,
                                   seq_len=config.calib_seq_len, prompts=prompts, seed=config.seed,
                                   encode=codec.encode, vocab_size=min(s.vocab_size for s in manifest.graphs.values()),
                                   eval_limit=quality.eval_window_count(parameters, config.calib_seq_len,
                                                                        config.eval_windows))
        if "draft" in roles and calibration.reads_features(manifest.graphs["draft"]) \
                and ALGORITHMS[config.method_for("draft")].needs:
            with progress.task("computing the feature draft's calibration features from the float target"):
                target = Graph(calibration.graph_info("target", manifest.graphs["target"], source.graph_path("target")))
                data = dataclasses.replace(data, features=calibration.draft_features(target, list(data.windows)))
                del target
        # graphs left out of --graphs are copied byte for byte (the bundle's hashes show it)
        writer.copy_from(source, exclude=graph_files(source.manifest.files,
                                                     (manifest.graphs[role].file for role in roles)))
        records = {role: _quantize_role(source, role, manifest.graphs[role], plans[role], config, data, writer.dir,
                                        progress) for role in roles}
        manifest.quantization = Quantization(format=format_name, domain=domain, graphs=records)
        report = _evaluate(source, writer.dir, manifest, data, new_tokens, progress, roles, config)
        if "target" in roles and config.also_formats:
            report["variants"] = {also.value: _also_format(source, manifest, also, config, data, writer.dir,
                                                           new_tokens, progress) for also in config.also_formats}
        manifest.reports.quantize = from_dict(QuantizeReport, report, "reports.quantize")
        return writer.finish(manifest, stage="quantize", config=config.record(), inputs=input_digests(source))


def _quantize_role(source: Bundle, role: str, spec: GraphSpec, plans: list[LayerPlan], config: QuantizeConfig,
                   data: calibration.CalibrationData, workdir: Path, progress: Progress) -> GraphQuantization:
    """Quantize the source's `role` graph into `config.weight_format`, written to `workdir`/`spec.file`
    (whose inputs and outputs `spec` then describes)."""
    quantize_graph = FORMATS[config.weight_format][0]
    # each layer's weight is read from the source's files when its turn comes and the rest after
    # the layers are replaced: the float graph is never in memory beside the calibration probe's
    # onnxruntime session (5 GB each at 1.24B), nor whole beside its quantized layers
    model = load_graph(source.graph_path(role), weights=False)
    record = quantize_graph(model, source.graph_path(role), role, spec, plans, config, data, workdir, progress)
    out = workdir / spec.file
    save_graph(model, out)
    del model
    onnx.checker.check_model(str(out), full_check=True)
    spec.inputs, spec.outputs = describe_io(out)
    return record


def _evaluate(source: Bundle, workdir: Path, manifest: Manifest, data: calibration.CalibrationData,
              new_tokens: int, progress: Progress, roles: tuple[str, ...], config: QuantizeConfig) -> dict[str, Any]:
    """The quality report of the graphs `manifest` describes, enforced (--max-ppl-increase)."""
    # The engine reads manifest.json; finish() rewrites it with hashes and lineage.
    (workdir / MANIFEST_NAME).write_text(manifest.to_json())
    report = quality.evaluate(source.path, workdir, source.manifest.graphs, data, new_tokens=new_tokens,
                              progress=progress, quantized=roles, after=manifest.graphs)
    quality.enforce(report, config.max_ppl_increase)
    return report


def _also_format(source: Bundle, manifest: Manifest, weight_format: WeightFormat, config: QuantizeConfig,
                 data: calibration.CalibrationData, workdir: Path, new_tokens: int, progress: Progress
                 ) -> dict[str, Any]:
    """Store the target in one more weight format (`manifest.variants`); returns its quality report.

    Only the target graph is written again (`target.<format>.onnx`): tokenizer, draft and custom ops
    are the bundle's, so the disk cost of a second format is one more quantized target."""
    sub = config.for_format(weight_format)
    spec = copy.deepcopy(source.manifest.graphs["target"])
    spec.file = f"{Path(spec.file).stem}.{weight_format.value}.onnx"
    plans = plan_graph(find_layers(load_graph(source.graph_path("target"), weights=False)), "target", sub)
    if weight_format is not WeightFormat.w8a8:
        _check_group_size({"target": plans}, sub)
    record = _quantize_role(source, "target", spec, plans, sub, data, workdir, progress)
    _, format_name, domain = FORMATS[weight_format]
    manifest.variants[weight_format.value] = TargetVariant(spec, format_name, domain, record)
    view = manifest.with_format(weight_format.value)
    return _evaluate(source, workdir, view, data, new_tokens, progress, ("target",), sub)

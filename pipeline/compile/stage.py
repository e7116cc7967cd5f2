"""`specdec compile`: the bundle's graphs in a runtime flavour, checked against the dynamic graphs.

Two flavours (docs/design.md §8), chosen by `--target` or the device profile's `compile.target`:

- cpu (compile/fused/): onnxruntime contrib-op graphs — GroupQueryAttention with the tree mask
  as attention bias, packed QKV, fused norms, MatMulNBits — over one KV buffer per layer that is
  updated in place. What a phone's or a desktop's CPU runs fastest.
- npu (compile/static/): static-shape standard-op bucket variants over a fixed KV
  buffer, ORT format and a readiness report, for NNAPI/QNN-style runtimes.

Either way the output is a new bundle; exported graphs stay portable standard ONNX.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from specdec.pipeline.bundle.store import Bundle, BundleWriter, Manifest, input_digests
from specdec.pipeline.compile.config import CompileConfig, CompileSettings
from specdec.pipeline.compile.fused.builder import fused_blocker
from specdec.pipeline.compile.fused.flavour import FUSED_DIR, compile_fused
from specdec.pipeline.compile.static.flavour import BUCKET_DIR, compile_static
from specdec.pipeline.errors import BundleError, InputError, UnsupportedModelError, setting
from specdec.pipeline.graphs.files import SHARED_DATA, graph_files
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.records.manifest import GraphFlavour, OutputFormat

log = logging.getLogger(__name__)

__all__ = ["BUCKET_DIR", "compile_bundle", "compile_settings"]


Flavour = Callable[[Bundle, Manifest, Path, CompileSettings, Progress], None]
FLAVOURS: dict[GraphFlavour, Flavour] = {GraphFlavour.cpu: compile_fused, GraphFlavour.npu: compile_static}


def _flavour(settings: CompileSettings, manifest: Manifest) -> tuple[GraphFlavour, str | None]:
    """The flavour to build, and a warning when it is not the profile's: the cpu flavour rebuilds
    each graph from its architecture record (manifest `decoder`), which says whether it can."""
    if settings.flavour is not GraphFlavour.cpu:
        return settings.flavour, None
    blockers = sorted({f"{role} ({spec.architecture}): {reason}" for role, spec in manifest.graphs.items()
                       if (reason := fused_blocker(spec.decoder, spec.head_dim)) is not None})
    if not blockers:
        return GraphFlavour.cpu, None
    if not settings.flavour_from_profile:
        raise UnsupportedModelError(f"--target cpu cannot build the {'; '.join(blockers)}",
                                    "compile with --target npu (standard ops, any architecture)")
    return GraphFlavour.npu, f"the cpu flavour cannot build the {'; '.join(blockers)}; compiling the npu flavour"


def compile_settings(config: CompileConfig, manifest: Manifest) -> CompileSettings:
    """What `compile_bundle` builds from `manifest` with `config`: the profile's defaults filled in, the max
    context clamped to the model's positions, the flavour the model can have. Its `record()` is the
    lineage's config, so `specdec pipeline` can tell an unchanged compile before running it."""
    model_context = min(spec.max_position_embeddings for spec in manifest.graphs.values())
    for role, spec in manifest.graphs.items():  # only an explicit max context can be too large
        if config.max_context is not None and config.max_context > spec.max_position_embeddings:
            raise InputError(f"{setting('max_context')} {config.max_context} exceeds the {role}'s "
                             f"{spec.max_position_embeddings} positions",
                             f"use {setting('max_context')} {spec.max_position_embeddings} or less")
    settings = config.resolve(model_context)
    policy = settings.kv_policy
    for role, spec in manifest.graphs.items():
        if policy.windowed and spec.decoder is not None and not spec.decoder.ropes:
            raise InputError(f"{setting('kv_cache')} window needs rotary positions: the {role} "
                             f"({spec.architecture}) learned its positions, which end at its "
                             f"{spec.max_position_embeddings}", f"use {setting('kv_cache')} full")
        own = spec.decoder.window if spec.decoder is not None else None
        if policy.windowed and own is not None and own > policy.window:
            raise InputError(f"{setting('kv_window')} {policy.window} is narrower than the {role}'s own attention "
                             f"window ({own})", f"use {setting('kv_window')} {own} or more")
    flavour, warning = _flavour(settings, manifest)
    if warning is None:
        if config.format is None and manifest.draft_spec.is_feature:
            # the fused target and feature draft store the tensors they share once, in an external-data
            # file, which ORT format cannot reference (fused/flavour.py)
            return dataclasses.replace(settings, format=OutputFormat.onnx)
        return settings
    # the fallback: check the npu flavour's settings too
    fallback = dataclasses.replace(config, target=flavour).resolve(model_context)
    return dataclasses.replace(fallback, warnings=(warning,))


def compile_bundle(config: CompileConfig, source: Bundle, progress: Progress | None = None) -> Bundle:
    progress = progress or SilentProgress()
    if source.manifest.buckets:
        raise BundleError(f"bundle '{source.path}' is already compiled", "compile the bundle it was made from")
    source.check_graphs()
    manifest = source.manifest.copy()
    settings = compile_settings(config, manifest)
    if manifest.draft_spec.is_feature and settings.flavour is not GraphFlavour.cpu:
        # its static bucket variants would need the features as one more static input and output per
        # variant, and the static runner a feature row per slot: not built yet
        raise UnsupportedModelError(f"the {settings.flavour.value} flavour cannot run a feature draft yet",
                                    "compile with --target cpu (fused graphs; the feature draft included)")
    if manifest.variants and settings.flavour is not GraphFlavour.cpu:
        raise InputError(f"the {settings.flavour.value} flavour builds one weight format, and the bundle's target "
                         f"is in {', '.join(manifest.weight_formats())}",
                         "compile with --target cpu, or quantize with one --format for this flavour")
    for warning in settings.warnings:
        log.warning("%s", warning)
    for note in settings.notes:
        log.info("%s", note)  # the CLI prints the report's notes
    with BundleWriter(config.output, force=config.force, sources=(source.path, config.kv_calib)) as writer:
        # the runners of a compiled bundle open its compiled graphs only: the dynamic graphs it was
        # compiled from (and their weights) stay in the source bundle, not a second copy here
        dynamic = [spec.file for spec in source.manifest.graphs.values()]
        dynamic += [variant.graph.file for variant in source.manifest.variants.values()]
        writer.copy_from(source, exclude={*graph_files(source.manifest.files, dynamic), SHARED_DATA})
        FLAVOURS[settings.flavour](source, manifest, writer.dir, settings, progress)
        report = manifest.reports.compile
        assert report is not None  # every flavour writes its report
        report.notes = [*settings.notes, *report.notes]
        for name, variant in manifest.variants.items():
            # the target again in each further format, under cpu/<format>/; the draft is the bundle's
            view = source.manifest.with_format(name)
            compile_fused(source, view, writer.dir, settings, progress, roles=("target",),
                          subdir=f"{FUSED_DIR}/{name}")
            assert view.buckets is not None
            variant.fused = view.buckets.fused["target"]
            assert view.reports.compile is not None
            report.variants[name] = view.reports.compile
        return writer.finish(manifest, stage="compile", config=settings.record(), inputs=input_digests(source))

"""`specdec compile`: the bundle's graphs in a runtime flavour, checked against the dynamic graphs.

Two flavours (DESIGN §8), chosen by `--target` or the device profile's `compile.target`:

- cpu (compile/fused/): onnxruntime contrib-op graphs — GroupQueryAttention with the tree mask
  as attention bias, packed QKV, fused norms, MatMulNBits — over one KV buffer per layer that is
  updated in place. What a phone's or a desktop's CPU runs fastest.
- npu (compile/static_flavour.py): static-shape standard-op bucket variants over a fixed KV
  buffer, ORT format and a readiness report, for NNAPI/QNN-style runtimes.

Either way the output is a new bundle; exported graphs stay portable standard ONNX.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline import profiles
from specdec.pipeline.bundle import Bundle, BundleWriter, Manifest, input_digests
from specdec.pipeline.compile.fused.builder import fused_blocker
from specdec.pipeline.compile.fused.flavour import compile_fused
from specdec.pipeline.compile.static_flavour import BUCKET_DIR, compile_static
from specdec.pipeline.errors import BundleError, InputError, UnsupportedModelError, setting
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.records.manifest import GraphFlavour, OutputFormat

log = logging.getLogger(__name__)

__all__ = ["BUCKET_DIR", "CompileConfig", "GraphFlavour", "OutputFormat", "compile_bundle"]


@dataclass(frozen=True)
class CompileSettings:
    """A CompileConfig with the profile's defaults filled in and checked."""

    flavour: GraphFlavour
    flavour_from_profile: bool
    buckets: tuple[int, ...]
    draft_buckets: tuple[int, ...]
    max_context: int
    prefill_chunk: int
    format: OutputFormat
    profile: str
    # npu: the KV slots each context bucket spans, ascending, max_context last
    context_buckets: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()  # adjustments the user should hear about (a clamped default)


@dataclass(frozen=True)
class CompileConfig:
    output: Path
    profile: str = "local-cpu"
    target: GraphFlavour | None = None  # graph flavour; the profile's compile.target when None
    buckets: tuple[int, ...] | None = None  # target verification buckets (npu); profile's when None
    draft_buckets: tuple[int, ...] | None = None
    max_context: int | None = None
    prefill_chunk: int | None = None
    # npu: context-length buckets (KV slots a variant attends over); profile's when None, capped
    # at max_context, which is always the last bucket
    context_buckets: tuple[int, ...] | None = None
    # None: the flavour's default, onnx for npu (its variants share weights files, which ORT
    # format cannot reference) and both for cpu
    format: OutputFormat | None = None
    force: bool = False

    def resolve(self, model_context: int | None = None) -> CompileSettings:
        """The settings with the profile's defaults; the profile's max context is clamped to
        `model_context` (the model's positions) with a note, an explicit one is not (compile_bundle)."""
        spec = profiles.load_device(self.profile).compile
        flavour = self.target or spec.target
        buckets = self.buckets or tuple(spec.buckets)
        draft = self.draft_buckets or tuple(spec.draft_buckets)
        context = self.max_context or spec.max_context
        notes: tuple[str, ...] = ()
        if self.max_context is None and model_context is not None and context > model_context:
            notes = (f"the profile {self.profile}'s max context ({context}) exceeds the model's {model_context} "
                     f"positions: compiled for {model_context}",)
            context = model_context
        chunk = self.prefill_chunk or spec.prefill_chunk
        contexts: tuple[int, ...] = ()
        if flavour is GraphFlavour.npu:  # the cpu flavour runs any tree size: buckets do not apply
            examples = {"buckets": "8,24,48,96", "draft_buckets": "1,4,8,16", "context_buckets": "128,256,512,1024"}
            given = self.context_buckets or tuple(spec.context_buckets)
            for name, values in (("buckets", buckets), ("draft_buckets", draft), ("context_buckets", given)):
                if not values or values[0] < 1 or any(b <= a for a, b in itertools.pairwise(values)):
                    raise InputError(f"{setting(name)} must be increasing and at least 1, got {list(values)}",
                                     f"pass e.g. {setting(name)} {examples[name]}")
            largest = max(*buckets, *draft, chunk)
            if context <= largest:
                raise InputError(f"{setting('max_context')} {context} is not larger than the largest bucket "
                                 f"({largest})", f"raise {setting('max_context')} or use smaller buckets")
            contexts = (*(c for c in given if c < context), context)
        output_format = self.format or (OutputFormat.onnx if flavour is GraphFlavour.npu else OutputFormat.both)
        return CompileSettings(flavour, self.target is None, buckets, draft, context, chunk, output_format,
                               self.profile, contexts, notes)

    def record(self) -> dict[str, Any]:
        settings = self.resolve()
        record = {"profile": self.profile, "target": settings.flavour.value, "buckets": list(settings.buckets),
                  "draft_buckets": list(settings.draft_buckets), "max_context": settings.max_context,
                  "prefill_chunk": settings.prefill_chunk, "format": settings.format.value}
        if settings.context_buckets:
            record["context_buckets"] = list(settings.context_buckets)
        return record


Flavour = Callable[[Bundle, Manifest, Path, CompileSettings, Progress], None]
FLAVOURS: dict[GraphFlavour, Flavour] = {GraphFlavour.cpu: compile_fused, GraphFlavour.npu: compile_static}


def _flavour(settings: CompileSettings, manifest: Manifest) -> GraphFlavour:
    """The flavour to build: the cpu flavour rebuilds each graph from its architecture record
    (manifest `decoder`), which says whether it can."""
    if settings.flavour is not GraphFlavour.cpu:
        return settings.flavour
    blockers = {f"{role} ({spec.architecture}): {reason}" for role, spec in manifest.graphs.items()
                if (reason := fused_blocker(spec.decoder, spec.head_dim)) is not None}
    if not blockers:
        return GraphFlavour.cpu
    if not settings.flavour_from_profile:
        raise UnsupportedModelError(f"--target cpu cannot build the {'; '.join(sorted(blockers))}",
                                    "compile with --target npu (standard ops, any architecture)")
    log.warning("the cpu flavour cannot build the %s; compiling the npu flavour instead", "; ".join(sorted(blockers)))
    return GraphFlavour.npu


def compile_bundle(config: CompileConfig, source: Bundle, progress: Progress | None = None) -> Bundle:
    progress = progress or SilentProgress()
    if source.manifest.buckets:
        raise BundleError(f"bundle '{source.path}' is already compiled", "compile the bundle it was made from")
    manifest = source.manifest.model_copy(deep=True)
    model_context = min(spec.max_position_embeddings for spec in manifest.graphs.values())
    for role, spec in manifest.graphs.items():  # only an explicit max context can be too large
        if config.max_context is not None and config.max_context > spec.max_position_embeddings:
            raise InputError(f"{setting('max_context')} {config.max_context} exceeds the {role}'s "
                             f"{spec.max_position_embeddings} positions",
                             f"use {setting('max_context')} {spec.max_position_embeddings} or less")
    settings = config.resolve(model_context)
    flavour = _flavour(settings, manifest)
    if flavour is not settings.flavour:  # the fallback: check the npu flavour's settings too
        settings = dataclasses.replace(config, target=flavour).resolve(model_context)
    for note in settings.notes:
        log.info("%s", note)  # the CLI prints the report's notes
    with BundleWriter(config.output, force=config.force, sources=(source.path,)) as writer:
        writer.copy_from(source)
        FLAVOURS[flavour](source, manifest, writer.dir, settings, progress)
        report = manifest.reports.setdefault("compile", {})
        report["notes"] = [*settings.notes, *report.get("notes", [])]
        return writer.finish(manifest, stage="compile", config=config.record(), inputs=input_digests(source))

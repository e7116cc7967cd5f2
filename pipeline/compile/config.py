"""What `specdec compile` is asked for (`CompileConfig`) and what it builds with (`CompileSettings`).

The flavours (compile/fused/, compile/static/) take the resolved settings; the stage
(compile/stage.py) resolves them and dispatches. Kept apart from both so neither imports the other.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.records.kv_policy import KVCache, KVDtype, KVPolicy
from specdec.pipeline.records.manifest import GraphFlavour, OutputFormat
from specdec.pipeline.settings import profiles

# The fewest KV slots a compiled bundle may have: compile validates its graphs on an 11-token prompt,
# an 8-node tree and a decode step (compile/fused/validate.py), and a bundle must hold a prompt and
# a reply. Checked with the other settings, before anything is built.
MIN_CONTEXT = 20


class Activations(str, enum.Enum):
    """How the npu flavour quantizes a w8a8 bundle's activations (compile/static/qdq.py)."""

    dynamic = "dynamic"  # the bundle's own per-row scales (MatMulInteger): exact w8a8, CPU provider only
    static_qdq = "static-qdq"  # QuantizeLinear/DequantizeLinear, constant calibrated scales: lossy vs w8a8


def window_slots(policy: KVPolicy, largest_call: int) -> int:
    """The KV slots of the npu flavour's variants under a window policy: the sinks, the window and
    room for the rows of the rounds in flight (a draft's levels, a tree, a prompt chunk), twice the
    largest call: a round's scratch rows stay until it commits (engine/static_window.py)."""
    return policy.sinks + policy.window + 2 * largest_call


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
    warnings: tuple[str, ...] = ()  # and ones they should heed (a flavour the model cannot have)
    kv_policy: KVPolicy = field(default_factory=KVPolicy)
    kv_calib: Path | None = None  # the text a lossy policy's quality is measured on
    activations: Activations = Activations.dynamic

    def record(self) -> dict[str, Any]:
        """The lineage's compile config: what was built (the flavour, the clamped context), not what was asked."""
        record: dict[str, Any] = {"profile": self.profile, "target": self.flavour.value, "buckets": list(self.buckets),
                                  "draft_buckets": list(self.draft_buckets), "max_context": self.max_context,
                                  "prefill_chunk": self.prefill_chunk, "format": self.format.value}
        if self.context_buckets:
            record["context_buckets"] = list(self.context_buckets)
        if self.kv_policy.windowed:  # a full float cache leaves the record as it always was
            record.update(kv_cache=self.kv_policy.cache.value, kv_sinks=self.kv_policy.sinks,
                          kv_window=self.kv_policy.window)
        if self.kv_policy.dtype is not KVDtype.float32:
            record["kv_dtype"] = self.kv_policy.dtype.value
        if self.activations is not Activations.dynamic:  # the default leaves the record as it always was
            record["activations"] = self.activations.value
        return record


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
    # format cannot reference) and ort for cpu (the file its runner opens; `both` keeps the .onnx too)
    format: OutputFormat | None = None
    # the KV cache policy (records/kv_policy.py); the profile's when None. `window` is lossy.
    kv_cache: KVCache | None = None
    kv_sinks: int | None = None  # window: the first positions kept (profile's, 4)
    kv_window: int | None = None  # window: the latest positions kept (profile's, 256)
    kv_dtype: KVDtype | None = None  # the rows' dtype (profile's, float32); int8 is lossy
    kv_calib: Path | None = None  # text to measure a lossy policy on; the quantize stage's default text
    # npu, w8a8 bundles: per-row dynamic activation scales (exact w8a8) or static QDQ (lossy, NPU form)
    activations: Activations | None = None
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
        if context < MIN_CONTEXT:
            raise InputError(f"{setting('max_context')} {context} is too small: a compiled bundle holds at least "
                             f"{MIN_CONTEXT} positions", f"pass {setting('max_context')} {MIN_CONTEXT} or more")
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
        policy = self._kv_policy(spec, flavour, context)
        if flavour is GraphFlavour.npu and policy.windowed:
            if self.context_buckets is not None:
                raise InputError(f"{setting('context_buckets')} apply to {setting('kv_cache')} full only: a window "
                                 "policy's variants span one fixed ring of slots",
                                 f"drop {setting('context_buckets')}")
            contexts = (window_slots(policy, max(*buckets, *draft, chunk)),)
        output_format = self.format or (OutputFormat.onnx if flavour is GraphFlavour.npu else OutputFormat.ort)
        activations = self.activations or Activations.dynamic
        if activations is not Activations.dynamic and flavour is not GraphFlavour.npu:
            raise InputError(f"{setting('activations')} {activations.value} is built for the npu flavour only",
                             f"compile with {setting('target')} npu, or drop {setting('activations')}")
        return CompileSettings(flavour, self.target is None, buckets, draft, context, chunk, output_format,
                               self.profile, contexts, notes, kv_policy=policy,
                               kv_calib=self.kv_calib, activations=activations)

    def _kv_policy(self, spec: profiles.CompileSpec, flavour: GraphFlavour, context: int) -> KVPolicy:
        cache = self.kv_cache or spec.kv_cache
        dtype = self.kv_dtype or spec.kv_dtype
        if dtype is not KVDtype.float32 and flavour is not GraphFlavour.cpu:
            raise InputError(f"{setting('kv_dtype')} {dtype.value} is built for the cpu flavour only",
                             f"compile with {setting('target')} cpu, or {setting('kv_dtype')} float32")
        if cache is KVCache.full:
            for name in ("kv_sinks", "kv_window"):
                if getattr(self, name) is not None:
                    raise InputError(f"{setting(name)} applies to {setting('kv_cache')} window only",
                                     f"add {setting('kv_cache')} window or drop {setting(name)}")
            return KVPolicy(dtype=dtype)
        sinks = spec.kv_sinks if self.kv_sinks is None else self.kv_sinks
        window = spec.kv_window if self.kv_window is None else self.kv_window
        if sinks < 0:
            raise InputError(f"{setting('kv_sinks')} {sinks} is negative", f"pass 0 or more {setting('kv_sinks')}")
        if window < 1:
            raise InputError(f"{setting('kv_window')} {window} must be at least 1",
                             f"pass a positive {setting('kv_window')}")
        if sinks + window >= context:
            raise InputError(f"{setting('kv_sinks')} {sinks} + {setting('kv_window')} {window} must be below the max "
                             f"context ({context}): the window would keep everything",
                             f"use a smaller {setting('kv_window')}, or {setting('kv_cache')} full")
        return KVPolicy(KVCache.window, sinks=sinks, window=window, dtype=dtype)

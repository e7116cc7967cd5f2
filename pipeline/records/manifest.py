"""A bundle's manifest.json: its one schema (`Manifest` and its sections) and its one reader (`read_manifest`).

Stages write it (through `bundle.BundleWriter`, which adds the file hashes and the lineage entry),
`bundle.Bundle.load` reads it and then verifies every file's sha256, and the device runtime reads
it with the same function (`engine/bundle_info.py` derives what the engine needs): stdlib
dataclasses validated by `records.codec`, so host and device accept exactly the same JSON and
word its errors the same way.
"""

from __future__ import annotations

import copy
import enum
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from specdec.pipeline.errors import BundleError
from specdec.pipeline.records.bundle_paths import check_bundle_paths
from specdec.pipeline.records.codec import OMIT_DEFAULT, RecordError, dump, parse
from specdec.pipeline.records.decoder import Decoder
from specdec.pipeline.records.draft_spec import DraftSpec
from specdec.pipeline.records.kv_policy import KVPolicy
from specdec.pipeline.records.plan import TunePlan
from specdec.pipeline.records.quantization import GraphQuantization, Quantization
from specdec.pipeline.records.reports import Reports

MANIFEST_NAME = "manifest.json"
# Version of the manifest's on-disk shape. Bump it when the JSON changes shape (a new key that
# older readers would reject, a changed meaning), and keep older bundles loading or failing
# with a BundleError that names the fix. 2: compiled graph flavours (`buckets.flavour`,
# `buckets.fused`) and the tuned `plan`. 3: context-length buckets of the npu flavour
# (`buckets.graphs.*.context`) and its shared weights files (`buckets.weights`). Schema-1 and
# schema-2 bundles load unchanged (their variants all span `max_context`). 4: each graph's
# `decoder` record (records/decoder.py: attention windows, rotary tables, norms); older bundles
# load as full-attention decoders, and compile --target cpu asks to re-export them. A compiled
# bundle's `buckets.kv_policy` is written only where it is not the full cache, so bundles without
# it read as full. 5: `variants`, the target in further weight formats (quantize --format a,b), and a
# plan's `weight_format`; written only where a bundle has them, so older bundles load unchanged.
# 6: each graph's `source_format` (a Hugging Face checkpoint, or a GGUF file and its quantization
# types); export writes it for every graph, so schema-5 readers reject the key, and older bundles
# load with None (the format was not recorded).
# 7: `draft` (records/draft_spec.DraftSpec): the draft's kind (a model, or a feature draft that reads
# the target's `hidden_states`) and its reduced vocabulary file; written only where a bundle has
# either, so a bundle without it (schema 6 and older included) reads as a model draft over the
# target's whole vocabulary.
MANIFEST_SCHEMA = 7


@dataclass
class TensorSpec:
    """One graph input or output: name, numpy dtype name, shape (ints, or names of dynamic dims)."""

    name: str
    dtype: str
    shape: list[int | str]


# ---- custom ops (written by surgery) -------------------------------------------------------------

@dataclass
class CustomOpGraph:
    """Where surgery put one custom op: its graph inputs and outputs and the op's attributes."""

    op: str
    attributes: dict[str, int]
    inputs: list[str]
    outputs: list[str]
    host_modes: list[str] = field(default_factory=list, metadata=OMIT_DEFAULT)  # modes the op leaves to the host


@dataclass
class CustomOps:
    domain: str
    version: int
    graphs: dict[str, CustomOpGraph]  # by role: target, draft


# ---- buckets (written by compile) ----------------------------------------------------------------

class OutputFormat(str, enum.Enum):
    onnx = "onnx"
    ort = "ort"
    both = "both"


class GraphFlavour(str, enum.Enum):
    """How compile shapes the graphs (docs/design.md §8, "graph flavours").

    cpu: onnxruntime contrib ops (GroupQueryAttention, SkipSimplifiedLayerNormalization, packed
         QKV, MatMulNBits), dynamic shapes, one KV buffer per layer updated in place;
    npu: standard ops, static shapes per query bucket over a fixed KV buffer (NNAPI/QNN-style).
    """

    cpu = "cpu"
    npu = "npu"


@dataclass
class FusedGraph:
    """The cpu flavour's graph for one role: any number of query tokens, the KV buffer in place."""

    file: str
    ort_file: str | None
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    ops: dict[str, int]  # node count by op type (domain-qualified for contrib ops)

    @property
    def runtime_file(self) -> str:
        return self.ort_file or self.file


@dataclass
class BucketVariant:
    """One row of the dispatch table: the static graph for `q` query tokens over `context` KV slots."""

    q: int
    file: str
    ort_file: str | None
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    # KV slots the variant attends over (its context-length bucket); None: the table's
    # max_context, what every variant of a schema-1/2 bundle spans
    context: int | None = field(default=None, metadata=OMIT_DEFAULT)

    @property
    def stem(self) -> str:
        return Path(self.file).stem

    @property
    def runtime_file(self) -> str:
        """The file a runtime opens: the ORT-format one where compile wrote it."""
        return self.ort_file or self.file


@dataclass
class BucketTable:
    """What compile wrote: its flavour's graphs over a KV buffer of `max_context` slots.

    npu: `graphs` is the dispatch table of static bucket variants, one per query bucket q and
    context bucket (the KV slots it attends over, at most max_context), and `weights` names the
    external-data file per role that every onnx variant of the role reads its weights from;
    cpu: `fused` holds one graph per role and `graphs` is empty (any tree size runs, so nothing
    limits the tree budget).
    """

    max_context: int
    prefill_chunk: int
    format: OutputFormat
    profile: str
    graphs: dict[str, list[BucketVariant]]  # by role, ascending context bucket, then q
    flavour: GraphFlavour = field(default=GraphFlavour.npu, metadata=OMIT_DEFAULT)
    fused: dict[str, FusedGraph] = field(default_factory=dict, metadata=OMIT_DEFAULT)
    weights: dict[str, str] = field(default_factory=dict, metadata=OMIT_DEFAULT)  # by role: shared data file
    # the KV cache policy of both graphs (records/kv_policy.py)
    kv_policy: KVPolicy = field(default_factory=KVPolicy, metadata=OMIT_DEFAULT)

    def context_of(self, variant: BucketVariant) -> int:
        return variant.context if variant.context is not None else self.max_context

    def sizes(self, role: str) -> list[int]:
        """The query buckets of `role`, ascending (each once, whatever its context buckets)."""
        return sorted({v.q for v in self.graphs.get(role, [])})

    def contexts(self, role: str) -> list[int]:
        """The context buckets of `role`, ascending; [max_context] for a bundle without them."""
        return sorted({self.context_of(v) for v in self.graphs.get(role, [])})

    def largest(self, role: str) -> int:
        """The most query tokens one call of `role` takes (a tree must fit it); 0: no limit."""
        return max(self.sizes(role), default=0)

    def shared_weights(self, role: str) -> str | None:
        """The shared weights file the runtime files of `role` read; None where they carry their weights.

        ORT-format files hold their weights inline, so with `--file-format both` the runtime opens the .ort
        variants (or fused graph) and never the shared file the onnx ones reference."""
        data = self.weights.get(role)
        graphs: list[BucketVariant | FusedGraph] = [*self.graphs.get(role, [])]
        graphs += [self.fused[role]] if role in self.fused else []
        return data if data is not None and any(graph.ort_file is None for graph in graphs) else None

    def files(self) -> list[str]:
        """Every file a runtime opens: the variants or fused graphs, and the weights they reference."""
        files = {v.runtime_file for variants in self.graphs.values() for v in variants}
        files |= {graph.runtime_file for graph in self.fused.values()}
        files |= {data for role in {*self.graphs, *self.fused} if (data := self.shared_weights(role)) is not None}
        return sorted(files)


# ---- the manifest ---------------------------------------------------------------------------------

class CheckpointFormat(str, enum.Enum):
    """What a graph was exported from."""

    huggingface = "huggingface"  # a Hugging Face checkpoint (directory or hub id): its float weights
    gguf = "gguf"  # a GGUF file, dequantized to float by transformers' GGUF loader (docs/export.md)


@dataclass
class SourceFormat:
    """The format of a graph's source checkpoint and, for GGUF, how the file stored its weights."""

    format: CheckpointFormat
    # GGUF: `general.file_type` as the gguf package names it (MOSTLY_Q4_1, ...); None where the file says nothing
    file_type: str | None = field(default=None, metadata=OMIT_DEFAULT)
    # GGUF: tensors per GGML type (a Q4_1 file keeps its norms in F32 and may store the embedding in Q8_0)
    tensor_types: dict[str, int] = field(default_factory=dict, metadata=OMIT_DEFAULT)

    def describe(self) -> str:
        """`GGUF MOSTLY_Q4_1 (210 Q4_1, 61 F32, 1 Q8_0 tensors)` or `Hugging Face` for people."""
        if self.format is CheckpointFormat.huggingface:
            return "Hugging Face"
        counts = ", ".join(f"{count} {kind}" for kind, count in self.tensor_types.items())
        return f"GGUF {self.file_type or 'file type not given'}" + (f" ({counts} tensors)" if counts else "")


@dataclass
class GraphSpec:
    """One exported graph (by role: target, draft): its file, architecture, geometry and I/O."""

    file: str
    architecture: str
    source: str  # the checkpoint it was exported from
    dtype: Literal["float32", "float16"]
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    parameters: int = 0
    # How the decoder computes (records/decoder.py); None in bundles exported before schema 4.
    decoder: Decoder | None = field(default=None, metadata=OMIT_DEFAULT)
    # What `source` is (a Hugging Face checkpoint or a GGUF file); None in bundles exported before schema 6.
    source_format: SourceFormat | None = field(default=None, metadata=OMIT_DEFAULT)


@dataclass
class TargetVariant:
    """The target in one more weight format than the bundle's own (`quantize --format nbits,w8a8`).

    Everything else (tokenizer, draft, custom ops) is the bundle's: a variant holds only what differs,
    the target graph, its quantization record and, once compiled, its fused graph. `Manifest.with_format`
    swaps it in, so every reader of a manifest runs it unchanged; `tune` measures each format and its
    plan names the one it chose.
    """

    graph: GraphSpec
    format: str  # as Quantization.format: the operator the weights are stored for
    domain: str
    quantization: GraphQuantization
    fused: FusedGraph | None = field(default=None, metadata=OMIT_DEFAULT)  # compile --target cpu


@dataclass(kw_only=True)
class TokenizerSpec:
    dir: str = "tokenizer"
    vocab_size: int
    eos_token_ids: list[int]
    bos_token_id: int | None = None
    pad_token_id: int | None = None
    special_tokens: dict[str, str] = field(default_factory=dict)


@dataclass
class FileEntry:
    sha256: str
    size: int


@dataclass
class LineageEntry:
    """One stage applied: its config and the hashes of its inputs; equal fingerprints mean equal runs."""

    stage: str
    tool_version: str
    created: str
    config: dict[str, Any]
    inputs: dict[str, str]
    fingerprint: str


@dataclass(kw_only=True)
class Manifest:
    schema_version: int = MANIFEST_SCHEMA
    tool_version: str = ""  # set by the writer (bundle.BundleWriter.finish)
    graphs: dict[str, GraphSpec]
    tokenizer: TokenizerSpec
    files: dict[str, FileEntry] = field(default_factory=dict)  # every file but the manifest, with its sha256
    lineage: list[LineageEntry] = field(default_factory=list)
    reports: Reports = field(default_factory=Reports)  # what each stage measured (records/reports.py)
    custom_ops: CustomOps | None = None  # surgery
    quantization: Quantization | None = None  # quantize
    buckets: BucketTable | None = None  # compile: the flavour's graphs, the dispatch table
    plan: TunePlan | None = field(default=None, metadata=OMIT_DEFAULT)  # tune: plans per device
    # quantize: the target in further weight formats, by WeightFormat value (TargetVariant)
    variants: dict[str, TargetVariant] = field(default_factory=dict, metadata=OMIT_DEFAULT)
    # export: the draft's kind and vocabulary where it is not a model draft over the whole vocabulary
    draft: DraftSpec | None = field(default=None, metadata=OMIT_DEFAULT)

    @property
    def draft_spec(self) -> DraftSpec:
        """The draft's kind and vocabulary (a bundle without the record: a model draft, full vocabulary)."""
        return self.draft if self.draft is not None else DraftSpec()

    @property
    def fingerprint(self) -> str:
        """The last stage's fingerprint: equal fingerprints mean equal inputs and config."""
        return self.lineage[-1].fingerprint if self.lineage else ""

    def weight_formats(self) -> list[str]:
        """The weight formats the target is carried in, the bundle's own first; [] unquantized."""
        if self.quantization is None:
            return []
        return [self.quantization.weight_format.value, *self.variants]

    def with_format(self, weight_format: str | None) -> Manifest:
        """The manifest as if the target were stored in `weight_format` only (None or the bundle's own
        format: this manifest): the variant's graph, quantization record and fused graph swapped in."""
        own = self.quantization.weight_format.value if self.quantization is not None else None
        if weight_format is None or weight_format == own:
            return self
        variant = self.variants.get(weight_format)
        if variant is None or self.quantization is None:
            raise BundleError(f"the bundle's target is not stored in weight format {weight_format} (it has: "
                              f"{', '.join(self.weight_formats()) or 'float weights'})",
                              f"quantize with --format {','.join([*self.weight_formats(), weight_format])}")
        view = self.copy()
        view.graphs["target"] = copy.deepcopy(variant.graph)
        view.quantization = Quantization(variant.format, variant.domain,
                                         {**self.quantization.graphs, "target": copy.deepcopy(variant.quantization)})
        if view.buckets is not None and view.buckets.flavour is GraphFlavour.cpu:
            if variant.fused is None:
                raise BundleError(f"the compiled bundle has no fused target in weight format {weight_format}",
                                  "compile the bundle again (compile --target cpu builds every format)")
            view.buckets.fused["target"] = copy.deepcopy(variant.fused)
        view.variants = {}
        return view

    def paths(self) -> Iterator[tuple[str, str]]:
        """(entry, path) for every path the manifest names: its file list, graphs, tokenizer, the draft's
        vocabulary, compiled graphs and weights, and the weight-format variants; `entry` says where in
        the manifest it is."""
        for rel in self.files:
            yield "files", rel
        yield "tokenizer.dir", self.tokenizer.dir
        if self.draft is not None and self.draft.vocab is not None:
            yield "draft.vocab.file", self.draft.vocab.file
        specs = [(f"graphs.{role}", spec) for role, spec in self.graphs.items()]
        specs += [(f"variants.{name}.graph", variant.graph) for name, variant in self.variants.items()]
        for where, spec in specs:
            yield f"{where}.file", spec.file
        fused = [(f"variants.{name}.fused", v.fused) for name, v in self.variants.items() if v.fused is not None]
        table = self.buckets
        if table is not None:
            fused += [(f"buckets.fused.{role}", graph) for role, graph in table.fused.items()]
            for role, variants in table.graphs.items():
                for index, variant in enumerate(variants):
                    yield f"buckets.graphs.{role}.{index}.file", variant.file
                    if variant.ort_file is not None:
                        yield f"buckets.graphs.{role}.{index}.ort_file", variant.ort_file
            for role, data in table.weights.items():
                yield f"buckets.weights.{role}", data
        for where, graph in fused:
            yield f"{where}.file", graph.file
            if graph.ort_file is not None:
                yield f"{where}.ort_file", graph.ort_file

    def copy(self) -> Manifest:
        """A deep copy for the next stage to change (stages never touch their input bundle)."""
        return copy.deepcopy(self)

    def to_json(self) -> str:
        return json.dumps(dump(self), indent=2) + "\n"


def read_manifest(root: str | Path) -> Manifest:
    """The bundle's manifest, validated; BundleError naming the problem and the fix otherwise.

    Reads only: `Bundle.load` then checks every file's sha256, and the device runtime trusts
    a copy the host verified before pushing it. The paths it names are checked here, once for
    every reader (`check_bundle_paths`), so no entry can direct a read or a write out of the bundle.
    """
    root = Path(root)
    if not root.is_dir():
        raise BundleError(f"bundle '{root}' does not exist or is not a directory",
                          "pass the output directory of `specdec export` (or a later stage)")
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise BundleError(f"'{root}' has no {MANIFEST_NAME}, so it is not a specdec bundle",
                          "create one with `specdec export TARGET --draft DRAFT -o DIR`")
    if not path.resolve().is_relative_to(root.resolve()):
        raise BundleError(f"{path} is a symlink that leads outside the bundle",
                          "copy the manifest into the bundle, or re-create the bundle")
    try:
        raw = json.loads(path.read_bytes().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise BundleError(f"{path} is not valid JSON ({reason})", "re-create the bundle") from None
    except OSError as exc:
        raise BundleError(f"{path} cannot be read ({exc.strerror or exc})", "check its permissions") from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise BundleError(f"{path} has no schema_version", "re-create the bundle")
    if version < 1:
        raise BundleError(f"{path} has schema_version {version}; versions start at 1",
                          "re-create the bundle with `specdec export`")
    if version > MANIFEST_SCHEMA:
        raise BundleError(f"bundle '{root}' was written by a newer specdec (schema {version}, this one reads "
                          f"{MANIFEST_SCHEMA})", "upgrade specdec to read it")
    try:
        manifest: Manifest = parse(Manifest, raw)
    except RecordError as exc:
        raise BundleError(f"{path} is invalid: {exc}", "re-create the bundle") from None
    check_bundle_paths(root, manifest.paths())
    return manifest

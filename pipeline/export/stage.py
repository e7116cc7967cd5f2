"""`specdec export`: Hugging Face or GGUF target + draft -> a validated ONNX bundle.

Without a draft (no `--draft` for a checkpoint or a built-in without one, `--no-draft` for
`demo-tiny`) the bundle holds the target graph only: `manifest.graphs` has no `draft`,
`reports.export.draft` says why, and the bundle speculates with prompt lookup (`--drafter lookup`)
or decodes plainly.

A feature draft (`--draft` naming a checkpoint of pipeline/draft/feature_model.py's format) makes
the target graph output `hidden_states` too and exports the draft on the target's embedding
(export/features.py); `--draft-vocab FILE` cuts a model draft's head to those target ids.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.bundle.staging import check_output_dir
from specdec.pipeline.bundle.store import Bundle, BundleWriter, GraphSpec, Manifest, TokenizerSpec
from specdec.pipeline.checkpoints import builtin
from specdec.pipeline.checkpoints.locate import locate
from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.export import checkpoint as ckpt
from specdec.pipeline.export import features
from specdec.pipeline.export.architectures import lookup
from specdec.pipeline.export.compat import PairReport, check_pair, check_target
from specdec.pipeline.export.tensor_sharing import share_identical
from specdec.pipeline.export.torch_graph import export_onnx
from specdec.pipeline.export.validate import enforce, validate_graph
from specdec.pipeline.graphs.files import describe_io, sha256_file
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.records.manifest import CheckpointFormat, SourceFormat
from specdec.pipeline.records.reports import ExportReport, Reports

log = logging.getLogger(__name__)

ROLES = ("target", "draft")
TARGET_ONLY = "none: a target-only bundle; it speculates with --drafter lookup (prompt lookup) or decodes plainly"


class DType(str, enum.Enum):
    float32 = "float32"
    float16 = "float16"


@dataclass(frozen=True)
class ExportConfig:
    target: str
    output: Path
    draft: str | None = None  # None: a built-in target's own draft where it has one, else none (target only)
    no_draft: bool = False  # export the target alone, also for a built-in with a draft (demo-tiny)
    opset: int = 18
    dtype: DType = DType.float32
    force: bool = False
    validate: bool = True
    seed: int = 0
    share_tensors: bool = True  # store tensors identical in target and draft once (shared.data)
    draft_vocab: Path | None = None  # a model draft's reduced vocabulary: target ids (.npy or text)

    def __post_init__(self) -> None:
        if self.no_draft and self.draft is not None:
            raise InputError(f"{setting('draft')} and {setting('no_draft')} contradict each other",
                             f"drop {setting('no_draft')} to export the pair, "
                             f"or {setting('draft')} for the target alone")

    @property
    def target_only(self) -> bool:
        if self.no_draft:
            return True
        model = builtin.lookup(self.target) if self.draft is None else None
        return self.draft is None and (model is None or model.draft is None)

    def sources(self) -> dict[str, str]:
        if self.target_only:
            return {"target": self.target}
        return {"target": self.target, "draft": self.draft or self.target}  # no draft given: the built-in's

    def record(self) -> dict[str, Any]:
        """What the lineage stores: everything that changes the output, nothing that does not."""
        record = {"sources": self.sources(), "opset": self.opset, "dtype": self.dtype.value,
                  "validate": self.validate, "seed": self.seed}
        if not self.share_tensors:  # only when off, so that records of earlier bundles keep their digest
            record["share_tensors"] = False
        if self.draft_vocab is not None:
            record["draft_vocab"] = self.draft_vocab.name
        return record | {"target_only": True} if self.target_only else record

    @functools.cached_property
    def input_digests(self) -> dict[str, str]:
        """sha256 of every checkpoint file: the export's lineage inputs, and what `specdec pipeline`
        compares to reuse an export. Computed once per config, here only."""
        digests = {f"{role}/{name}": digest for role, spec in self.sources().items()
                   for name, digest in locate(spec, role).digests().items()}
        if self.draft_vocab is not None and self.draft_vocab.is_file():
            digests["draft_vocab"] = sha256_file(self.draft_vocab)
        return digests


def _tokenizer_spec(tokenizer: Any, generation_eos: Any) -> TokenizerSpec:
    eos: list[int] = []
    for value in (generation_eos, tokenizer.eos_token_id):
        for token_id in value if isinstance(value, list) else [value]:
            if isinstance(token_id, int) and token_id not in eos:
                eos.append(token_id)
    special = {attr: str(getattr(tokenizer, attr)) for attr in ("bos_token", "eos_token", "pad_token", "unk_token")
               if getattr(tokenizer, attr, None) is not None}
    return TokenizerSpec(
        vocab_size=len(tokenizer),
        eos_token_ids=eos,
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        special_tokens=special,
    )


def _source_format(checkpoint: ckpt.Checkpoint) -> SourceFormat:
    if checkpoint.gguf is None:
        return SourceFormat(CheckpointFormat.huggingface)
    return SourceFormat(CheckpointFormat.gguf, checkpoint.gguf.file_type, checkpoint.gguf.tensor_types)


def _check_pair_before_export(config: ExportConfig, feature: features.FeatureSource | None
                              ) -> tuple[dict[str, ckpt.Checkpoint], PairReport]:
    """Load configs and tokenizers only, so a mismatched pair fails before any weight is read."""
    light = {role: ckpt.load_checkpoint(spec, role, config.dtype.value, with_model=False)
             for role, spec in config.sources().items() if not (role == "draft" and feature is not None)}
    geometry = {role: c.architecture.geometry(c.config) for role, c in light.items()}
    if feature is not None:  # its tokenizer is the target's; its geometry must be the target's
        features.check_feature_pair(feature, light["target"].config, geometry["target"])
        return light, check_pair(light["target"].tokenizer, features.load_tokenizer(feature),
                                 geometry["target"].vocab_size, feature.config.target_vocab_size)
    if "draft" not in light:
        return light, check_target(light["target"].tokenizer, geometry["target"].vocab_size)
    report = check_pair(light["target"].tokenizer, light["draft"].tokenizer,
                        geometry["target"].vocab_size, geometry["draft"].vocab_size)
    return light, report


def _input_paths(config: ExportConfig) -> tuple[Path, ...]:
    """The checkpoints (and a draft vocabulary file) the export reads, where they are on this machine
    (the output may not touch them)."""
    paths = [Path(locate(spec, role).path) for role, spec in config.sources().items()]
    if config.draft_vocab is not None:
        paths.append(config.draft_vocab.expanduser())
    return tuple(path for path in paths if path.exists())


def export_bundle(config: ExportConfig, progress: Progress | None = None) -> Bundle:
    progress = progress or SilentProgress()
    checkpoints = _input_paths(config)
    check_output_dir(config.output, force=config.force, sources=checkpoints)
    if config.opset < 18:
        raise InputError(f"{setting('opset')} {config.opset} is too old",
                         "use 18 or newer (torch.onnx dynamo needs it)")
    feature = None if config.target_only else features.feature_source(config.draft)
    features.check_draft_vocab_flag(feature, config.draft_vocab)
    light, pair = _check_pair_before_export(config, feature)
    vocab = (features.read_vocab_file(config.draft_vocab, pair.target_vocab)
             if config.draft_vocab is not None and "draft" in config.sources() else None)
    graphs: dict[str, GraphSpec] = {}
    validation: dict[str, Any] = {}
    draft: Any = None  # the feature draft, loaded on the target's embedding
    with BundleWriter(config.output, force=config.force, sources=checkpoints) as writer:
        for role in (r for r in ROLES if r in light):
            source = light[role]
            with progress.task(f"loading {role} {Path(source.source.path).name}"):
                model = ckpt.load_model(source.source, role, source.config, config.dtype.value)
            architecture = source.architecture
            geometry = architecture.geometry(source.config)
            if role == "draft" and vocab is not None:
                model = features.reduce_head(model, vocab)
                geometry = dataclasses.replace(geometry, vocab_size=int(vocab.size))
            decoder = architecture.describe(source.config, model)
            path = writer.dir / f"{role}.onnx"
            feature_layer = feature.config.feature_layer if feature is not None and role == "target" else None
            with progress.task(f"exporting {role} ({architecture.model_type})"):
                export_onnx(model, geometry, path, opset=config.opset, dtype=config.dtype.value, decoder=decoder,
                            per_layer_masks=architecture.per_layer_masks, feature_layer=feature_layer)
            if config.validate:
                with progress.task(f"validating {role} against PyTorch"):
                    checks = validate_graph(model, path, geometry, architecture, config.dtype.value,
                                            token_range=pair.tokenizer_size, seed=config.seed, decoder=decoder,
                                            feature_layer=feature_layer)
                    validation[role] = enforce(checks, path.name)
            inputs, outputs = describe_io(path)
            graphs[role] = GraphSpec(
                file=path.name,
                architecture=architecture.model_type,
                source=source.source.path,
                source_format=_source_format(source),
                dtype=config.dtype.value,
                num_layers=geometry.num_layers,
                num_kv_heads=geometry.num_kv_heads,
                head_dim=geometry.head_dim,
                vocab_size=geometry.vocab_size,
                max_position_embeddings=geometry.max_position_embeddings,
                inputs=inputs,
                outputs=outputs,
                parameters=int(sum(p.numel() for p in model.parameters())),
                decoder=decoder,
            )
            if feature is not None and role == "target":
                with progress.task(f"loading the feature draft {Path(feature.source).name}"):
                    draft = features.load_feature_draft(feature, model, config.dtype.value)
                vocab = features.draft_vocab_of(draft)
            del model
        if feature is not None and draft is not None:
            graphs["draft"], validation_draft = _export_feature_draft(draft, feature, writer.dir, config, pair,
                                                                      graphs["target"], progress)
            if validation_draft is not None:
                validation["draft"] = validation_draft
            del draft
        draft_record = features.draft_spec(feature, vocab, pair.target_vocab)
        features.write_vocab(writer.dir, draft_record, vocab)
        share = len(graphs) > 1 and config.share_tensors
        sharing = share_identical(writer.dir, [graphs[role].file for role in graphs]) if share else None
        target = light["target"]
        target.tokenizer.save_pretrained(str(writer.dir / "tokenizer"))
        generation_eos = ckpt.generation_eos(target.source)
        manifest = Manifest(
            graphs=graphs,
            tokenizer=_tokenizer_spec(target.tokenizer, generation_eos),
            reports=Reports(export=ExportReport(
                validation=validation if config.validate else "skipped (--no-validate)", warnings=list(pair.warnings),
                shared=sharing.record() if sharing is not None else None,
                draft=TARGET_ONLY if config.target_only else None)),
            draft=draft_record,
        )
        return writer.finish(manifest, stage="export", config=config.record(), inputs=config.input_digests)


def _export_feature_draft(draft: Any, feature: features.FeatureSource, directory: Path, config: ExportConfig,
                          pair: PairReport, target: GraphSpec, progress: Progress
                          ) -> tuple[GraphSpec, dict[str, Any] | None]:
    """The feature draft's graph (export/features.py), checked against PyTorch; its spec and validation."""
    path = directory / "draft.onnx"
    with progress.task("exporting draft (feature draft)"):
        features.export_draft_graph(draft, path, opset=config.opset, dtype=config.dtype.value)
    validation = None
    if config.validate:
        architecture = lookup("llama")  # the feature draft's layers are Llama's
        fp16 = config.dtype is DType.float16
        with progress.task("validating draft against PyTorch"):
            checks = features.validate_draft_graph(
                draft, path, token_range=pair.tokenizer_size, seed=config.seed,
                atol=architecture.atol_fp16 if fp16 else architecture.atol,
                rtol=architecture.rtol_fp16 if fp16 else architecture.rtol)
            validation = enforce(checks, path.name)
    spec = features.draft_graph_spec(draft, path, feature.source, config.dtype.value, target.max_position_embeddings)
    return spec, validation

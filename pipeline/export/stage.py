"""`specdec export`: Hugging Face or GGUF target + draft -> a validated ONNX bundle.

Without a draft (no `--draft` for a checkpoint or a built-in without one, `--no-draft` for
`demo-tiny`) the bundle holds the target graph only: `manifest.graphs` has no `draft`,
`reports.export.draft` says why, and the bundle speculates with prompt lookup (`--drafter lookup`)
or decodes plainly.
"""

from __future__ import annotations

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
from specdec.pipeline.export.compat import PairReport, check_pair, check_target
from specdec.pipeline.export.tensor_sharing import share_identical
from specdec.pipeline.export.torch_graph import export_onnx
from specdec.pipeline.export.validate import enforce, validate_graph
from specdec.pipeline.graphs.files import describe_io
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
        return record | {"target_only": True} if self.target_only else record

    @functools.cached_property
    def input_digests(self) -> dict[str, str]:
        """sha256 of every checkpoint file: the export's lineage inputs, and what `specdec pipeline`
        compares to reuse an export. Computed once per config, here only."""
        return {f"{role}/{name}": digest for role, spec in self.sources().items()
                for name, digest in locate(spec, role).digests().items()}


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


def _check_pair_before_export(config: ExportConfig) -> tuple[dict[str, ckpt.Checkpoint], PairReport]:
    """Load configs and tokenizers only, so a mismatched pair fails before any weight is read."""
    light = {role: ckpt.load_checkpoint(spec, role, config.dtype.value, with_model=False)
             for role, spec in config.sources().items()}
    geometry = {role: c.architecture.geometry(c.config) for role, c in light.items()}
    if "draft" not in light:
        return light, check_target(light["target"].tokenizer, geometry["target"].vocab_size)
    report = check_pair(light["target"].tokenizer, light["draft"].tokenizer,
                        geometry["target"].vocab_size, geometry["draft"].vocab_size)
    return light, report


def _input_paths(config: ExportConfig) -> tuple[Path, ...]:
    """The checkpoints the export reads, where they are on this machine (the output may not touch them)."""
    paths = (Path(locate(spec, role).path) for role, spec in config.sources().items())
    return tuple(path for path in paths if path.exists())


def export_bundle(config: ExportConfig, progress: Progress | None = None) -> Bundle:
    progress = progress or SilentProgress()
    checkpoints = _input_paths(config)
    check_output_dir(config.output, force=config.force, sources=checkpoints)
    if config.opset < 18:
        raise InputError(f"{setting('opset')} {config.opset} is too old",
                         "use 18 or newer (torch.onnx dynamo needs it)")
    light, pair = _check_pair_before_export(config)
    graphs: dict[str, GraphSpec] = {}
    validation: dict[str, Any] = {}
    with BundleWriter(config.output, force=config.force, sources=checkpoints) as writer:
        for role in (r for r in ROLES if r in light):
            source = light[role]
            with progress.task(f"loading {role} {Path(source.source.path).name}"):
                model = ckpt.load_model(source.source, role, source.config, config.dtype.value)
            architecture = source.architecture
            geometry = architecture.geometry(source.config)
            decoder = architecture.describe(source.config, model)
            path = writer.dir / f"{role}.onnx"
            with progress.task(f"exporting {role} ({architecture.model_type})"):
                export_onnx(model, geometry, path, opset=config.opset, dtype=config.dtype.value, decoder=decoder,
                            per_layer_masks=architecture.per_layer_masks)
            if config.validate:
                with progress.task(f"validating {role} against PyTorch"):
                    checks = validate_graph(model, path, geometry, architecture, config.dtype.value,
                                            token_range=pair.tokenizer_size, seed=config.seed, decoder=decoder)
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
            del model
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
        )
        return writer.finish(manifest, stage="export", config=config.record(), inputs=config.input_digests)

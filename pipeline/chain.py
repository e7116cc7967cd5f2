"""`specdec pipeline [CONFIG.yaml]`: export -> surgery -> quantize -> compile -> bench from one file.

Each stage writes `OUTPUT/NN-stage/`; a stage whose output already holds the fingerprint this
run would write (same inputs, same config, same specdec) is reused instead of rebuilt. With no
file, the built-in demo pair runs on the local device.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field
from pydantic import ValidationError as PydanticValidationError

from specdec.pipeline.bench.stage import BenchConfig, BenchOutcome, run_bench
from specdec.pipeline.bundle import Bundle, StrictModel, fingerprint, input_digests
from specdec.pipeline.compile import CompileConfig, OutputFormat, compile_bundle
from specdec.pipeline.errors import BundleError, InputError
from specdec.pipeline.export import DType, ExportConfig, export_bundle
from specdec.pipeline.export import checkpoint as ckpt
from specdec.pipeline.profiles import Transport
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.quantize.config import Method, QuantizeConfig
from specdec.pipeline.quantize.stage import quantize_bundle
from specdec.pipeline.runtime.config import VerifyMode
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

log = logging.getLogger(__name__)


class ExportSection(StrictModel):
    opset: int = 18
    dtype: DType = DType.float32
    validate_graphs: bool = Field(True, alias="validate")


class SurgerySection(StrictModel):
    enabled: bool = True
    max_k: int = Field(8, ge=1)


class QuantizeSection(StrictModel):
    enabled: bool = True
    method: Method = Method.awq
    target_method: Method | None = None
    draft_method: Method | None = Method.gptq  # the articles' pairing: AWQ target, GPTQ draft
    group_size: int | None = None
    symmetric: bool = False
    accuracy_level: int = 0  # 4 is faster but lossy (see quantize --help)
    keep_float: list[str] = Field(default_factory=list)
    calib: Path | None = None
    calib_samples: int = 64
    calib_seq_len: int = 128
    max_ppl_increase: float | None = None


class CompileSection(StrictModel):
    enabled: bool = True
    buckets: list[int] | None = None
    draft_buckets: list[int] | None = None
    max_context: int | None = None
    prefill_chunk: int | None = None
    format: OutputFormat = OutputFormat.both


class BenchSection(StrictModel):
    enabled: bool = True
    device: Transport = Transport.local
    serial: str | None = None
    scenario: str | None = None
    prompts: Path | None = None
    limit: int | None = 8
    max_new_tokens: int = 64
    repeats: int = 1
    temperature: float = 0.0
    mode: VerifyMode | None = None
    cooldown: bool = True
    asserts: list[str] = Field(default_factory=list)
    baseline: Path | None = None
    max_regression_pct: float = 5.0


class PipelineConfig(StrictModel):
    target: str = ckpt.DEMO_NAME
    draft: str | None = None
    output: Path = Path("specdec-out")
    profile: str | None = None  # device profile for compile and bench
    export: ExportSection = Field(default_factory=ExportSection)
    surgery: SurgerySection = Field(default_factory=SurgerySection)
    quantize: QuantizeSection = Field(default_factory=QuantizeSection)
    compile: CompileSection = Field(default_factory=CompileSection)
    bench: BenchSection = Field(default_factory=BenchSection)


def load_config(path: Path | None) -> PipelineConfig:
    if path is None:
        return PipelineConfig()
    if not path.is_file():
        raise InputError(f"pipeline config '{path}' does not exist", "pass a YAML file (see README, 'pipeline')")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise InputError(f"{path} is not valid YAML ({' '.join(str(exc).split())})", "fix the file") from exc
    try:
        config = PipelineConfig.model_validate(data)
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{path}: '{where}': {first['msg']}", "fix the field (unknown keys are errors)") from exc
    base = path.parent  # relative paths in the file are relative to the file
    return config.model_copy(update={"output": base / config.output})


def _reusable(out: Path, expected: str) -> Bundle | None:
    if not (out / "manifest.json").is_file():
        return None
    try:
        bundle = Bundle.load(out)
    except BundleError as exc:
        log.warning("rebuilding %s: %s", out, exc.problem)
        return None
    return bundle if bundle.manifest.fingerprint == expected else None


def _stage(name: str, out: Path, expected: str, build: Callable[[], Bundle],
           report: Callable[[str, Bundle, bool], None]) -> Bundle:
    reused = _reusable(out, expected)
    if reused is not None:
        report(name, reused, True)
        return reused
    bundle = build()
    report(name, bundle, False)
    return bundle


def run_pipeline(config: PipelineConfig, progress: Progress | None = None,
                 report: Callable[[str, Bundle, bool], None] | None = None) -> tuple[Bundle, BenchOutcome | None]:
    progress = progress or SilentProgress()
    report = report or (lambda name, bundle, reused: None)
    root = config.output
    profile = config.profile or ("local-cpu" if config.bench.device is Transport.local else "android-generic")
    export = ExportConfig(target=config.target, draft=config.draft, output=root / "01-export",
                          opset=config.export.opset, dtype=config.export.dtype,
                          validate=config.export.validate_graphs, force=True)
    sources = export.sources()
    digests = {f"{role}/{name}": digest for role, spec in sources.items()
               for name, digest in ckpt.source_digests(ckpt.resolve(spec, role)).items()}
    bundle = _stage("export", export.output, fingerprint("export", export.record(), digests),
                    lambda: export_bundle(export, progress), report)
    if config.surgery.enabled:
        surgery = SurgeryConfig(output=root / "02-surgery", max_k=config.surgery.max_k, force=True)
        source = bundle
        bundle = _stage("surgery", surgery.output, fingerprint("surgery", surgery.record(), input_digests(source)),
                        lambda: surgery_bundle(surgery, source, progress), report)
    if config.quantize.enabled:
        q = config.quantize
        quantize = QuantizeConfig(output=root / "03-quantize", method=q.method, target_method=q.target_method,
                                  draft_method=q.draft_method, group_size=q.group_size, symmetric=q.symmetric,
                                  accuracy_level=q.accuracy_level, keep_float=tuple(q.keep_float), calib=q.calib,
                                  calib_samples=q.calib_samples, calib_seq_len=q.calib_seq_len,
                                  max_ppl_increase=q.max_ppl_increase, force=True)
        source = bundle
        bundle = _stage("quantize", quantize.output,
                        fingerprint("quantize", quantize.record(), input_digests(source)),
                        lambda: quantize_bundle(quantize, source, progress), report)
    if config.compile.enabled:
        c = config.compile
        compile_config = CompileConfig(
            output=root / "04-compile", profile=profile, buckets=tuple(c.buckets) if c.buckets else None,
            draft_buckets=tuple(c.draft_buckets) if c.draft_buckets else None, max_context=c.max_context,
            prefill_chunk=c.prefill_chunk, format=c.format, force=True)
        source = bundle
        bundle = _stage("compile", compile_config.output,
                        fingerprint("compile", compile_config.record(), input_digests(source)),
                        lambda: compile_bundle(compile_config, source, progress), report)
    outcome = None
    if config.bench.enabled:
        b = config.bench
        outcome = run_bench(BenchConfig(
            output=root / "bench", device=b.device, profile=profile, scenario=b.scenario, serial=b.serial,
            prompts=b.prompts, limit=b.limit, max_new_tokens=b.max_new_tokens, repeats=b.repeats,
            temperature=b.temperature, mode=b.mode, cooldown=b.cooldown, asserts=tuple(b.asserts),
            baseline=b.baseline, max_regression_pct=b.max_regression_pct, force=True), bundle)
    return bundle, outcome


def describe(config: PipelineConfig) -> dict[str, Any]:
    return config.model_dump(mode="json")

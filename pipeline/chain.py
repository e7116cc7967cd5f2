"""`specdec pipeline [CONFIG.yaml]`: export -> surgery -> quantize -> compile -> bench from one file.

Each stage writes `OUTPUT/NN-stage/`; a stage whose output already holds the fingerprint this
run would write (same inputs, same config, same specdec) is reused instead of rebuilt. With no
file, the built-in demo pair runs on the local device.

The YAML's stage sections ARE the stage configs: a section takes exactly the fields and defaults
of ExportConfig, SurgeryConfig, QuantizeConfig, CompileConfig or BenchConfig, validated by
`records.codec` (unknown keys are errors, choices are enums) and by the config's own checks,
plus `enabled` (all but export). What the chain decides itself is not a section key: `output`
and `force` of every stage, export's `target`/`draft` and the `profile` of compile and bench
(top-level keys). Two pipeline defaults differ from the commands' and are listed in
`PIPELINE_DEFAULTS`: the articles' pairing (AWQ target, GPTQ draft) and 8 bench prompts.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specdec.pipeline.bench.stage import BenchConfig, BenchOutcome, run_bench
from specdec.pipeline.bundle import Bundle, fingerprint, input_digests
from specdec.pipeline.compile import CompileConfig, compile_bundle, compile_settings
from specdec.pipeline.errors import BundleError, InputError
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.export import checkpoint as ckpt
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.quantize.config import QuantizeConfig
from specdec.pipeline.quantize.stage import quantize_bundle
from specdec.pipeline.records.codec import RecordError, from_dict, parse
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

log = logging.getLogger(__name__)

SECTIONS: dict[str, type] = {"export": ExportConfig, "surgery": SurgeryConfig, "quantize": QuantizeConfig,
                             "compile": CompileConfig, "bench": BenchConfig}
OUTPUT_DIRS = {"export": "01-export", "surgery": "02-surgery", "quantize": "03-quantize", "compile": "04-compile",
               "bench": "bench"}
TOP_LEVEL = ("target", "draft", "output", "profile")
# Where the pipeline's defaults differ from the stage's own (the command's).
PIPELINE_DEFAULTS: dict[str, dict[str, Any]] = {"quantize": {"draft_method": "gptq"}, "bench": {"limit": 8}}


@dataclass(frozen=True)
class PipelineConfig:
    output: Path
    export: ExportConfig
    surgery: SurgeryConfig
    quantize: QuantizeConfig
    compile: CompileConfig
    bench: BenchConfig
    skipped: frozenset[str] = frozenset()  # sections with `enabled: false` (or --no-bench)

    @property
    def target(self) -> str:
        return self.export.target

    @property
    def draft(self) -> str | None:
        return self.export.draft

    def enabled(self, stage: str) -> bool:
        return stage not in self.skipped

    def without(self, stage: str) -> PipelineConfig:
        return dataclasses.replace(self, skipped=self.skipped | {stage})


def load_config(path: Path | None, *, output: Path | None = None) -> PipelineConfig:
    """The pipeline YAML (None: the demo pair); `output` overrides the file's output root."""
    if path is None:
        return build_config({}, output=output)
    if not path.is_file():
        raise InputError(f"pipeline config '{path}' does not exist", "pass a YAML file (see README, 'pipeline')")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise InputError(f"{path} is not valid YAML ({' '.join(str(exc).split())})", "fix the file") from exc
    try:
        return build_config(data, output=output, base=path.parent)
    except RecordError as exc:
        raise InputError(f"{path}: {exc}", "fix the field (unknown keys are errors)") from exc
    except InputError as exc:  # a stage config's own check
        raise InputError(f"{path}: {exc.raw_problem}", exc.raw_fix) from exc


def build_config(data: Any, *, output: Path | None = None, base: Path = Path()) -> PipelineConfig:
    """Validate parsed YAML into the stage configs; RecordError names the first bad field."""
    if not isinstance(data, Mapping):
        raise RecordError("", "the file must hold a mapping of top-level keys")
    for key in data:
        if key not in TOP_LEVEL and key not in SECTIONS:
            raise RecordError(str(key), "Extra inputs are not permitted")
    target: str = parse(str, data.get("target", ckpt.DEMO_NAME), "target")
    draft: str | None = parse(str | None, data.get("draft"), "draft")
    # relative paths in the file are relative to the file; --out is relative to the working directory
    root = output if output is not None else base / parse(Path, data.get("output", "specdec-out"), "output")
    profile: str | None = parse(str | None, data.get("profile"), "profile")
    skipped: set[str] = set()

    def section(stage: str, **owned: Any) -> Any:
        values = data.get(stage) or {}
        if not isinstance(values, Mapping):
            raise RecordError(stage, f"Input should be a mapping of {SECTIONS[stage].__name__} fields")
        values = dict(values)
        if stage != "export" and not parse(bool, values.pop("enabled", True), f"{stage}.enabled"):
            skipped.add(stage)
        owned = {"output": root / OUTPUT_DIRS[stage], "force": True, **owned}
        for key in values:
            if key in owned:
                raise RecordError(f"{stage}.{key}", "is set by the pipeline, not in a section "
                                  "(use the top-level target, draft, output and profile)")
        return from_dict(SECTIONS[stage], {**PIPELINE_DEFAULTS.get(stage, {}), **values, **owned}, stage)

    bench: BenchConfig = section("bench", profile=profile)
    return PipelineConfig(
        output=root,
        export=section("export", target=target, draft=draft),
        surgery=section("surgery"),
        quantize=section("quantize"),
        compile=section("compile", profile=bench.profile_name),  # compile for the device bench runs on
        bench=bench,
        skipped=frozenset(skipped),
    )


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
    export = config.export
    bundle = _stage("export", export.output, fingerprint("export", export.record(), export.input_digests),
                    lambda: export_bundle(export, progress), report)
    if config.enabled("surgery"):
        surgery, source = config.surgery, bundle
        bundle = _stage("surgery", surgery.output, fingerprint("surgery", surgery.record(), input_digests(source)),
                        lambda: surgery_bundle(surgery, source, progress), report)
    if config.enabled("quantize"):
        quantize, source = config.quantize, bundle
        bundle = _stage("quantize", quantize.output,
                        fingerprint("quantize", quantize.record(), input_digests(source)),
                        lambda: quantize_bundle(quantize, source, progress), report)
    if config.enabled("compile"):
        compile_config, source = config.compile, bundle
        bundle = _stage("compile", compile_config.output,
                        fingerprint("compile", compile_settings(compile_config, source.manifest).record(),
                                    input_digests(source)),
                        lambda: compile_bundle(compile_config, source, progress), report)
    outcome = run_bench(config.bench, bundle) if config.enabled("bench") else None
    return bundle, outcome

"""`specdec pipeline [CONFIG.yaml]`: export -> surgery -> quantize -> compile -> bench from one file.

Each stage writes `OUTPUT/NN-stage/`; a stage whose output already holds the fingerprint this
run would write (same inputs, same config, same specdec) is reused instead of rebuilt. With no
file, the demo's own file runs (pipeline/demo/smollm2/pipeline.yaml: SmolLM2-135M-Instruct on
this machine, benched on chat requests), writing to ./specdec-out.

The YAML's stage sections ARE the stage configs: a section takes exactly the fields and defaults
of ExportConfig, SurgeryConfig, QuantizeConfig, CompileConfig or BenchConfig, validated by
`records.codec` (unknown keys are errors, choices are enums) and by the config's own checks,
plus `enabled` (all but export). What the chain decides itself is not a section key: `output`
and `force` of every stage, export's `target`/`draft` and the `profile` of quantize, compile
and bench (top-level keys). Two pipeline defaults differ from the commands' and are listed in
`PIPELINE_DEFAULTS`: the articles' pairing (AWQ target, GPTQ draft) and 8 bench prompts.
Relative paths in a file are relative to the file (`output`, and every path a section takes).

`draft` names where the rounds' drafts come from: a draft checkpoint, `{from_target: {...}}` (a
draft `specdec draft` makes first), or `lookup`: no draft model, the target exported alone and
speculating with prompt lookup (bench's drafter, unless the bench section names one).
"""

from __future__ import annotations

import dataclasses
import logging
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from specdec.pipeline.bench.stage import BenchConfig, BenchOutcome, run_bench
from specdec.pipeline.bundle.store import MANIFEST_NAME, Bundle, fingerprint, input_digests
from specdec.pipeline.checkpoints import builtin
from specdec.pipeline.compile import CompileConfig, compile_bundle, compile_settings
from specdec.pipeline.draft import DraftConfig, make_draft
from specdec.pipeline.draft.config import default_kind
from specdec.pipeline.draft.report import read as read_draft_report
from specdec.pipeline.draft.target import resolve_target
from specdec.pipeline.errors import BundleError, InputError
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.quantize.config import QuantizeConfig
from specdec.pipeline.quantize.stage import quantize_bundle
from specdec.pipeline.records.codec import RecordError, from_dict, parse
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

log = logging.getLogger(__name__)

SECTIONS: dict[str, type] = {"export": ExportConfig, "surgery": SurgeryConfig, "quantize": QuantizeConfig,
                             "compile": CompileConfig, "bench": BenchConfig}
DRAFT_DIR = "00-draft"  # `draft: {from_target: {...}}`: the draft `specdec draft` makes first
OUTPUT_DIRS = {"export": "01-export", "surgery": "02-surgery", "quantize": "03-quantize", "compile": "04-compile",
               "bench": "bench"}
TOP_LEVEL = ("target", "draft", "output", "profile")
# Where the pipeline's defaults differ from the stage's own (the command's).
PIPELINE_DEFAULTS: dict[str, dict[str, Any]] = {"quantize": {"draft_method": "gptq"}, "bench": {"limit": 8}}
LOOKUP = "lookup"  # `draft: lookup`: no draft model; the target speculates with prompt lookup
DEFAULT_OUTPUT = Path("specdec-out")


def demo_config_file() -> Path:
    """The demo's pipeline file (package data): what `specdec pipeline` runs with no file."""
    return Path(str(resources.files("specdec.pipeline.demo") / "smollm2" / "pipeline.yaml"))


@dataclass(frozen=True)
class PipelineConfig:
    output: Path
    export: ExportConfig
    surgery: SurgeryConfig
    quantize: QuantizeConfig
    compile: CompileConfig
    bench: BenchConfig
    skipped: frozenset[str] = frozenset()  # sections with `enabled: false` (or --no-bench)
    from_target: DraftConfig | None = None  # the draft to make from the target before export

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
    """The pipeline YAML (None: the demo's, writing to ./specdec-out); `output` overrides the file's output root."""
    if path is None:
        return load_config(demo_config_file(), output=output if output is not None else DEFAULT_OUTPUT)
    if not path.is_file():
        raise InputError(f"pipeline config '{path}' does not exist", "pass a YAML file (see docs/pipeline.md)")
    try:
        data = yaml.safe_load(path.read_bytes()) or {}  # bytes: PyYAML names a bad encoding's position
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
    target: str = parse(str, data.get("target", builtin.DEMO), "target")
    # relative paths in the file are relative to the file; --out is relative to the working directory
    root = output if output is not None else base / parse(Path, data.get("output", str(DEFAULT_OUTPUT)), "output")
    from_target = _from_target(data.get("draft"), target, root, base)
    lookup_only = data.get("draft") == LOOKUP
    draft = str(from_target.output) if from_target else None if lookup_only else \
        parse(str | None, data.get("draft"), "draft")
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
        defaults = {**PIPELINE_DEFAULTS.get(stage, {}), **({"drafter": LOOKUP} if stage == "bench" and lookup_only
                                                           else {})}
        values = _relative_to(base, SECTIONS[stage], values)
        return from_dict(SECTIONS[stage], {**defaults, **values, **owned}, stage)

    bench: BenchConfig = section("bench", profile=profile)
    drafter = bench.decode.drafter
    if lookup_only and drafter is not None and drafter.needs_model:
        raise RecordError("bench.drafter", f"{drafter.value} needs a draft model, and `draft: lookup` "
                                           "exports none (name a draft checkpoint, or drop bench.drafter)")
    return PipelineConfig(
        output=root,
        export=section("export", target=target, draft=draft, **({"no_draft": True} if lookup_only else {})),
        surgery=section("surgery"),
        # quantize and compile for the device bench runs on (its profile's format and graph flavour)
        quantize=section("quantize", profile=bench.profile_name),
        compile=section("compile", profile=bench.profile_name),
        bench=bench,
        skipped=frozenset(skipped),
        from_target=from_target,
    )


def _relative_to(base: Path, config: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with each relative path a `config` field takes (Path, Path | None) made relative to `base`."""
    hints = typing.get_type_hints(config)
    paths = {name for name, hint in hints.items() if hint is Path or Path in typing.get_args(hint)}
    return {key: str(base / Path(value).expanduser()) if key in paths and isinstance(value, str) else value
            for key, value in values.items()}


def _from_target(value: Any, target: str, root: Path, base: Path) -> DraftConfig | None:
    """`draft: {from_target: {DraftConfig fields}}`: make the draft (in OUTPUT/00-draft) from the target."""
    if not isinstance(value, Mapping):
        return None
    if set(value) != {"from_target"}:
        raise RecordError("draft", "Input should be a checkpoint path or {from_target: {...}} (specdec draft's "
                                   "options)")
    values = dict(value["from_target"] or {})
    for key in ("target", "output", "force", "resume"):
        if key in values:
            raise RecordError(f"draft.from_target.{key}", "is set by the pipeline")
    for key in ("calib", "train_prompts", "eval_prompts", "data"):  # paths read relative to the pipeline file
        if values.get(key) is not None:
            values[key] = str(base / str(values[key]))
    values.setdefault("kind", str(default_kind(values)))  # as `specdec draft` chooses
    config: DraftConfig = from_dict(DraftConfig, {**values, "target": target, "output": root / DRAFT_DIR,
                                                  "force": True}, "draft.from_target")
    return config


def _made_draft(config: DraftConfig, progress: Progress) -> None:
    """Make the draft unless OUTPUT/00-draft already holds one made with the same options."""
    report = read_draft_report(config.output)
    if report is not None and report.get("config") == config.record() and \
            report.get("target") == resolve_target(config.target).path:
        log.info("reusing the draft in %s", config.output)
        return
    make_draft(config, progress)


def _reusable(out: Path, expected: str) -> Bundle | None:
    if not (out / MANIFEST_NAME).is_file():
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
    if config.from_target is not None:
        _made_draft(config.from_target, progress)
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

"""`specdec bench`: plain vs speculative decoding on a device, in one run, with sensors.

Writes `results.json` (versioned), `summary.md`, PNG plots and `trace.json` into the output
directory atomically; CI gates are evaluated on the written results.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from specdec.pipeline.bench import gates
from specdec.pipeline.bench.outputs import assemble, write_outputs
from specdec.pipeline.bundle.store import Bundle, StagedDirectory
from specdec.pipeline.devices.session import new_run_id
from specdec.pipeline.engine.processors import ProcessorCache, build
from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.inputs.prompts import CALIBRATION_PROMPTS, BenchPrompt, load_bench_prompts
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.ondevice.controls import sensor_args
from specdec.pipeline.ondevice.launch import prepare_device
from specdec.pipeline.ondevice.orchestrate import DeviceRun, ProgressSink, run_on_device
from specdec.pipeline.ondevice.payload import build_payload
from specdec.pipeline.progress import Progress
from specdec.pipeline.records.decode import BanPolicy, DrafterKind, VerifyMode
from specdec.pipeline.records.results import BenchResults, GateResult, RunSpec
from specdec.pipeline.settings import profiles
from specdec.pipeline.settings.profiles import RuntimeKind, Transport
from specdec.pipeline.settings.resolve import (
    DEFAULT_CONTROLLERS,
    check_controllers,
    controller_spec,
    options_from,
    run_settings,
)
from specdec.pipeline.tune import plans

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchConfig:
    output: Path
    device: Transport = Transport.local
    profile: str | None = None  # local-cpu for local, android-generic for adb
    scenario: str | None = None
    serial: str | None = None
    adb_host: str | None = None
    adb_port: int | None = None
    prompts: Path | None = None
    chat: bool = False  # text prompts as user messages through the bundle's chat template
    limit: int | None = None
    repeats: int = 1
    # Decode settings, by DecodeConfig field name; None: not set, the plan, scenario, profile or
    # built-in default decides (pipeline/settings/resolve.py), as for `specdec generate`.
    max_new_tokens: int | None = None
    temperature: float | None = None
    mode: VerifyMode | None = None
    seed: int | None = None
    tree_budget: int | None = None
    depth: int | None = None
    width: int | None = None
    drafter: DrafterKind | None = None  # None: the scenario's or profile's, else model
    lookup_max_ngram: int | None = None
    lookup_min_ngram: int | None = None
    threads: int | None = None
    python: str | None = None
    runtime: RuntimeKind | None = None  # None: the profile's runtime.use
    cooldown: bool = True
    tune: bool = True  # no plan for this device in the bundle: measure and plan the tree first
    calib: Path | None = None  # calibration prompts for tuning (default: held-out prompts of the prompt file)
    exact_layout: bool | None = None
    # constrained decoding (DecodeConfig's fields: the phrases and the schema's text, read from files by the CLI)
    ban: tuple[str, ...] | None = None
    ban_policy: BanPolicy | None = None
    refusal: str | None = None
    json_schema: str | None = None
    regex: str | None = None
    controllers: tuple[str, ...] = DEFAULT_CONTROLLERS
    asserts: tuple[str, ...] = ()
    baseline: Path | None = None
    max_regression_pct: float = 5.0
    force: bool = False

    def __post_init__(self) -> None:
        # Checked here so a typo fails before a long run, whether it came from flags or pipeline YAML.
        if self.repeats < 1:
            raise InputError(f"{setting('repeats')} must be at least 1", "use 1 or more")
        if self.max_regression_pct < 0:
            raise InputError(f"{setting('max_regression_pct')} must be >= 0", "use e.g. 5 (per cent)")
        check_controllers(self.controllers)
        for text in self.asserts:
            gates.parse_assertion(text)

    @property
    def profile_name(self) -> str:
        return self.profile or profiles.DEFAULT_PROFILES[self.device]


@dataclass
class BenchOutcome:
    results: BenchResults
    output: Path
    gates: list[GateResult] = field(default_factory=list)
    run: DeviceRun | None = None

    @property
    def failed_gates(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed]


def calibration_prompts(config: BenchConfig, codec: TextCodec, measured: list[BenchPrompt]) -> list[list[int]]:
    """Prompts to tune on: --calib, else prompts of the file the run does not measure, else the measured ones."""
    if config.calib is not None:
        return [p.ids for p in load_bench_prompts(config.calib, codec, None, config.chat)][:CALIBRATION_PROMPTS]
    every = load_bench_prompts(config.prompts, codec, None, config.chat)
    held_out = [p.ids for p in every[len(measured):]]
    return (held_out[-CALIBRATION_PROMPTS:] if held_out else [p.ids for p in measured])[:CALIBRATION_PROMPTS]


def run_bench(config: BenchConfig, bundle: Bundle, on_event: ProgressSink | None = None,
              progress: Progress | None = None) -> BenchOutcome:
    # Everything the user gave is checked before any device work: profile, settings, gates and
    # baseline, prompts, and the output directory (writable, not clobbered; pipeline/bundle/staging.py).
    profile = profiles.load_device(config.profile_name)
    if profile.transport is not config.device:
        raise InputError(f"profile '{profile.name}' is for the {profile.transport.value} transport, not "
                         f"{config.device.value}",
                         f"pass {setting('device')} {profile.transport.value} or another {setting('profile')}")
    scenario = profiles.load_scenario(config.scenario) if config.scenario else None
    options = options_from(config)
    settings = run_settings(options, bundle.manifest, profile=profile, scenario=scenario)
    if settings.config.constrained:  # a pattern or schema no reply can meet fails here, not on the device
        build(settings.config, ProcessorCache(bundle.tokenizer_dir / "tokenizer.json",
                                              bundle.manifest.graphs["target"].vocab_size))
    baseline = gates.load_baseline(config.baseline) if config.baseline is not None else None
    codec = TextCodec(bundle.tokenizer_dir)
    prompts, truncated = fit_prompts(load_bench_prompts(config.prompts, codec, config.limit, config.chat), bundle,
                                     settings.config.max_new_tokens)
    with StagedDirectory(config.output, force=config.force,
                         sources=(bundle.path, config.prompts, config.calib, config.baseline)) as staged:
        # What the device is decides which plan applies: the plan of a bundle is per device.
        prepared = prepare_device(config.device, profile, serial=config.serial, adb_host=config.adb_host,
                                  adb_port=config.adb_port, python=config.python, runtime=config.runtime,
                                  threads=config.threads, progress=progress)
        device, python, launch, info, threads, key = (prepared.device, prepared.python, prepared.launch,
                                                      prepared.info, prepared.threads, prepared.key)
        settings = run_settings(options, bundle.manifest, profile=profile, scenario=scenario, device=key)
        plan = settings.plan
        tune = None
        if plan is None and config.tune and settings.config.speculative:
            tune = plans.tune_request(bundle, options, key, calibration_prompts(config, codec, prompts))
        sensors = sensor_args(device, profile, config.controllers)
        controls = controller_spec(config.controllers, profile, scenario, settings)
        controls["power"].update(sensors.power)
        run_spec = RunSpec(decode=settings.config, prompts=[p.ids for p in prompts], repeats=config.repeats,
                           threads=threads, controllers=controls, tune=tune, weight_format=settings.weight_format)
        with tempfile.TemporaryDirectory() as scratch:
            payload = build_payload(bundle, run_spec, Path(scratch) / "payload")
            run = run_on_device(device, profile, payload, new_run_id(), python=python, cooldown=config.cooldown,
                                on_event=on_event, sensors=sensors, launch=launch, info=info)
        run.warnings += settings.notes + sensors.notes + truncated
        tuned = plans.tuned_plan(run.events)
        settings = plans.with_tuned(settings, tuned, tune)
        results = assemble(config.scenario, config.repeats, list(config.controllers), profile, bundle, settings,
                           prompts, run)
        used = plan or tuned
        if used is not None:
            source = "bundle" if plan is not None else "tuned on the device"
            plan_report = plans.report(used, source, run.events, results.figures.speedup, tuned)
            figures = dataclasses.replace(results.figures, predicted_speedup=plan_report.predicted_speedup)
            results = dataclasses.replace(results, plan=plan_report, figures=figures)
        if baseline is not None:
            results = dataclasses.replace(results,
                                          warnings=results.warnings + gates.baseline_differences(baseline, results))
        write_outputs(staged.dir, results, run)
        outcome = BenchOutcome(results, config.output, run=run)
        outcome.gates = gates.check_assertions(list(config.asserts), results)
        if baseline is not None:
            outcome.gates += gates.check_baseline(baseline, config.max_regression_pct, results)
        outcome.results = results = dataclasses.replace(results, gates=list(outcome.gates))
        write_outputs(staged.dir, results, run, figures_only=True)
        staged.commit()
    return outcome


def bundle_context(bundle: Bundle) -> int:
    """The positions a reply may reach: the compiled context, or past it under a window KV policy."""
    table = bundle.manifest.buckets
    if table is not None:
        return table.kv_policy.positions(table.max_context)
    return min(spec.max_position_embeddings for spec in bundle.manifest.graphs.values())


def fit_prompts(prompts: list[BenchPrompt], bundle: Bundle, max_new_tokens: int) -> tuple[list[BenchPrompt], list[str]]:
    """Keep the end of prompts that would leave no room for the reply in the bundle's context."""
    room = bundle_context(bundle) - max_new_tokens - 1
    if room < 1:
        raise InputError(f"{setting('max_new_tokens')} {max_new_tokens} leaves no room for a prompt in the bundle's "
                         f"context of {bundle_context(bundle)} tokens", f"lower {setting('max_new_tokens')}")
    long = [p.id for p in prompts if len(p.ids) > room]
    notes = [f"{len(long)} prompt(s) longer than {room} tokens were cut to their last {room} "
             f"({', '.join(long[:4])})"] if long else []
    return [BenchPrompt(p.id, p.ids[-room:], p.scenario) for p in prompts], notes

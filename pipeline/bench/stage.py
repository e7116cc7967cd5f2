"""`specdec bench`: plain vs speculative decoding on a device, in one run, with sensors.

Writes `results.json` (versioned), `summary.md`, PNG plots and `trace.json` into the output
directory atomically; CI gates are evaluated on the written results.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from specdec.pipeline.bench import gates
from specdec.pipeline.bench.outputs import assemble, write_outputs
from specdec.pipeline.bundle.store import Bundle, StagedDirectory
from specdec.pipeline.engine.processors import ProcessorCache, build
from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.inputs.prompts import fit_prompts, load_bench_prompts
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.ondevice.controls import sensor_args
from specdec.pipeline.ondevice.orchestrate import DeviceRun, ProgressSink
from specdec.pipeline.ondevice.session import DeviceSession, DeviceTarget, SessionGroup, calibration_prompts
from specdec.pipeline.progress import Progress
from specdec.pipeline.records.codec import FLATTEN
from specdec.pipeline.records.results import BenchResults, GateResult, RunSpec
from specdec.pipeline.settings import profiles
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import RuntimeKind, Transport
from specdec.pipeline.settings.resolve import (
    DEFAULT_CONTROLLERS,
    check_controllers,
    controller_spec,
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
    # the decode settings the run was given (flat in YAML and on the command line); None: not set, the
    # plan, scenario, profile or built-in default decides (pipeline/settings/resolve.py)
    decode: DecodeOptions = field(default_factory=DecodeOptions, metadata=FLATTEN)
    threads: int | None = None
    python: str | None = None
    runtime: RuntimeKind | None = None  # None: the profile's runtime.use
    cooldown: bool = True
    tune: bool = True  # no plan for this device in the bundle: measure and plan the tree first
    calib: Path | None = None  # calibration prompts for tuning (default: held-out prompts of the prompt file)
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
    def target(self) -> DeviceTarget:
        return DeviceTarget(self.device, self.profile, serial=self.serial, adb_host=self.adb_host,
                            adb_port=self.adb_port, python=self.python, runtime=self.runtime, threads=self.threads)

    @property
    def profile_name(self) -> str:
        return self.target.profile_name


@dataclass
class BenchOutcome:
    results: BenchResults
    output: Path
    gates: list[GateResult] = field(default_factory=list)
    run: DeviceRun | None = None

    @property
    def failed_gates(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed]


def run_bench(config: BenchConfig, bundle: Bundle, on_event: ProgressSink | None = None,
              progress: Progress | None = None, *, group: SessionGroup | None = None,
              baseline: gates.Baseline | None = None) -> BenchOutcome:
    """Bench `bundle` on one device. `group`: the sessions this one runs beside (a fleet); `baseline`: one
    already read (a fleet's, per device), instead of reading `config.baseline`."""
    # Everything the user gave is checked before any device work: profile, settings, gates and
    # baseline, prompts, and the output directory (writable, not clobbered; pipeline/bundle/staging.py).
    target = config.target
    profile = target.load_profile()
    scenario = profiles.load_scenario(config.scenario) if config.scenario else None
    options = config.decode
    settings = run_settings(options, bundle.manifest, profile=profile, scenario=scenario)
    if settings.config.constrained:  # a pattern or schema no reply can meet fails here, not on the device
        build(settings.config, ProcessorCache(bundle.tokenizer_dir / "tokenizer.json",
                                              bundle.manifest.graphs["target"].vocab_size))
    if baseline is None and config.baseline is not None:
        baseline = gates.load_baseline(config.baseline)
    codec = TextCodec(bundle.tokenizer_dir)
    prompts, truncated = fit_prompts(load_bench_prompts(config.prompts, codec, config.limit, config.chat),
                                     bundle.context, settings.config.max_new_tokens)
    with StagedDirectory(config.output, force=config.force,
                         sources=(bundle.path, config.prompts, config.calib, config.baseline)) as staged:
        # What the device is decides which plan applies: the plan of a bundle is per device.
        session = DeviceSession.open(target, profile, progress, group)
        device = session.device
        settings = run_settings(options, bundle.manifest, profile=profile, scenario=scenario, device=session.key)
        plan = settings.plan
        tune = None
        if plan is None and config.tune and settings.config.speculative:
            calibration = calibration_prompts(codec, calib=config.calib, prompts=config.prompts, measured=prompts,
                                              chat=config.chat)
            tune = plans.tune_request(bundle, options, session.key, calibration)
        sensors = sensor_args(device, profile, config.controllers)
        controls = controller_spec(config.controllers, profile, scenario, settings)
        controls["power"].update(sensors.power)
        run_spec = RunSpec(decode=settings.config, prompts=[p.ids for p in prompts], repeats=config.repeats,
                           threads=session.threads, controllers=controls, tune=tune,
                           weight_format=settings.weight_format)
        run = session.run(bundle, run_spec, cooldown=config.cooldown, on_event=on_event, sensors=sensors)
        run.warnings += settings.notes + sensors.notes + truncated
        tuned = plans.tuned_plan(run.events)
        settings = plans.with_tuned(settings, tuned, tune)
        results = assemble(config.scenario, config.repeats, list(config.controllers), profile, bundle, settings,
                           prompts, run)
        if results.memory is not None:
            results.memory.payload_bytes = run.payload_bytes
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

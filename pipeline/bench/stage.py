"""`specdec bench`: plain vs speculative decoding on a device, in one run, with sensors.

Writes `results.json` (versioned), `summary.md`, PNG plots and `trace.json` into the output
directory atomically; CI gates are evaluated on the written results.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec import __version__
from specdec.pipeline import profiles
from specdec.pipeline.bench import analysis, gates, plots, report, trace
from specdec.pipeline.bench.controls import DEFAULT as DEFAULT_CONTROLLERS
from specdec.pipeline.bench.controls import controller_spec, sensor_args
from specdec.pipeline.bench.gates import GateResult
from specdec.pipeline.bench.launch import select_launch
from specdec.pipeline.bench.orchestrate import DeviceRun, ProgressSink, run_on_device
from specdec.pipeline.bench.payload import build_payload
from specdec.pipeline.bench.prompts import BenchPrompt, load_bench_prompts
from specdec.pipeline.bundle import Bundle, StagedDirectory
from specdec.pipeline.devices.registry import open_device
from specdec.pipeline.devices.sensors import thermal_events
from specdec.pipeline.devices.session import new_run_id
from specdec.pipeline.errors import InputError
from specdec.pipeline.profiles import RuntimeKind, Transport
from specdec.pipeline.progress import Progress
from specdec.pipeline.runtime.config import DecodeConfig, PruneParams, VerifyMode
from specdec.pipeline.text import TextCodec

log = logging.getLogger(__name__)

RESULTS_SCHEMA = "specdec.bench/1"


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
    limit: int | None = None
    max_new_tokens: int = 64
    repeats: int = 1
    temperature: float = 0.0
    mode: VerifyMode | None = None
    seed: int = 0
    tree_budget: int | None = None
    depth: int | None = None
    width: int | None = None
    threads: int | None = None
    python: str | None = None
    runtime: RuntimeKind | None = None  # None: the profile's runtime.use
    cooldown: bool = True
    controllers: tuple[str, ...] = DEFAULT_CONTROLLERS
    asserts: tuple[str, ...] = ()
    baseline: Path | None = None
    max_regression_pct: float = 5.0
    force: bool = False

    @property
    def profile_name(self) -> str:
        return self.profile or ("local-cpu" if self.device is Transport.local else "android-generic")


@dataclass
class BenchOutcome:
    results: dict[str, Any]
    output: Path
    gates: list[GateResult] = field(default_factory=list)
    run: DeviceRun | None = None

    @property
    def failed_gates(self) -> list[GateResult]:
        return [g for g in self.gates if not g.passed]


def decode_spec(config: BenchConfig, profile: profiles.DeviceProfile, bundle: Bundle) -> dict[str, Any]:
    """The decoding settings sent to the device, validated here so errors surface before any push."""
    scenario = profiles.load_scenario(config.scenario) if config.scenario else None
    tree = profile.tree
    budget = config.tree_budget or tree.budget
    width = config.width or (scenario.width if scenario and scenario.width else tree.width)
    if bundle.manifest.buckets:  # a compiled bundle verifies at most its largest bucket per round
        largest = max(v["q"] for v in bundle.manifest.buckets["graphs"]["target"])
        if budget > largest:
            log.warning("tree budget %d exceeds the largest compiled bucket; using %d", budget, largest)
            budget = largest
    prune = PruneParams(max_k=tree.max_k) if scenario is None else PruneParams(
        entropy_low=scenario.entropy_low, entropy_high=scenario.entropy_high, beta_base=scenario.beta_base,
        rho_min=scenario.rho_min, rho_max=scenario.rho_max, max_k=tree.max_k)
    depth = config.depth or (scenario.depth if scenario and scenario.depth else tree.depth)
    spec = {"max_new_tokens": config.max_new_tokens, "temperature": config.temperature, "seed": config.seed,
            "mode": config.mode.value if config.mode else None, "tree_budget": budget, "depth": depth,
            "width": width, "prune": prune.__dict__}
    DecodeConfig(max_new_tokens=config.max_new_tokens, temperature=config.temperature, seed=config.seed,
                 mode=config.mode, tree_budget=budget, depth=depth, width=width,
                 prune=prune)  # validates the combination, raises InputError
    return spec


def run_bench(config: BenchConfig, bundle: Bundle, on_event: ProgressSink | None = None,
              progress: Progress | None = None) -> BenchOutcome:
    if config.repeats < 1:
        raise InputError("--repeats must be at least 1", "pass --repeats 1 or more")
    for text in config.asserts:
        gates.parse_assertion(text)  # fail on a typo before a long run
    profile = profiles.load_device(config.profile_name)
    if profile.transport is not config.device:
        raise InputError(f"profile '{profile.name}' is for the {profile.transport.value} transport, not "
                         f"{config.device.value}", f"pass --device {profile.transport.value} or another --profile")
    spec = decode_spec(config, profile, bundle)
    codec = TextCodec(bundle.tokenizer_dir)
    prompts, truncated = fit_prompts(load_bench_prompts(config.prompts, codec, config.limit), bundle,
                                     config.max_new_tokens)
    scenario = profiles.load_scenario(config.scenario) if config.scenario else None
    device = open_device(config.device, profile=profile, serial=config.serial, adb_host=config.adb_host,
                         adb_port=config.adb_port)
    sensors = sensor_args(device, profile, config.controllers)
    controls = controller_spec(config.controllers, profile, scenario, spec["prune"]["beta_base"])
    controls["power"].update(sensors.power)
    run_spec = {"decode": spec, "prompts": [p.ids for p in prompts], "repeats": config.repeats,
                "threads": profile.runtime.threads if config.threads is None else config.threads,
                "controllers": controls}
    python = config.python or (sys.executable if config.device is Transport.local else profile.runtime.python)
    launch = select_launch(config.runtime or profile.runtime.use, python=python, cpu_mask=profile.runtime.cpu_mask,
                           progress=progress)
    with StagedDirectory(config.output, force=config.force) as staged, tempfile.TemporaryDirectory() as scratch:
        payload = build_payload(bundle, run_spec, Path(scratch) / "payload")
        run = run_on_device(device, profile, payload, new_run_id(), python=python, cooldown=config.cooldown,
                            on_event=on_event, sensors=sensors, launch=launch)
        run.warnings += sensors.notes + truncated
        results = assemble(config, profile, bundle, spec, prompts, run)
        write_outputs(staged.dir, results, run)
        outcome = BenchOutcome(results, config.output, run=run)
        outcome.gates = gates.check_assertions(list(config.asserts), results)
        if config.baseline is not None:
            outcome.gates += gates.check_baseline(config.baseline, config.max_regression_pct, results)
        results["gates"] = [g.__dict__ for g in outcome.gates]
        write_outputs(staged.dir, results, run, figures_only=True)
        staged.commit()
    return outcome


def bundle_context(bundle: Bundle) -> int:
    if bundle.manifest.buckets:
        return int(bundle.manifest.buckets["max_context"])
    return min(spec.max_position_embeddings for spec in bundle.manifest.graphs.values())


def fit_prompts(prompts: list[BenchPrompt], bundle: Bundle, max_new_tokens: int) -> tuple[list[BenchPrompt], list[str]]:
    """Keep the end of prompts that would leave no room for the reply in the bundle's context."""
    room = bundle_context(bundle) - max_new_tokens - 1
    if room < 1:
        raise InputError(f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the bundle's "
                         f"context of {bundle_context(bundle)} tokens", "lower --max-new-tokens")
    long = [p.id for p in prompts if len(p.ids) > room]
    notes = [f"{len(long)} prompt(s) longer than {room} tokens were cut to their last {room} "
             f"({', '.join(long[:4])})"] if long else []
    return [BenchPrompt(p.id, p.ids[-room:], p.scenario) for p in prompts], notes


def assemble(config: BenchConfig, profile: profiles.DeviceProfile, bundle: Bundle, spec: dict[str, Any],
             prompts: list[Any], run: DeviceRun) -> dict[str, Any]:
    mode = DecodeConfig(temperature=config.temperature, mode=config.mode).effective_mode
    result = analysis.analyze(run.events, run.sensors, greedy_equivalent=mode is not VerifyMode.rrs)
    info = run.info
    thermal = thermal_events(run.sensors, profile.thermal) if run.sensors else []
    gain = result.figures.get("latency_gain_ms")
    results: dict[str, Any] = {
        "schema": RESULTS_SCHEMA,
        "tool_version": __version__,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "bundle": {"path": str(bundle.path), "stages": bundle.stages(), "fingerprint": bundle.manifest.fingerprint,
                   "compiled": bool(bundle.manifest.buckets), "quantized": bool(bundle.manifest.quantization),
                   "custom_ops": bool(bundle.manifest.custom_ops)},
        "device": {"serial": info.serial, "transport": info.transport, "model": info.model,
                   "android_version": info.android_version, "abi": info.abi, "battery_level": info.battery_level,
                   "charging": info.charging, "charging_source": info.charging_source,
                   "python": info.python.__dict__ if info.python else None},
        "runtime": run.runtime,
        "profile": profile.name,
        "scenario": config.scenario,
        "config": {"decode": spec, "prompts": len(prompts), "repeats": config.repeats,
                   "prompt_ids": [p.id for p in prompts], "controllers": list(config.controllers)},
        "partial": run.partial,
        "partial_reason": run.partial_reason,
        "figures": result.figures,
        "details": result.details,
        "lossless": result.lossless,
        "unavailable": result.unavailable,
        "enable_rule": enable_rule(run.events, prompts, gain, profile.enable_threshold_ms),
        "thermal": {"events": thermal, "cooldown": run.cooldown.__dict__ if run.cooldown else None,
                    "before": run.thermal_before.__dict__ if run.thermal_before else None,
                    "after": run.thermal_after.__dict__ if run.thermal_after else None},
        "sensors": _sensor_summary(run),
        "controllers": _controller_summary(run.events),
        "warnings": run.warnings + (run.sensors.warnings if run.sensors else []),
    }
    plain: dict[str, Any] = json.loads(json.dumps(results, default=_jsonable))
    return plain


def enable_rule(events: list[dict[str, Any]], prompts: list[Any], gain: float | None,
                threshold_ms: float) -> dict[str, Any]:
    """Speculation on where the measured per-reply latency gain beats the profile's threshold."""

    def verdict(value: float | None) -> str:
        return "unknown" if value is None else "on" if value >= threshold_ms else "off"

    per_scenario: dict[str, Any] = {}
    scenarios = {index: p.scenario for index, p in enumerate(prompts) if p.scenario}
    for scenario in sorted(set(scenarios.values())):
        ms = {mode: [e["total_ns"] / 1e6 for e in events if e.get("type") == "reply" and e["mode"] == mode
                     and scenarios.get(e["prompt"]) == scenario] for mode in ("plain", "speculative")}
        value = (sum(ms["plain"]) / len(ms["plain"]) - sum(ms["speculative"]) / len(ms["speculative"])
                 if ms["plain"] and ms["speculative"] else None)
        per_scenario[scenario] = {"gain_ms": value, "recommendation": verdict(value)}
    return {"threshold_ms": threshold_ms, "gain_ms": gain, "recommendation": verdict(gain),
            "per_scenario": per_scenario}


def _jsonable(value: Any) -> Any:
    if hasattr(value, "__dict__"):
        return value.__dict__
    return str(value)


def _sensor_summary(run: DeviceRun) -> dict[str, Any] | None:
    if run.sensors is None:
        return None
    s = run.sensors
    return {"samples": len(s.samples), "interval_ms": s.interval_ms, "available": s.available,
            "current_unit": s.current_unit, "current_unit_source": s.current_unit_source,
            "voltage_unit": s.voltage_unit, "voltage_unit_source": s.voltage_unit_source,
            "discharge_sign": s.discharge_sign, "discharge_sign_source": s.discharge_sign_source,
            "timestamp_resolution": s.timestamp_resolution, "charging": s.charging, "usb_powered": s.usb_powered}


def _controller_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for event in events:
        for decision in event.get("events", []) if event.get("type") == "round" else []:
            key = f"{decision.get('controller')}:{decision.get('action')}"
            counts[key] = counts.get(key, 0) + 1
    return {"counts": counts}


def write_outputs(directory: Path, results: dict[str, Any], run: DeviceRun, figures_only: bool = False) -> None:
    (directory / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (directory / "summary.md").write_text(report.summary_markdown(results))
    if figures_only:
        return
    (directory / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in run.events))
    trace.write_trace(directory / "trace.json", trace.build_trace(run.events, run.sensors,
                                                                   results["thermal"]["events"]))
    if results["details"]["stage_latency_ms"].get("Target_Verify"):
        plots.latency_breakdown(results["details"], directory / "latency_breakdown.png")
        plots.accepted_histogram(results["details"], directory / "accepted_length.png")
    if run.sensors is not None:
        plots.power_and_temperature(run.sensors, directory / "power_temperature.png")

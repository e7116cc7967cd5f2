"""A bench run's outputs: the `BenchResults` record and the files written from it.

`results.json` is the record through `records.codec`; summary.md, the plots and trace.json are
rendered from the same record and the run's raw events and sensor samples.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from specdec import __version__
from specdec.pipeline.bench import analysis, plots, report, trace
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.devices.sensors import thermal_events
from specdec.pipeline.engine.processors import processor_names
from specdec.pipeline.inputs.prompts import BenchPrompt
from specdec.pipeline.ondevice.orchestrate import DeviceRun
from specdec.pipeline.records.codec import to_dict
from specdec.pipeline.records.decode import VerifyMode
from specdec.pipeline.records.kv_policy import KVPolicy
from specdec.pipeline.records.results import (
    BenchResults,
    BundleRef,
    ControllerSummary,
    EnableRule,
    Recommendation,
    RunSettings,
    ScenarioVerdict,
    SensorSummary,
    Thermal,
)
from specdec.pipeline.settings import profiles
from specdec.pipeline.settings.resolve import ResolvedSettings


def assemble(scenario: str | None, repeats: int, controllers: list[str], profile: profiles.DeviceProfile,
             bundle: Bundle, settings: ResolvedSettings, prompts: list[BenchPrompt], run: DeviceRun) -> BenchResults:
    mode = settings.config.effective_mode
    result = analysis.analyze(run.events, run.sensors, greedy_equivalent=mode is not VerifyMode.rrs)
    memory = result.memory
    memory.weights_bytes = bundle.runner_bytes(settings.weight_format)
    memory.kv_policy = kv_policy_name(bundle)
    result.figures.weights_mb = memory.weights_bytes / 2**20
    return BenchResults(
        tool_version=__version__,
        created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        bundle=bundle_ref(bundle),
        device=run.info,
        profile=profile.name,
        scenario=scenario,
        config=RunSettings(decode=settings.config, sources=settings.sources, prompts=len(prompts), repeats=repeats,
                           prompt_ids=[p.id for p in prompts], controllers=controllers,
                           processors=processor_names(settings.config)),
        partial=run.partial,
        partial_reason=run.partial_reason,
        figures=result.figures,
        details=result.details,
        lossless=result.lossless,
        unavailable=result.unavailable,
        enable_rule=enable_rule(run.events, prompts, result.figures.latency_gain_ms, profile.enable_threshold_ms),
        thermal=Thermal(events=thermal_events(run.sensors, profile.thermal) if run.sensors else [],
                        cooldown=run.cooldown, before=run.thermal_before, after=run.thermal_after),
        sensors=_sensor_summary(run),
        controllers=_controller_summary(run.events),
        warnings=run.warnings + (run.sensors.warnings if run.sensors else []),
        runtime=dict(run.runtime),
        memory=memory,
    )


def bundle_ref(bundle: Bundle) -> BundleRef:
    """What results.json (and fleet.json) say about the bundle measured."""
    manifest = bundle.manifest
    return BundleRef(path=str(bundle.path), stages=bundle.stages(), fingerprint=manifest.fingerprint,
                     compiled=manifest.buckets is not None, quantized=manifest.quantization is not None,
                     custom_ops=manifest.custom_ops is not None)


def kv_policy_name(bundle: Bundle) -> str:
    """The bundle's KV cache policy in words, e.g. "full float32"."""
    table = bundle.manifest.buckets
    return (table.kv_policy if table is not None else KVPolicy()).describe(bundle.manifest.graphs["target"].dtype)


def enable_rule(events: list[dict[str, Any]], prompts: list[BenchPrompt], gain: float | None,
                threshold_ms: float) -> EnableRule:
    """Speculation on where the measured per-reply latency gain beats the profile's threshold."""

    def verdict(value: float | None) -> Recommendation:
        return Recommendation.unknown if value is None else \
            Recommendation.on if value >= threshold_ms else Recommendation.off

    per_scenario: dict[str, ScenarioVerdict] = {}
    scenarios = {index: p.scenario for index, p in enumerate(prompts) if p.scenario}
    for scenario in sorted(set(scenarios.values())):
        ms = {mode: [e["total_ns"] / 1e6 for e in events if e.get("type") == "reply" and e["mode"] == mode
                     and scenarios.get(e["prompt"]) == scenario] for mode in ("plain", "speculative")}
        value = (sum(ms["plain"]) / len(ms["plain"]) - sum(ms["speculative"]) / len(ms["speculative"])
                 if ms["plain"] and ms["speculative"] else None)
        per_scenario[scenario] = ScenarioVerdict(gain_ms=value, recommendation=verdict(value))
    return EnableRule(threshold_ms=threshold_ms, gain_ms=gain, recommendation=verdict(gain),
                      per_scenario=per_scenario)


def _sensor_summary(run: DeviceRun) -> SensorSummary | None:
    if run.sensors is None:
        return None
    s = run.sensors
    return SensorSummary(
        samples=len(s.samples), interval_ms=s.interval_ms, available=s.available, current_unit=s.current_unit,
        current_unit_source=s.current_unit_source, voltage_unit=s.voltage_unit,
        voltage_unit_source=s.voltage_unit_source, discharge_sign=s.discharge_sign,
        discharge_sign_source=s.discharge_sign_source, timestamp_resolution=s.timestamp_resolution,
        charging=s.charging, usb_powered=s.usb_powered)


def _controller_summary(events: list[dict[str, Any]]) -> ControllerSummary:
    counts: dict[str, int] = {}
    for event in events:
        for decision in event.get("events", []) if event.get("type") == "round" else []:
            key = f"{decision.get('controller')}:{decision.get('action')}"
            counts[key] = counts.get(key, 0) + 1
    return ControllerSummary(counts=counts)


def write_outputs(directory: Path, results: BenchResults, run: DeviceRun, figures_only: bool = False) -> None:
    (directory / "results.json").write_text(results.to_json())
    (directory / "summary.md").write_text(report.summary_markdown(results))
    if figures_only:
        return
    (directory / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in run.events))
    instants = [to_dict(event) for event in results.thermal.events]
    trace.write_trace(directory / "trace.json", trace.build_trace(run.events, run.sensors, instants))
    if results.details.stage_latency_ms.get("Target_Verify"):
        plots.latency_breakdown(results.details, directory / "latency_breakdown.png")
        plots.accepted_histogram(results.details, directory / "accepted_length.png")
    if run.sensors is not None:
        plots.power_and_temperature(run.sensors, directory / "power_temperature.png")
    if results.memory is not None and results.memory.replies:
        plots.memory_by_length(results.memory, directory / "memory.png")

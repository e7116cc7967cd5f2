"""A fleet run's report: fleet.json (the record), fleet.md (one row per device, for CI job summaries), fleet.png."""

from __future__ import annotations

from pathlib import Path

from specdec.pipeline.bench import plots
from specdec.pipeline.records.fleet import DeviceStatus, FleetResults, FleetRow

FLEET_JSON = "fleet.json"
FLEET_MD = "fleet.md"
FLEET_PNG = "fleet.png"

_COLUMNS = ("device", "model", "status", "plain tok/s", "speculative tok/s", "speedup measured / predicted",
            "acceptance", "energy/token mJ", "peak °C", "lossless")


def _num(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return "—" if value is None else f"{value:.{digits}g}{suffix}"


def _cells(row: FleetRow) -> list[str]:
    status = row.status.value + (" (partial)" if row.results is not None and row.results.partial else "")
    if row.results is None:
        return [f"`{row.label}`", "—", status, *["—"] * (len(_COLUMNS) - 3)]
    r = row.results
    f = r.figures
    lossless = ("yes" if r.lossless.equal else "not compared" if not r.lossless.checked
                else f"{len(r.lossless.mismatches)} of {r.lossless.pairs} differ")
    return [f"`{row.label}`", f"{r.device.model} ({r.device.serial})", status, _num(f.plain_tokens_per_s),
            _num(f.tokens_per_s), f"{_num(f.speedup, suffix='×')} / {_num(f.predicted_speedup, suffix='×')}",
            _num(f.acceptance_rate), _num(f.energy_per_token_mj), _num(f.peak_temp_c), lossless]


def fleet_markdown(results: FleetResults) -> str:
    s = results.summary
    counts = ", ".join(f"{n} {status.value}" for status, n in s.statuses.items())
    verdict = "exit 0" if not s.exit_code else f"exit {s.exit_code} ({', '.join(s.failures)})"
    lines = [
        f"## specdec bench — fleet of {s.devices} device{'s' * (s.devices != 1)}",
        "",
        f"{counts}; {verdict}. Wall time {s.wall_s:.1f} s with {s.jobs} at a time; the devices' own sessions "
        f"took {s.device_wall_s_max:.1f} s at most and {s.device_wall_s_sum:.1f} s together.",
        "",
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
        *("| " + " | ".join(_cells(row)) + " |" for row in results.devices),
        "",
    ]
    troubled = [row for row in results.devices if row.status is not DeviceStatus.complete]
    if troubled:
        lines += ["**Not complete**", ""]
        lines += [f"- `{row.label}` ({row.serial}{f' on {row.server}' if row.server else ''}): {row.status.value}: "
                  f"{row.reason or 'no reason recorded'}" for row in troubled]
        lines.append("")
    gate_lines = [f"- {'pass' if g.passed else '**FAIL**'} {g.gate}: {g.message}" for g in results.gates]
    gate_lines += [f"- **FAIL** `{row.label}` {g.gate}: {g.message}" for row in results.devices
                   if row.status is DeviceStatus.complete for g in row.failed_gates]
    if gate_lines:
        lines += ["**Gates**", "", *gate_lines, ""]
    if results.warnings:
        lines += ["**Warnings**", "", *(f"- {w}" for w in results.warnings), ""]
    measured = [row.results_dir for row in results.devices if row.results_dir]
    if measured:
        lines += [f"Each device's results (results.json, summary.md, plots, trace.json): "
                  f"{', '.join(f'`{d}/`' for d in measured)}.", "", f"![devices compared]({FLEET_PNG})", ""]
    return "\n".join(lines)


def write_fleet(directory: Path, results: FleetResults) -> None:
    (directory / FLEET_JSON).write_text(results.to_json())
    (directory / FLEET_MD).write_text(fleet_markdown(results))
    if any(row.results is not None for row in results.devices):
        plots.fleet_comparison(results.devices, directory / FLEET_PNG)

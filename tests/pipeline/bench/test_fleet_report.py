"""fleet.json round-trips through the records codec; fleet.md has a row per device; failure classes and gates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.pipeline.bench.fleet import FleetBaseline, assertion_gates, failure_classes, load_fleet_baseline
from specdec.pipeline.bench.fleet_report import fleet_markdown, write_fleet
from specdec.pipeline.errors import InputError
from specdec.pipeline.records.codec import RecordError
from specdec.pipeline.records.fleet import DeviceStatus, FleetResults, FleetRow, FleetSummary, read_fleet
from specdec.pipeline.records.results import BundleRef, Figures, GateResult


def _row(label: str, status: DeviceStatus, reason: str | None = None) -> FleetRow:
    return FleetRow(label=label, serial=f"{label}-serial", server="farm:5037" if label == "far" else None,
                    profile="android-generic", status=status, reason=reason, wall_s=1.5, results_dir=None,
                    results=None)


def _fleet(rows: list[FleetRow], gates: list[GateResult]) -> FleetResults:
    summary = FleetSummary(devices=len(rows), statuses={DeviceStatus.unusable: 1, DeviceStatus.lost: 1}, jobs=2,
                           wall_s=2.0, device_wall_s_max=1.5, device_wall_s_sum=3.0, median=Figures(),
                           failures=["lost", "unusable"], exit_code=19)
    return FleetResults(tool_version="0", created="2026-01-01T00:00:00+00:00",
                        bundle=BundleRef(path="b", stages=["export"], fingerprint="f" * 64, compiled=True,
                                         quantized=False, custom_ops=True),
                        devices=rows, gates=gates, summary=summary, warnings=["a warning"])


def test_round_trip_and_markdown(tmp_path: Path) -> None:
    rows = [_row("far", DeviceStatus.unusable, "device 'x' is not attached"),
            _row("gone", DeviceStatus.lost, "device lost mid-run: adb said offline")]
    fleet = _fleet(rows, assertion_gates(["lossless"], rows))
    write_fleet(tmp_path, fleet)
    assert read_fleet((tmp_path / "fleet.json").read_text()) == fleet
    assert not (tmp_path / "fleet.png").exists()  # nothing measured, nothing to plot
    markdown = fleet_markdown(fleet)
    assert "| `far` | — | unusable |" in markdown and "| `gone` | — | lost |" in markdown
    assert "- `far` (far-serial on farm:5037): unusable: device 'x' is not attached" in markdown
    assert "exit 19 (lost, unusable)" in markdown and "**FAIL** fleet:lossless" in markdown
    data = json.loads((tmp_path / "fleet.json").read_text())
    data["devices"][0]["colour"] = "red"
    with pytest.raises(RecordError, match="devices.0.colour"):
        read_fleet(json.dumps(data))
    with pytest.raises(RecordError, match="schema"):
        read_fleet(json.dumps({**data, "schema": "specdec.fleet/0"}))


def test_failure_classes() -> None:
    gate = GateResult("fleet:lossless", False, "no")
    rows = [_row("a", DeviceStatus.complete), _row("b", DeviceStatus.partial), _row("c", DeviceStatus.error)]
    assert int(failure_classes(rows, [])) == 1 + 8
    assert int(failure_classes(rows[:1], [gate])) == 4
    assert int(failure_classes([_row("d", DeviceStatus.unusable)], [])) == 2
    # with no complete device, an assertion holds nowhere
    assert not assertion_gates(["speedup>=1.2"], rows[1:])[0].passed


def test_baseline_is_a_fleet_or_a_results_file(tmp_path: Path) -> None:
    fleet = _fleet([_row("gone", DeviceStatus.lost)], [])
    (tmp_path / "fleet.json").write_text(fleet.to_json())
    baseline = load_fleet_baseline(tmp_path / "fleet.json")
    assert isinstance(baseline, FleetBaseline) and baseline.per_device == {} and baseline.median == Figures()
    assert baseline.of("gone") is None  # it measured nothing complete there: nothing to compare with
    (tmp_path / "bad.json").write_text(json.dumps({"schema": "specdec.fleet/1", "devices": []}))
    with pytest.raises(InputError, match="is not a fleet.json this specdec reads"):
        load_fleet_baseline(tmp_path / "bad.json")
    with pytest.raises(InputError, match="does not exist"):
        load_fleet_baseline(tmp_path / "missing.json")

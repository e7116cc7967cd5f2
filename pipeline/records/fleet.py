"""`fleet.json`: one bench over many devices (`specdec bench --fleet`), read and written through `records.codec`.

Each device's row holds its status, why it is not complete, its session's wall time and its full
results in today's `results.json` schema (`BenchResults`; also written, with summary.md, plots and
trace.json, to the row's results directory beside fleet.json). The summary counts the rows by
status, puts the fleet's wall time next to the devices' (a fleet runs them side by side), takes the
median of each figure over the complete devices and names the failure classes behind the exit code.

Schema history:
- `specdec.fleet/1`: the first layout.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from specdec.pipeline.records.codec import RecordError, from_dict, to_dict
from specdec.pipeline.records.results import BenchResults, BundleRef, Figures, GateResult

FLEET_SCHEMA = "specdec.fleet/1"


class DeviceStatus(str, enum.Enum):
    complete = "complete"  # every prompt measured (its gates may still have failed)
    lost = "lost"  # the device went away: partial results, or none when it went before the run started
    partial = "partial"  # the runner stopped early (the profile's timeout): partial results
    unusable = "unusable"  # the bench could not run there (unreachable, not ready, no runtime, the runner failed)
    error = "error"  # an unexpected error (a bug in specdec)


@dataclass
class FleetRow:
    label: str
    serial: str
    server: str | None  # host:port of its adb server; None: the local one
    profile: str
    status: DeviceStatus
    reason: str | None  # why it is not complete, in one line
    wall_s: float  # its session: opening the device to its outputs written
    results_dir: str | None  # relative to fleet.json; None where nothing was measured
    results: BenchResults | None

    @property
    def failed_gates(self) -> list[GateResult]:
        return [g for g in self.results.gates if not g.passed] if self.results is not None else []


@dataclass
class FleetSummary:
    devices: int
    statuses: dict[DeviceStatus, int]
    jobs: int  # devices measured at once
    wall_s: float  # the whole fleet, first device opened to the last one's outputs written
    device_wall_s_max: float
    device_wall_s_sum: float
    median: Figures  # each figure's median over the complete devices that measured it
    failures: list[str]  # errors.FleetFailure names, behind the exit code
    exit_code: int


@dataclass(kw_only=True)
class FleetResults:
    schema: str = FLEET_SCHEMA
    tool_version: str
    created: str
    bundle: BundleRef
    devices: list[FleetRow]
    gates: list[GateResult] = field(default_factory=list)  # the fleet's own (`fleet:...`)
    summary: FleetSummary
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.schema != FLEET_SCHEMA:
            raise RecordError("schema", f"this is {self.schema}, this specdec reads {FLEET_SCHEMA}")

    def to_json(self) -> str:
        return json.dumps(to_dict(self), indent=1) + "\n"


def is_fleet(data: dict[str, Any]) -> bool:
    schema = data.get("schema")
    return isinstance(schema, str) and schema.startswith("specdec.fleet/")


def read_fleet(text: str) -> FleetResults:
    """Parse fleet.json; RecordError (a ValueError) names the first field that does not fit."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError("", f"not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise RecordError("", "not a JSON object")
    if data.get("schema") != FLEET_SCHEMA:
        raise RecordError("schema", f"'{data.get('schema')}' is not {FLEET_SCHEMA}")
    return from_dict(FleetResults, data)

"""`specdec devices`: what adb sees, and whether each device (or each of a fleet) can run the benchmark."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from specdec.cli import options
from specdec.cli.console import err, out
from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.devices.adb_client import STATE_FIXES, AdbDeviceEntry
from specdec.pipeline.devices.base import DeviceInfo
from specdec.pipeline.devices.registry import list_adb_devices
from specdec.pipeline.errors import DeviceError
from specdec.pipeline.ondevice.readiness import Readiness, check_fleet, runtime_status
from specdec.pipeline.settings.fleet import FleetFile, fleet_from
from specdec.pipeline.settings.profiles import DEFAULT_PROFILES, Transport, load_device


def _probe(entry: AdbDeviceEntry, python: str, host: str | None, port: int | None) -> dict[str, Any]:
    row: dict[str, Any] = {"serial": entry.serial, "state": entry.state, "model": entry.model,
                           "info": None, "error": None, "runtime": None}
    if entry.state != "device":
        row["error"] = STATE_FIXES.get(entry.state, "check `adb devices -l` and reconnect it")
        return row
    try:
        device = AdbDevice(serial=entry.serial, adb_host=host, adb_port=port)
        info = device.info(python)
        row["runtime"] = dataclasses.asdict(runtime_status(device, info.abi))
    except DeviceError as exc:  # one broken device must not hide the others
        row["error"] = exc.one_line()
        return row
    row["info"] = info
    return row


def _runtime_cell(status: dict[str, Any] | None) -> str:
    if not status:
        return "-"
    if status["current_present"]:
        return f"[green]present[/] {status['current']}"
    if status["present"]:
        return f"[yellow]older[/] {', '.join(status['present'])} (the next bench pushes the current one)"
    return "not pushed (the bench pushes it once)"


def _python_cell(info: DeviceInfo) -> str:
    status = info.python
    if status is None:
        return "-"
    if status.usable:
        return f"[green]ok[/] python {status.version}, numpy {status.numpy}, onnxruntime {status.onnxruntime}"
    return f"[yellow]missing[/] {escape(', '.join(status.missing))}"


def _charging_cell(info: DeviceInfo) -> str:
    if info.charging is None:
        return "-"
    text = "yes" if info.charging else "no"
    return f"{text} ({info.charging_source})" if info.charging_source else text


def render(rows: list[dict[str, Any]]) -> None:
    table = Table(title="adb devices", title_justify="left")
    columns = ("serial", "state", "model", "Android", "ABI", "battery", "charging",
               "device python / numpy / onnxruntime", "portable runtime")
    for column in columns:
        table.add_column(column, no_wrap=column == "serial")
    for row in rows:
        info: DeviceInfo | None = row["info"]
        if info is None:
            detail = f"[red]{escape(row['error'])}[/]" if row["error"] else "-"
            table.add_row(escape(row["serial"]), row["state"], escape(row["model"] or "-"), "-", "-", "-", "-",
                          detail, "-")
            continue
        battery = f"{info.battery_level}%" if info.battery_level is not None else "-"
        table.add_row(escape(info.serial), row["state"], escape(info.model), info.android_version or "-",
                      info.abi or "-", battery, _charging_cell(info), _python_cell(info), _runtime_cell(row["runtime"]))
    out.print(table)


def _as_json(row: dict[str, Any]) -> dict[str, Any]:
    info: DeviceInfo | None = row["info"]
    data = {**row, "info": dataclasses.asdict(info) if info else None}
    if info is not None and info.python is not None:
        data["python_usable"] = info.python.usable
        data["python_missing"] = info.python.missing
    return data


def render_fleet(rows: list[Readiness]) -> None:
    table = Table(title="fleet devices", title_justify="left")
    for column in ("device", "serial", "adb server", "profile", "model", "ABI", "runs with", "ready"):
        table.add_column(column, no_wrap=column in ("device", "serial"))
    for row in rows:
        info = row.info
        runs_with = row.runs_with or "-"
        if row.runs_with == "portable" and row.runtime is not None:
            runs_with += " (present)" if row.runtime.current_present else " (the bench pushes it once)"
        verdict = "[green]ready[/]" if row.ready else f"[red]{escape(row.problem or '')}[/]"
        table.add_row(escape(row.label), escape(row.serial), escape(row.server or "local"), escape(row.profile),
                      escape(info.model) if info else "-", (info.abi or "-") if info else "-", runs_with, verdict)
    out.print(table)


def _check_fleet(fleet: FleetFile, as_json: bool) -> None:
    rows = check_fleet(fleet)
    if as_json:
        out.print_json(json.dumps([dataclasses.asdict(row) | {"ready": row.ready} for row in rows], default=str))
    else:
        render_fleet(rows)
    failing = [row.label for row in rows if not row.ready]
    if failing:
        raise DeviceError(f"{len(failing)} of {len(rows)} fleet devices are not ready: {', '.join(failing)}",
                          "fix them as the table says, or drop them from the fleet")


def devices(
    serial: options.Serial = None,
    adb_host: options.AdbHost = None,
    adb_port: options.AdbPort = None,
    fleet: options.Fleet = None,
    profile: options.Profile = None,
    python: options.Python = None,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List adb devices: model, Android, ABI, battery, device Python, portable runtime.

    With --serial, only those devices. With --fleet: check every device of a fleet file (reachable on its adb
    server, ABI, its Python or the portable runtime) before a long run; exit 8 when one is not ready."""
    if fleet is not None:
        _check_fleet(fleet_from(fleet, serial or [], profile=profile, host=adb_host, port=adb_port), as_json)
        return
    python = python or load_device(profile or DEFAULT_PROFILES[Transport.adb]).runtime.python
    entries = list_adb_devices(adb_host=adb_host, adb_port=adb_port)
    if serial:
        listed = ", ".join(e.serial for e in entries) or "none"
        missing = [s for s in serial if s not in {e.serial for e in entries}]
        if missing:
            raise DeviceError(f"device '{missing[0]}' is not attached (attached: {listed})",
                              f"check `adb devices -l`; for a network device run `adb connect {missing[0]}`")
        entries = [e for e in entries if e.serial in serial]
    rows = [_probe(entry, python, adb_host, adb_port) for entry in entries]
    if as_json:
        out.print_json(json.dumps([_as_json(row) for row in rows], default=str))
        return
    if not rows:
        err.print("no devices attached — plug one in with USB debugging on, or `adb connect HOST:PORT`",
                  soft_wrap=True)
        return
    render(rows)

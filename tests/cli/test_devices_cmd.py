"""`specdec devices` over the stand-in, through the real adb binary."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from standin.adb_env import AdbServer
from standin.adbd import StandinDevice
from standin.conftest import MakeStandin, adb_env, make_standin  # noqa: F401
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.cli.console import out

# wide enough for every column: without a terminal (a CI log, a pytest-xdist worker) rich lays tables out
# in 80 columns and cuts the cells this file reads
WIDE = {"COLUMNS": "250"}
ADB_KEYS = ("ANDROID_ADB_SERVER_PORT", "HOME", "TMPDIR", "ADB_LOCAL_TRANSPORT_MAX_PORT")


@pytest.fixture
def adb_environ(adb_env: AdbServer, monkeypatch: pytest.MonkeyPatch) -> AdbServer:  # noqa: F811
    for key in ("ANDROID_SERIAL", "ADB_SERVER_SOCKET"):
        monkeypatch.delenv(key, raising=False)
    for key in ADB_KEYS:
        monkeypatch.setenv(key, adb_env.env[key])
    monkeypatch.setattr(out, "width", 250)  # keep table cells on one line
    return adb_env


@pytest.mark.adb
def test_devices_table(adb_environ: AdbServer, make_standin: MakeStandin) -> None:  # noqa: F811
    bare = make_standin(model="Bare_Phone", battery_level=64)
    ready = make_standin(model="Ready_Phone", python=sys.executable, charging=True, usb_online=True)
    result = CliRunner().invoke(app, ["devices"], env=WIDE)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    bare_line = next(line for line in lines if bare.serial in line)
    ready_line = next(line for line in lines if ready.serial in line)
    assert "Bare_Phone" in bare_line and "64%" in bare_line and "missing python (python3)" in bare_line
    assert "Ready_Phone" in ready_line and "yes (usb)" in ready_line and "ok python" in ready_line
    assert "arm64-v8a" in ready_line and "14" in ready_line


@pytest.mark.adb
def test_devices_json_and_serial(adb_environ: AdbServer, make_standin: MakeStandin) -> None:  # noqa: F811
    dev = make_standin(python=sys.executable)
    make_standin()
    result = CliRunner().invoke(app, ["devices", "--serial", dev.serial, "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert row["serial"] == dev.serial and row["state"] == "device"
    assert row["python_usable"] is True and row["python_missing"] == []
    assert row["info"]["python"]["numpy"] and row["info"]["battery_level"] == 80
    missing = CliRunner().invoke(app, ["devices", "--python", "/nope/python3", "--json", "-s", dev.serial])
    assert json.loads(missing.output)[0]["python_missing"] == ["python (/nope/python3)"]


@pytest.mark.adb
def test_devices_unknown_serial_and_none(adb_environ: AdbServer) -> None:
    empty = CliRunner().invoke(app, ["devices"])
    assert empty.exit_code == 0 and "no devices attached" in empty.output
    assert json.loads(CliRunner().invoke(app, ["devices", "--json"]).output) == []
    unknown = CliRunner().invoke(app, ["devices", "--serial", "127.0.0.1:1"])
    assert unknown.exit_code == 8 and "'127.0.0.1:1' is not attached" in unknown.output


def test_devices_without_adb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(app, ["devices"], env=WIDE)
    assert result.exit_code == 8
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "adb binary was not found" in lines[0] and "apt-get install adb" in lines[0]


def _table_row(serial: str) -> str:
    return next(line for line in CliRunner().invoke(app, ["devices"], env=WIDE).output.splitlines() if serial in line)


@pytest.mark.adb
def test_devices_portable_runtime_column(adb_environ: AdbServer, make_standin: MakeStandin,  # noqa: F811
                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from specdec.pipeline.ondevice import readiness

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing built here
    dev = make_standin(model="Stock_Phone")
    row = _table_row(dev.serial)
    assert "missing python (python3)" in row and "not pushed" in row
    current = SimpleNamespace(id="0123456789abcdef", sha256="0123456789abcdef" + "0" * 48)
    older = "fedcba9876543210"
    marker = dev.fs.host_path(f"/data/local/tmp/specdec/runtime/{older}/.specdec-complete")
    marker.parent.mkdir(parents=True)
    marker.write_text(older + "1" * 48 + "\n")
    (marker.parent.parent / ".0123456789abcdef.partial-1234").mkdir()  # a push in progress is not "present"
    monkeypatch.setattr(readiness, "find_current", lambda abi: current)
    row = _table_row(dev.serial)
    assert f"older {older}" in row
    done = dev.fs.host_path(f"/data/local/tmp/specdec/runtime/{current.id}/.specdec-complete")
    done.parent.mkdir()
    done.write_text(current.sha256 + "\n")
    (data,) = json.loads(CliRunner().invoke(app, ["devices", "--json"]).output)
    assert data["runtime"] == {"present": sorted([older, current.id]), "current": current.id, "current_present": True}
    row = _table_row(dev.serial)
    assert f"present {current.id}" in row


@pytest.fixture
def second_server(adb_environ: AdbServer, tmp_path: Path) -> Iterator[AdbServer]:
    """Another adb server on a port of its own, as a device farm's would be."""
    server = AdbServer(workdir=tmp_path / "adb2")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.adb
def test_devices_fleet_check(adb_environ: AdbServer, second_server: AdbServer, make_standin: MakeStandin,  # noqa: F811
                             tmp_path: Path) -> None:
    ready = make_standin(python=sys.executable, model="Ready")
    bare = make_standin(python=None, model="Bare")  # no Python: the portable runtime (arm64) will do
    odd = StandinDevice(tmp_path / "odd", python=None, model="Odd", abi="mips").start()
    try:
        second_server.connect(odd)
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(f"devices:\n  - serial: {ready.serial}\n  - serial: {bare.serial}\n"
                         f"  - {{serial: {odd.serial}, host: 127.0.0.1, port: {second_server.port}, label: odd}}\n"
                         f"  - {{serial: '127.0.0.1:1', label: absent}}\n")
        result = CliRunner().invoke(app, ["devices", "--fleet", str(fleet), "--json"])
        assert result.exit_code == 8, result.output
        rows = {row["label"]: row for row in json.loads(result.stdout)}
        assert rows[ready.serial.replace(":", "_")]["ready"] and \
            rows[ready.serial.replace(":", "_")]["runs_with"] == "device-python"
        assert rows[bare.serial.replace(":", "_")]["runs_with"] == "portable"
        assert not rows["odd"]["ready"] and "not mips" in rows["odd"]["problem"]
        assert rows["odd"]["server"] == f"127.0.0.1:{second_server.port}" and rows["odd"]["info"]["model"] == "Odd"
        assert rows["absent"]["state"] == "not attached"
        assert "2 of 4 fleet devices are not ready: odd, absent" in " ".join(result.output.split())
    finally:
        odd.stop()

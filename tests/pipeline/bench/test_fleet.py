"""`specdec bench --fleet`: several stand-in phones on two adb servers, through the real adb binary.

One device drops mid-run, one has a profile of its own, one is reached on a second adb server
(-H/-P per device). The log of the three-device run says how the fleet's wall time compares with
the devices' own sessions (`pytest -s` or `-o log_cli=true` shows it).
"""

from __future__ import annotations

import _thread
import contextlib
import dataclasses
import json
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from standin.adb_env import AdbServer
from standin.adbd import StandinDevice, reap_jobs
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bench.fleet import FleetConfig, run_fleet
from specdec.pipeline.bench.stage import BenchConfig
from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.devices.session import new_run_id
from specdec.pipeline.devices.stale_runs import ENDED_GRACE, sweep_stale_runs
from specdec.pipeline.errors import FLEET_EXIT_BASE, FleetFailure
from specdec.pipeline.records.codec import from_dict
from specdec.pipeline.records.fleet import DeviceStatus, read_fleet
from specdec.pipeline.records.results import BenchResults
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.fleet import FleetEntry
from specdec.pipeline.settings.profiles import Transport

pytestmark = pytest.mark.adb
runner = CliRunner()
log = logging.getLogger(__name__)
COOL = {"cpu0": 36000, "battery": 30000}  # below the profiles' 40 °C start temperature


@pytest.fixture
def second_server(adb_environ: AdbServer, tmp_path: Path) -> Iterator[AdbServer]:
    """Another adb server on a port of its own, as a device farm's would be."""
    server = AdbServer(workdir=tmp_path / "adb2")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _tree(device: StandinDevice) -> list[str]:
    """Everything under the device's /data/local/tmp (logged before and after a run)."""
    root = device.root / "data/local/tmp"
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def _left(device: StandinDevice) -> list[str]:
    """What specdec's runs left in its remote dir (the dir itself stays; onnxruntime's ~/.ses is not ours)."""
    return [path for path in _tree(device) if path.startswith("specdec/")]


def _kill_after_first_reply(device: StandinDevice, done: threading.Event) -> threading.Thread:
    """Watch the device's event file (as the runner writes it) and drop the device after its first reply."""

    def watch() -> None:
        while not done.is_set():
            for events in device.root.glob("data/local/tmp/specdec/*/events.jsonl"):
                with contextlib.suppress(OSError):
                    if sum('"type":"reply"' in line for line in events.read_text().splitlines()) >= 1:
                        device.kill()
                        return
            done.wait(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_fleet_of_three_one_lost(adb_environ: AdbServer, second_server: AdbServer, make_standin: Any,  # type: ignore[no-untyped-def]
                                 bench_bundle, prompts_file: Path, tmp_path: Path) -> None:
    steady = make_standin(python=sys.executable, model="Pixel A", thermal_zones=COOL)
    other = StandinDevice(tmp_path / "device-b", python=sys.executable, model="Phone B", thermal_zones=COOL).start()
    dropping = make_standin(python=sys.executable, model="Dropping C", thermal_zones=COOL)
    try:
        second_server.connect(other)
        (tmp_path / "one-thread.yaml").write_text("transport: adb\nruntime: {threads: 1}\n")
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(f"devices:\n"
                         f"  - serial: {steady.serial}\n    label: steady\n"
                         f"  - serial: {other.serial}\n    host: 127.0.0.1\n    port: {second_server.port}\n"
                         f"    profile: one-thread.yaml\n    label: other\n")
        before = {name: _tree(dev) for name, dev in (("steady", steady), ("other", other), ("dropping", dropping))}
        done = threading.Event()
        watcher = _kill_after_first_reply(dropping, done)
        out = tmp_path / "fleet-out"
        try:
            result = runner.invoke(app, [
                "bench", str(bench_bundle.path), "--device", "adb", "--fleet", str(fleet),
                "-s", f"127.0.0.1:{adb_environ.port}/{dropping.serial}",  # the first server, named per device
                "--prompts", str(prompts_file), "--limit", "2", "-n", "12", "--repeats", "2", "--no-cooldown",
                "--no-tune", "--assert", "lossless", "-o", str(out)])
        finally:
            done.set()
            watcher.join()
            reap_jobs(dropping.root)
        assert result.exit_code == FLEET_EXIT_BASE + FleetFailure.lost == 17, result.output

        fleet_json = read_fleet((out / "fleet.json").read_text())
        rows = {row.label: row for row in fleet_json.devices}
        lost_label = f"127.0.0.1_{adb_environ.port}_{dropping.serial.replace(':', '_')}"
        assert set(rows) == {"steady", "other", lost_label}
        assert rows["steady"].status is rows["other"].status is DeviceStatus.complete
        lost = rows[lost_label]
        assert lost.status is DeviceStatus.lost and "device lost" in (lost.reason or "")
        assert fleet_json.summary.failures == ["lost"] and fleet_json.summary.exit_code == 17
        assert fleet_json.gates[0].gate == "fleet:lossless" and fleet_json.gates[0].passed
        # each complete device: its own results directory, in today's results.json schema
        for label, model in (("steady", "Pixel A"), ("other", "Phone B")):
            row = rows[label]
            assert row.results is not None and row.results.device.model == model and row.results.lossless.equal
            assert from_dict(BenchResults, json.loads((out / label / "results.json").read_text())) == row.results
            assert (out / label / "summary.md").is_file() and (out / label / "trace.json").is_file()
        assert rows["other"].server == f"127.0.0.1:{second_server.port}"  # -H/-P of this device only
        assert rows["other"].results is not None and rows["other"].results.profile == "one-thread"
        assert rows["steady"].results is not None and rows["steady"].results.profile == "android-generic"
        assert rows["other"].results.runtime and rows["steady"].results.device.serial == steady.serial
        markdown = (out / "fleet.md").read_text()
        assert all(f"| `{label}` |" in markdown for label in rows) and "device lost" in markdown
        assert (out / "fleet.png").stat().st_size > 0

        # nothing left on the devices that finished; the lost one keeps its run dir until it is back
        after = {name: _tree(dev) for name, dev in (("steady", steady), ("other", other), ("dropping", dropping))}
        for name in before:
            log.warning("%s: /data/local/tmp before %s, after %s", name, before[name], after[name])
        assert not before["steady"] and not _left(steady) and not _left(other)
        left = _left(dropping)
        assert left and all(path.startswith(left[0]) for path in left)  # its one run dir
        dropping.start()
        adb_environ.adb("disconnect", dropping.serial)
        adb_environ.connect(dropping)
        dropping.fs.age("/data/local/tmp/specdec", ENDED_GRACE.total_seconds() + 60)  # a later session ...
        sweep_stale_runs(AdbDevice(serial=dropping.serial), new_run_id())  # ... does this first
        assert not _left(dropping)
        log.warning("dropping, back and swept by its next session: %s", _tree(dropping))

        s = fleet_json.summary
        log.warning("fleet of 3 (2 cores, stand-ins; per device 2 prompts x 2 repeats x 12 tokens): wall %.2f s, "
                    "device sessions %s s; wall / sum %.2f, wall / max %.2f", s.wall_s,
                    [r.wall_s for r in fleet_json.devices], s.wall_s / s.device_wall_s_sum,
                    s.wall_s / s.device_wall_s_max)
        # side by side, not one after another: the devices' sessions overlap
        assert s.wall_s < 0.85 * s.device_wall_s_sum
    finally:
        other.stop()


def test_unusable_device_and_failed_gate(adb_environ: AdbServer, make_standin: Any, bench_bundle,  # type: ignore[no-untyped-def]
                                         prompts_file: Path, tmp_path: Path) -> None:
    ready = make_standin(python=sys.executable, thermal_zones=COOL)
    bare = make_standin(python=None, thermal_zones=COOL)  # no Python, and the runtime forced to the device's
    bench = BenchConfig(output=tmp_path / "out", device=Transport.adb, prompts=prompts_file, limit=1,
                        decode=DecodeOptions(max_new_tokens=8), cooldown=False, tune=False, runtime=None,
                        asserts=("lossless", "speedup>=1000"))
    (tmp_path / "python-only.yaml").write_text("transport: adb\nruntime: {use: device-python}\n")
    fleet = FleetConfig((FleetEntry(serial=ready.serial, label="ready"),
                         FleetEntry(serial=bare.serial, label="bare", profile=str(tmp_path / "python-only.yaml")),
                         FleetEntry(serial="127.0.0.1:1", label="absent")), jobs=2)
    outcome = run_fleet(bench, fleet, bench_bundle)
    rows = {row.label: row for row in outcome.results.devices}
    assert rows["ready"].status is DeviceStatus.complete and [g.gate for g in rows["ready"].failed_gates] == \
        ["speedup>=1000"]
    assert rows["bare"].status is DeviceStatus.unusable and "missing python" in (rows["bare"].reason or "")
    assert rows["absent"].status is DeviceStatus.unusable and "not attached" in (rows["absent"].reason or "")
    assert rows["bare"].results is None and not (outcome.output / "bare").exists()
    assert outcome.failures == FleetFailure.unusable | FleetFailure.gate
    assert outcome.results.summary.exit_code == 22 and outcome.results.summary.jobs == 2
    gates = {g.gate: g for g in outcome.results.gates}
    assert gates["fleet:lossless"].passed and "not complete: bare, absent" in gates["fleet:lossless"].message
    assert not gates["fleet:speedup>=1000"].passed

    # the next run against this one: each device against its own row, the medians against the medians; the
    # bundle has no plan for the device, so it is tuned there first
    again = run_fleet(dataclasses.replace(bench, output=tmp_path / "again", asserts=(), tune=True,
                                          baseline=outcome.output / "fleet.json", max_regression_pct=1e9),
                      FleetConfig(fleet.devices[:1]), bench_bundle)
    (row,) = again.results.devices
    assert row.results is not None and any(g.gate.startswith("regression:") for g in row.results.gates)
    assert row.results.plan is not None and row.results.plan.source == "tuned on the device"
    assert any(g.gate.startswith("fleet regression:median ") for g in again.results.gates)
    failed = [g for g in again.results.gates + row.results.gates if not g.passed]
    assert again.results.summary.exit_code == 0 and not again.results.warnings, failed


@contextlib.contextmanager
def _python_takes_sigint() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in the main thread, whatever an earlier test in this worker left
    installed (`_thread.interrupt_main` does nothing while SIGINT is ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.parametrize("how", ["signal", "swallowed by a finaliser"])
def test_ctrl_c_stops_and_cleans_every_device(adb_environ: AdbServer, make_standin: Any, bench_bundle,  # type: ignore[no-untyped-def]
                                              prompts_file: Path, tmp_path: Path, how: str) -> None:
    devices = [make_standin(python=sys.executable, thermal_zones=COOL) for _ in range(2)]
    before = [_tree(dev) for dev in devices]
    bench = BenchConfig(output=tmp_path / "out", device=Transport.adb, prompts=prompts_file, limit=2,
                        decode=DecodeOptions(max_new_tokens=24), repeats=3, cooldown=False, tune=False)
    fleet = FleetConfig(tuple(FleetEntry(serial=dev.serial) for dev in devices))
    interrupted: list[str] = []
    replies: list[str] = []

    def on_event(label: str, event: dict[str, Any]) -> None:
        if event.get("type") == "reply":
            replies.append(label)
            if not interrupted:
                interrupted.append(label)
                if how == "signal":
                    _thread.interrupt_main()  # Ctrl-C: it reaches the main thread only
                else:  # what Python does with a KeyboardInterrupt raised inside a __del__
                    sys.unraisablehook(SimpleNamespace(exc_type=KeyboardInterrupt, exc_value=KeyboardInterrupt(),
                                                       exc_traceback=None, err_msg=None, object=None))

    try:
        with _python_takes_sigint():
            outcome = run_fleet(bench, fleet, bench_bundle, on_event=on_event)
    except KeyboardInterrupt:
        pass
    else:  # say why
        devices_seen = [(row.label, row.status.value, row.reason) for row in outcome.results.devices]
        pytest.fail(f"not interrupted; {len(replies)} replies; devices: {devices_seen}")
    assert interrupted and len(replies) < 2 * 2 * 2 * 3  # stopped early: not every device's every reply came
    assert not any(before) and not any(_left(dev) for dev in devices)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))

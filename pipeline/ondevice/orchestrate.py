"""Drive one bench run on a device: push the payload, cool down, sample sensors, start the runner,
poll it, clean up.

The host reads the runner's events while it works, by tailing its events file over the device
shell (nothing is pulled), so a device lost mid-run still leaves every round finished before the
loss; the result then says it is partial and why.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import posixpath
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from specdec.pipeline.devices import shell
from specdec.pipeline.devices.base import Device, DeviceInfo, PythonStatus
from specdec.pipeline.devices.sensor_log import SensorLog
from specdec.pipeline.devices.sensors import (
    CooldownResult,
    SensorSampler,
    ThermalSnapshot,
    start_sampling,
    thermal_snapshot,
    wait_for_cooldown,
)
from specdec.pipeline.devices.session import device_session
from specdec.pipeline.devices.stale_runs import sweep_stale_runs
from specdec.pipeline.engine.device_main import EVENTS
from specdec.pipeline.errors import DeviceError, DeviceLostError
from specdec.pipeline.ondevice.controls import SensorArgs
from specdec.pipeline.ondevice.payload import RUN_SPEC, RUNTIME_ZIP
from specdec.pipeline.settings.profiles import DeviceProfile

log = logging.getLogger(__name__)

ProgressSink = Callable[[dict[str, Any]], None]
_POLL_S = 0.5


@dataclass
class DeviceRun:
    info: DeviceInfo
    events: list[dict[str, Any]] = field(default_factory=list)
    sensors: SensorLog | None = None
    thermal_before: ThermalSnapshot | None = None
    thermal_after: ThermalSnapshot | None = None
    cooldown: CooldownResult | None = None
    partial: bool = False
    partial_reason: str | None = None
    lost: bool = False  # partial because the device went away (not because the runner stopped early)
    returncode: int | None = None
    log_tail: str = ""
    warnings: list[str] = field(default_factory=list)
    runtime: dict[str, Any] = field(default_factory=dict)  # what ran the runner (RunnerLaunch.describe)
    payload_bytes: int = 0  # what the push carried (runtime zip, run spec, the bundle's runner files)


def check_device(device: Device, profile: DeviceProfile, python: str) -> DeviceInfo:
    info = device.info(python)
    if info.python is None or not info.python.usable:
        missing = ", ".join(info.python.missing) if info.python else f"python ({python})"
        raise DeviceError(
            f"{device.serial}: the device cannot run the bench runner: missing {missing}",
            "install Python with numpy and onnxruntime on the device (e.g. Termux: pkg install python "
            "python-numpy; pip install onnxruntime) and set runtime.python in the profile",
        )
    return info


RUNNER_MODULE = "specdec.pipeline.engine.device_main"


def runner_args(workdir: str, sensors: SensorArgs | None = None) -> str:
    """The runner's arguments: its run spec, then the sensor files its controllers read."""
    args = [shlex.quote(posixpath.join(workdir, RUN_SPEC))]
    for path in sensors.thermal_paths if sensors else []:
        args.append(f"--thermal-zone {shlex.quote(path)}")
    if sensors and sensors.battery:
        args.append(f"--battery {shlex.quote(sensors.battery[0])} {shlex.quote(sensors.battery[1])}")
    return " ".join(args)


def runner_command(workdir: str, python: str, cpu_mask: str | None, sensors: SensorArgs | None = None) -> str:
    """The runner under the device's own Python, its HOME, TMPDIR and caches in the work dir (nothing is
    left on the device once the work dir goes)."""
    prefix = f"taskset {shlex.quote(cpu_mask)} " if cpu_mask else ""
    zip_path = posixpath.join(workdir, RUNTIME_ZIP)
    return (f"{shell.private_environment(workdir)} PYTHONPATH={shlex.quote(zip_path)} {prefix}{shlex.quote(python)} "
            f"-m {RUNNER_MODULE} {runner_args(workdir, sensors)}").rstrip()


class RunnerLaunch(Protocol):
    """What starts the runner on the device: its own Python, or the portable runtime (ondevice/launch.py)."""

    def prepare(self, device: Device) -> DeviceInfo:
        """Before the run's work dir exists: check the device, push what the runner needs."""

    def preflight(self, device: Device, workdir: str) -> PythonStatus | None:
        """In the work dir, before the run: start the interpreter once (None: nothing to check)."""

    def command(self, workdir: str, sensors: SensorArgs | None) -> str: ...

    def describe(self) -> dict[str, Any]:
        """For results.json: which runtime ran the runner, and whether it was pushed."""


@dataclass
class DevicePython:
    """The device's own Python, which must have numpy and onnxruntime."""

    python: str
    cpu_mask: str | None = None

    def prepare(self, device: Device) -> DeviceInfo:
        return check_device(device, device.profile, self.python)

    def preflight(self, device: Device, workdir: str) -> PythonStatus | None:
        return None

    def command(self, workdir: str, sensors: SensorArgs | None) -> str:
        return runner_command(workdir, self.python, self.cpu_mask, sensors)

    def describe(self) -> dict[str, Any]:
        return {"kind": "device-python", "python": self.python}


class _EventTail:
    """Reads the runner's event file incrementally (`tail -c +N`), keeping whole lines only."""

    def __init__(self, device: Device, path: str) -> None:
        self.device = device
        self.path = path
        self.offset = 0
        self.buffer = ""

    def fetch(self) -> list[dict[str, Any]]:
        result = self.device.run(f"tail -c +{self.offset + 1} {shlex.quote(self.path)} 2>/dev/null",
                                 timeout_s=60)
        if result.returncode != 0:
            return []
        self.offset += len(result.stdout.encode())
        self.buffer += result.stdout
        *complete, self.buffer = self.buffer.split("\n")
        return [json.loads(line) for line in complete if line.strip()]


def run_on_device(device: Device, profile: DeviceProfile, payload: Path, run_id: str, *, python: str,
                  cooldown: bool = True, on_event: ProgressSink | None = None,
                  sensors: SensorArgs | None = None, launch: RunnerLaunch | None = None,
                  info: DeviceInfo | None = None) -> DeviceRun:
    launch = launch or DevicePython(python, profile.runtime.cpu_mask)
    info = info or launch.prepare(device)  # callers that needed the device's identity first pass it
    run = DeviceRun(info=info, runtime=launch.describe())
    if info.charging:
        run.warnings.append(f"{device.serial} is charging ({info.charging_source or 'source unknown'}): "
                            "USB charging masks the battery's discharge current, power figures are unreliable")
    timeout = profile.runtime.run_timeout_s
    sweep_stale_runs(device, run_id)
    with device_session(device, run_id) as workdir:
        device.push(payload, workdir)
        status = launch.preflight(device, workdir)
        if status is not None:
            run.info = dataclasses.replace(run.info, python=status)
        run.thermal_before = thermal_snapshot(device)
        if cooldown:
            run.cooldown = wait_for_cooldown(device, profile.sensors, profile.thermal)
        sampler: SensorSampler | None = start_sampling(device, profile.sensors, workdir, max_duration_s=timeout + 60)
        job = device.start_background(launch.command(workdir, sensors), cwd=workdir, name="runner", timeout_s=timeout)
        tail = _EventTail(device, posixpath.join(workdir, EVENTS))
        try:
            while True:
                running = device.job_running(job)
                for event in tail.fetch():
                    run.events.append(event)
                    if on_event:
                        on_event(event)
                if not running:
                    break
                time.sleep(_POLL_S)
            run.returncode = device.job_returncode(job)
            run.log_tail = _log_tail(device, job.log_file)
            if sampler is not None:
                run.sensors = sampler.stop()
                sampler = None
            run.thermal_after = thermal_snapshot(device)
        except DeviceLostError as exc:
            run.partial, run.partial_reason, run.lost = True, f"device lost mid-run: {exc.problem}", True
            log.warning("%s: %s; keeping the %d events received", device.serial, exc.problem, len(run.events))
            sampler = None
        finally:
            if sampler is not None:
                _quietly(sampler.stop)
            if not run.partial:
                _quietly(lambda: device.stop_job(job))
    if not run.partial and run.returncode != 0:
        if run.returncode == 124:
            run.partial, run.partial_reason = True, f"the runner exceeded the profile's {timeout:.0f} s timeout"
        else:
            raise DeviceError(f"{device.serial}: the bench runner failed (exit {run.returncode}): "
                              f"{run.log_tail.strip().splitlines()[-1] if run.log_tail.strip() else 'no output'}",
                              "run with SPECDEC_DEBUG=1 and SPECDEC_KEEP_REMOTE=1 to inspect the device work dir")
    if not any(e.get("type") == "done" for e in run.events) and not run.partial:
        run.partial, run.partial_reason = True, "the runner stopped before finishing"
    run.runtime = launch.describe()  # now with what prepare() did (pushed or reused)
    return run


def _log_tail(device: Device, path: str) -> str:
    result = device.run(f"tail -n 20 {shlex.quote(path)} 2>/dev/null", timeout_s=30)
    return result.stdout if result.returncode == 0 else ""


def _quietly(action: Callable[[], object]) -> None:
    try:
        action()
    except Exception as exc:  # cleanup after a failure must not hide the failure
        log.debug("cleanup step failed: %s", exc)

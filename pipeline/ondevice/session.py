"""One device session: what `specdec bench` and `specdec tune` both do on a device, written once.

A stage names where it runs (`DeviceTarget`), checks the profile against the transport before any
device work (`DeviceTarget.load_profile`), chooses the prompts a tuning pass calibrates on by one
rule (`calibration_prompts`), opens a session (`DeviceSession.open`: the device, what starts the
runner there, the key its plans are stored under) and runs run specs in it (`DeviceSession.run`:
the payload laid out in a scratch directory, pushed, run, pulled, the device cleaned up).

Sessions that run side by side (a fleet, pipeline/bench/fleet.py) share a `SessionGroup`: the
portable runtime is built at most once per ABI, and one stop signal interrupts every session at
its next device command, after which each cleans up its device as after Ctrl-C.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.devices.base import BackgroundJob, Device, DeviceInfo, OutputSink, RunResult
from specdec.pipeline.devices.registry import open_device
from specdec.pipeline.devices.session import new_run_id
from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.inputs.chat import has_chat_template
from specdec.pipeline.inputs.prompts import CALIBRATION_PROMPTS, BenchPrompt, default_chat_requests, load_bench_prompts
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.ondevice.controls import SensorArgs
from specdec.pipeline.ondevice.launch import ArchiveSource, cached_or_built, select_launch
from specdec.pipeline.ondevice.orchestrate import DeviceRun, ProgressSink, RunnerLaunch, run_on_device
from specdec.pipeline.ondevice.payload import build_payload, payload_bytes
from specdec.pipeline.portable.archive import RuntimeArchive
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.records.plan import device_key
from specdec.pipeline.records.results import RunSpec
from specdec.pipeline.settings import profiles
from specdec.pipeline.settings.profiles import DeviceProfile, RuntimeKind, Transport
from specdec.pipeline.settings.resolve import run_threads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeviceTarget:
    """Where a stage runs: transport, profile, the device's address, and what starts the runner there."""

    transport: Transport = Transport.local
    profile: str | None = None  # a name or a YAML path; None: the transport's default profile
    serial: str | None = None
    adb_host: str | None = None
    adb_port: int | None = None
    python: str | None = None  # None: this interpreter for local, the profile's runtime.python for adb
    runtime: RuntimeKind | None = None  # None: the profile's runtime.use
    threads: int | None = None  # None: the profile's runtime.threads

    @property
    def profile_name(self) -> str:
        return self.profile or profiles.DEFAULT_PROFILES[self.transport]

    def load_profile(self) -> DeviceProfile:
        """The profile, checked against the transport (before any device work)."""
        profile = profiles.load_device(self.profile_name)
        if profile.transport is not self.transport:
            raise InputError(f"profile '{profile.name}' is for the {profile.transport.value} transport, not "
                             f"{self.transport.value}",
                             f"pass {setting('device')} {profile.transport.value} or another {setting('profile')}")
        return profile


def calibration_prompts(codec: TextCodec, *, calib: Path | None, prompts: Path | None,
                        measured: list[BenchPrompt], chat: bool = False) -> list[list[int]]:
    """The prompts a tuning pass calibrates on: `calib`'s first ones; else the last ones of the prompt file
    (default: the demo's held-out prompts) that the run does not measure (it measures the first
    `len(measured)`; the default file interleaves its scenarios, so its last ones span all of them); else,
    when the run measures the whole file, the measured ones. With neither file, a model with a chat
    template calibrates on chat requests (a draft trained on chat answers is judged on what it is for)."""
    if calib is not None:
        return [p.ids for p in load_bench_prompts(calib, codec, None, chat)][:CALIBRATION_PROMPTS]
    if prompts is None and has_chat_template(codec.directory):
        requests = load_bench_prompts(default_chat_requests(), codec, None, chat=True)
        return [p.ids for p in requests[-CALIBRATION_PROMPTS:]]
    held_out = [p.ids for p in load_bench_prompts(prompts, codec, None, chat)[len(measured):]]
    return (held_out[-CALIBRATION_PROMPTS:] if held_out else [p.ids for p in measured])[:CALIBRATION_PROMPTS]


class SessionGroup:
    """What sessions running side by side share: one build of the portable runtime per ABI, one stop signal."""

    def __init__(self, archives: ArchiveSource | None = None, progress: Progress | None = None) -> None:
        self.stop = threading.Event()
        self._archives = archives or cached_or_built(progress or SilentProgress())
        self._built: dict[str, RuntimeArchive] = {}
        self._lock = threading.Lock()

    def archive(self, abi: str) -> RuntimeArchive:
        # Under the lock: the second device of an ABI waits for the first one's build instead of starting its own.
        with self._lock:
            if abi not in self._built:
                self._built[abi] = self._archives(abi)
            return self._built[abi]


@dataclass
class DeviceSession:
    """An opened device with its runner launch chosen and prepared; `run` runs one run spec on it."""

    profile: DeviceProfile
    device: Device
    python: str
    launch: RunnerLaunch
    info: DeviceInfo
    threads: int
    key: str  # records.plan.device_key: what this device's plans are stored under

    @classmethod
    def open(cls, target: DeviceTarget, profile: DeviceProfile, progress: Progress | None = None,
             group: SessionGroup | None = None) -> DeviceSession:
        """Open the device, choose what runs the runner there (its own Python or the portable runtime,
        pushed once) and probe it."""
        device = open_device(target.transport, profile=profile, serial=target.serial, adb_host=target.adb_host,
                             adb_port=target.adb_port)
        if group is not None:
            device = StoppableDevice(device, group.stop)
        python = target.python or (sys.executable if target.transport is Transport.local else profile.runtime.python)
        launch = select_launch(target.runtime or profile.runtime.use, python=python,
                               cpu_mask=profile.runtime.cpu_mask, progress=progress,
                               archives=group.archive if group is not None else None)
        info = launch.prepare(device)
        threads = run_threads(target.threads, profile)
        return cls(profile, device, python, launch, info, threads,
                   device_key(target.transport.value, info.model, info.abi, threads))

    def run(self, bundle: Bundle, spec: RunSpec, *, cooldown: bool, on_event: ProgressSink | None = None,
            sensors: SensorArgs | None = None) -> DeviceRun:
        """Lay out the payload for `spec`, then push, run, poll, pull and clean up (orchestrate.run_on_device)."""
        # The payload is scratch: it is pushed and dropped, never an output (the staging rules do not apply).
        with tempfile.TemporaryDirectory(prefix="specdec-payload-") as scratch:
            payload = build_payload(bundle, spec, Path(scratch) / "payload")
            pushed = payload_bytes(payload)
            run = run_on_device(self.device, self.profile, payload, new_run_id(), python=self.python,
                                cooldown=cooldown, on_event=on_event, sensors=sensors, launch=self.launch,
                                info=self.info)
            run.payload_bytes = pushed
            return run


class StoppableDevice(Device):
    """A device that raises KeyboardInterrupt at its first command after `stop` is set, once.

    Ctrl-C reaches only the main thread; a session in a worker thread learns of it here, at a point
    where it would also have been interrupted when it ran alone, and its cleanup (stop the runner,
    remove the work dir: more device commands) then runs as after Ctrl-C.
    """

    def __init__(self, inner: Device, stop: threading.Event) -> None:
        self.inner = inner
        self.stop = stop
        self.interrupted = False
        self.transport, self.serial, self.profile = inner.transport, inner.serial, inner.profile
        self.is_android = inner.is_android

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # what a transport has beyond the interface (AdbDevice.client, ...)

    def _check(self) -> None:
        if self.stop.is_set() and not self.interrupted:
            self.interrupted = True
            raise KeyboardInterrupt(f"{self.serial}: stopped")

    def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._check()
        return method(*args, **kwargs)

    def info(self, python: str | None = None) -> DeviceInfo:
        result: DeviceInfo = self._call(self.inner.info, python)
        return result

    def workdir(self, run_id: str) -> str:
        return self.inner.workdir(run_id)

    def push(self, local: Path, remote: str) -> None:
        self._call(self.inner.push, local, remote)

    def run(self, command: str, *, timeout_s: float, on_output: OutputSink | None = None,
            cwd: str | None = None) -> RunResult:
        result: RunResult = self._call(self.inner.run, command, timeout_s=timeout_s, on_output=on_output, cwd=cwd)
        return result

    def start_background(self, command: str, *, cwd: str, name: str, timeout_s: float) -> BackgroundJob:
        job: BackgroundJob = self._call(self.inner.start_background, command, cwd=cwd, name=name,
                                        timeout_s=timeout_s)
        return job

    def job_running(self, job: BackgroundJob) -> bool:
        running: bool = self._call(self.inner.job_running, job)
        return running

    def job_returncode(self, job: BackgroundJob) -> int | None:
        code: int | None = self._call(self.inner.job_returncode, job)
        return code

    def stop_job(self, job: BackgroundJob) -> None:
        self._call(self.inner.stop_job, job)

    def read_text(self, remote: str) -> str:
        text: str = self._call(self.inner.read_text, remote)
        return text

    def remove(self, remote: str) -> None:
        self._call(self.inner.remove, remote)

"""Which runtime starts the bench runner on the device: `--runtime auto|portable|device-python`.

`device-python` is the device's own Python (profile key runtime.python), as before. `portable`
pushes the portable runtime once (pipeline/portable/) and starts the runner through its
launcher; nothing is needed on the phone. `auto` (the default) asks the device's Python first
and falls back to the portable runtime when it lacks numpy or onnxruntime, as a stock phone does.
"""

from __future__ import annotations

import logging
import posixpath
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specdec.pipeline.devices.base import Device, DeviceInfo, PythonStatus
from specdec.pipeline.errors import DeviceError, InputError
from specdec.pipeline.ondevice.controls import SensorArgs
from specdec.pipeline.ondevice.orchestrate import RUNNER_MODULE, DevicePython, RunnerLaunch, runner_args
from specdec.pipeline.ondevice.payload import RUNTIME_ZIP
from specdec.pipeline.portable import recipe
from specdec.pipeline.portable.archive import BuildConfig, RuntimeArchive, build_runtime
from specdec.pipeline.portable.probe import run_probe
from specdec.pipeline.portable.remote import RemoteRuntime, ensure_runtime
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.settings.profiles import RuntimeKind

log = logging.getLogger(__name__)

ArchiveSource = Callable[[str], RuntimeArchive]  # ABI -> archive (cached, or built now)


def cached_or_built(progress: Progress) -> ArchiveSource:
    """The cached archive for the ABI, built first when there is none (needs the package sources)."""
    return lambda abi: build_runtime(BuildConfig(abi=abi), progress)


@dataclass
class Portable:
    """The portable runtime: pushed once per device, then the runner through its launcher."""

    archives: ArchiveSource
    cpu_mask: str | None = None
    progress: Progress = field(default_factory=SilentProgress)
    archive: RuntimeArchive | None = None
    remote: RemoteRuntime | None = None

    def prepare(self, device: Device) -> DeviceInfo:
        if not device.is_android:
            raise InputError("the portable runtime is for Android devices over adb",
                             "drop --runtime portable for --device local")
        return self.prepare_with(device, device.info())

    def prepare_with(self, device: Device, info: DeviceInfo) -> DeviceInfo:
        abi = info.abi or recipe.DEFAULT_ABI
        if abi not in recipe.ABIS:
            raise DeviceError(f"{device.serial} is {abi}; the portable runtime exists for "
                              f"{', '.join(sorted(recipe.ABIS))} only",
                              "install Python with numpy and onnxruntime on it and use --runtime device-python")
        self.archive = self.archives(abi)
        self.remote = ensure_runtime(device, self.archive, self.progress)
        return info

    def preflight(self, device: Device, workdir: str) -> PythonStatus | None:
        assert self.remote is not None, "prepare() first"
        return run_probe(device, self.remote, workdir, self.cpu_mask)

    def command(self, workdir: str, sensors: SensorArgs | None) -> str:
        assert self.remote is not None, "prepare() first"
        mask = f" --cpu-mask {shlex.quote(self.cpu_mask)}" if self.cpu_mask else ""
        runner_zip = shlex.quote(posixpath.join(workdir, RUNTIME_ZIP))
        return (f"sh {shlex.quote(self.remote.launcher)} --run-dir {shlex.quote(workdir)}{mask} run {runner_zip} "
                f"{RUNNER_MODULE} {runner_args(workdir, sensors)}")

    def describe(self) -> dict[str, Any]:
        described: dict[str, Any] = {"kind": RuntimeKind.portable.value}
        if self.archive is not None:
            described.update(id=self.archive.id, sha256=self.archive.sha256, size=self.archive.size,
                             python=self.archive.python, numpy=self.archive.numpy,
                             onnxruntime=self.archive.onnxruntime)
        if self.remote is not None:
            described.update(root=self.remote.root, pushed=self.remote.pushed, push_s=self.remote.push_s,
                             verify_s=self.remote.verify_s)
        return described


@dataclass
class Auto:
    """The device's Python when it can run the runner, else the portable runtime."""

    device_python: DevicePython
    portable: Portable
    chosen: RunnerLaunch | None = None

    def prepare(self, device: Device) -> DeviceInfo:
        if not device.is_android:
            self.chosen = self.device_python
            return self.device_python.prepare(device)
        info = device.info(self.device_python.python)
        if info.python is not None and info.python.usable:
            self.chosen = self.device_python
            return info
        missing = ", ".join(info.python.missing) if info.python else "python"
        log.info("%s: the device's Python lacks %s; using the portable runtime", device.serial, missing)
        self.chosen = self.portable
        return self.portable.prepare_with(device, info)

    def _launch(self) -> RunnerLaunch:
        assert self.chosen is not None, "prepare() first"
        return self.chosen

    def preflight(self, device: Device, workdir: str) -> PythonStatus | None:
        return self._launch().preflight(device, workdir)

    def command(self, workdir: str, sensors: SensorArgs | None) -> str:
        return self._launch().command(workdir, sensors)

    def describe(self) -> dict[str, Any]:
        return {"kind": RuntimeKind.auto.value} if self.chosen is None else {
            **self.chosen.describe(), "chosen_by": RuntimeKind.auto.value}


def select_launch(kind: RuntimeKind, *, python: str, cpu_mask: str | None, progress: Progress | None = None,
                  archives: ArchiveSource | None = None) -> RunnerLaunch:
    progress = progress or SilentProgress()
    portable = Portable(archives or cached_or_built(progress), cpu_mask, progress)
    device_python = DevicePython(python, cpu_mask)
    launches: dict[RuntimeKind, RunnerLaunch] = {
        RuntimeKind.device_python: device_python,
        RuntimeKind.portable: portable,
        RuntimeKind.auto: Auto(device_python, portable),
    }
    return launches[kind]

"""The `Device` interface every transport implements.

The bench stage only talks to this interface: push files (hash-checked), run a command with a
timeout while streaming its output, run a long job in the background under `timeout` + nohup
with a pid file and poll it, read files and sensors over the shell, and always clean up its work
directory.
"""

from __future__ import annotations

import abc
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specdec.pipeline.errors import DeviceError
from specdec.pipeline.records.device import DeviceInfo as DeviceInfo  # re-exported: the transports' result
from specdec.pipeline.records.device import PythonStatus as PythonStatus
from specdec.pipeline.settings.profiles import DeviceProfile, Transport

OutputSink = Callable[[str], None]


@dataclass(frozen=True)
class RunResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


@dataclass(frozen=True)
class BackgroundJob:
    """A command started by `start_background`; poll with `Device.job_running`."""

    pid_file: str
    log_file: str
    rc_file: str


def default_profile(transport: Transport) -> DeviceProfile:
    """The built-in defaults, for callers (e.g. `specdec devices`) that have no profile."""
    return DeviceProfile.model_validate({"name": f"default-{transport.value}", "transport": transport})


class Device(abc.ABC):
    transport: str
    serial: str
    profile: DeviceProfile
    # Android tools (getprop, dumpsys) exist; host-only counters such as RAPL do not.
    is_android: bool = False

    @abc.abstractmethod
    def info(self, python: str | None = None) -> DeviceInfo:
        """Model, OS, battery and what `python` (default: the profile's runtime.python) can do."""

    @abc.abstractmethod
    def workdir(self, run_id: str) -> str:
        """Absolute path of this run's work directory on the device (not created)."""

    @abc.abstractmethod
    def push(self, local: Path, remote: str) -> None:
        """Copy a file or directory; verify sha256 of every file on the device afterwards."""

    @abc.abstractmethod
    def run(self, command: str, *, timeout_s: float, on_output: OutputSink | None = None,
            cwd: str | None = None) -> RunResult:
        """Run a shell command on the device; the exit code survives old adb (__RC__ marker)."""

    @abc.abstractmethod
    def start_background(self, command: str, *, cwd: str, name: str, timeout_s: float) -> BackgroundJob:
        """Start under `timeout` + nohup, writing pid, combined log and exit code files in `cwd`."""

    @abc.abstractmethod
    def job_running(self, job: BackgroundJob) -> bool: ...

    @abc.abstractmethod
    def job_returncode(self, job: BackgroundJob) -> int | None: ...

    @abc.abstractmethod
    def stop_job(self, job: BackgroundJob) -> None: ...

    @abc.abstractmethod
    def read_text(self, remote: str) -> str: ...

    @abc.abstractmethod
    def remove(self, remote: str) -> None:
        """rm -rf on the device; never raises for a missing path."""

    def mkdir(self, remote: str) -> None:
        """mkdir -p on the device."""
        result = self.run(f"mkdir -p {shlex.quote(remote)}", timeout_s=60)
        if result.returncode != 0:
            detail = result.stderr.strip() or result.stdout.strip()
            raise DeviceError(f"cannot create {remote} on {self.serial}: {detail}",
                              "point the profile's runtime.remote_dir at a writable dir "
                              "(on Android: below /data/local/tmp)")

    def wait_job(self, job: BackgroundJob, *, timeout_s: float, poll_s: float = 0.5) -> int | None:
        """Poll until the job ends; its exit code (124: its own `timeout` fired), or None when it
        is still running at `timeout_s` or died without writing one (killed)."""
        deadline = time.monotonic() + timeout_s
        while self.job_running(job):
            if time.monotonic() >= deadline:
                return None
            time.sleep(poll_s)
        return self.job_returncode(job)

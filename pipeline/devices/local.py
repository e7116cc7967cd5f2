"""`LocalDevice`: this machine as a device — a work dir under the profile's remote_dir and `sh -c`.

It runs the same shell snippets as the adb transport (background jobs, the Python probe), so
the bench behaves the same on a laptop, in CI and on a phone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import posixpath
import shutil
import signal
import subprocess
from pathlib import Path

from specdec.pipeline.devices import shell
from specdec.pipeline.devices.base import (
    BackgroundJob,
    Device,
    DeviceInfo,
    OutputSink,
    RunResult,
    default_profile,
)
from specdec.pipeline.errors import DeviceError, InputError
from specdec.pipeline.graphs.files import sha256_file
from specdec.pipeline.settings.profiles import DeviceProfile, Transport

log = logging.getLogger(__name__)

LOCAL_REMOTE_DIR = "/tmp/specdec-runs"
_TIMEOUT_RC = 124  # what `timeout` returns, so both transports report a timeout alike


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _cpu_model() -> str:
    cpuinfo = _read(Path("/proc/cpuinfo")) or ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Hardware", "Model") and value.strip():
            return value.strip()
    return platform.processor() or platform.machine() or "unknown"


class LocalDevice(Device):
    transport = "local"

    def __init__(self, profile: DeviceProfile | None = None) -> None:
        self.profile = profile or default_profile(Transport.local)
        self.serial = platform.node() or "localhost"

    @property
    def remote_dir(self) -> str:
        # RuntimeSpec's default is the phone's /data/local/tmp/specdec; on this machine a profile
        # that does not name a dir gets one that exists everywhere.
        runtime = self.profile.runtime
        return runtime.remote_dir if "remote_dir" in runtime.model_fields_set else LOCAL_REMOTE_DIR

    def workdir(self, run_id: str) -> str:
        return posixpath.join(self.remote_dir, run_id)

    # --------------------------------------------------------------------------- commands
    def run(self, command: str, *, timeout_s: float, on_output: OutputSink | None = None,
            cwd: str | None = None) -> RunResult:
        out = shell.stream_process(["sh", "-c", shell.in_dir(command, cwd)], timeout_s=timeout_s,
                                   on_output=on_output)
        if out.timed_out:
            return RunResult(_TIMEOUT_RC, out.stdout, out.stderr, timed_out=True)
        return RunResult(out.returncode, out.stdout, out.stderr)

    def read_text(self, remote: str) -> str:
        try:
            return Path(remote).read_text(errors="replace")
        except OSError as exc:
            raise DeviceError(f"cannot read {remote}: {exc.strerror}",
                              "check the path exists (the run may have failed before writing it)") from exc

    def remove(self, remote: str) -> None:
        target = Path(shell.check_removable(remote))
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
        if target.exists():
            raise DeviceError(f"could not remove {target}", f"remove it by hand: rm -rf {target}")

    def mkdir(self, remote: str) -> None:
        try:
            Path(remote).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DeviceError(f"cannot create {remote}: {exc.strerror}",
                              "set the profile's runtime.remote_dir to a writable directory") from exc

    # --------------------------------------------------------------------------- files
    def push(self, local: Path, remote: str) -> None:
        """Same semantics as AdbDevice.push: `remote` is the destination itself."""
        if not local.exists():
            raise InputError(f"cannot push {local}: it does not exist", "check the path")
        self._transfer(local, remote)
        self._verify(local, remote)

    def _transfer(self, local: Path, remote: str) -> None:
        dest = Path(remote)
        try:
            if local.is_dir():
                shutil.copytree(local, dest, dirs_exist_ok=True)
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(local, dest)
        except OSError as exc:
            raise DeviceError(f"copying {local} to {remote} failed: {exc}",
                              "check free space and permissions") from exc

    def _verify(self, local: Path, remote: str) -> None:
        expected = shell.local_hashes(local)
        for name, digest in expected.items():
            copy = Path(remote) / name if name else Path(remote)
            if not copy.is_file():
                raise DeviceError(f"{copy} is missing after copying {local}",
                                  "check free space and copy again")
            if sha256_file(copy) != digest:
                raise DeviceError(f"sha256 of {copy} does not match {local / name} after copying",
                                  "the copy is corrupt (disk full?); copy again")

    # --------------------------------------------------------------------------- background jobs
    def start_background(self, command: str, *, cwd: str, name: str, timeout_s: float) -> BackgroundJob:
        job = shell.job_files(cwd, name)
        script = shell.background_script(job, command, cwd=cwd, timeout_s=timeout_s)
        result = self.run(script, timeout_s=30)
        if result.returncode != 0 or shell.parse_pids(result.stdout) is None:
            raise DeviceError(f"job {name} did not start: {(result.stderr or result.stdout).strip()[:200]}",
                              f"check {cwd} is writable and `nohup`/`timeout` are installed (coreutils)")
        return job

    @staticmethod
    def _pids(job: BackgroundJob) -> tuple[int, int] | None:
        return shell.parse_pids(_read(Path(job.pid_file)) or "")

    def job_running(self, job: BackgroundJob) -> bool:
        if Path(job.rc_file).exists():
            return False
        pids = self._pids(job)
        if pids is None:
            return False
        try:
            os.kill(pids[0], 0)
        except (ProcessLookupError, PermissionError):  # PermissionError: the pid was reused
            return False
        # An orphaned wrapper may linger as a zombie until init reaps it; kill -0 succeeds on those.
        stat = _read(Path(f"/proc/{pids[0]}/stat")) or ""
        return ") Z " not in stat

    def job_returncode(self, job: BackgroundJob) -> int | None:
        text = _read(Path(job.rc_file)) or ""
        return int(text) if text.lstrip("-").isdigit() else None

    def stop_job(self, job: BackgroundJob) -> None:
        # The same script as on a phone: TERM to `timeout`, a grace period, then KILL its group.
        subprocess.run(["sh", "-c", shell.stop_job_script(job)], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=30, check=False)
        pids = self._pids(job)
        if pids is not None and self.job_running(job):
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    # --------------------------------------------------------------------------- info
    @staticmethod
    def identity() -> tuple[str, str | None]:
        """(model, abi) without probing Python: what a tuned plan is keyed by (records.plan.device_key)."""
        return _cpu_model(), platform.machine() or None

    def info(self, python: str | None = None) -> DeviceInfo:
        exe = python or self.profile.runtime.python
        sensors = self.profile.sensors
        battery = Path(sensors.battery_dir)
        level_text = _read(battery / "capacity")
        status = _read(battery / "status")
        usb = _read(Path(sensors.usb_online))
        probe = self.run(shell.python_probe_command(exe), timeout_s=120)
        py_status, errors = shell.parse_python_probe(exe, probe.stdout)
        if not py_status.found and probe.stderr.strip():
            errors["python_error"] = " ".join(probe.stderr.split())[:200]
        model, abi = self.identity()
        return DeviceInfo(
            serial=self.serial, transport=self.transport, model=model, android_version=None, abi=abi,
            battery_level=int(level_text) if level_text and level_text.isdigit() else None,
            charging=None if status is None else status == "Charging",
            charging_source="usb" if usb == "1" else None,
            python=py_status, extra={"os": f"{platform.system()} {platform.release()}", **errors})

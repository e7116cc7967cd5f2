"""`AdbDevice`: a phone (or the stand-in) driven through the real adb binary (docs/design.md §6).

Every command goes out as `adb -s SERIAL shell '...; echo __RC__:$?'`: old adb drops exit
codes, and adb 29 exits 0 with truncated output when the device vanishes mid-command, so the
marker is the only trustworthy exit code and its absence means the device was lost.
"""

from __future__ import annotations

import logging
import posixpath
import re
import secrets
from collections.abc import Mapping
from pathlib import Path

from specdec.pipeline.devices import shell
from specdec.pipeline.devices.adb_client import AdbClient
from specdec.pipeline.devices.base import (
    BackgroundJob,
    Device,
    DeviceInfo,
    OutputSink,
    RunResult,
    default_profile,
)
from specdec.pipeline.devices.shell import q
from specdec.pipeline.errors import DeviceError, InputError
from specdec.pipeline.settings.profiles import DeviceProfile, Transport

log = logging.getLogger(__name__)

# adb needs a moment beyond the device-side `timeout` to deliver the last output and the marker.
_HOST_GRACE_S = 15.0
_HASH_BATCH = 200  # files per sha256sum call: keeps the command line far below ARG_MAX
_INFO_PROPS = {"model": "ro.product.model", "android": "ro.build.version.release",
               "sdk": "ro.build.version.sdk", "abi": "ro.product.cpu.abi",
               "manufacturer": "ro.product.manufacturer"}
_BATTERY_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?):\s*(.*?)\s*$")
_BATTERY_STATUS_CHARGING = "2"  # BatteryManager.BATTERY_STATUS_CHARGING


def parse_dumpsys_battery(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        match = _BATTERY_LINE.match(line)
        if match:
            values.setdefault(match.group(1).strip().lower(), match.group(2))
    return values


def battery_fields(values: Mapping[str, str]) -> tuple[int | None, bool | None, str | None]:
    """(level %, charging, source) from `dumpsys battery`; None where the device did not say."""
    level_text = values.get("level", "")
    level = int(level_text) if level_text.lstrip("-").isdigit() else None
    status = values.get("status")
    charging = None if status is None else status == _BATTERY_STATUS_CHARGING
    sources = [name for name in ("ac", "usb", "wireless", "dock") if values.get(f"{name} powered") == "true"]
    return level, charging, ",".join(sources) if sources else ("none" if "usb powered" in values else None)


class AdbDevice(Device):
    transport = "adb"
    is_android = True

    def __init__(self, profile: DeviceProfile | None = None, serial: str | None = None, *,
                 adb_host: str | None = None, adb_port: int | None = None,
                 env: Mapping[str, str] | None = None, adb_path: str | None = None) -> None:
        self.profile = profile or default_profile(Transport.adb)
        self.client = AdbClient(adb_path=adb_path, host=adb_host, port=adb_port, env=env)
        self.serial = self.client.resolve_serial(serial)

    def _adb(self, *args: str, timeout_s: float = 600) -> tuple[int, str]:
        result = self.client.call(["-s", self.serial, *args], timeout_s=timeout_s)
        return result.returncode, (result.stdout + result.stderr).strip()

    # --------------------------------------------------------------------------- commands
    def run(self, command: str, *, timeout_s: float, on_output: OutputSink | None = None,
            cwd: str | None = None) -> RunResult:
        script = shell.with_rc_marker(command, cwd=cwd, timeout_s=timeout_s)
        argv = self.client.argv("-s", self.serial, "shell", script)
        out = shell.stream_process(argv, timeout_s=timeout_s + _HOST_GRACE_S, on_output=on_output,
                                   env=self.client.env, line_filter=shell.strip_marker_line)
        stdout, rc = shell.split_marker(out.stdout)
        doing = f"running `{command[:80]}`"
        if out.timed_out:
            # The device-side `timeout` should have ended it long ago: the link is gone or hung.
            waited = timeout_s + _HOST_GRACE_S
            raise self.client.lost_error(self.serial, doing, f"no answer within {waited:g} s")
        if rc is None:
            detail = out.stderr or f"adb exit {out.returncode}, no __RC__"
            raise self.client.lost_error(self.serial, doing, detail)
        timed_out = rc == 124 and out.elapsed_s >= timeout_s
        return RunResult(rc, stdout, out.stderr, timed_out=timed_out)

    def _check(self, command: str, *, doing: str, fix: str, timeout_s: float = 120) -> str:
        result = self.run(command, timeout_s=timeout_s)
        if result.returncode != 0:
            detail = result.stderr.strip() or result.stdout.strip() or f"exit {result.returncode}"
            detail = " ".join(detail.split())
            raise DeviceError(f"{doing} failed on {self.serial}: {detail[-300:]}", fix)
        return result.stdout

    def read_text(self, remote: str) -> str:
        return self._check(f"cat {q(remote)}", doing=f"reading {remote}",
                           fix="check the path exists (the run may have failed before writing it)")

    def remove(self, remote: str) -> None:
        target = shell.check_removable(remote)
        self._check(f"rm -rf {q(target)}", doing=f"removing {target}", fix=f"remove it by hand: adb -s "
                    f"{self.serial} shell rm -rf {target}")

    def workdir(self, run_id: str) -> str:
        return posixpath.join(self.profile.runtime.remote_dir, run_id)

    # --------------------------------------------------------------------------- files
    def push(self, local: Path, remote: str) -> None:
        """`remote` is the destination itself: a file's path, or the directory that will hold
        the contents of `local` (merged into it if it exists)."""
        if not local.exists():
            raise InputError(f"cannot push {local}: it does not exist", "check the path")
        self._transfer(local, remote)
        self._verify(local, remote)

    def _transfer(self, local: Path, remote: str) -> None:
        kind = self._kind(remote)
        if local.is_dir() and kind == "dir":
            # adb would nest local's folder inside an existing dir; push beside it and merge.
            staging = f"{remote.rstrip('/')}.push-{secrets.token_hex(4)}"
            self._adb_transfer("push", str(local), staging)
            self._check(f"cp -R {q(staging)}/. {q(remote)}/ && rm -rf {q(staging)}",
                        doing=f"merging into {remote}", fix="check free space: adb shell df /data/local/tmp")
            return
        if kind != "missing" and local.is_dir() != (kind == "dir"):
            raise InputError(f"cannot push {local} to {remote}: one is a directory, the other a file",
                             "give the destination's full path (the directory or file to create)")
        # Old adb clients and adbd without fixed_push_mkdir do not create missing parents.
        parent = posixpath.dirname(remote.rstrip("/")) or "/"
        self._check(f"mkdir -p {q(parent)}", doing=f"creating {parent}",
                    fix="check the profile's runtime.remote_dir is writable")
        self._adb_transfer("push", str(local), remote)

    def _adb_transfer(self, verb: str, source: str, dest: str) -> None:
        rc, output = self._adb(verb, source, dest)
        if rc == 0:
            return
        if self.client.looks_lost(output) or self.client.get_state(self.serial) != "device":
            raise self.client.lost_error(self.serial, f"{verb}ing {source}", output)
        raise DeviceError(f"adb {verb} {source} -> {dest} failed: {' '.join(output.split())[-300:]}",
                          "check free space (adb shell df /data/local/tmp) and the paths")

    def _verify(self, local: Path, remote: str) -> None:
        expected = shell.local_hashes(local)
        found: dict[str, str] = {}
        names = sorted(expected)
        for start in range(0, len(names), _HASH_BATCH):
            batch = names[start:start + _HASH_BATCH]
            if batch == [""]:
                command = f"sha256sum {q(remote)}"
            else:
                command = f"cd {q(remote)} && sha256sum " + " ".join(q(name) for name in batch)
            result = self.run(command, timeout_s=600)
            if result.returncode == 127:
                raise DeviceError(f"sha256sum is not available on {self.serial}",
                                  "use Android 7 or later (toybox provides sha256sum)")
            parsed = shell.parse_sha256sum(result.stdout)
            found.update({"": next(iter(parsed.values()))} if batch == [""] and parsed else parsed)
        for name in names:
            where = posixpath.join(remote, name) if name else remote
            if name not in found:
                raise DeviceError(f"{where} is missing on {self.serial} after push of {local}",
                                  "check free space (adb shell df /data/local/tmp) and push again")
            if found[name] != expected[name]:
                raise DeviceError(f"sha256 of {where} on {self.serial} does not match {local / name} "
                                  "after push",
                                  "the copy is corrupt (storage full or a flaky cable); push again")
        log.info("pushed %s -> %s:%s (%d files, sha256 verified)", local, self.serial, remote, len(names))

    def _kind(self, remote: str) -> str:
        out = self._check(f"if [ -d {q(remote)} ]; then echo dir; elif [ -e {q(remote)} ]; then echo file; "
                          "else echo missing; fi", doing=f"checking {remote}", fix="check the path")
        return out.strip() or "missing"

    # --------------------------------------------------------------------------- background jobs
    def start_background(self, command: str, *, cwd: str, name: str, timeout_s: float) -> BackgroundJob:
        job = shell.job_files(cwd, name)
        out = self._check(shell.background_script(job, command, cwd=cwd, timeout_s=timeout_s),
                          doing=f"starting {name}", fix="check the work dir is writable", timeout_s=30)
        if shell.parse_pids(out) is None:
            raise DeviceError(f"job {name} on {self.serial} did not write its pid file ({out.strip()[:100]})",
                              "check `nohup`, `timeout` and `sh` exist on the device (toybox, Android 7+)")
        return job

    def job_running(self, job: BackgroundJob) -> bool:
        state = self._check(shell.job_state_script(job), doing="polling a job", fix="check the device")
        return state.strip() == "running"

    def job_returncode(self, job: BackgroundJob) -> int | None:
        result = self.run(f"cat {q(job.rc_file)} 2>/dev/null", timeout_s=30)
        text = result.stdout.strip()
        return int(text) if result.returncode == 0 and text.lstrip("-").isdigit() else None

    def stop_job(self, job: BackgroundJob) -> None:
        self.run(shell.stop_job_script(job), timeout_s=30)

    # --------------------------------------------------------------------------- info
    def info(self, python: str | None = None) -> DeviceInfo:
        exe = python or self.profile.runtime.python
        props = "; ".join(f'echo "{key}=$(getprop {prop})"' for key, prop in _INFO_PROPS.items())
        out = self.run(f"{props}; echo __battery__; dumpsys battery 2>/dev/null", timeout_s=60).stdout
        head, _, battery_text = out.partition("__battery__")
        prop_values = dict(line.split("=", 1) for line in head.splitlines() if "=" in line)
        level, charging, source = battery_fields(parse_dumpsys_battery(battery_text))
        probe = self.run(shell.python_probe_command(exe), timeout_s=120)
        status, errors = shell.parse_python_probe(exe, probe.stdout)
        if not status.found and probe.stderr.strip():
            errors["python_error"] = " ".join(probe.stderr.split())[:200]
        extra = {k: v for k, v in (("sdk", prop_values.get("sdk")),
                                   ("manufacturer", prop_values.get("manufacturer"))) if v}
        return DeviceInfo(serial=self.serial, transport=self.transport,
                          model=prop_values.get("model") or "unknown",
                          android_version=prop_values.get("android") or None,
                          abi=prop_values.get("abi") or None,
                          battery_level=level, charging=charging, charging_source=source,
                          python=status, extra={**extra, **errors})


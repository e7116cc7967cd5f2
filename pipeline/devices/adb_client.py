"""The adb binary: finding it, calling it, listing devices and choosing one.

The environment is read when each command runs, not when the client is built, so
`ANDROID_ADB_SERVER_PORT`, `ADB_SERVER_SOCKET`, `ANDROID_SERIAL` and `HOME` set by a caller
(or a test's monkeypatch) reach adb unchanged.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specdec.pipeline.errors import DeviceError, DeviceLostError

log = logging.getLogger(__name__)

INSTALL_HINT = ("install adb (`apt-get install adb` on Debian/Ubuntu, or Android SDK platform-tools from "
                "https://developer.android.com/tools/releases/platform-tools) and put it on PATH")
# What adb prints when the transport went away under it (adb 29 and later).
LOST_PATTERNS = ("device offline", "not found", "no devices", "device unauthorized", "closed",
                 "connection reset", "protocol fault", "device still connecting")
STATE_FIXES = {
    "unauthorized": "unlock the phone and accept the 'Allow USB debugging' prompt",
    "offline": "replug the cable or run `adb reconnect`",
    "no permissions": "add a udev rule for the phone (see `adb devices` output) or run adb as your user",
    "authorizing": "wait for the phone to finish authorizing, then retry",
    "connecting": "wait a moment and retry",
    "recovery": "reboot the phone into Android",
    "bootloader": "reboot the phone into Android",
    "sideload": "reboot the phone into Android",
}


@dataclass(frozen=True)
class AdbDeviceEntry:
    """One line of `adb devices -l`."""

    serial: str
    state: str
    model: str | None = None
    product: str | None = None
    device: str | None = None
    transport_id: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


def parse_devices(text: str) -> list[AdbDeviceEntry]:
    entries = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("List of devices", "*", "adb server")):
            continue
        # The state can be two words ("no permissions (...)"); key:value pairs follow it.
        head, *rest = line.split(None, 1)
        state_words: list[str] = []
        props: dict[str, str] = {}
        for word in rest[0].split() if rest else []:
            key, sep, value = word.partition(":")
            if sep and (props or key.isidentifier()):
                props[key] = value
            elif not props:
                state_words.append(word)
        state = " ".join(state_words) or "unknown"
        if state.startswith("no permissions"):
            state = "no permissions"
        entries.append(AdbDeviceEntry(
            serial=head, state=state, model=props.pop("model", None), product=props.pop("product", None),
            device=props.pop("device", None), transport_id=props.pop("transport_id", None), extra=props))
    return entries


class AdbClient:
    """Runs `adb [-H host] [-P port] ...`; env=None inherits os.environ at call time."""

    def __init__(self, *, adb_path: str | None = None, host: str | None = None, port: int | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.env = None if env is None else dict(env)
        found = adb_path or shutil.which("adb", path=self.getenv("PATH"))
        if not found or not os.access(found, os.X_OK):
            raise DeviceError(f"the adb binary was not found ({adb_path or 'not on PATH'})", INSTALL_HINT)
        self.adb_path = found
        self.host = host
        self.port = port

    def getenv(self, key: str) -> str | None:
        return (os.environ if self.env is None else self.env).get(key)

    def argv(self, *args: str) -> list[str]:
        server: list[str] = []
        if self.host:
            server += ["-H", self.host]
        if self.port:
            server += ["-P", str(self.port)]
        return [self.adb_path, *server, *args]

    def where(self) -> str:
        if self.host or self.port:
            return f"the adb server at {self.host or 'localhost'}:{self.port or 5037}"
        socket = self.getenv("ADB_SERVER_SOCKET")
        if socket:
            return f"the adb server at {socket} (ADB_SERVER_SOCKET)"
        port = self.getenv("ANDROID_ADB_SERVER_PORT")
        return f"the local adb server (port {port or 5037})"

    def call(self, args: Sequence[str], *, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        argv = self.argv(*args)
        log.debug("adb: %s", " ".join(argv))
        try:
            return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  errors="replace", timeout=timeout_s, env=self.env, start_new_session=True)
        except subprocess.TimeoutExpired as exc:
            raise DeviceError(f"`adb {' '.join(args[:3])}` did not finish within {timeout_s:g} s",
                              f"check {self.where()} with `adb devices -l`") from exc
        except OSError as exc:
            raise DeviceError(f"cannot run {self.adb_path}: {exc.strerror}", INSTALL_HINT) from exc

    def devices(self) -> list[AdbDeviceEntry]:
        result = self.call(["devices", "-l"], timeout_s=30)
        if result.returncode != 0:
            detail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise DeviceError(f"`adb devices` failed on {self.where()}: {detail[0]}",
                              "start the adb server (`adb start-server`) or fix -H/-P / ADB_SERVER_SOCKET")
        return parse_devices(result.stdout)

    def get_state(self, serial: str) -> str:
        result = self.call(["-s", serial, "get-state"], timeout_s=15)
        if result.returncode == 0:
            return result.stdout.strip() or "unknown"
        return (result.stderr.strip() or result.stdout.strip() or "unknown").removeprefix("error: ")

    def resolve_serial(self, serial: str | None) -> str:
        """The option, else ANDROID_SERIAL, else the only attached device; ready or a clear error."""
        wanted = serial or self.getenv("ANDROID_SERIAL") or None
        entries = self.devices()
        listing = ", ".join(f"{e.serial} ({e.state}{', ' + e.model if e.model else ''})" for e in entries)
        if wanted is None:
            if not entries:
                raise DeviceError(f"no Android device is attached to {self.where()}",
                                  "plug one in with USB debugging on, or `adb connect HOST:PORT` for a "
                                  "network device; `adb devices -l` must list it")
            if len(entries) > 1:
                raise DeviceError(f"{len(entries)} devices are attached: {listing}",
                                  "choose one with --serial SERIAL or ANDROID_SERIAL")
            entry = entries[0]
        else:
            match = [e for e in entries if e.serial == wanted]
            if not match:
                source = "--serial" if serial else "ANDROID_SERIAL"
                raise DeviceError(f"device '{wanted}' ({source}) is not attached to {self.where()} "
                                  f"(attached: {listing or 'none'})",
                                  f"check `adb devices -l`; for a network device run `adb connect {wanted}`")
            entry = match[0]
        if entry.state != "device":
            fix = STATE_FIXES.get(entry.state, "check `adb devices -l` and reconnect it")
            raise DeviceError(f"device '{entry.serial}' is {entry.state}, not ready", fix)
        return entry.serial

    def lost_error(self, serial: str, doing: str, detail: str) -> DeviceLostError:
        state = self.get_state(serial)
        detail = " ".join(detail.split())[-200:] or "no output"
        return DeviceLostError(f"device {serial} went away while {doing} (adb: {detail}; state now: {state})",
                               "reconnect it (check `adb devices -l`) and rerun; the run's partial results "
                               "on the device are lost")

    @staticmethod
    def looks_lost(text: str) -> bool:
        lowered = text.lower()
        return any(pattern in lowered for pattern in LOST_PATTERNS)

"""An isolated adb server for tests: private port, HOME and TMPDIR.

Nothing here touches the user's ~/.android or the default adb server on 5037.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Protocol


class HasSerial(Protocol):
    @property
    def serial(self) -> str: ...


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AdbServer:
    """Starts ``adb start-server`` with its own port; ``.env`` is for subprocesses."""

    def __init__(self, adb: str | None = None, workdir: str | Path | None = None) -> None:
        found = adb or shutil.which("adb")
        if not found:
            raise FileNotFoundError("adb binary not found on PATH")
        self.adb_path = found
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        if workdir is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="adbenv-")
            workdir = self._tmpdir.name
        self.workdir = Path(workdir)
        home = self.workdir / "home"
        tmp = self.workdir / "tmp"  # adb writes its server log (adb.UID.log) here
        home.mkdir(parents=True, exist_ok=True)
        tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        env = dict(os.environ)
        # These would redirect adb to real keys, another server or one device.
        for key in (
            "ANDROID_SERIAL",
            "ANDROID_SDK_HOME",
            "ANDROID_USER_HOME",
            "ANDROID_EMULATOR_HOME",
            "ADB_SERVER_SOCKET",
            "ADB_VENDOR_KEYS",
        ):
            env.pop(key, None)
        env.update(
            {
                "ANDROID_ADB_SERVER_PORT": str(self.port),
                "HOME": str(home),
                "TMPDIR": str(tmp),
                # Don't probe the emulator port range 5555..5585 beyond the minimum.
                "ADB_LOCAL_TRANSPORT_MAX_PORT": "5555",
            }
        )
        self.env: dict[str, str] = env
        self.started = False

    def adb(
        self, *args: str, timeout: float = 30, input: bytes | None = None, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.adb_path, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            input=None if input is None else input.decode(),
            stdin=subprocess.DEVNULL if input is None else None,
        )

    def start(self) -> AdbServer:
        self.adb("start-server", check=True, timeout=30)
        self.started = True
        return self

    def get_state(self, serial: str) -> str:
        r = self.adb("-s", serial, "get-state", timeout=10)
        return r.stdout.strip() if r.returncode == 0 else (r.stderr.strip() or "error")

    def connect(self, device: HasSerial | str, timeout: float = 10) -> str:
        """`adb connect` and wait until the transport is online; returns the serial."""
        serial = device if isinstance(device, str) else device.serial
        r = self.adb("connect", serial, timeout=timeout)
        if "connected to" not in r.stdout:
            raise RuntimeError(f"adb connect {serial} failed: {r.stdout}{r.stderr}")
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.get_state(serial)
            if state == "device":
                return serial
            time.sleep(0.05)
        raise RuntimeError(f"{serial} never came online (last state: {state!r})")

    def disconnect(self, device: HasSerial | str) -> None:
        serial = device if isinstance(device, str) else device.serial
        self.adb("disconnect", serial, timeout=10)

    def stop(self) -> None:
        if self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.adb("kill-server", timeout=10)
            self.started = False
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    def __enter__(self) -> AdbServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

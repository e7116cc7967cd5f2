"""Fixtures: a private adb server and stand-in devices connected to it."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .adb_env import AdbServer
from .adbd import StandinDevice

MakeStandin = Callable[..., StandinDevice]
ADB_KEYS = ("ANDROID_ADB_SERVER_PORT", "HOME", "TMPDIR", "ADB_LOCAL_TRANSPORT_MAX_PORT")


@pytest.fixture
def adb_env(tmp_path: Path) -> Iterator[AdbServer]:
    """A running adb server on a private port with a private HOME."""
    if shutil.which("adb") is None:
        pytest.skip("the adb binary is not on PATH (apt install adb)")
    server = AdbServer(workdir=tmp_path / "adb")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def make_standin(adb_env: AdbServer, tmp_path: Path) -> Iterator[MakeStandin]:
    """Factory: ``make_standin(python=..., model=...)`` -> started, connected device."""
    devices: list[StandinDevice] = []

    def make(**knobs: Any) -> StandinDevice:
        root = tmp_path / f"device{len(devices)}"
        dev = StandinDevice(root, **knobs).start()
        devices.append(dev)
        adb_env.connect(dev)
        return dev

    try:
        yield make
    finally:
        for dev in devices:
            dev.stop()


@pytest.fixture
def standin_device(make_standin: MakeStandin) -> StandinDevice:
    """A connected stand-in device with default knobs (no python3 on it)."""
    return make_standin()


@pytest.fixture
def adb_environ(adb_env: AdbServer, monkeypatch: pytest.MonkeyPatch) -> AdbServer:
    """Make the private adb server the one this process (and the CLI) talks to."""
    for key in ("ANDROID_SERIAL", "ADB_SERVER_SOCKET"):
        monkeypatch.delenv(key, raising=False)
    for key in ADB_KEYS:
        monkeypatch.setenv(key, adb_env.env[key])
    return adb_env

"""Stand-in device fixtures plus helpers that point this process's adb calls at them."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from standin.adb_env import AdbServer
from standin.adbd import StandinDevice
from standin.conftest import adb_env, adb_environ, make_standin, standin_device  # noqa: F401

from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.settings.profiles import DeviceProfile

MakeStandin = Callable[..., StandinDevice]


def make_profile(transport: str = "adb", **sections: Any) -> DeviceProfile:
    return DeviceProfile.model_validate({"name": f"test-{transport}", "transport": transport, **sections})


@pytest.fixture
def adb_device(adb_environ: AdbServer, make_standin: MakeStandin) -> tuple[AdbDevice, StandinDevice]:  # noqa: F811
    dev = make_standin()
    return AdbDevice(make_profile()), dev


def host_path(dev: StandinDevice, device_path: str) -> Path:
    return dev.fs.host_path(device_path)


@pytest.fixture
def reap_jobs() -> Iterator[list[Path]]:
    """Pid files of jobs whose `timeout` (GNU: its own process group) outlives a killed stand-in."""
    pid_files: list[Path] = []
    yield pid_files
    for pid_file in pid_files:
        with contextlib.suppress(OSError, ValueError):
            wrapper, timeout_pid = (int(p) for p in pid_file.read_text().split()[:2])
            with contextlib.suppress(OSError):
                os.killpg(timeout_pid, signal.SIGKILL)  # GNU timeout leads its own group
            for pid in (timeout_pid, wrapper):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

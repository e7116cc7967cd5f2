"""device_session: the work dir is always removed, also on Ctrl-C and SIGTERM."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from standin.adbd import StandinDevice

from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.devices.local import LocalDevice
from specdec.pipeline.devices.session import KEEP_ENV, device_session, new_run_id

from .conftest import make_profile


@pytest.fixture
def local(tmp_path: Path) -> LocalDevice:
    return LocalDevice(make_profile("local", runtime={"remote_dir": str(tmp_path / "runs")}))


def test_new_run_id_is_unique_and_shell_safe() -> None:
    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", run_id) for run_id in ids)


def test_local_session_creates_and_removes(local: LocalDevice) -> None:
    with device_session(local, "r1") as work:
        assert Path(work).is_dir()
        Path(work, "f").write_text("x")
    assert not Path(work).exists()


def test_local_session_cleans_up_on_keyboard_interrupt(local: LocalDevice) -> None:
    with pytest.raises(KeyboardInterrupt), device_session(local, "r2") as work:
        raise KeyboardInterrupt
    assert not Path(work).exists()


def test_sigterm_becomes_keyboard_interrupt_and_cleans_up(local: LocalDevice) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), device_session(local, "r3") as work:
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()  # never reached: the handler raises
    assert not Path(work).exists()
    assert signal.getsignal(signal.SIGTERM) is before


def test_keep_remote_env(local: LocalDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEEP_ENV, "1")
    with pytest.raises(RuntimeError), device_session(local, "r4") as work:
        raise RuntimeError("boom")
    assert Path(work).is_dir()


@pytest.mark.adb
def test_adb_session_cleans_up_on_keyboard_interrupt(adb_device: tuple[AdbDevice, StandinDevice]) -> None:
    device, dev = adb_device
    with pytest.raises(KeyboardInterrupt), device_session(device, new_run_id()) as work:
        device.run(f"echo data > {work}/out.txt", timeout_s=10)
        assert dev.fs.host_path(f"{work}/out.txt").is_file()
        raise KeyboardInterrupt
    assert not dev.fs.host_path(work).exists()
    assert device.run(f"[ -e {work} ]", timeout_s=10).returncode == 1


@pytest.mark.adb
def test_adb_session_survives_a_lost_device(adb_device: tuple[AdbDevice, StandinDevice]) -> None:
    device, dev = adb_device
    with pytest.raises(RuntimeError, match="original"), device_session(device, new_run_id()):
        dev.kill()
        raise RuntimeError("original")  # cleanup cannot reach the phone; this error still wins

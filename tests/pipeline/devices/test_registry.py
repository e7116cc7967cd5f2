"""Transport registry and `adb devices -l` listing."""

from __future__ import annotations

from pathlib import Path

import pytest
from standin.adb_env import AdbServer

from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.devices.adb_client import parse_devices
from specdec.pipeline.devices.local import LocalDevice
from specdec.pipeline.devices.registry import list_adb_devices, open_device, transports
from specdec.pipeline.errors import DeviceError, InputError
from specdec.pipeline.settings.profiles import Transport, load_device

from .conftest import MakeStandin, make_profile


def test_open_local_and_errors() -> None:
    profile = load_device("local-cpu")
    assert isinstance(open_device(profile.transport, profile=profile), LocalDevice)
    assert isinstance(open_device("local", profile=profile), LocalDevice)
    assert transports() == ["adb", "local"]
    with pytest.raises(InputError, match="unknown device transport 'usb'"):
        open_device("usb", profile=profile)
    with pytest.raises(InputError, match="adb transport only"):
        open_device("local", profile=profile, serial="X")


def test_parse_devices_states() -> None:
    text = ("List of devices attached\n"
            "R58M1234 device usb:1-1 product:a54x model:SM_A546B device:a54x transport_id:3\n"
            "0123 no permissions (user in plugdev group; are your udev rules wrong?); see [http://x] usb:1-2\n"
            "emulator-5554 unauthorized transport_id:4\n")
    entries = parse_devices(text)
    assert [(e.serial, e.state, e.model) for e in entries] == [
        ("R58M1234", "device", "SM_A546B"), ("0123", "no permissions", None), ("emulator-5554", "unauthorized", None)]


@pytest.mark.adb
def test_list_and_open_adb(adb_environ: AdbServer, make_standin: MakeStandin) -> None:
    dev = make_standin(model="Pixel_8")
    entries = list_adb_devices()
    assert [(e.serial, e.state, e.model) for e in entries] == [(dev.serial, "device", "Pixel_8")]
    device = open_device(Transport.adb, profile=make_profile())
    assert isinstance(device, AdbDevice) and device.serial == dev.serial


def test_list_without_adb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DeviceError, match="adb binary was not found"):
        list_adb_devices()

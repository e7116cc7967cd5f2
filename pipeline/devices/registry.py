"""Transport name -> factory. A new transport registers here; callers never branch on names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.devices.adb_client import AdbClient, AdbDeviceEntry
from specdec.pipeline.devices.base import Device
from specdec.pipeline.devices.local import LocalDevice
from specdec.pipeline.errors import InputError
from specdec.pipeline.settings.profiles import DeviceProfile, Transport


class DeviceFactory(Protocol):
    def __call__(self, *, profile: DeviceProfile, serial: str | None, adb_host: str | None,
                 adb_port: int | None) -> Device: ...


def _open_local(*, profile: DeviceProfile, serial: str | None, adb_host: str | None,
                adb_port: int | None) -> Device:
    if serial or adb_host or adb_port:
        raise InputError("--serial, -H and -P apply to the adb transport only",
                         "drop them, or use a profile with `transport: adb`")
    return LocalDevice(profile)


def _open_adb(*, profile: DeviceProfile, serial: str | None, adb_host: str | None,
              adb_port: int | None) -> Device:
    return AdbDevice(profile, serial, adb_host=adb_host, adb_port=adb_port)


_FACTORIES: dict[str, DeviceFactory] = {
    Transport.local.value: _open_local,
    Transport.adb.value: _open_adb,
}


def register(transport: str) -> Callable[[DeviceFactory], DeviceFactory]:
    """Decorator for a further transport (e.g. a device farm's own client)."""

    def add(factory: DeviceFactory) -> DeviceFactory:
        _FACTORIES[transport] = factory
        return factory

    return add


def transports() -> list[str]:
    return sorted(_FACTORIES)


def open_device(transport: str | Transport, *, profile: DeviceProfile, serial: str | None = None,
                adb_host: str | None = None, adb_port: int | None = None) -> Device:
    name = transport.value if isinstance(transport, Transport) else transport
    factory = _FACTORIES.get(name)
    if factory is None:
        raise InputError(f"unknown device transport '{name}'", f"use one of: {', '.join(transports())}")
    return factory(profile=profile, serial=serial, adb_host=adb_host, adb_port=adb_port)


def list_adb_devices(*, adb_host: str | None = None, adb_port: int | None = None,
                     env: Mapping[str, str] | None = None,
                     adb_path: str | None = None) -> list[AdbDeviceEntry]:
    """What `adb devices -l` sees: serial, state, model (DeviceError when adb is missing)."""
    return AdbClient(adb_path=adb_path, host=adb_host, port=adb_port, env=env).devices()

"""Whether a device can run the bench, checked before a long run (`specdec devices`, `specdec devices --fleet`).

A device is ready when its adb server lists it as `device` and the runner can start there as its
profile says (`runtime.use`): with the device's own Python (numpy and onnxruntime importable), or
with the portable runtime, which exists for some ABIs only (it is pushed by the first bench when
the device does not hold the current one yet).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.devices.adb_client import STATE_FIXES, AdbClient
from specdec.pipeline.devices.base import Device, DeviceInfo
from specdec.pipeline.errors import DeviceError
from specdec.pipeline.ondevice.session import DeviceTarget
from specdec.pipeline.portable import recipe
from specdec.pipeline.portable.archive import find_current
from specdec.pipeline.portable.remote import present
from specdec.pipeline.settings.fleet import FleetEntry, FleetFile
from specdec.pipeline.settings.profiles import RuntimeKind, Transport


@dataclass(frozen=True)
class RuntimeStatus:
    """Portable runtimes on the device, and whether this machine's current one (for its ABI) is among them."""

    present: list[str]
    current: str | None
    current_present: bool


def runtime_status(device: Device, abi: str | None) -> RuntimeStatus:
    on_device = present(device)
    current = find_current(abi) if abi else None
    return RuntimeStatus(sorted(on_device), current.id if current else None,
                         bool(current and on_device.get(current.id) == current.sha256))


@dataclass
class Readiness:
    """One fleet entry, checked."""

    label: str
    serial: str
    server: str | None  # host:port; None: the local adb server
    profile: str
    state: str  # as adb lists it, or "not attached" / "server unreachable"
    info: DeviceInfo | None = None
    runtime: RuntimeStatus | None = None
    runs_with: str | None = None  # what would start the runner: "device-python" or "portable"
    problem: str | None = None  # None: ready

    @property
    def ready(self) -> bool:
        return self.problem is None


def check_entry(entry: FleetEntry) -> Readiness:
    """Reachable, ready, and able to start the runner as its profile says; a problem is a field, never raised."""
    profile = DeviceTarget(Transport.adb, entry.profile).load_profile()  # InputError: the fleet file is wrong
    row = Readiness(entry.name, entry.serial, entry.server, profile.name, state="unknown")
    try:
        listed = {e.serial: e for e in AdbClient(host=entry.host, port=entry.port).devices()}
    except DeviceError as exc:
        row.state, row.problem = "server unreachable", exc.one_line()
        return row
    found = listed.get(entry.serial)
    if found is None:
        row.state = "not attached"
        where = f" -H {entry.host}" * bool(entry.host) + f" -P {entry.port}" * bool(entry.port)
        row.problem = (f"not attached (the server lists {', '.join(listed) or 'nothing'}) — "
                       f"`adb{where} connect {entry.serial}` for a network device")
        return row
    row.state = found.state
    if found.state != "device":
        row.problem = f"{found.state} — {STATE_FIXES.get(found.state, 'check `adb devices -l` and reconnect it')}"
        return row
    try:
        device = AdbDevice(profile, entry.serial, adb_host=entry.host, adb_port=entry.port)
        row.info = info = device.info(profile.runtime.python)
        row.runtime = runtime_status(device, info.abi)
    except DeviceError as exc:  # lost between the listing and the probe
        row.problem = exc.one_line()
        return row
    python_ok = info.python is not None and info.python.usable
    portable_ok = (info.abi or recipe.DEFAULT_ABI) in recipe.ABIS
    use = profile.runtime.use
    if python_ok and use is not RuntimeKind.portable:
        row.runs_with = RuntimeKind.device_python.value
    elif portable_ok and use is not RuntimeKind.device_python:
        row.runs_with = RuntimeKind.portable.value
    else:
        missing = ", ".join(info.python.missing) if info.python else f"python ({profile.runtime.python})"
        portable = "" if use is RuntimeKind.device_python else (
            f"; the portable runtime exists for {', '.join(sorted(recipe.ABIS))}, not {info.abi}")
        row.problem = f"cannot start the runner: the device's Python lacks {missing}{portable}"
    return row


def check_fleet(fleet: FleetFile) -> list[Readiness]:
    """Every entry checked, side by side (each waits on adb and its device), in the fleet's order."""
    with ThreadPoolExecutor(min(len(fleet.devices), 8), thread_name_prefix="specdec-check") as pool:
        return list(pool.map(check_entry, fleet.devices))

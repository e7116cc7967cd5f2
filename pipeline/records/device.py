"""What the host learns about a device: its identity, its Python, thermal readings and cool-down.

The transports (`specdec.pipeline.devices`) produce these and `results.json` stores them as they
are, so they live with the other records.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PythonStatus:
    """What the device's Python can do: the runner needs numpy and onnxruntime."""

    executable: str
    found: bool
    version: str | None = None
    numpy: str | None = None
    onnxruntime: str | None = None

    @property
    def usable(self) -> bool:
        return self.found and self.numpy is not None and self.onnxruntime is not None

    @property
    def missing(self) -> list[str]:
        if not self.found:
            return [f"python ({self.executable})"]
        modules = (("numpy", self.numpy), ("onnxruntime", self.onnxruntime))
        return [name for name, version in modules if not version]


@dataclass(frozen=True)
class DeviceInfo:
    serial: str
    transport: str
    model: str = "unknown"
    android_version: str | None = None
    abi: str | None = None
    battery_level: int | None = None
    charging: bool | None = None
    charging_source: str | None = None  # "usb", "ac", "wireless" when known
    python: PythonStatus | None = None
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HalTemperature:
    """One `dumpsys thermalservice` HAL entry."""

    name: str
    value_c: float | None
    type: int | None = None
    status: int | None = None


@dataclass(frozen=True)
class ThermalSnapshot:
    available: bool
    temperatures: list[HalTemperature] = field(default_factory=list)
    raw: str = ""
    detail: str = ""  # why it is unavailable


@dataclass(frozen=True)
class CooldownResult:
    status: str  # reached | timeout | unavailable
    target_c: float
    waited_s: float
    start_c: float | None = None
    final_c: float | None = None
    hottest_zone: str | None = None
    readings: list[tuple[float, float]] = field(default_factory=list)  # (s since start, hottest °C)
    detail: str = ""

"""Host side of adaptive speculation for a bench run: the device's sensors for the controllers.

Which controllers run, with which targets, is resolved in `specdec.pipeline.settings.resolve`; the
runner on the device builds them (`runtime.controllers.build_chain`) from that spec, and the
sensor files found here go on its command line, where device path mapping applies.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from specdec.pipeline.devices.base import Device
from specdec.pipeline.devices.sensor_log import detect_current_unit, detect_voltage_unit
from specdec.pipeline.devices.sensors import plan_sensors
from specdec.pipeline.settings.profiles import DeviceProfile, DischargeSign

log = logging.getLogger(__name__)


@dataclass
class SensorArgs:
    thermal_paths: list[str]
    battery: tuple[str, str] | None
    power: dict[str, Any]
    notes: list[str]


def sensor_args(device: Device, profile: DeviceProfile, names: tuple[str, ...]) -> SensorArgs:
    """Device paths for the thermal and power controllers, with battery units settled now."""
    notes: list[str] = []
    if not {"thermal", "power"} & set(names):
        return SensorArgs([], None, {}, notes)
    plan = plan_sensors(device, profile.sensors)
    thermal = [f.path for f in plan.fields if f.kind == "thermal"]
    if "thermal" in names and not thermal:
        notes.append("thermal controller off: no readable thermal zone on the device")
    current = next(f.path for f in plan.fields if f.kind == "current")
    voltage = next(f.path for f in plan.fields if f.kind == "voltage")
    power = _battery_units(device, profile, current, voltage, notes) if "power" in names else None
    return SensorArgs(thermal, (current, voltage) if power else None, power or {}, notes)


def _battery_units(device: Device, profile: DeviceProfile, current: str, voltage: str,
                   notes: list[str]) -> dict[str, Any] | None:
    status_path = current.rsplit("/", 1)[0] + "/status"
    result = device.run(f"cat {current} {voltage} {status_path}", timeout_s=30)
    values = result.stdout.split()
    try:
        amps, volts = float(values[0]), float(values[1])
    except (IndexError, ValueError):
        notes.append("power controller off: battery current/voltage unreadable")
        return None
    sensors = profile.sensors
    current_unit = sensors.current_unit.value if sensors.current_unit.value != "auto" else \
        detect_current_unit([amps], [values[0]])[0]
    voltage_unit = sensors.voltage_unit.value if sensors.voltage_unit.value != "auto" else detect_voltage_unit([volts])
    sign = sensors.discharge_sign
    if sign is DischargeSign.auto:
        status = values[2] if len(values) > 2 else ""
        if status != "Discharging" or amps == 0:
            notes.append(f"power controller off: discharge sign unknown (battery status '{status or 'unknown'}')")
            return None
        sign = DischargeSign.negative if amps < 0 else DischargeSign.positive
    if current_unit is None or voltage_unit is None:
        notes.append("power controller off: battery units could not be determined")
        return None
    return {"budget_w": profile.power.budget_w, "current_unit": current_unit, "voltage_unit": voltage_unit,
            "discharge_negative": sign is DischargeSign.negative}

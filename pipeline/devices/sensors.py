"""On-device sensors: a shell sampling loop, `dumpsys thermalservice`, and cooling down.

The sampler is a plain `sh` loop started with `Device.start_background`, so it needs no Python
on the phone and costs one `date` fork per sample (values are read with the `read` builtin).
Every sysfs path is inlined in the command string — never in a pushed file — so transports or
stand-ins that map paths see them. It stops when its stop file appears, or when killed.
"""

from __future__ import annotations

import logging
import math
import posixpath
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specdec.pipeline.devices.base import BackgroundJob, Device
from specdec.pipeline.devices.sensor_log import TEMP_TO_C, SensorField, SensorLog, detect_temp_unit, header_lines
from specdec.pipeline.devices.sensor_log import parse_sensor_log as parse_sensor_log  # re-exported
from specdec.pipeline.devices.shell import q, seconds
from specdec.pipeline.records.device import CooldownResult as CooldownResult  # re-exported
from specdec.pipeline.records.device import HalTemperature as HalTemperature
from specdec.pipeline.records.device import ThermalSnapshot as ThermalSnapshot
from specdec.pipeline.records.results import ThermalEvent
from specdec.pipeline.settings.profiles import SensorSpec, ThermalSpec

log = logging.getLogger(__name__)

UNAVAILABLE = "unavailable"
_NATURAL = re.compile(r"(\d+)")
_HAL_ENTRY = re.compile(r"Temperature\{([^}]*)\}")


def _natural(name: str) -> list[object]:
    return [int(part) if part.isdigit() else part for part in _NATURAL.split(name)]


@dataclass(frozen=True)
class SensorPlan:
    interval_ms: int
    fields: tuple[SensorField, ...]
    rapl_max_uj: int | None = None
    missing_zone_types: tuple[str, ...] = ()

    def zones(self) -> list[SensorField]:
        return [f for f in self.fields if f.kind == "thermal"]


def discover(device: Device, sensors: SensorSpec) -> tuple[list[tuple[str, str]], list[str], int | None]:
    """(thermal zones as (dir name, type), cpus with cpufreq, RAPL wrap value) on the device."""
    rapl_max = posixpath.join(posixpath.dirname(sensors.rapl_energy), "max_energy_range_uj") \
        if sensors.rapl_energy and not device.is_android else None
    command = (
        f"for z in {q(sensors.thermal_dir)}/thermal_zone*; do [ -r \"$z/temp\" ] || continue; t=; "
        "read -r t < \"$z/type\"; printf 'zone\\t%s\\t%s\\n' \"${z##*/}\" \"$t\"; done 2>/dev/null; "
        f"for c in {q(sensors.cpufreq_dir)}/cpu[0-9]*; do [ -r \"$c/cpufreq/scaling_cur_freq\" ] && "
        "printf 'cpu\\t%s\\n' \"${c##*/}\"; done 2>/dev/null; "
        + (f"[ -r {q(rapl_max)} ] && {{ m=; read -r m < {q(rapl_max)}; printf 'rapl_max\\t%s\\n' \"$m\"; }}; "
           if rapl_max else "")
        + "true")
    zones: list[tuple[str, str]] = []
    cpus: list[str] = []
    wrap: int | None = None
    for line in device.run(command, timeout_s=60).stdout.splitlines():
        parts = line.split("\t")
        if parts[0] == "zone" and len(parts) >= 2:
            zones.append((parts[1], parts[2].strip() if len(parts) > 2 else ""))
        elif parts[0] == "cpu" and len(parts) == 2:
            cpus.append(parts[1])
        elif parts[0] == "rapl_max" and len(parts) == 2 and parts[1].strip().isdigit():
            wrap = int(parts[1])
    return sorted(zones, key=lambda z: _natural(z[0])), sorted(cpus, key=_natural), wrap


Zone = tuple[str, str]  # (thermal_zoneN, type)


def _select_zones(zones: list[Zone], wanted: Sequence[str]) -> tuple[list[Zone], tuple[str, ...]]:
    if not wanted:
        return zones, ()
    chosen = [z for z in zones if z[1] in wanted]
    return chosen, tuple(t for t in wanted if t not in {z[1] for z in zones})


def plan_sensors(device: Device, sensors: SensorSpec) -> SensorPlan:
    zones, cpus, rapl_max = discover(device, sensors)
    chosen, missing = _select_zones(zones, sensors.thermal_zone_types)
    if missing:
        log.warning("thermal zone types %s are not on %s (it has: %s)", ", ".join(missing), device.serial,
                    ", ".join(sorted({z[1] for z in zones})) or "none")
    battery = sensors.battery_dir
    fields = [SensorField("current_now", "current", posixpath.join(battery, "current_now")),
              SensorField("voltage_now", "voltage", posixpath.join(battery, "voltage_now")),
              SensorField("status", "status", posixpath.join(battery, "status")),
              SensorField("usb_online", "usb_online", sensors.usb_online)]
    fields += [SensorField(name, "thermal", posixpath.join(sensors.thermal_dir, name, "temp"), kind)
               for name, kind in chosen]
    fields += [SensorField(cpu, "cpufreq", posixpath.join(sensors.cpufreq_dir, cpu, "cpufreq", "scaling_cur_freq"))
               for cpu in cpus]
    if sensors.rapl_energy and not device.is_android:  # RAPL is a host (x86) counter
        fields.append(SensorField("rapl", "rapl", sensors.rapl_energy))
    return SensorPlan(sensors.interval_ms, tuple(fields), rapl_max, missing)


def sampler_command(plan: SensorPlan, out_file: str, stop_file: str) -> str:
    header = " ".join(q(line) for line in header_lines(plan.fields, plan.interval_ms, plan.rapl_max_uj))
    reads = " ".join(f"sample_value {q(f.path)};" for f in plan.fields)
    return "\n".join([
        # `read` is a builtin: no fork per value; stderr of a missing file is dropped. (Not `r`:
        # mksh, Android's sh, predefines the alias r='fc -e -', which shadows a function.)
        "sample_value() { v=; read -r v < \"$1\"; printf '\\t%s' \"$v\"; } 2>/dev/null",
        f"{{ printf '%s\\n' {header}",
        f"while [ ! -e {q(stop_file)} ]; do",
        "  t=$(date +%s%N 2>/dev/null); case \"$t\" in ''|*[!0-9]*) t=\"$(date +%s)s\";; esac",
        f"  printf '%s' \"$t\"; {reads} printf '\\n'",
        f"  sleep {seconds(plan.interval_ms / 1000)}",
        f"done; }} > {q(out_file)}",
    ])


@dataclass
class SensorSampler:
    """A running sampler; `stop()` ends it and returns the parsed log (raw text in `raw_text`)."""

    device: Device
    sensors: SensorSpec
    plan: SensorPlan
    job: BackgroundJob
    out_file: str
    stop_file: str
    raw_text: str = ""
    result: SensorLog | None = field(default=None, repr=False)

    def stop(self) -> SensorLog:
        self.device.run(f"touch {q(self.stop_file)}", timeout_s=30)
        if self.device.wait_job(self.job, timeout_s=self.plan.interval_ms / 1000 * 3 + 5, poll_s=0.1) is None:
            self.device.stop_job(self.job)
        self.raw_text = self.device.read_text(self.out_file)
        result = parse_sensor_log(self.raw_text, self.sensors)
        if self.plan.missing_zone_types:
            missing = ", ".join(self.plan.missing_zone_types)
            result.warnings.append(f"thermal zone types not on the device: {missing}")
        self.result = result
        return result


def start_sampling(device: Device, sensors: SensorSpec, workdir: str, *, max_duration_s: float,
                   name: str = "sensors") -> SensorSampler:
    """Start the loop in `workdir`; it ends by itself after `max_duration_s` at the latest."""
    plan = plan_sensors(device, sensors)
    out_file = posixpath.join(workdir, f"{name}.tsv")
    stop_file = posixpath.join(workdir, f"{name}.stop")
    device.run(f"rm -f {q(stop_file)}", timeout_s=30)
    job = device.start_background(sampler_command(plan, out_file, stop_file), cwd=workdir, name=name,
                                  timeout_s=max_duration_s)
    return SensorSampler(device, sensors, plan, job, out_file, stop_file)


# ------------------------------------------------------------------------------- thermalservice
def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def parse_thermalservice(text: str) -> list[HalTemperature]:
    """The `Temperature{mValue=.., mType=.., mName=.., mStatus=..}` lines under
    "Current temperatures from HAL:" (the live values; "Cached temperatures" may be stale)."""
    found: list[HalTemperature] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("Current temperatures from HAL"):
            inside = True
            continue
        if inside and line and not line[0].isspace():
            break
        match = _HAL_ENTRY.search(line) if inside else None
        if match:
            pairs = (p.strip() for p in match.group(1).split(","))
            values = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
            try:
                value: float | None = float(values.get("mValue", "nan"))
            except ValueError:
                value = None
            found.append(HalTemperature(name=values.get("mName", "?"),
                                        value_c=None if value is None or math.isnan(value) else value,
                                        type=_int(values.get("mType")), status=_int(values.get("mStatus"))))
    return found


def thermal_snapshot(device: Device) -> ThermalSnapshot:
    if not device.is_android:
        return ThermalSnapshot(False, detail=f"{UNAVAILABLE}: dumpsys exists on Android only")
    result = device.run("dumpsys thermalservice", timeout_s=60)
    temps = parse_thermalservice(result.stdout)
    if result.returncode != 0 or "Can't find service" in result.stdout + result.stderr:
        why = (result.stderr or result.stdout).strip()[:120]
        return ThermalSnapshot(False, raw=result.stdout, detail=f"{UNAVAILABLE}: dumpsys thermalservice failed ({why})")
    return ThermalSnapshot(True, temps, result.stdout,
                           "" if temps else "no 'Current temperatures from HAL' entries")


# ------------------------------------------------------------------------------- cooldown
def read_zone_temps(device: Device, zones: Sequence[SensorField]) -> dict[str, float]:
    """°C of each readable zone, keyed by its type (zone name when the type is empty)."""
    if not zones:
        return {}
    paths = " ".join(q(z.path) for z in zones)
    out = device.run(f"for f in {paths}; do v=; read -r v 2>/dev/null < \"$f\"; echo \"$v\"; done",
                     timeout_s=30).stdout.splitlines()
    temps: dict[str, float] = {}
    for zone, text in zip(zones, out, strict=False):
        try:
            value = float(text)
        except ValueError:
            continue
        temps[zone.label or zone.name] = value * TEMP_TO_C[detect_temp_unit([value])]
    return temps


def wait_for_cooldown(device: Device, sensors: SensorSpec, thermal: ThermalSpec, timeout: float | None = None,
                      *, poll_s: float = 2.0, sleep: Callable[[float], None] = time.sleep) -> CooldownResult:
    """Wait until the hottest configured zone is below `thermal.start_temp_c`."""
    limit = thermal.cooldown_timeout_s if timeout is None else timeout
    target = thermal.start_temp_c
    zones, _, _ = discover(device, sensors)
    chosen, missing = _select_zones(zones, sensors.thermal_zone_types)
    fields = [SensorField(name, "thermal", posixpath.join(sensors.thermal_dir, name, "temp"), kind)
              for name, kind in chosen]
    start = time.monotonic()
    readings: list[tuple[float, float]] = []
    first: float | None = None
    while True:
        temps = read_zone_temps(device, fields)
        waited = time.monotonic() - start
        if not temps:
            why = f"no readable thermal zones under {sensors.thermal_dir}" + (
                f" of types {', '.join(missing)}" if missing else "")
            return CooldownResult(UNAVAILABLE, target, waited, detail=why)
        zone, hottest = max(temps.items(), key=lambda item: item[1])
        readings.append((waited, hottest))
        first = hottest if first is None else first
        if hottest < target:
            return CooldownResult("reached", target, waited, first, hottest, zone, readings)
        if waited >= limit:
            detail = f"{zone} at {hottest:.1f} °C after {waited:.0f} s, target below {target:g} °C"
            log.warning("%s: still hot (%s); measuring anyway", device.serial, detail)
            return CooldownResult("timeout", target, waited, first, hottest, zone, readings, detail)
        log.info("cooling down: %s at %.1f °C, target below %g °C", zone, hottest, target)
        sleep(min(poll_s, max(limit - waited, 0.0)))


# ------------------------------------------------------------------------------- thermal events
def thermal_events(sensors: SensorLog, thermal: ThermalSpec) -> list[ThermalEvent]:
    """Threshold crossings of the hottest zone, with the profile's hysteresis (docs/design.md §5).

    normal -> throttle above `throttle_c`, -> disable above `disable_c`; back to normal only
    below `recover_c`. Each transition is one event with the sample's device time.
    """
    events: list[ThermalEvent] = []
    state = "normal"
    start = sensors.start_epoch_s
    for sample in sensors.samples:
        if not sample.temps_c or start is None:
            continue
        zone, temp = max(sample.temps_c.items(), key=lambda item: item[1])
        new = state
        if temp > thermal.disable_c:
            new = "disable"
        elif temp > thermal.throttle_c and state == "normal":
            new = "throttle"
        elif temp < thermal.recover_c:
            new = "normal"
        if new != state:
            events.append(ThermalEvent(name=f"thermal_{new}", from_state=state, to=new, temp_c=temp, zone=zone,
                                       ts_ns=int((start + sample.t_s) * 1e9)))
            state = new
    return events

"""Turn the sampler's raw log into samples: power (mW), temperatures (°C), charging state.

The log keeps raw sysfs text; every conversion records what it assumed (units, sign) so a
reader can redo it. Nothing is filled in: a field that was never readable is "unavailable",
never zero, and power is None when current, voltage or the discharge sign is unknown.

Log format (tab-separated): `#specdec-sensors 1`, `#interval_ms N`, optional `#rapl_max_uj N`,
one `#field NAME KIND LABEL` per column, then rows `TIMESTAMP VALUE...` where TIMESTAMP is
`date +%s%N` nanoseconds, or `<seconds>s` where the device's `date` lacks %N.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specdec.pipeline.settings.profiles import CurrentUnit, DischargeSign, SensorSpec, VoltageUnit

MAGIC = "#specdec-sensors"
VERSION = "1"
CURRENT_TO_A = {"uA": 1e-6, "mA": 1e-3, "A": 1.0}
VOLTAGE_TO_V = {"uV": 1e-6, "mV": 1e-3, "V": 1.0}
TEMP_TO_C = {"m°C": 1e-3, "d°C": 1e-1, "°C": 1.0}
USB_WARNING = ("device is powered over USB: battery current_now does not show the full draw (discharge "
               "current is masked); measure energy on battery, e.g. over wireless adb")


@dataclass(frozen=True)
class SensorField:
    name: str  # column name, unique: current_now, thermal_zone3, cpu4, rapl, ...
    kind: str  # current | voltage | status | usb_online | thermal | cpufreq | rapl
    path: str  # device path read by the loop (not written to the log)
    label: str = ""  # zone type for thermal fields


@dataclass(frozen=True)
class Sample:
    t_s: float  # seconds since the first sample
    raw: dict[str, str]  # every column as read, "" when unreadable
    power_mw: float | None  # battery discharge power, > 0 while the battery drains
    rapl_power_mw: float | None  # package power from energy_uj since the previous sample
    charging: bool | None
    usb_online: bool | None
    temps_c: dict[str, float]
    cpu_khz: dict[str, int]


@dataclass(frozen=True)
class SensorLog:
    samples: list[Sample]
    interval_ms: int | None
    timestamp_resolution: str  # "ns", or "s" where `date` has no %N
    available: dict[str, bool]  # per column: was it ever readable
    current_unit: str | None
    current_unit_source: str  # profile | auto | unavailable
    voltage_unit: str | None
    voltage_unit_source: str
    discharge_sign: str | None  # negative | positive
    discharge_sign_source: str  # profile | auto | unknown
    temp_units: dict[str, str]
    charging: bool
    usb_powered: bool
    warnings: list[str] = field(default_factory=list)
    skipped_lines: int = 0
    rapl_energy_mj: float | None = None
    start_epoch_s: float | None = None  # device clock of the first sample, to align with runner events

    def power_values(self) -> list[float]:
        battery = [s.power_mw for s in self.samples if s.power_mw is not None]
        return battery or [s.rapl_power_mw for s in self.samples if s.rapl_power_mw is not None]

    def mean_power_mw(self) -> float | None:
        values = self.power_values()
        return statistics.fmean(values) if values else None

    def peak_temp_c(self) -> float | None:
        temps = [t for s in self.samples for t in s.temps_c.values()]
        return max(temps) if temps else None

    def energy_mj(self) -> float | None:
        """RAPL's counter when read, else the trapezoid of battery power over sample times."""
        if self.rapl_energy_mj is not None:
            return self.rapl_energy_mj
        points = [(s.t_s, s.power_mw) for s in self.samples if s.power_mw is not None]
        if len(points) < 2:
            return None
        return sum((p0 + p1) / 2 * (t1 - t0) for (t0, p0), (t1, p1) in itertools.pairwise(points))

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["mean_power_mw"] = self.mean_power_mw()
        data["energy_mj"] = self.energy_mj()
        return data


def header_lines(fields: Sequence[SensorField], interval_ms: int, rapl_max_uj: int | None) -> list[str]:
    lines = [f"{MAGIC}\t{VERSION}", f"#interval_ms\t{interval_ms}"]
    if rapl_max_uj is not None:
        lines.append(f"#rapl_max_uj\t{rapl_max_uj}")
    lines += [f"#field\t{f.name}\t{f.kind}\t{'_'.join(f.label.split())}" for f in fields]
    return lines


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def detect_current_unit(values: Sequence[float], raw: Sequence[str]) -> tuple[str | None, str | None]:
    """(unit, warning) from magnitudes: phones draw ~10 mA..10 A, so µA values are >= 10 000."""
    mags = [abs(v) for v in values if v != 0]
    if not mags:
        return None, None
    median = statistics.median(mags)
    if any("." in r for r in raw) or median < 10:
        unit = "A"
    elif median >= 10_000:
        unit = "uA"
    else:
        unit = "mA"
    warning = None
    if 1_000 <= median < 20_000:
        warning = (f"battery current magnitude {median:g} fits both mA and µA; assumed {unit} — "
                   "set sensors.current_unit in the profile")
    return unit, warning


def detect_voltage_unit(values: Sequence[float]) -> str | None:
    """Li-ion packs sit at 3-9 V: µV, mV and V magnitudes never overlap."""
    mags = [abs(v) for v in values if v != 0]
    if not mags:
        return None
    median = statistics.median(mags)
    return "uV" if median >= 100_000 else "mV" if median >= 100 else "V"


def detect_temp_unit(values: Sequence[float]) -> str:
    """Thermal zones report milli-°C; a few drivers report °C or tenths."""
    mags = [abs(v) for v in values]
    median = statistics.median(mags) if mags else 0.0
    return "m°C" if median >= 1000 else "°C" if median < 200 else "d°C"


def _columns(fields: Sequence[SensorField], rows: Sequence[dict[str, str]], kind: str) -> list[str]:
    return [f.name for f in fields if f.kind == kind and any(r[f.name] for r in rows)]


def _parse_header(lines: list[str]) -> tuple[list[SensorField], int | None, int | None, list[str]]:
    fields: list[SensorField] = []
    interval = rapl_max = None
    rows: list[str] = []
    for line in lines:
        if not line.startswith("#"):
            rows.append(line)
            continue
        parts = line.split("\t")
        if parts[0] == "#field" and len(parts) >= 3:
            fields.append(SensorField(parts[1], parts[2], "", parts[3] if len(parts) > 3 else ""))
        elif parts[0] == "#interval_ms" and len(parts) > 1 and parts[1].isdigit():
            interval = int(parts[1])
        elif parts[0] == "#rapl_max_uj" and len(parts) > 1 and parts[1].isdigit():
            rapl_max = int(parts[1])
    return fields, interval, rapl_max, rows


def _timestamp(text: str) -> tuple[float, str] | None:
    if text.endswith("s") and text[:-1].isdigit():
        return float(text[:-1]), "s"
    return (int(text) / 1e9, "ns") if text.isdigit() else None


def _zone_keys(fields: Sequence[SensorField]) -> dict[str, str]:
    """Temperatures are keyed by zone type; repeated types get their zone's name appended."""
    labels = [f.label or f.name for f in fields if f.kind == "thermal"]
    return {f.name: (f.label or f.name) if labels.count(f.label or f.name) == 1 else f"{f.label} ({f.name})"
            for f in fields if f.kind == "thermal"}


def parse_sensor_log(text: str, sensors: SensorSpec) -> SensorLog:
    lines = [line for line in text.splitlines() if line.strip()]
    fields, interval, rapl_max, data_lines = _parse_header(lines)
    names = [f.name for f in fields]
    rows: list[dict[str, str]] = []
    times: list[float] = []
    resolution = "ns"
    skipped = 0
    for line in data_lines:
        parts = line.split("\t")
        stamp = _timestamp(parts[0])
        if stamp is None or len(parts) != len(names) + 1:
            skipped += 1  # e.g. the last line, cut when the sampler was killed
            continue
        times.append(stamp[0])
        resolution = "s" if stamp[1] == "s" else resolution
        rows.append(dict(zip(names, (p.strip() for p in parts[1:]), strict=True)))
    warnings: list[str] = []
    available = {name: any(r[name] for r in rows) for name in names}

    def column(kind: str) -> str | None:
        found = _columns(fields, rows, kind)
        return found[0] if found else None

    kinds = ("current", "voltage", "status", "usb_online", "rapl")
    cur_col, volt_col, status_col, usb_col, rapl_col = (column(k) for k in kinds)
    currents = [_number(r[cur_col]) if cur_col else None for r in rows]
    voltages = [_number(r[volt_col]) if volt_col else None for r in rows]

    cur_unit, cur_source = _unit(sensors.current_unit, CurrentUnit.auto,
                                 [c for c in currents if c is not None],
                                 [r[cur_col] for r in rows if cur_col], warnings, current=True)
    volt_unit, volt_source = _unit(sensors.voltage_unit, VoltageUnit.auto,
                                   [v for v in voltages if v is not None], [], warnings, current=False)
    statuses = [r[status_col] if status_col else "" for r in rows]
    sign, sign_source = _sign(sensors.discharge_sign, currents, statuses, warnings,
                              have_current=cur_col is not None)

    zone_keys = _zone_keys(fields)
    temp_units = {}
    for name in zone_keys:
        values = [v for v in (_number(r[name]) for r in rows) if v is not None]
        if values:
            temp_units[name] = detect_temp_unit(values)
            if temp_units[name] == "d°C":
                warnings.append(f"thermal zone {zone_keys[name]} reads {statistics.median(values):g}: "
                                "assumed tenths of °C")
    cpu_cols = [f.name for f in fields if f.kind == "cpufreq"]
    t0 = times[0] if times else 0.0
    samples: list[Sample] = []
    rapl_total_uj = 0.0
    rapl_ok = rapl_col is not None
    prev_energy: float | None = None
    for i, row in enumerate(rows):
        power = None
        current, voltage = currents[i], voltages[i]
        if current is not None and voltage is not None and cur_unit and volt_unit and sign:
            watts = current * CURRENT_TO_A[cur_unit] * voltage * VOLTAGE_TO_V[volt_unit]
            power = watts * 1000 * (-1 if sign == "negative" else 1)
        rapl_power = None
        energy = _number(row[rapl_col]) if rapl_col else None
        if energy is None:
            rapl_ok = False
        elif prev_energy is not None:
            delta = energy - prev_energy
            if delta < 0 and rapl_max:
                delta += rapl_max  # the counter wrapped at max_energy_range_uj
            if delta < 0:
                rapl_ok = False
            else:
                rapl_total_uj += delta
                dt = times[i] - times[i - 1]
                rapl_power = delta / dt / 1000 if dt > 0 else None
        prev_energy = energy if energy is not None else prev_energy
        usb = row[usb_col] == "1" if usb_col else None
        samples.append(Sample(
            t_s=times[i] - t0, raw=row, power_mw=power, rapl_power_mw=rapl_power,
            charging=statuses[i] == "Charging" if statuses[i] else None, usb_online=usb,
            temps_c={zone_keys[n]: v * TEMP_TO_C[temp_units[n]] for n in zone_keys
                     if n in temp_units and (v := _number(row[n])) is not None},
            cpu_khz={n: int(v) for n in cpu_cols if (v := _number(row[n])) is not None}))
    charging = any(s.charging for s in samples)
    usb_powered = any(s.usb_online for s in samples)
    if usb_powered or (charging and usb_col is None):
        warnings.append(USB_WARNING + (" (status: Charging)" if charging else ""))
    if resolution == "s":
        warnings.append("the device's `date` has no %N: timestamps have 1 s resolution")
    return SensorLog(samples=samples, interval_ms=interval, timestamp_resolution=resolution,
                     available=available,
                     current_unit=cur_unit, current_unit_source=cur_source, voltage_unit=volt_unit,
                     voltage_unit_source=volt_source, discharge_sign=sign, discharge_sign_source=sign_source,
                     temp_units={zone_keys[n]: u for n, u in temp_units.items()}, charging=charging,
                     usb_powered=usb_powered, warnings=warnings, skipped_lines=skipped,
                     rapl_energy_mj=rapl_total_uj / 1000 if rapl_ok and len(rows) > 1 else None,
                     start_epoch_s=t0 if times else None)


def _unit(configured: CurrentUnit | VoltageUnit, auto: CurrentUnit | VoltageUnit, values: list[float],
          raw: list[str], warnings: list[str], *, current: bool) -> tuple[str | None, str]:
    if configured != auto:
        return configured.value, "profile"
    if not values:
        return None, "unavailable"
    if current:
        unit, warning = detect_current_unit(values, raw)
        if warning:
            warnings.append(warning)
    else:
        unit = detect_voltage_unit(values)
    return unit, "auto" if unit else "unavailable"


def _sign(configured: DischargeSign, currents: Sequence[float | None], statuses: Sequence[str],
          warnings: list[str], *, have_current: bool) -> tuple[str | None, str]:
    if configured != DischargeSign.auto:
        return configured.value, "profile"
    draining = [c for c, s in zip(currents, statuses, strict=True) if c is not None and s == "Discharging"]
    median = statistics.median(draining) if draining else 0.0
    if median:
        return ("negative" if median < 0 else "positive"), "auto"
    if have_current:
        warnings.append("cannot tell the discharge sign (no non-zero current while Discharging): power is "
                        "not reported; set sensors.discharge_sign in the profile")
    return None, "unknown"

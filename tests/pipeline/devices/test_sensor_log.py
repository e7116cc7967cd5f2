"""Parsing the sampler's raw log: units, sign, power, temperatures, RAPL, charging."""

from __future__ import annotations

import pytest

from specdec.pipeline.devices.sensor_log import (
    SensorField,
    detect_current_unit,
    detect_temp_unit,
    detect_voltage_unit,
    header_lines,
    parse_sensor_log,
)
from specdec.pipeline.settings.profiles import SensorSpec

FIELDS = (SensorField("current_now", "current", ""), SensorField("voltage_now", "voltage", ""),
          SensorField("status", "status", ""), SensorField("usb_online", "usb_online", ""),
          SensorField("thermal_zone0", "thermal", "", "cpu0"), SensorField("cpu0", "cpufreq", ""))


def log_text(rows: list[list[str]], fields: tuple[SensorField, ...] = FIELDS, rapl_max: int | None = None) -> str:
    lines = header_lines(fields, 200, rapl_max)
    return "\n".join(lines + ["\t".join(row) for row in rows]) + "\n"


def test_microunits_negative_discharge_auto() -> None:
    rows = [[str(1_000_000_000 + i * 200_000_000), "-450000", "3900000", "Discharging", "0", "41500", "1800000"]
            for i in range(5)]
    parsed = parse_sensor_log(log_text(rows), SensorSpec())
    assert (parsed.current_unit, parsed.voltage_unit) == ("uA", "uV")
    assert (parsed.current_unit_source, parsed.discharge_sign, parsed.discharge_sign_source) == ("auto", "negative",
                                                                                                 "auto")
    assert [s.power_mw for s in parsed.samples] == pytest.approx([1755.0] * 5)
    assert parsed.samples[-1].t_s == pytest.approx(0.8)
    assert parsed.samples[0].temps_c == {"cpu0": 41.5} and parsed.temp_units == {"cpu0": "m°C"}
    assert parsed.samples[0].cpu_khz == {"cpu0": 1_800_000}
    assert parsed.samples[0].raw["current_now"] == "-450000"  # raw values are kept
    assert parsed.energy_mj() == pytest.approx(1755.0 * 0.8)
    assert not parsed.charging and not parsed.warnings


def test_milli_units_positive_sign_and_truncated_last_line() -> None:
    rows = [["1000000000", "320", "3850", "Discharging", "0", "38", "900000"],
            ["1200000000", "330", "3850", "Discharging", "0", "38", "900000"],
            ["1400000000", "33"]]  # cut short when the sampler was killed
    parsed = parse_sensor_log(log_text(rows), SensorSpec())
    assert (parsed.current_unit, parsed.voltage_unit, parsed.discharge_sign) == ("mA", "mV", "positive")
    assert parsed.samples[0].power_mw == pytest.approx(0.320 * 3.850 * 1000)
    assert parsed.temp_units == {"cpu0": "°C"} and parsed.samples[0].temps_c == {"cpu0": 38.0}
    assert parsed.skipped_lines == 1 and len(parsed.samples) == 2


def test_profile_units_and_sign_win() -> None:
    rows = [["1000000000", "450", "3900", "Charging", "1", "40000", "1"]]
    spec = SensorSpec.model_validate({"current_unit": "mA", "voltage_unit": "mV", "discharge_sign": "negative"})
    parsed = parse_sensor_log(log_text(rows), spec)
    assert (parsed.current_unit_source, parsed.voltage_unit_source, parsed.discharge_sign_source) == (
        "profile", "profile", "profile")
    assert parsed.samples[0].power_mw == pytest.approx(-0.45 * 3.9 * 1000)  # charging: negative draw
    assert parsed.charging and parsed.usb_powered
    assert any("powered over USB" in w for w in parsed.warnings)


def test_unknown_sign_gives_no_power() -> None:
    rows = [["1000000000", "500000", "4000000", "Charging", "1", "40000", "1"]]
    parsed = parse_sensor_log(log_text(rows), SensorSpec())
    assert parsed.discharge_sign is None and parsed.discharge_sign_source == "unknown"
    assert parsed.samples[0].power_mw is None and parsed.mean_power_mw() is None
    assert any("discharge sign" in w for w in parsed.warnings)


def test_unreadable_fields_are_unavailable_not_zero() -> None:
    rows = [["5s", "", "", "", "", "41000", ""], ["6s", "", "", "", "", "42000", ""]]
    parsed = parse_sensor_log(log_text(rows), SensorSpec())
    assert parsed.available == {"current_now": False, "voltage_now": False, "status": False, "usb_online": False,
                                "thermal_zone0": True, "cpu0": False}
    assert parsed.current_unit is None and parsed.current_unit_source == "unavailable"
    assert all(s.power_mw is None for s in parsed.samples) and parsed.energy_mj() is None
    assert parsed.timestamp_resolution == "s" and parsed.samples[1].t_s == 1.0
    assert parsed.samples[0].cpu_khz == {}


def test_rapl_deltas_and_wrap() -> None:
    fields = (SensorField("thermal_zone0", "thermal", "", "x86_pkg_temp"), SensorField("rapl", "rapl", ""))
    rows = [["1000000000", "50000", "999000000"], ["1500000000", "50000", "999500000"],
            ["2000000000", "51000", "500000"]]  # wrapped at 1e9 µJ
    parsed = parse_sensor_log(log_text(rows, fields, rapl_max=1_000_000_000), SensorSpec())
    assert [s.rapl_power_mw for s in parsed.samples] == pytest.approx([None, 1000.0, 2000.0], nan_ok=True)
    assert parsed.rapl_energy_mj == pytest.approx(1500.0)
    assert parsed.mean_power_mw() == pytest.approx(1500.0)


def test_rapl_unreadable_is_none() -> None:
    fields = (SensorField("rapl", "rapl", ""),)
    parsed = parse_sensor_log(log_text([["1000000000", ""], ["2000000000", ""]], fields), SensorSpec())
    assert parsed.available == {"rapl": False} and parsed.rapl_energy_mj is None and parsed.energy_mj() is None


@pytest.mark.parametrize(("values", "raw", "unit", "warns"), [
    ([-450_000.0], ["-450000"], "uA", False),
    ([1200.0], ["1200"], "mA", True),  # 1.2 A or 1.2 mA: ambiguous
    ([0.45], ["0.45"], "A", False),
    ([250.0], ["250"], "mA", False),
])
def test_current_unit_detection(values: list[float], raw: list[str], unit: str, warns: bool) -> None:
    found, warning = detect_current_unit(values, raw)
    assert found == unit and (warning is not None) == warns


def test_voltage_and_temperature_units() -> None:
    assert [detect_voltage_unit([v]) for v in (3_900_000, 3900, 3.9)] == ["uV", "mV", "V"]
    assert [detect_temp_unit([v]) for v in (41500, 41.5, 415)] == ["m°C", "°C", "d°C"]

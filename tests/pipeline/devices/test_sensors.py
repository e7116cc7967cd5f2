"""On-device sampling loop, dumpsys thermalservice and cooldown, over the stand-in and locally."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from standin.adb_env import AdbServer

from specdec.pipeline.devices import sensors
from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.devices.local import LocalDevice
from specdec.pipeline.settings.profiles import SensorSpec, ThermalSpec

from .conftest import MakeStandin, make_profile

WORK = "/data/local/tmp/specdec/sensors-test"
HAL_TEXT = """Cached temperatures:
\tTemperature{mValue=99.0, mType=0, mName=cpu0, mStatus=0}
HAL Ready: true
Current temperatures from HAL:
\tTemperature{mValue=41.5, mType=0, mName=cpu0, mStatus=0}
\tTemperature{mValue=NaN, mType=3, mName=skin, mStatus=0}
Current cooling devices from HAL:
\tCoolingDevice{mValue=0, mType=0, mName=fan}
"""


def test_parse_thermalservice_reads_only_current_hal_values() -> None:
    temps = sensors.parse_thermalservice(HAL_TEXT)
    assert [(t.name, t.value_c, t.type) for t in temps] == [("cpu0", 41.5, 0), ("skin", None, 3)]


@pytest.mark.adb
def test_sampling_over_adb(adb_environ: AdbServer, make_standin: MakeStandin) -> None:
    make_standin(thermal_zones={"cpu0": 41500, "cpu1": 43250, "battery": 30000}, battery_current_ua=-612_000,
                 battery_voltage_uv=3_850_000, cpu_count=2, cpu_freq_khz=2_100_000)
    spec = SensorSpec.model_validate({"thermal_zone_types": ["cpu0", "cpu1", "npu"], "interval_ms": 100})
    device = AdbDevice(make_profile(sensors=spec.model_dump()))
    device.mkdir(WORK)
    sampler = sensors.start_sampling(device, spec, WORK, max_duration_s=30)
    time.sleep(1.0)
    result = sampler.stop()
    assert not device.job_running(sampler.job)
    assert len(result.samples) >= 4
    assert (result.current_unit, result.voltage_unit, result.discharge_sign) == ("uA", "uV", "negative")
    assert (result.current_unit_source, result.discharge_sign_source) == ("auto", "auto")
    assert {round(s.power_mw or 0, 6) for s in result.samples} == {round(0.612 * 3.85 * 1000, 6)}
    assert all(s.temps_c == {"cpu0": 41.5, "cpu1": 43.25} for s in result.samples)
    assert all(s.cpu_khz == {"cpu0": 2_100_000, "cpu1": 2_100_000} for s in result.samples)
    assert result.timestamp_resolution == "ns" and not result.charging
    assert all(result.available.values()) and "rapl" not in result.available  # RAPL is local-only
    assert any("npu" in w for w in result.warnings)
    assert result.samples[-1].t_s > 0.5
    assert sampler.raw_text.startswith("#specdec-sensors\t1\n")


@pytest.mark.adb
def test_sampling_while_charging_over_usb_warns(adb_environ: AdbServer, make_standin: MakeStandin) -> None:
    make_standin(charging=True, usb_online=True, battery_current_ua=900_000)
    spec = SensorSpec.model_validate({"interval_ms": 100})
    device = AdbDevice(make_profile())
    device.mkdir(WORK)
    sampler = sensors.start_sampling(device, spec, WORK, max_duration_s=30)
    time.sleep(0.4)
    result = sampler.stop()
    assert result.charging and result.usb_powered
    assert any("discharge current is masked" in w for w in result.warnings)
    assert result.discharge_sign is None and all(s.power_mw is None for s in result.samples)


@pytest.mark.adb
def test_thermalservice_snapshot_over_adb(adb_environ: AdbServer, make_standin: MakeStandin) -> None:
    make_standin(thermal_zones={"cpu0": 41500, "skin": 35250})
    snap = sensors.thermal_snapshot(AdbDevice(make_profile()))
    assert snap.available
    assert [(t.name, t.value_c) for t in snap.temperatures] == [("cpu0", 41.5), ("skin", 35.25)]


@pytest.mark.adb
def test_cooldown_reaches_target_when_the_phone_cools(adb_environ: AdbServer, make_standin: MakeStandin) -> None:
    dev = make_standin(thermal_zones={"cpu0": 47000, "battery": 30000})
    device = AdbDevice(make_profile())
    spec = SensorSpec.model_validate({"thermal_zone_types": ["cpu0"]})
    thermal = ThermalSpec.model_validate({"start_temp_c": 40.0})
    threading.Timer(0.8, dev.set_temperature, args=("cpu0", 36000)).start()
    result = sensors.wait_for_cooldown(device, spec, thermal, 20, poll_s=0.2)
    assert result.status == "reached"
    assert (result.start_c, result.final_c, result.hottest_zone) == (47.0, 36.0, "cpu0")
    assert 0.6 < result.waited_s < 10
    assert len(result.readings) >= 3


@pytest.mark.adb
def test_cooldown_times_out(adb_environ: AdbServer, make_standin: MakeStandin) -> None:
    make_standin(thermal_zones={"cpu0": 47000})
    thermal = ThermalSpec.model_validate({"start_temp_c": 40.0})
    result = sensors.wait_for_cooldown(AdbDevice(make_profile()), SensorSpec(), thermal, 0.5, poll_s=0.2)
    assert result.status == "timeout" and result.final_c == 47.0
    assert 0.5 <= result.waited_s < 5 and "target below 40" in result.detail


# ------------------------------------------------------------------------------- local
def _fake_sysfs(root: Path) -> dict[str, str | int]:
    def put(path: str, text: str) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text + "\n")

    put("ps/battery/current_now", "-1200")  # mA, negative while discharging
    put("ps/battery/voltage_now", "7700")  # mV, a two-cell pack
    put("ps/battery/status", "Discharging")
    put("thermal/thermal_zone0/type", "x86_pkg_temp")
    put("thermal/thermal_zone0/temp", "55000")
    put("thermal/thermal_zone1/type", "acpitz")
    put("thermal/thermal_zone1/temp", "61000")
    put("cpu/cpu0/cpufreq/scaling_cur_freq", "3400000")
    put("rapl/energy_uj", "1000")
    put("rapl/max_energy_range_uj", "262143328850")
    return {"battery_dir": str(root / "ps/battery"), "usb_online": str(root / "ps/usb/online"),
            "thermal_dir": str(root / "thermal"), "cpufreq_dir": str(root / "cpu"),
            "rapl_energy": str(root / "rapl/energy_uj"), "interval_ms": 100}


def test_local_sampling_with_rapl(tmp_path: Path) -> None:
    paths = _fake_sysfs(tmp_path / "sys")
    spec = SensorSpec.model_validate(paths)
    device = LocalDevice(make_profile("local", runtime={"remote_dir": str(tmp_path / "runs")}))
    work = device.workdir("r1")
    device.mkdir(work)
    stop = threading.Event()

    def count_energy() -> None:  # a RAPL counter that moves: 1000 µJ every 50 ms
        energy = 1000
        while not stop.wait(0.05):
            energy += 1000
            tmp = Path(f"{paths['rapl_energy']}.tmp")
            tmp.write_text(f"{energy}\n")
            tmp.replace(str(paths["rapl_energy"]))

    counter = threading.Thread(target=count_energy)
    counter.start()
    try:
        sampler = sensors.start_sampling(device, spec, work, max_duration_s=30)
        time.sleep(0.8)
        result = sampler.stop()
    finally:
        stop.set()
        counter.join()
    assert (result.current_unit, result.voltage_unit, result.discharge_sign) == ("mA", "mV", "negative")
    assert result.samples[0].power_mw == pytest.approx(1.2 * 7.7 * 1000)
    assert result.samples[0].temps_c == {"x86_pkg_temp": 55.0, "acpitz": 61.0}
    assert result.available["rapl"] and not result.available["usb_online"]
    assert result.rapl_energy_mj is not None and result.rapl_energy_mj > 0
    assert sensors.thermal_snapshot(device).detail.startswith("unavailable")
    thermal = ThermalSpec.model_validate({"start_temp_c": 70.0, "throttle_c": 80, "disable_c": 90,
                                          "recover_c": 70})
    cooled = sensors.wait_for_cooldown(device, spec, thermal, 5, poll_s=0.1)
    assert (cooled.status, cooled.final_c, cooled.hottest_zone) == ("reached", 61.0, "acpitz")


def test_local_without_sensors_is_unavailable(tmp_path: Path) -> None:
    spec = SensorSpec.model_validate({"battery_dir": str(tmp_path / "none"), "usb_online": str(tmp_path / "none/u"),
                                      "thermal_dir": str(tmp_path / "none"), "cpufreq_dir": str(tmp_path / "none"),
                                      "rapl_energy": str(tmp_path / "none/energy_uj"), "interval_ms": 50})
    device = LocalDevice(make_profile("local", runtime={"remote_dir": str(tmp_path / "runs")}))
    work = device.workdir("r1")
    device.mkdir(work)
    sampler = sensors.start_sampling(device, spec, work, max_duration_s=30)
    time.sleep(0.3)
    result = sampler.stop()
    assert result.samples and not any(result.available.values())
    assert result.mean_power_mw() is None and result.energy_mj() is None and result.peak_temp_c() is None
    t0 = time.monotonic()
    cooled = sensors.wait_for_cooldown(device, spec, ThermalSpec(), 30)
    assert cooled.status == "unavailable" and time.monotonic() - t0 < 5

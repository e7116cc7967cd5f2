"""The stand-in device, driven only through the real adb binary."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .adb_env import AdbServer
from .adbd import StandinDevice

if TYPE_CHECKING:
    from .conftest import MakeStandin

pytestmark = pytest.mark.adb


def shell(adb: AdbServer, dev: StandinDevice, cmd: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return adb.adb("-s", dev.serial, "shell", cmd, **kw)  # type: ignore[arg-type]


def popen_shell(adb: AdbServer, dev: StandinDevice, cmd: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [adb.adb_path, "-s", dev.serial, "shell", cmd],
        env=adb.env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_connect_and_get_state(adb_env: AdbServer, standin_device: StandinDevice) -> None:
    assert standin_device.serial == f"127.0.0.1:{standin_device.port}"
    assert adb_env.get_state(standin_device.serial) == "device"


def test_devices_lists_model(adb_env: AdbServer, make_standin: MakeStandin) -> None:
    dev = make_standin(model="Pixel_8_Standin")
    out = adb_env.adb("devices", "-l").stdout
    line = next(ln for ln in out.splitlines() if ln.startswith(dev.serial))
    assert "device" in line.split()
    assert "model:Pixel_8_Standin" in line


def test_shell_output_and_exit_codes(adb_env: AdbServer, standin_device: StandinDevice) -> None:
    r = shell(adb_env, standin_device, "echo hi; exit 3")
    assert (r.returncode, r.stdout) == (3, "hi\n")
    r = shell(adb_env, standin_device, "echo out; echo err >&2; exit 7")
    assert (r.returncode, r.stdout, r.stderr) == (7, "out\n", "err\n")
    r = shell(adb_env, standin_device, "true")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_shell_forwards_stdin(adb_env: AdbServer, standin_device: StandinDevice) -> None:
    r = shell(
        adb_env,
        standin_device,
        "cat > /data/local/tmp/in.txt; cat /data/local/tmp/in.txt",
        input=b"line one\nline two\n",
    )
    assert r.returncode == 0
    assert r.stdout == "line one\nline two\n"
    assert (standin_device.root / "data/local/tmp/in.txt").read_text() == r.stdout


def test_output_streams_while_command_runs(adb_env: AdbServer, standin_device: StandinDevice) -> None:
    proc = popen_shell(adb_env, standin_device, "for i in 1 2 3 4 5; do echo $i; sleep 0.25; done")
    assert proc.stdout is not None
    t0 = time.monotonic()
    arrivals = [(line.strip(), time.monotonic() - t0) for line in proc.stdout]
    assert proc.wait(timeout=10) == 0
    assert [a[0] for a in arrivals] == ["1", "2", "3", "4", "5"]
    # The first line must not wait for the command to finish (~1.25 s).
    assert arrivals[-1][1] - arrivals[0][1] > 0.7


def test_timeout_kills_long_command(adb_env: AdbServer, standin_device: StandinDevice) -> None:
    t0 = time.monotonic()
    r = shell(adb_env, standin_device, "timeout 0.5 sleep 30")
    assert r.returncode == 124
    assert time.monotonic() - t0 < 5


def test_push_pull_roundtrip(adb_env: AdbServer, standin_device: StandinDevice, tmp_path: Path) -> None:
    src = tmp_path / "blob.bin"
    src.write_bytes(os.urandom(3 * 1024 * 1024 + 123))
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    s = standin_device.serial
    assert adb_env.adb("-s", s, "push", str(src), "/data/local/tmp/blob.bin").returncode == 0
    r = shell(adb_env, standin_device, "sha256sum /data/local/tmp/blob.bin")
    assert r.stdout.split() == [digest, "/data/local/tmp/blob.bin"]
    back = tmp_path / "back.bin"
    assert adb_env.adb("-s", s, "pull", "/data/local/tmp/blob.bin", str(back)).returncode == 0
    assert hashlib.sha256(back.read_bytes()).hexdigest() == digest


def test_push_into_nested_dir(adb_env: AdbServer, standin_device: StandinDevice, tmp_path: Path) -> None:
    src = tmp_path / "model.onnx"
    src.write_bytes(b"not really a model")
    dst = "/data/local/tmp/specdec/run-1/bundle/model.onnx"
    r = adb_env.adb("-s", standin_device.serial, "push", str(src), dst)
    assert r.returncode == 0, r.stdout + r.stderr
    assert shell(adb_env, standin_device, f"cat {dst}").stdout == "not really a model"


def test_push_pull_directory(adb_env: AdbServer, standin_device: StandinDevice, tmp_path: Path) -> None:
    src = tmp_path / "bundle"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub/b.txt").write_text("b")
    s = standin_device.serial
    assert adb_env.adb("-s", s, "push", str(src), "/data/local/tmp/bundle").returncode == 0
    assert "b.txt" in adb_env.adb("-s", s, "ls", "/data/local/tmp/bundle/sub").stdout
    assert adb_env.adb("-s", s, "pull", "/data/local/tmp/bundle", str(tmp_path / "back")).returncode == 0
    assert (tmp_path / "back/sub/b.txt").read_text() == "b"


def test_exec_out_is_byte_exact(adb_env: AdbServer, standin_device: StandinDevice) -> None:
    r = subprocess.run(
        [adb_env.adb_path, "-s", standin_device.serial, "exec-out", "printf 'a\\0b\\377'; pwd"],
        env=adb_env.env,
        capture_output=True,
        timeout=30,
        check=True,
    )
    # exec: is raw: no shell-v2 framing and no sandbox-path unmapping.
    assert r.stdout == b"a\0b\xff" + str(standin_device.root / "data/local/tmp").encode() + b"\n"


def test_pull_missing_file_fails(adb_env: AdbServer, standin_device: StandinDevice, tmp_path: Path) -> None:
    r = adb_env.adb("-s", standin_device.serial, "pull", "/data/local/tmp/nope", str(tmp_path / "x"))
    assert r.returncode != 0
    assert "does not exist" in r.stdout + r.stderr


def test_push_outside_sandbox_is_refused(
    adb_env: AdbServer, standin_device: StandinDevice, tmp_path: Path
) -> None:
    src = tmp_path / "f"
    src.write_text("x")
    r = adb_env.adb("-s", standin_device.serial, "push", str(src), "/etc/standin-must-not-exist")
    assert r.returncode != 0
    assert not Path("/etc/standin-must-not-exist").exists()


def test_getprop_and_dumpsys(adb_env: AdbServer, make_standin: MakeStandin) -> None:
    dev = make_standin(model="SM-S928B", android_version="13", sdk=33, serialno="R5CX123")
    r = shell(
        adb_env,
        dev,
        "getprop ro.product.model; getprop ro.build.version.release;"
        " getprop ro.build.version.sdk; getprop ro.product.cpu.abi; getprop ro.serialno",
    )
    assert r.stdout.splitlines() == ["SM-S928B", "13", "33", "arm64-v8a", "R5CX123"]
    assert "[ro.product.model]: [SM-S928B]" in shell(adb_env, dev, "getprop").stdout.splitlines()

    battery = shell(adb_env, dev, "dumpsys battery").stdout
    assert battery.startswith("Current Battery Service state:")
    for expected in (
        "AC powered: false",
        "USB powered: false",
        "level: 80",
        "status: 3",
        "temperature: 300",
        "voltage: 3900",
    ):
        assert f"  {expected}\n" in battery

    dev.set_temperature("cpu0", 47250)
    thermal = shell(adb_env, dev, "dumpsys thermalservice").stdout
    hal = thermal.split("Current temperatures from HAL:\n")[1]
    assert "\tTemperature{mValue=47.25, mType=0, mName=cpu0, mStatus=0}\n" in hal
    assert "mName=gpu" in hal and "mType=3, mName=skin" in hal


def test_fake_sysfs_follows_knobs(adb_env: AdbServer, standin_device: StandinDevice) -> None:
    cmd = (
        "cat /sys/class/power_supply/battery/current_now /sys/class/power_supply/battery/status"
        " /sys/class/thermal/thermal_zone0/type /sys/class/thermal/thermal_zone0/temp"
        " /sys/devices/system/cpu/cpu7/cpufreq/scaling_cur_freq"
    )
    assert shell(adb_env, standin_device, cmd).stdout.split() == [
        "-450000",
        "Discharging",
        "cpu0",
        "41500",
        "1800000",
    ]
    standin_device.set_battery(current_ua=900_000, charging=True, usb_online=True)
    standin_device.set_temperature(0, 52000)
    standin_device.set_cpu_freq(7, 2_400_000)
    assert shell(adb_env, standin_device, cmd).stdout.split() == [
        "900000",
        "Charging",
        "cpu0",
        "52000",
        "2400000",
    ]
    assert "USB powered: true" in shell(adb_env, standin_device, "dumpsys battery").stdout


def test_device_paths_in_output_are_unmapped(adb_env: AdbServer, standin_device: StandinDevice) -> None:
    assert shell(adb_env, standin_device, "pwd").stdout == "/data/local/tmp\n"


def test_python_availability(adb_env: AdbServer, make_standin: MakeStandin) -> None:
    bare = make_standin()
    r = shell(adb_env, bare, "command -v python3 || exit 9")
    assert r.returncode == 9 and r.stdout == ""
    assert shell(adb_env, bare, "command -v python || exit 9").returncode == 9
    with_py = make_standin(python=sys.executable)
    r = shell(adb_env, with_py, "python3 -c 'import sys; print(6 * 7, sys.prefix)'")
    assert r.returncode == 0
    assert r.stdout.split()[0] == "42"


def test_kill_mid_command_loses_device(adb_env: AdbServer, standin_device: StandinDevice) -> None:
    proc = popen_shell(adb_env, standin_device, "echo started; sleep 20; echo finished")
    assert proc.stdout is not None
    assert proc.stdout.readline() == "started\n"
    standin_device.kill()
    out, _ = proc.communicate(timeout=5)
    # adb 29 exits 0 when the transport drops before the shell-v2 exit packet:
    # callers must notice the missing output / marker, not rely on the code.
    assert "finished" not in out
    deadline = time.monotonic() + 5
    while adb_env.get_state(standin_device.serial) == "device":
        assert time.monotonic() < deadline, "adb still reports the killed device"
        time.sleep(0.1)


def test_two_devices_at_once(adb_env: AdbServer, make_standin: MakeStandin) -> None:
    a = make_standin(model="First", serialno="AAA")
    b = make_standin(model="Second", serialno="BBB")
    listing = adb_env.adb("devices").stdout
    assert f"{a.serial}\tdevice" in listing and f"{b.serial}\tdevice" in listing
    assert shell(adb_env, a, "getprop ro.serialno").stdout == "AAA\n"
    assert shell(adb_env, b, "getprop ro.serialno").stdout == "BBB\n"


def test_android_userland(adb_env: AdbServer, make_standin: MakeStandin) -> None:
    from .device_fs import toybox_tools

    if toybox_tools() is None:
        pytest.skip("mksh and toybox are not installed (apt-get install mksh toybox)")
    dev = make_standin(userland="toybox", env={"SPECDEC_EXEC_WRAPPER": "/x/qemu"})
    r = shell(adb_env, dev, 'echo "$KSH_VERSION"; command -v awk || echo no-awk; readlink "$(command -v ls)"; '
                            'echo "$SPECDEC_EXEC_WRAPPER"')
    lines = r.stdout.splitlines()
    assert "MIRBSD KSH" in lines[0] and lines[1] == "no-awk" and lines[2].endswith("toybox")
    assert lines[3] == "/x/qemu"
    host = make_standin(userland="host")
    assert shell(adb_env, host, 'echo "${KSH_VERSION:-dash}"').stdout == "dash\n"

"""AdbDevice against the stand-in phone, through the real adb binary."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from standin.adb_env import AdbServer
from standin.adbd import StandinDevice

from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.errors import DeviceError, DeviceLostError, InputError

from .conftest import MakeStandin, host_path, make_profile

pytestmark = pytest.mark.adb
WORK = "/data/local/tmp/specdec/t1"


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    src = tmp_path / "payload"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)) * 300)
    (src / "sub" / "deeper" / "c d.txt").write_text("space in name\n")
    return src


def test_run_exit_code_stderr_and_streaming(adb_device: tuple[AdbDevice, StandinDevice]) -> None:
    device, _ = adb_device
    arrivals: list[tuple[str, float]] = []
    t0 = time.monotonic()
    result = device.run("echo one; echo oops >&2; sleep 0.6; printf 'two'; exit 3", timeout_s=20,
                        on_output=lambda line: arrivals.append((line, time.monotonic() - t0)))
    total = time.monotonic() - t0
    assert (result.returncode, result.stdout, result.stderr, result.timed_out) == (3, "one\ntwo", "oops\n", False)
    assert [line for line, _ in arrivals if line != "oops"] == ["one", "two"]  # the marker never shows
    assert arrivals[0][1] < total - 0.4  # "one" arrived before the command finished


def test_run_in_cwd_and_timeout(adb_device: tuple[AdbDevice, StandinDevice]) -> None:
    device, _ = adb_device
    device.mkdir(WORK)
    assert device.run("pwd", timeout_s=10, cwd=WORK).stdout.strip() == WORK
    t0 = time.monotonic()
    result = device.run("sleep 10", timeout_s=0.5)
    assert result.timed_out and result.returncode == 124
    assert time.monotonic() - t0 < 5


def test_push_verifies_and_pull_round_trips(adb_device: tuple[AdbDevice, StandinDevice], payload: Path,
                                            tmp_path: Path) -> None:
    device, dev = adb_device
    device.push(payload, f"{WORK}/bundle")
    device.push(payload / "a.txt", f"{WORK}/single/a.txt")
    assert _tree(host_path(dev, f"{WORK}/bundle")) == _tree(payload)
    assert host_path(dev, f"{WORK}/single/a.txt").read_text() == "alpha\n"
    # A second push into the now existing dir merges instead of nesting payload/ inside it.
    (payload / "new.txt").write_text("new\n")
    device.push(payload, f"{WORK}/bundle")
    assert _tree(host_path(dev, f"{WORK}/bundle")) == _tree(payload)
    assert device.read_text(f"{WORK}/single/a.txt") == "alpha\n"


def test_push_hash_mismatch_names_the_file(adb_device: tuple[AdbDevice, StandinDevice], payload: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    device, dev = adb_device
    transfer = AdbDevice._transfer

    def corrupting(self: AdbDevice, local: Path, remote: str) -> None:
        transfer(self, local, remote)
        copy = host_path(dev, f"{remote}/sub/b.bin")
        copy.write_bytes(copy.read_bytes()[:-1] + b"\x00")  # flip the last byte on the "phone"

    monkeypatch.setattr(AdbDevice, "_transfer", corrupting)
    with pytest.raises(DeviceError, match=r"sha256 of .*/bundle/sub/b\.bin .*does not match") as info:
        device.push(payload, f"{WORK}/bundle")
    assert info.value.fix and "push again" in info.value.fix


def test_push_missing_file_on_device_is_reported(adb_device: tuple[AdbDevice, StandinDevice], payload: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    device, dev = adb_device
    transfer = AdbDevice._transfer

    def losing(self: AdbDevice, local: Path, remote: str) -> None:
        transfer(self, local, remote)
        host_path(dev, f"{remote}/a.txt").unlink()

    monkeypatch.setattr(AdbDevice, "_transfer", losing)
    with pytest.raises(DeviceError, match=r"bundle/a\.txt is missing"):
        device.push(payload, f"{WORK}/bundle")


def test_background_job_poll_read_remove(adb_device: tuple[AdbDevice, StandinDevice], tmp_path: Path) -> None:
    device, dev = adb_device
    job = device.start_background(f"echo working; sleep 0.5; echo 42 > {WORK}/result.txt; exit 7",
                                  cwd=WORK, name="bench", timeout_s=30)
    assert device.job_running(job)
    assert device.job_returncode(job) is None
    assert device.wait_job(job, timeout_s=15, poll_s=0.1) == 7
    assert not device.job_running(job)
    assert device.read_text(job.log_file) == "working\n"
    assert device.read_text(f"{WORK}/result.txt") == "42\n"
    device.remove(WORK)
    assert not host_path(dev, WORK).exists()
    device.remove(WORK)  # a missing path is fine


def test_background_job_timeout_and_stop(adb_device: tuple[AdbDevice, StandinDevice]) -> None:
    device, _ = adb_device
    short = device.start_background("sleep 10", cwd=WORK, name="short", timeout_s=0.5)
    assert device.wait_job(short, timeout_s=10, poll_s=0.1) == 124
    long = device.start_background("sleep 30", cwd=WORK, name="long", timeout_s=60)
    assert device.job_running(long)
    t0 = time.monotonic()
    device.stop_job(long)
    assert not device.job_running(long)
    assert time.monotonic() - t0 < 5


def test_remove_refuses_system_dirs(adb_device: tuple[AdbDevice, StandinDevice]) -> None:
    device, _ = adb_device
    for path in ("/", "/data/local/tmp", "relative/dir", "/sdcard/"):
        with pytest.raises(InputError, match="refusing"):
            device.remove(path)


def test_device_lost_during_background_job(adb_device: tuple[AdbDevice, StandinDevice],
                                           reap_jobs: list[Path]) -> None:
    device, dev = adb_device
    job = device.start_background("sleep 20", cwd=WORK, name="doomed", timeout_s=25)
    reap_jobs.append(host_path(dev, job.pid_file))
    assert device.job_running(job)
    dev.kill()
    with pytest.raises(DeviceLostError, match="went away") as info:
        device.job_running(job)
    assert info.value.exit_code == 9


def test_device_lost_mid_command(adb_device: tuple[AdbDevice, StandinDevice]) -> None:
    device, dev = adb_device
    lines: list[str] = []
    threading.Timer(0.6, dev.kill).start()
    with pytest.raises(DeviceLostError):
        # adb exits 0 here with the output cut short: only the missing marker tells.
        device.run("echo started; sleep 5; echo never", timeout_s=20, on_output=lines.append)
    assert lines == ["started"]


def test_android_serial_and_several_devices(adb_environ: AdbServer, make_standin: MakeStandin,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = make_standin(model="First"), make_standin(model="Second")
    with pytest.raises(DeviceError, match="2 devices are attached") as info:
        AdbDevice(make_profile())
    assert first.serial in str(info.value) and second.serial in str(info.value)
    assert "--serial" in (info.value.fix or "")
    monkeypatch.setenv("ANDROID_SERIAL", second.serial)
    assert AdbDevice(make_profile()).info().model == "Second"
    assert AdbDevice(make_profile(), first.serial).serial == first.serial  # the option wins
    with pytest.raises(DeviceError, match="'127.0.0.1:1' .* is not attached"):
        AdbDevice(make_profile(), "127.0.0.1:1")


def test_no_device_is_a_clear_error(adb_environ: AdbServer) -> None:
    with pytest.raises(DeviceError, match="no Android device is attached") as info:
        AdbDevice(make_profile())
    assert "adb connect" in (info.value.fix or "")


def test_remote_server_options_and_socket_env(adb_env: AdbServer, make_standin: MakeStandin,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    dev = make_standin()
    env = {k: v for k, v in adb_env.env.items() if k != "ANDROID_ADB_SERVER_PORT"}
    via_options = AdbDevice(make_profile(), adb_host="127.0.0.1", adb_port=adb_env.port, env=env)
    assert via_options.serial == dev.serial
    assert via_options.run("echo ok", timeout_s=10).stdout == "ok\n"
    via_socket = AdbDevice(make_profile(), env={**env, "ADB_SERVER_SOCKET": f"tcp:127.0.0.1:{adb_env.port}"})
    assert via_socket.run("echo ok", timeout_s=10).stdout == "ok\n"


def test_missing_adb_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DeviceError, match="adb binary was not found") as info:
        AdbDevice(make_profile())
    assert "apt-get install adb" in (info.value.fix or "") and "platform-tools" in (info.value.fix or "")


def test_info_without_python(adb_device: tuple[AdbDevice, StandinDevice]) -> None:
    device, _ = adb_device
    info = device.info("python3")
    assert (info.model, info.android_version, info.abi) == ("Standin_Pixel", "14", "arm64-v8a")
    assert (info.battery_level, info.charging) == (80, False)
    assert info.python is not None and not info.python.found and not info.python.usable
    assert info.python.missing == ["python (python3)"]


def test_info_with_python_and_charging(adb_environ: AdbServer, make_standin: MakeStandin) -> None:
    make_standin(python=sys.executable, model="Pixel_8", charging=True, usb_online=True, battery_level=55)
    info = AdbDevice(make_profile()).info("python3")
    assert info.model == "Pixel_8"
    assert (info.battery_level, info.charging, info.charging_source) == (55, True, "usb")
    assert info.python is not None and info.python.usable, info.extra
    assert info.python.version == "{}.{}.{}".format(*sys.version_info[:3])
    assert info.python.numpy and info.python.onnxruntime and info.python.missing == []


@pytest.fixture(params=["toybox", "host"])
def any_userland(request: pytest.FixtureRequest, adb_environ: AdbServer,
                 make_standin: MakeStandin) -> tuple[AdbDevice, StandinDevice]:
    """The same checks with Android's mksh + toybox and with the host's sh + GNU tools."""
    from standin.device_fs import toybox_tools

    if request.param == "toybox" and toybox_tools() is None:
        pytest.skip("mksh and toybox are not installed (apt-get install mksh toybox)")
    dev = make_standin(userland=request.param)
    return AdbDevice(make_profile()), dev


def test_exit_codes_are_the_commands_own(any_userland: tuple[AdbDevice, StandinDevice]) -> None:
    # toybox 0.8.9's `timeout` (Android 14) reports 127 for about half the commands that exit at once.
    device, _ = any_userland
    assert [device.run("true", timeout_s=30).returncode for _ in range(30)] == [0] * 30
    assert device.run("exit 3", timeout_s=30).returncode == 3
    assert device.run("kill -9 $$", timeout_s=30).returncode == 137
    fast = [device.start_background("exit 5", cwd=WORK, name=f"fast{i}", timeout_s=30) for i in range(8)]
    assert [device.wait_job(job, timeout_s=15, poll_s=0.1) for job in fast] == [5] * 8


def test_stop_job_ends_the_whole_job(any_userland: tuple[AdbDevice, StandinDevice]) -> None:
    # toybox's `timeout` dies of TERM and leaves its child, the leader of a group of its own, running.
    device, dev = any_userland
    job = device.start_background(f"echo $$ > {WORK}/me; exec sleep 30", cwd=WORK, name="victim", timeout_s=60)
    me = host_path(dev, f"{WORK}/me")
    deadline = time.monotonic() + 10
    while not me.exists() or not me.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int(me.read_text())
    device.stop_job(job)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and " Z " not in Path(f"/proc/{pid}/stat").read_text():
        assert time.monotonic() < deadline, "the job's command survived stop_job"
        time.sleep(0.05)

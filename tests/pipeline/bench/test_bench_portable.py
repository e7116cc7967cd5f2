"""`specdec bench --device adb` on a stand-in phone with no Python: the portable arm64 runtime.

The stand-in runs its commands with mksh and toybox applets only, like Android, and the runtime's
arm64 programs under qemu-user (SPECDEC_EXEC_WRAPPER, an ARM /proc/cpuinfo bind-mounted in a
private mount namespace). Slow-ish (an emulated onnxruntime): one prompt, a few tokens.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from standin.adb_env import AdbServer
from standin.adbd import StandinDevice
from standin.arm_userland import exec_wrapper, skip_reason
from standin.device_fs import toybox_tools
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.devices.session import new_run_id
from specdec.pipeline.devices.stale_runs import ENDED_GRACE, sweep_stale_runs
from specdec.pipeline.errors import DeviceError
from specdec.pipeline.portable import remote
from specdec.pipeline.portable.archive import RuntimeArchive
from specdec.pipeline.portable.probe import run_probe
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import Transport

pytestmark = [pytest.mark.adb, pytest.mark.slow]
COOL = {"cpu0": 36000, "gpu": 34000, "battery": 30000}  # below the profile's 40 °C start temperature
SPECDEC = "/data/local/tmp/specdec"


@pytest.fixture
def arm_phone(adb_environ: AdbServer, make_standin: Any, portable_runtime: tuple[RuntimeArchive, Path],
              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[StandinDevice, RuntimeArchive]:
    """A stand-in with no Python, Android's userland and an arm64 emulator; the runtime cache set."""
    if toybox_tools() is None:
        pytest.skip("mksh and toybox are not installed (apt-get install mksh toybox)")
    if (why := skip_reason()) is not None:
        pytest.skip(f"cannot run arm64 programs here: {why}")
    archive, xdg = portable_runtime
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    device = make_standin(python=None, userland="toybox", thermal_zones=dict(COOL),
                          env=exec_wrapper(tmp_path / "qemu"))
    return device, archive


def _device_files(device: StandinDevice) -> set[str]:
    """Every file the device's commands could have written (the fake sysfs aside)."""
    roots = [device.root / "data", device.root / "sdcard", device.fs.state_dir / "home"]
    return {p.relative_to(device.root).as_posix() for root in roots for p in root.rglob("*")}


def _bench(device: StandinDevice, bundle: Path, prompts: Path, out: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["bench", str(bundle), "--device", "adb", "-s", device.serial,
                                      "--prompts", str(prompts), "--limit", "1", "-n", "8", "--no-tune",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads((out / "results.json").read_text())
    return data


def test_bench_with_the_portable_runtime(arm_phone: tuple[StandinDevice, RuntimeArchive], bench_bundle: Any,
                                         prompts_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    device, archive = arm_phone
    before = _device_files(device)
    pushes: list[str] = []
    push_chunks = remote._push_chunks
    monkeypatch.setattr(remote, "_push_chunks", lambda dev, a, partial, progress: (
        pushes.append(a.id), push_chunks(dev, a, partial, progress)))
    first = _bench(device, bench_bundle.path, prompts_file, tmp_path / "first")
    assert first["runtime"]["kind"] == "portable" and first["runtime"]["chosen_by"] == "auto"
    assert first["runtime"]["pushed"] and pushes == [archive.id]
    assert first["device"]["python"]["executable"] == f"portable runtime {archive.id}"
    assert first["device"]["python"]["onnxruntime"] == archive.onnxruntime
    assert not first["partial"] and first["lossless"]["checked"] and first["lossless"]["equal"]
    figures = first["figures"]
    assert figures["mean_power_mw"] == pytest.approx(1755.0, rel=1e-6)  # -450 mA at 3.9 V
    assert figures["energy_per_token_mj"] is not None and figures["peak_temp_c"] is not None
    assert first["thermal"]["before"]["available"] and first["thermal"]["cooldown"]["status"] == "reached"
    # Only the runtime stays on the device; run dirs are gone, nothing landed outside specdec/.
    written = _device_files(device) - before
    kept = f"data/local/tmp/specdec/runtime/{archive.id}"
    assert kept in written and all(p.startswith(kept) or kept.startswith(p) for p in written), sorted(written)[:5]
    assert sorted(p.name for p in (device.root / SPECDEC.lstrip("/")).iterdir()) == ["runtime"]

    second = _bench(device, bench_bundle.path, prompts_file, tmp_path / "second")
    assert pushes == [archive.id], "the second run pushed the runtime again"
    assert not second["runtime"]["pushed"] and second["runtime"]["verify_s"] is not None
    assert second["lossless"]["equal"] and _device_files(device) - before == written


def _intact(device: StandinDevice, archive: RuntimeArchive) -> bool:
    adb = AdbDevice(serial=device.serial)
    root = f"{SPECDEC}/runtime/{archive.id}"
    return remote.present(adb) == {archive.id: archive.sha256} and remote.verify(adb, root) == []


def _run_dirs(device: StandinDevice) -> list[str]:
    return sorted(p.name for p in (device.root / SPECDEC.lstrip("/")).iterdir() if p.name != "runtime")


def test_ctrl_c_and_device_loss_keep_the_runtime(arm_phone: tuple[StandinDevice, RuntimeArchive], bench_bundle: Any,
                                                 prompts_file: Path, adb_environ: AdbServer, tmp_path: Path) -> None:
    device, archive = arm_phone
    config = BenchConfig(output=tmp_path / "out", device=Transport.adb, serial=device.serial, prompts=prompts_file,
                         limit=2, cooldown=False, tune=False, decode=DecodeOptions(max_new_tokens=16))

    def interrupt(event: dict[str, object]) -> None:
        if event.get("type") == "reply":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_bench(config, bench_bundle, on_event=interrupt)
    assert _run_dirs(device) == [] and not (tmp_path / "out").exists()
    assert _intact(device, archive)

    def lose(event: dict[str, object]) -> None:
        if event.get("type") == "reply":
            device.kill()

    outcome = run_bench(config, bench_bundle, on_event=lose)
    assert outcome.results.partial and "device lost" in (outcome.results.partial_reason or "")
    device.start()
    adb_environ.disconnect(device)
    adb_environ.connect(device)
    assert _intact(device, archive)
    assert len(_run_dirs(device)) == 1  # nothing could reach the device to remove it ...
    # ... so a later run does, once the orphaned runner (still decoding on the stand-in, which a real
    # phone's reboot would have killed) has ended and its dir has been quiet past the grace: a dir
    # with a live job is never swept
    lost_dir = f"{SPECDEC}/{_run_dirs(device)[0]}"
    deadline = time.monotonic() + 180
    while True:
        device.fs.age(lost_dir, ENDED_GRACE.total_seconds() + 60)
        if sweep_stale_runs(AdbDevice(serial=device.serial), new_run_id()) or not _run_dirs(device):
            break
        assert time.monotonic() < deadline, "the orphaned runner never ended"
        time.sleep(1)
    assert _run_dirs(device) == []


def test_failures_name_the_step(arm_phone: tuple[StandinDevice, RuntimeArchive], tmp_path: Path) -> None:
    device, archive = arm_phone
    adb = AdbDevice(serial=device.serial)
    pushed = remote.ensure_runtime(adb, archive)
    adb.mkdir(f"{SPECDEC}/probe")
    assert run_probe(adb, pushed, f"{SPECDEC}/probe").usable
    wrapper = device.config.env.pop("SPECDEC_EXEC_WRAPPER")  # an x86 kernel refuses the arm64 loader
    with pytest.raises(DeviceError, match="failed at the loader step"):
        run_probe(adb, pushed, f"{SPECDEC}/probe")
    device.config.env["SPECDEC_EXEC_WRAPPER"] = wrapper
    root = device.fs.host_path(pushed.root)
    shutil.copytree(root, tmp_path / "saved")
    (root / "lib" / "libstdc++.so.6").unlink()  # onnxruntime's C++ library
    with pytest.raises(DeviceError, match=r"failed at the import step: numpy: .*libstdc\+\+\.so\.6: cannot open"):
        run_probe(adb, pushed, f"{SPECDEC}/probe")
    shutil.copy(tmp_path / "saved" / "lib" / "libstdc++.so.6", root / "lib")
    (root / "share" / "specdec" / "probe.onnx").write_bytes(b"\x08\x07 not a model")
    with pytest.raises(DeviceError, match="failed at the session step") as info:
        run_probe(adb, pushed, f"{SPECDEC}/probe")
    assert "\n" not in info.value.one_line()


def test_constrained_bench_with_the_portable_runtime(arm_phone: tuple[StandinDevice, RuntimeArchive],
                                                     bench_bundle: Any, prompts_file: Path, tmp_path: Path) -> None:
    """Banned phrases (pyahocorasick) and a regex (llguidance) run on the phone: the arm64 wheels ship."""
    device, _ = arm_phone
    (tmp_path / "ban.txt").write_text("the\nqu\n")
    result = CliRunner().invoke(app, ["bench", str(bench_bundle.path), "--device", "adb", "-s", device.serial,
                                      "--prompts", str(prompts_file), "--limit", "1", "-n", "8", "--no-tune",
                                      "--ban", str(tmp_path / "ban.txt"), "--regex", "[a-z ]+",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["runtime"]["kind"] == "portable"
    assert data["config"]["processors"] == ["ban (mask, 2 phrases)", "regex"]
    assert not data["partial"] and data["lossless"]["checked"] and data["lossless"]["equal"]
    assert data["details"]["stage_latency_ms"]["Logits_Process"] is not None

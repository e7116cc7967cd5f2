"""Naming the step that fails on the device: loader, import, session."""

from __future__ import annotations

from pathlib import Path

import pytest
from standin.adbd import StandinDevice

from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.devices.base import RunResult
from specdec.pipeline.errors import DeviceError
from specdec.pipeline.portable.probe import parse, run_probe
from specdec.pipeline.portable.remote import RemoteRuntime

from .conftest import FakeRuntime, needs_toybox

OK = ("specdec-step loader ok python=3.11.2 machine=aarch64\n"
      "specdec-step import ok numpy=2.4.6 onnxruntime=1.32.0\nspecdec-step session ok providers=CPUExecutionProvider\n")


@pytest.mark.parametrize(("stdout", "stderr", "rc", "step", "detail"), [
    ("", "specdec-run[56]: /rt/lib/ld-linux-aarch64.so.1: not executable: 64-bit ELF file\n", 1, "loader",
     "not executable: 64-bit ELF file (exit 1)"),
    ("", "/system/bin/sh: /rt/lib/ld-linux-aarch64.so.1: Permission denied\n", 126, "loader", "Permission denied"),
    (OK.splitlines()[0] + "\n", "qemu: uncaught target signal 11 (Segmentation fault) - core dumped\n", 139,
     "import", "killed by signal 11"),
    (OK.splitlines()[0] + "\nspecdec-step import failed OSError: libstdc++.so.6: cannot open shared object file\n",
     "", 3, "import", "OSError: libstdc++.so.6"),
    ("\n".join(OK.splitlines()[:2]) + "\nspecdec-step session failed Fail: [ONNXRuntimeError] bad CPU\n", "", 4,
     "session", "bad CPU"),
])
def test_parse_names_the_failed_step(stdout: str, stderr: str, rc: int, step: str, detail: str) -> None:
    result = parse(RunResult(rc, stdout, stderr))
    assert result.failed_step == step
    assert detail in result.detail


def test_parse_success_and_versions() -> None:
    result = parse(RunResult(0, OK, ""))
    assert result.failed_step is None
    assert result.versions() == {"python": "3.11.2", "machine": "aarch64", "numpy": "2.4.6", "onnxruntime": "1.32.0",
                                 "providers": "CPUExecutionProvider"}


def _pushed(dev: StandinDevice, root: Path) -> RemoteRuntime:
    """Place a fake runtime tree on the stand-in as if it had been pushed."""
    import shutil

    device_root = "/data/local/tmp/specdec/runtime/fake"
    shutil.copytree(root, dev.fs.host_path(device_root))
    return RemoteRuntime("fake", device_root, pushed=True)


@pytest.mark.adb
@pytest.mark.parametrize(("knobs", "step", "fix"), [
    ({"loader": False}, "loader", "arm64-v8a"),
    ({"hide": "onnxruntime"}, "import", "specdec runtime build --force"),
    ({"probe_model": b"\x08\x07garbage"}, "session", "cannot run on this CPU"),
])
def test_run_probe_on_an_android_shell(adb_environ: object, make_standin: object, fake_runtime: FakeRuntime,
                                       knobs: dict[str, object], step: str, fix: str) -> None:
    needs_toybox()
    dev: StandinDevice = make_standin(userland="toybox")  # type: ignore[operator]
    remote = _pushed(dev, fake_runtime(**knobs))
    device = AdbDevice(serial=dev.serial)
    device.mkdir("/data/local/tmp/specdec/run1")
    with pytest.raises(DeviceError, match=f"portable runtime fake failed at the {step} step") as info:
        run_probe(device, remote, "/data/local/tmp/specdec/run1")
    assert fix in info.value.one_line() and "\n" not in info.value.one_line()


@pytest.mark.adb
def test_run_probe_reports_versions(adb_environ: object, make_standin: object, fake_runtime: FakeRuntime) -> None:
    import numpy
    import onnxruntime

    needs_toybox()
    dev: StandinDevice = make_standin(userland="toybox")  # type: ignore[operator]
    device = AdbDevice(serial=dev.serial)
    device.mkdir("/data/local/tmp/specdec/run1")
    status = run_probe(device, _pushed(dev, fake_runtime()), "/data/local/tmp/specdec/run1")
    assert status.usable and (status.numpy, status.onnxruntime) == (numpy.__version__, onnxruntime.__version__)
    assert status.executable == "portable runtime fake"

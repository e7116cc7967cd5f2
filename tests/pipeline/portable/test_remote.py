"""Pushing the runtime once, checking it by hash, reusing it; interrupted pushes (toybox stand-in)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from standin.adb_env import AdbServer
from standin.adbd import StandinDevice

from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.errors import DeviceError, DeviceLostError
from specdec.pipeline.portable import assemble, remote
from specdec.pipeline.portable.archive import RuntimeArchive, write_archive

from .conftest import needs_toybox

pytestmark = pytest.mark.adb
BASE = "/data/local/tmp/specdec/runtime"


def small_archive(tmp_path: Path, name: str = "a", size: int = 20_000) -> RuntimeArchive:
    tree = tmp_path / name / "tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "tool").write_bytes(os.urandom(size))
    (tree / "lib" / "python3.11").mkdir(parents=True)
    (tree / "lib" / "python3.11" / "os.py").write_text(f"# {name}\n")
    files, unpacked = assemble.write_manifest(tree)
    dest = tmp_path / name / "runtime.tar.gz"
    write_archive(tree, dest)
    return RuntimeArchive(path=dest, sha256=hashlib.sha256(dest.read_bytes()).hexdigest(), abi="arm64-v8a",
                          recipe="test", size=dest.stat().st_size, unpacked_size=unpacked, files=files,
                          python="3.11", numpy="-", onnxruntime="-", packages={}, dropped_extensions=[],
                          bytecode=False, created="2026-01-01T00:00:00+00:00", tool_version="test")


@pytest.fixture
def phone(adb_environ: AdbServer, make_standin: object,
          monkeypatch: pytest.MonkeyPatch) -> tuple[AdbDevice, StandinDevice]:
    needs_toybox()
    monkeypatch.setattr(remote, "CHUNK_BYTES", 4096)  # several chunks even for a small archive
    dev: StandinDevice = make_standin(userland="toybox")  # type: ignore[operator]
    return AdbDevice(serial=dev.serial), dev


def _listing(dev: StandinDevice, device_path: str) -> list[str]:
    path = dev.fs.host_path(device_path)
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


def _count_pushes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    pushed: list[str] = []
    original = AdbDevice.push

    def counting(self: AdbDevice, local: Path, remote_path: str) -> None:
        pushed.append(remote_path)
        original(self, local, remote_path)

    monkeypatch.setattr(AdbDevice, "push", counting)
    return pushed


def test_pushed_once_then_reused(phone: tuple[AdbDevice, StandinDevice], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    device, dev = phone
    archive = small_archive(tmp_path)
    pushes = _count_pushes(monkeypatch)
    first = remote.ensure_runtime(device, archive)
    assert first.pushed and first.root == f"{BASE}/{archive.id}" and len(pushes) == -(-archive.size // 4096)
    root = dev.fs.host_path(first.root)
    assert (root / remote.MARKER).read_text().strip() == archive.sha256
    assert (root / "bin" / "tool").read_bytes() == (tmp_path / "a" / "tree" / "bin" / "tool").read_bytes()
    assert remote.present(device) == {archive.id: archive.sha256}
    assert _listing(dev, BASE) == [archive.id]  # no partial dir left
    assert _listing(dev, "/data/local/tmp") == ["specdec"] and _listing(dev, "/sdcard") == []
    pushes.clear()
    second = remote.ensure_runtime(device, archive)
    assert not second.pushed and second.verify_s is not None and pushes == []


def test_a_damaged_runtime_is_pushed_again(phone: tuple[AdbDevice, StandinDevice], tmp_path: Path) -> None:
    device, dev = phone
    archive = small_archive(tmp_path)
    root = dev.fs.host_path(remote.ensure_runtime(device, archive).root)
    (root / "bin" / "tool").write_bytes(b"changed on the phone")
    assert remote.verify(device, f"{BASE}/{archive.id}") == ["./bin/tool: FAILED"]
    again = remote.ensure_runtime(device, archive)
    assert again.pushed and remote.verify(device, again.root) == []


def test_a_corrupt_archive_leaves_nothing(phone: tuple[AdbDevice, StandinDevice], tmp_path: Path) -> None:
    device, dev = phone
    archive = small_archive(tmp_path)
    wrong = RuntimeArchive(**{**archive.__dict__, "sha256": "0" * 64})
    with pytest.raises(DeviceError, match=f"sha256 is {archive.sha256}, not 0000"):
        remote.ensure_runtime(device, wrong)
    assert _listing(dev, BASE) == []


class _InterruptAfter:
    """A Progress whose task raises Ctrl-C after `steps` chunks."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[_InterruptAfter]:
        yield self

    def advance(self, steps: int = 1) -> None:
        self.steps -= steps
        if self.steps <= 0:
            raise KeyboardInterrupt

    def describe(self, description: str) -> None:
        return None


def test_ctrl_c_mid_push_leaves_nothing_that_looks_complete(phone: tuple[AdbDevice, StandinDevice],
                                                            tmp_path: Path) -> None:
    device, dev = phone
    archive = small_archive(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        remote.ensure_runtime(device, archive, _InterruptAfter(2))
    assert _listing(dev, BASE) == []  # the partial dir was removed on the way out
    assert remote.present(device) == {}
    assert remote.ensure_runtime(device, archive).pushed


def test_device_lost_mid_push(phone: tuple[AdbDevice, StandinDevice], adb_environ: AdbServer, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    device, dev = phone
    archive = small_archive(tmp_path)
    original = AdbDevice.push
    pushes: list[str] = []

    def losing(self: AdbDevice, local: Path, remote_path: str) -> None:
        pushes.append(remote_path)
        if len(pushes) == 3:
            dev.kill()
        original(self, local, remote_path)

    monkeypatch.setattr(AdbDevice, "push", losing)
    with pytest.raises(DeviceLostError):
        remote.ensure_runtime(device, archive)
    monkeypatch.setattr(AdbDevice, "push", original)
    dev.start()
    adb_environ.disconnect(dev)
    adb_environ.connect(dev)
    left = _listing(dev, BASE)
    assert len(left) == 1 and left[0].startswith(f".{archive.id}.partial-")  # hidden, not named by the id
    assert not (dev.fs.host_path(f"{BASE}/{left[0]}") / remote.MARKER).exists()
    assert remote.present(device) == {}
    # The next push works beside it; the partial goes once it is stale (another host may own a young one).
    assert remote.ensure_runtime(device, archive).pushed
    assert left[0] in _listing(dev, BASE)
    stale = time.time() - 2 * 3600
    os.utime(dev.fs.host_path(f"{BASE}/{left[0]}"), (stale, stale))
    newer = small_archive(tmp_path, "b")
    assert remote.ensure_runtime(device, newer).pushed
    assert _listing(dev, BASE) == [newer.id]  # older runtime and stale partial swept

"""LocalDevice: a work dir on this machine and `sh -c`."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from specdec.pipeline.devices.local import LocalDevice
from specdec.pipeline.errors import DeviceError, InputError

from .conftest import make_profile


@pytest.fixture
def local(tmp_path: Path) -> LocalDevice:
    return LocalDevice(make_profile("local", runtime={"remote_dir": str(tmp_path / "runs")}))


def test_workdir_under_remote_dir(local: LocalDevice, tmp_path: Path) -> None:
    assert local.workdir("r1") == str(tmp_path / "runs" / "r1")
    assert LocalDevice().workdir("r1") == "/tmp/specdec-runs/r1"  # the profile default


def test_run_exit_code_streaming_cwd_timeout(local: LocalDevice, tmp_path: Path) -> None:
    arrivals: list[tuple[str, float]] = []
    t0 = time.monotonic()
    result = local.run("echo one; echo oops >&2; sleep 0.5; echo two; exit 4", timeout_s=10,
                       on_output=lambda line: arrivals.append((line, time.monotonic() - t0)))
    assert (result.returncode, result.stdout, result.stderr) == (4, "one\ntwo\n", "oops\n")
    # Streamed: the lines before the sleep arrive while the command still runs. stdout and stderr
    # are two pipes, so which of "one" and "oops" comes first is a race: compare each with "two".
    arrived = {line: at for line, at in arrivals}
    assert sorted(arrived) == ["one", "oops", "two"]
    assert arrived["one"] < arrived["two"] - 0.3 and arrived["oops"] < arrived["two"] - 0.3
    assert local.run("pwd", timeout_s=5, cwd=str(tmp_path)).stdout.strip() == str(tmp_path)
    slow = local.run("sleep 10", timeout_s=0.3)
    assert slow.timed_out and slow.returncode == 124


def test_push_verify_remove(local: LocalDevice, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("alpha")
    (src / "sub" / "b.bin").write_bytes(b"\x00\x01" * 1000)
    work = local.workdir("r1")
    local.mkdir(work)
    local.push(src, f"{work}/bundle")
    local.push(src / "a.txt", f"{work}/one/a.txt")
    assert (Path(work) / "bundle/sub/b.bin").read_bytes() == b"\x00\x01" * 1000
    assert (Path(work) / "bundle/a.txt").read_text() == "alpha"
    assert local.read_text(f"{work}/one/a.txt") == "alpha"
    with pytest.raises(InputError, match="does not exist"):
        local.push(tmp_path / "missing", f"{work}/x")
    local.remove(work)
    assert not Path(work).exists()
    local.remove(work)
    with pytest.raises(InputError, match="refusing"):
        local.remove("/tmp")


def test_push_hash_mismatch(local: LocalDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "w.bin").write_bytes(b"weights" * 100)
    transfer = LocalDevice._transfer

    def corrupting(self: LocalDevice, local_path: Path, remote: str) -> None:
        transfer(self, local_path, remote)
        (Path(remote) / "w.bin").write_bytes(b"garbage")

    monkeypatch.setattr(LocalDevice, "_transfer", corrupting)
    with pytest.raises(DeviceError, match=r"sha256 of .*w\.bin does not match"):
        local.push(src, local.workdir("r1") + "/bundle")


def test_background_job_poll_stop(local: LocalDevice) -> None:
    work = local.workdir("r1")
    job = local.start_background("echo hi; sleep 0.3; exit 3", cwd=work, name="job", timeout_s=20)
    assert local.job_running(job)
    assert local.wait_job(job, timeout_s=10, poll_s=0.05) == 3
    assert local.read_text(job.log_file) == "hi\n"
    hung = local.start_background("sleep 30", cwd=work, name="hung", timeout_s=60)
    assert local.job_running(hung)
    local.stop_job(hung)
    assert not local.job_running(hung)
    timed = local.start_background("sleep 30", cwd=work, name="timed", timeout_s=0.3)
    assert local.wait_job(timed, timeout_s=10, poll_s=0.05) == 124
    with pytest.raises(InputError, match="shell-safe"):
        local.start_background("true", cwd=work, name="bad name;", timeout_s=5)


def test_info_reports_python(local: LocalDevice) -> None:
    info = local.info(sys.executable)
    assert info.transport == "local" and info.python is not None
    assert info.python.usable and info.python.numpy and info.python.onnxruntime
    missing = local.info("/nonexistent/python3")
    assert missing.python is not None and not missing.python.found
    assert missing.python.missing == ["python (/nonexistent/python3)"]

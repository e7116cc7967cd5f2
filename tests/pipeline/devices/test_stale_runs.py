"""Run dirs a lost device kept are swept by the next run; live, young and just-ended ones stay."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Iterator

import pytest
from standin.adbd import StandinDevice

from specdec.pipeline.devices.adb import AdbDevice
from specdec.pipeline.devices.session import KEEP_ENV
from specdec.pipeline.devices.stale_runs import ENDED_GRACE, stale_runs, sweep_stale_runs

pytestmark = pytest.mark.adb
REMOTE = "/data/local/tmp/specdec"


@pytest.fixture
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _layout(dev: StandinDevice, live_pid: int) -> dict[str, str]:
    now = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    dirs = {"lost": f"{now}-aaaaaa", "running": f"{now}-bbbbbb", "pushing": f"{now}-cccccc",
            "just-ended": f"{now}-ffffff", "abandoned": "20200101-000000-dddddd", "current": "20200101-000001-eeeeee"}
    base = dev.fs.host_path(REMOTE)
    for name in [*dirs.values(), "runtime/abc", "notes"]:
        (base / name).mkdir(parents=True)
    for ended in ("lost", "just-ended"):
        (base / dirs[ended] / "runner.pid").write_text(f"{_dead_pid()} {_dead_pid()}\n")
        (base / dirs[ended] / "sensors.pid").write_text(f"{_dead_pid()} {_dead_pid()}\n")
    # the lost run's last job ended past the grace; the other's host may still be reading its results
    dev.fs.age(f"{REMOTE}/{dirs['lost']}", ENDED_GRACE.total_seconds() + 60)
    (base / dirs["running"] / "runner.pid").write_text(f"{live_pid} {live_pid}\n")
    (base / dirs["running"] / "sensors.pid").write_text(f"{_dead_pid()} {_dead_pid()}\n")
    return dirs


def test_sweeps_only_what_nothing_uses(adb_device: tuple[AdbDevice, StandinDevice], sleeper: int) -> None:
    device, dev = adb_device
    dirs = _layout(dev, sleeper)
    assert sorted(stale_runs(device, dirs["current"])) == sorted([dirs["lost"], dirs["abandoned"]])
    assert sorted(sweep_stale_runs(device, dirs["current"])) == sorted([dirs["lost"], dirs["abandoned"]])
    left = sorted(p.name for p in dev.fs.host_path(REMOTE).iterdir())
    assert left == sorted([dirs["running"], dirs["pushing"], dirs["just-ended"], dirs["current"], "runtime", "notes"])


def test_keep_remote_keeps_everything(adb_device: tuple[AdbDevice, StandinDevice], sleeper: int,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    device, dev = adb_device
    dirs = _layout(dev, sleeper)
    monkeypatch.setenv(KEEP_ENV, "1")
    assert sweep_stale_runs(device, dirs["current"]) == []
    assert (dev.fs.host_path(REMOTE) / dirs["lost"]).is_dir()

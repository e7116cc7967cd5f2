"""Remove run directories an earlier bench left on the device when it lost the device.

A run's work dir is removed when the run ends, on error and on Ctrl-C (session.py), but not
when the device went away mid-run: nothing can reach it then. The next run sweeps such dirs:
those whose jobs all ended (pid files, no live wrapper) with nothing in them touched for
`ENDED_GRACE`, and those without any job that are older than a day (a push that never got to
start its runner). A dir with a live job stays, and so do a young one without jobs (another
host may be pushing into it right now) and one whose job has only just ended: its host is
still reading the results or about to start the next job (two benches sharing a device, as
two test workers share this machine's, once lost a run that way). Runtimes (`runtime/`) are
not run dirs and are never touched here.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import posixpath
import re

from specdec.pipeline.devices.base import Device
from specdec.pipeline.devices.session import KEEP_ENV
from specdec.pipeline.devices.shell import q
from specdec.pipeline.errors import SpecdecError

log = logging.getLogger(__name__)

# session.new_run_id(): UTC timestamp + random suffix
_RUN_ID = re.compile(r"^(\d{8}-\d{6})-[0-9a-f]+$")
_NO_JOB_MAX_AGE = _dt.timedelta(days=1)
ENDED_GRACE = _dt.timedelta(minutes=10)


def _state_script(remote_dir: str) -> str:
    # First line: the device's clock (epoch s), so ages never compare two machines' clocks. Then one
    # line per run dir: NAME LIVE(0/1) JOBS(0/1) NEWEST, NEWEST the latest mtime of the dir and the
    # files in it (a job's rc file lands when it ends). `kill -0` on each job's wrapper pid, a
    # zombie (killed, not yet reaped by an init that may never reap it) counting as ended.
    return (f"cd {q(remote_dir)} 2>/dev/null || exit 0; date +%s; "
            "for d in [0-9]*-[0-9]*-*; do [ -d \"$d\" ] || continue; "
            "live=0; jobs=0; for p in \"$d\"/*.pid; do [ -f \"$p\" ] || continue; jobs=1; w=; read -r w t < \"$p\"; "
            "if [ -n \"$w\" ] && kill -0 \"$w\" 2>/dev/null && "
            "[ \"$(cut -d' ' -f3 /proc/$w/stat 2>/dev/null)\" != Z ]; then live=1; fi; done; "
            "newest=$(stat -c %Y \"$d\" \"$d\"/* 2>/dev/null | sort -n | tail -n 1); "
            "echo \"$d $live $jobs ${newest:-0}\"; done; true")


def stale_runs(device: Device, current: str, now: _dt.datetime | None = None) -> list[str]:
    """Run dirs (names) under the device's remote dir that no job or push is using."""
    remote_dir = posixpath.dirname(device.workdir(current))
    now = now or _dt.datetime.now(_dt.UTC)
    stale = []
    lines = device.run(_state_script(remote_dir), timeout_s=60).stdout.splitlines()
    device_now = int(lines[0]) if lines and lines[0].strip().isdigit() else None
    for line in lines[1:]:
        name, *flags = line.split()
        match = _RUN_ID.match(name)
        if name == current or match is None or len(flags) != 3 or not flags[2].isdigit() or flags[0] == "1":
            continue
        if flags[1] == "1":
            quiet_s = None if device_now is None else device_now - int(flags[2])
            if quiet_s is not None and quiet_s > ENDED_GRACE.total_seconds():
                stale.append(name)
            continue
        started = _dt.datetime.strptime(match.group(1), "%Y%m%d-%H%M%S").replace(tzinfo=_dt.UTC)
        if now - started > _NO_JOB_MAX_AGE:
            stale.append(name)
    return stale


def sweep_stale_runs(device: Device, current: str) -> list[str]:
    """Remove stale run dirs (not with SPECDEC_KEEP_REMOTE, which keeps dirs on purpose)."""
    if os.environ.get(KEEP_ENV, "") not in ("", "0"):
        return []
    removed = []
    try:
        for name in stale_runs(device, current):
            device.remove(posixpath.join(posixpath.dirname(device.workdir(current)), name))
            removed.append(name)
    except SpecdecError as exc:  # tidying up must not stop a run
        log.warning("could not remove stale run dirs on %s: %s", device.serial, exc.one_line())
    if removed:
        log.info("removed run dirs an earlier run left on %s: %s", device.serial, ", ".join(removed))
    return removed

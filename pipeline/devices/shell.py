"""Shell text and process plumbing shared by the `local` and `adb` transports.

Both transports run the same `sh` snippets (background jobs, hash checks, the Python probe), so
a job started on a phone and one started on this machine leave the same pid/log/rc files.
Every device path is inlined in the command string: the stand-in device (and any tool that
rewrites paths) only sees paths that appear there, never paths inside pushed files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from specdec.pipeline.devices.base import BackgroundJob, OutputSink
from specdec.pipeline.errors import InputError
from specdec.pipeline.graphs.files import sha256_file
from specdec.pipeline.records.device import PythonStatus

log = logging.getLogger(__name__)

q = shlex.quote
RC_MARKER = "__RC__:"  # the command's own exit code, printed by the shell that ran it
END_MARKER = "__END__:"  # `timeout`'s exit code, printed last: its absence means the device was lost
_MARKER_RE = re.compile(f"(?:{re.escape(RC_MARKER)}(\\d+)\r?\n)?{re.escape(END_MARKER)}(\\d+)\r?\n?\\Z")
_JOB_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
# rm -rf on these would wipe far more than a run's work dir.
_PROTECTED = {"/", "/data", "/data/local", "/data/local/tmp", "/sdcard", "/tmp", "/sys", "/proc", "/home"}


def seconds(value: float) -> str:
    """A duration for `timeout`/`sleep`: GNU and toybox both take decimals."""
    return f"{max(value, 0.001):.3f}".rstrip("0").rstrip(".")


def in_dir(command: str, cwd: str | None) -> str:
    # The newline ends a trailing comment or `&` in the user's command before the brace.
    return command if cwd is None else f"cd {q(cwd)} && {{ {command}\n}}"


# Runs as `sh -c _STATUS_OF CMD`: the command in a shell of its own (an `exit` in it ends only
# that one), then its exit code. toybox 0.8.9's `timeout` (Android 14) races with a child that
# exits at once and then reports 127 for it, so the code that counts comes from inside.
_STATUS_OF = f'sh -c "$1"; echo "{RC_MARKER}$?"'


def with_rc_marker(command: str, *, cwd: str | None, timeout_s: float) -> str:
    """`timeout` bounds the command on the device itself (killing adb leaves it running);
    the markers carry the exit code even where adb drops it or the device vanishes."""
    inner = f"timeout {seconds(timeout_s)} sh -c {q(_STATUS_OF)} specdec {q(command)}"
    if cwd is not None:
        inner = f"cd {q(cwd)} && {inner}"
    return f"{inner}; echo {END_MARKER}$?"


def split_marker(stdout: str) -> tuple[str, int | None]:
    """(output without the markers, exit code) or (output, None) when the end marker is missing.

    The command's own code wins; without it (killed by `timeout`: 124, 137) `timeout`'s counts."""
    match = _MARKER_RE.search(stdout)
    if match is None:
        return stdout, None
    own, outer = match.groups()
    return stdout[: match.start()], int(own if own is not None else outer)


def strip_marker_line(line: str) -> str | None:
    """For streaming: hide the markers; a marker glued to unterminated output keeps the output."""
    for marker in (RC_MARKER, END_MARKER):
        index = line.rfind(marker)
        if index >= 0 and line[index + len(marker):].strip().isdigit():
            return line[:index] or None
    return line


# ----------------------------------------------------------------------------- processes
@dataclass(frozen=True)
class ProcessOutput:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    elapsed_s: float


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # Each command gets its own session (start_new_session), so its group is its pid.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def stream_process(argv: Sequence[str], *, timeout_s: float, on_output: OutputSink | None = None,
                   env: Mapping[str, str] | None = None,
                   line_filter: Callable[[str], str | None] | None = None) -> ProcessOutput:
    """Run argv, hand each output line to `on_output` as it arrives, kill it at the deadline.

    The child gets its own session so a terminal Ctrl-C reaches only us: we decide what to
    kill (the child, always) and what to clean up afterwards.
    """
    start = time.monotonic()
    proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=None if env is None else dict(env),
                            start_new_session=True)
    sink_lock = threading.Lock()
    collected: dict[str, list[str]] = {"out": [], "err": []}

    def pump(pipe: IO[bytes], key: str, filt: Callable[[str], str | None] | None) -> None:
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = raw.decode("utf-8", "replace")
                collected[key].append(line)
                if on_output is None:
                    continue
                shown = filt(line) if filt else line
                if shown is not None:
                    with sink_lock:
                        try:
                            on_output(shown.rstrip("\r\n"))
                        except Exception:  # a broken sink must not kill the transfer
                            log.exception("output sink failed")

    assert proc.stdout is not None and proc.stderr is not None
    threads = [threading.Thread(target=pump, args=(proc.stdout, "out", line_filter), daemon=True),
               threading.Thread(target=pump, args=(proc.stderr, "err", None), daemon=True)]
    for thread in threads:
        thread.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    for thread in threads:
        # A grandchild that kept our pipe open must not hang the caller.
        thread.join(timeout=5)
    return ProcessOutput(proc.returncode, "".join(collected["out"]), "".join(collected["err"]),
                         timed_out, time.monotonic() - start)


# ----------------------------------------------------------------------------- background jobs
def job_files(cwd: str, name: str) -> BackgroundJob:
    if not _JOB_NAME_RE.match(name):
        raise InputError(f"job name {name!r} is not shell-safe", "use letters, digits, '.', '_' and '-' only")
    base = posixpath.join(cwd, name)
    return BackgroundJob(pid_file=f"{base}.pid", log_file=f"{base}.log", rc_file=f"{base}.rc")


# Runs on the device as `sh -c WRAPPER specdec-job PIDFILE T CMD RCFILE`. The pid file holds
# "WRAPPER TIMEOUT": the wrapper lives until the rc file is written (so "running" never
# flickers to "dead" before the exit code lands), `timeout` is what `stop_job` signals.
# Files are written to .tmp and renamed so a poll never reads half a number. The command's own
# exit code (RCFILE.cmd, see _STATUS_OF) beats `timeout`'s, which toybox 0.8.9 gets wrong.
_WRAPPER = ('printf "%s " "$$" > "$1.tmp"; rm -f "$4.cmd"; '
            'timeout "$2" sh -c \'sh -c "$1"; echo "$?" > "$0"\' "$4.cmd" "$3" & '
            'echo "$!" >> "$1.tmp"; mv "$1.tmp" "$1"; wait "$!"; r=$?; '
            'if [ -s "$4.cmd" ]; then read -r r < "$4.cmd"; fi; echo "$r" > "$4.tmp"; mv "$4.tmp" "$4"')


def background_script(job: BackgroundJob, command: str, *, cwd: str, timeout_s: float) -> str:
    """Start the job detached (stdin, stdout and stderr off the caller's pipes, nohup), then
    wait briefly for its pid file and print it, so the caller learns the pids at once."""
    launch = (f"nohup sh -c {q(_WRAPPER)} specdec-job {q(job.pid_file)} {seconds(timeout_s)} {q(command)} "
              f"{q(job.rc_file)} > {q(job.log_file)} 2>&1 < /dev/null &")
    wait_pid = (f"i=0; while [ ! -s {q(job.pid_file)} ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; "
                f"cat {q(job.pid_file)}")
    # `a && b &` backgrounds the whole list in a subshell; mksh (Android's sh) keeps that subshell,
    # and with it adb's stdout, alive until the job ends, so only the nohup line may end in `&`.
    return f"mkdir -p {q(cwd)} && cd {q(cwd)} && rm -f {q(job.rc_file)} || exit 1\n{launch}\n{wait_pid}"


def job_state_script(job: BackgroundJob) -> str:
    # A killed wrapper whose parent is gone can linger as a zombie until init reaps it, and
    # `kill -0` succeeds on zombies: /proc/PID/stat's state field tells them apart.
    pid, rc = q(job.pid_file), q(job.rc_file)
    return (f"if [ -e {rc} ]; then echo done; else w=; read -r w t < {pid} 2>/dev/null; "
            'if [ -n "$w" ] && kill -0 "$w" 2>/dev/null; then s=; read -r s < "/proc/$w/stat" 2>/dev/null; '
            'case "$s" in *") Z "*) echo dead;; *) echo running;; esac; else echo dead; fi; fi')


def stop_job_script(job: BackgroundJob, grace_s: float = 2.0) -> str:
    # TERM first so the job can flush. GNU `timeout` leads a process group of its own and passes
    # TERM on; toybox's (Android) dies of it and leaves its child, which it made the leader of
    # another group, running: so signal that group too (`pgrep -P`), and each target in its own
    # `kill` (dash's stops at the first pid that does not exist). The rc file, not `kill -0`,
    # tells when the wrapper is done: a zombie passes kill -0.
    pid, rc = q(job.pid_file), q(job.rc_file)
    steps = max(int(grace_s / 0.05), 1)
    return (f"w=; t=; read -r w t < {pid} 2>/dev/null; if [ -n \"$t\" ]; then "
            'c=$(pgrep -P "$t" 2>/dev/null); '
            'for p in "$t" $c; do kill -TERM "$p" 2>/dev/null; kill -TERM -- "-$p" 2>/dev/null; done; '
            f'i=0; while [ ! -e {rc} ] && kill -0 "$w" 2>/dev/null && [ $i -lt {steps} ]; do sleep 0.05; '
            'i=$((i+1)); done; '
            'for p in "$t" $c; do kill -KILL -- "-$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done; '
            'kill -KILL "$w" 2>/dev/null; fi; true')


def parse_pids(text: str) -> tuple[int, int] | None:
    parts = text.split()
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


# ----------------------------------------------------------------------------- hashes
def local_hashes(local: Path) -> dict[str, str]:
    """sha256 of every file, keyed by path relative to `local` ('' for a single file)."""
    if local.is_file():
        return {"": sha256_file(local)}
    return {p.relative_to(local).as_posix(): sha256_file(p) for p in sorted(local.rglob("*")) if p.is_file()}


def parse_sha256sum(text: str) -> dict[str, str]:
    """`HASH  name` lines (GNU and toybox; `*` marks binary mode) -> {name: hash}."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        digest, _, name = line.partition(" ")
        if len(digest) == 64 and name:
            name = name[1:] if name[:1] in (" ", "*") else name
            found[name[2:] if name.startswith("./") else name] = digest.lower()
    return found


def check_removable(path: str) -> str:
    """Refuse rm -rf of relative paths and system roots: a bad profile must not wipe a phone."""
    norm = posixpath.normpath(path)
    if not norm.startswith("/") or norm in _PROTECTED or norm.count("/") < 2:
        raise InputError(f"refusing to remove '{path}'",
                         "pass a run's work dir (an absolute path below the profile's remote_dir)")
    return norm


# ----------------------------------------------------------------------------- python probe
PYTHON_PROBE = (
    "import sys\n"
    "print('python', sys.version.split()[0])\n"
    "for m in ('numpy', 'onnxruntime'):\n"
    "    try:\n"
    "        print(m, getattr(__import__(m), '__version__', 'unknown'))\n"
    "    except Exception as e:\n"
    "        print(m, '!' + type(e).__name__ + ': ' + str(e).replace(chr(10), ' ')[:160])\n"
)


# onnxruntime (1.2x on Linux and Android) keeps telemetry state from the moment it is imported: a
# `.ses` file in $TMPDIR and `.cache/Microsoft/DeveloperTools/.onnxruntime/` in $HOME, which on a
# phone is /data/local/tmp. Nothing may be left on a device, so every Python started there runs
# with it off (the portable runtime's launcher, portable/specdec-run, does the same).
NO_TELEMETRY = "ORT_DISABLE_TELEMETRY=1"


def python_probe_command(python: str) -> str:
    return f"{NO_TELEMETRY} {q(python)} -c {q(PYTHON_PROBE)}"


def private_environment(workdir: str) -> str:
    """Variable assignments that keep what a program writes besides its output (caches, temp files, the
    telemetry state above) inside `workdir`, which the host removes after the run. Python's user site
    (`pip install --user` packages) stays where the real HOME has it: it is expanded before HOME moves."""
    home = q(workdir)
    return (f'PYTHONUSERBASE="${{PYTHONUSERBASE:-$HOME/.local}}" HOME={home} TMPDIR={home} '
            f"XDG_CACHE_HOME={q(workdir + '/.cache')} XDG_CONFIG_HOME={q(workdir + '/.config')} {NO_TELEMETRY}")


def parse_python_probe(python: str, stdout: str) -> tuple[PythonStatus, dict[str, str]]:
    """PythonStatus plus import errors (e.g. onnxruntime's missing shared library) for `extra`."""
    values: dict[str, str] = {}
    for line in stdout.splitlines():
        key, _, value = line.partition(" ")
        if key in ("python", "numpy", "onnxruntime") and value:
            values[key] = value.strip()
    errors = {f"{k}_error": v[1:] for k, v in values.items() if v.startswith("!")}
    ok = {k: v for k, v in values.items() if not v.startswith("!")}
    status = PythonStatus(executable=python, found="python" in ok, version=ok.get("python"),
                          numpy=ok.get("numpy"), onnxruntime=ok.get("onnxruntime"))
    return status, errors

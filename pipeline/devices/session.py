"""A run's work directory on a device: created on entry, always removed on exit.

"Always" includes Ctrl-C, SIGTERM (CI cancelling a job sends it) and SIGHUP (a closed terminal):
inside the session SIGTERM and SIGHUP raise `errors.Interrupted` (a KeyboardInterrupt) so the same
cleanup runs, and while the directory is being removed further signals are held back until the
removal is done. A phone's
/data/local/tmp fills up quickly with leftover bundles otherwise.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import secrets
import shlex
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from specdec.pipeline.devices.base import Device
from specdec.pipeline.errors import Interrupted, SpecdecError

log = logging.getLogger(__name__)

KEEP_ENV = "SPECDEC_KEEP_REMOTE"
_STOPPING = (signal.SIGTERM, signal.SIGHUP)  # signals that end a run like Ctrl-C does


def new_run_id() -> str:
    """UTC timestamp + random suffix: sortable, unique per run, and safe in any shell."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def _keep_remote() -> bool:
    return os.environ.get(KEEP_ENV, "") not in ("", "0")


def _in_main_thread() -> bool:
    # signal.signal() only works there; elsewhere the caller's own handlers stay in charge.
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    if not _in_main_thread():
        yield
        return

    def raise_interrupt(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, raise_interrupt) for sig in _STOPPING}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[list[int]]:
    """Hold SIGINT/SIGTERM while cleaning up; the caller re-raises afterwards."""
    received: list[int] = []
    if not _in_main_thread():
        yield received
        return

    def remember(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    saved: dict[int, Any] = {sig: signal.signal(sig, remember) for sig in (signal.SIGINT, *_STOPPING)}
    try:
        yield received
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _cleanup(device: Device, workdir: str, failing: bool) -> None:
    if _keep_remote():
        log.warning("keeping %s on %s (%s is set); remove it when done", workdir, device.serial, KEEP_ENV)
        return
    with _signals_deferred() as received:
        try:
            device.remove(workdir)
            # and the directory of work dirs, if this run made it and nothing else lives there (the portable
            # runtime does, when it was pushed: then it stays)
            device.run(f"rmdir {shlex.quote(posixpath.dirname(workdir))} 2>/dev/null", timeout_s=30)
            log.info("removed %s on %s", workdir, device.serial)
        except SpecdecError as exc:
            # A lost device cannot be cleaned. Say so, but neither hide the error that got us
            # here nor fail a run whose results are already safe on this machine.
            log.warning("could not remove %s on %s: %s", workdir, device.serial, exc.one_line())
    if received and not failing:
        raise Interrupted(received[0])


@contextlib.contextmanager
def device_session(device: Device, run_id: str) -> Iterator[str]:
    """Yield the run's work dir (created); remove it on every exit unless SPECDEC_KEEP_REMOTE=1."""
    workdir = device.workdir(run_id)
    with _sigterm_as_interrupt():
        device.mkdir(workdir)
        log.info("work dir %s on %s", workdir, device.serial)
        failing = True
        try:
            yield workdir
            failing = False
        finally:
            _cleanup(device, workdir, failing)

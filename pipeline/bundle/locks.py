"""One writer per output: an exclusive lock next to it while it is written, and the sweep of what a killed
writer left (pipeline/bundle/staging.py's output policy; docs/bundles.md)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from specdec.pipeline.bundle.write_errors import write_error
from specdec.pipeline.errors import InputError, setting


def lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.lock"


class _OutputLock:
    """An exclusive flock on `.NAME.lock` next to the output, holding the writer's pid (for the error
    another writer gets). The OS drops the lock when the process dies however it dies, so a stale
    lock file never blocks anyone: only a live writer does."""

    def __init__(self, out: Path, key: str) -> None:
        self.out = out
        self.key = key
        self.path = lock_path(out)
        self.fd = self._acquire()

    def _acquire(self) -> int:
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise write_error(exc, self.out, self.key) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip()
                os.close(fd)
                pid = f" (pid {holder})" if holder.isdigit() else ""
                raise InputError(f"output '{self.out}' is being written by another specdec process{pid}",
                                 f"wait for it to finish, or choose another {setting(self.key)}") from None
            except OSError as exc:
                os.close(fd)
                raise write_error(exc, self.out, self.key) from None
            # The previous holder removes the file when it lets go: a lock on a removed file guards nothing,
            # so lock whatever file is at the path now.
            try:
                if os.path.samestat(os.fstat(fd), self.path.stat()):
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self.fd)


_HELD: dict[Path, tuple[_OutputLock, int]] = {}  # this process's locks, by output, with their holders' count


@contextlib.contextmanager
def hold_output(out: Path, key: str = "output") -> Iterator[None]:
    """Hold the output's lock for the block (re-entrant within one process: a stage that stages its
    output inside a longer run holding it). Parent directories made for the lock file go again."""
    name = out.absolute()
    made: list[Path] = []
    if name not in _HELD:
        missing = [p for p in (name.parent, *name.parent.parents) if not p.exists()]
        try:
            for parent in reversed(missing):
                parent.mkdir()
                made.insert(0, parent)
            _HELD[name] = (_OutputLock(out, key), 0)
        except OSError as exc:
            _remove_empty(made)
            raise write_error(exc, out, key) from None
        except BaseException:
            _remove_empty(made)
            raise
    lock, count = _HELD[name]
    _HELD[name] = (lock, count + 1)
    try:
        yield
    finally:
        lock, count = _HELD.pop(name)
        if count > 1:
            _HELD[name] = (lock, count - 1)
        else:
            lock.release()
        _remove_empty(made)


def _remove_empty(directories: list[Path]) -> None:
    for directory in directories:  # deepest first
        with contextlib.suppress(OSError):
            directory.rmdir()


def release_outputs() -> None:
    """Let go of every lock this process holds (the CLI calls it when a command ends, however it ends)."""
    while _HELD:
        _HELD.popitem()[1][0].release()


def sweep_leftovers(out: Path) -> list[Path]:
    """Remove the hidden leftovers of an earlier writer of `out` that was killed before it could clean
    up (`.NAME.XXXXXXXX.partial`, `.NAME.old-PID`); call it holding the output's lock, so no live writer
    owns them. Only names of exactly this shape are touched."""
    pattern = re.compile(rf"\.{re.escape(out.name)}\.(?:[a-z0-9_]{{8}}\.partial|old-\d+)")
    swept: list[Path] = []
    with contextlib.suppress(OSError):
        for entry in out.parent.iterdir():
            if pattern.fullmatch(entry.name):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                swept.append(entry)
    return swept

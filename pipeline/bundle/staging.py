"""The one place that opens outputs: every directory and file a command writes goes through here.

The output policy (docs/bundles.md), checked before any long work starts (`check_output_dir`,
`check_output_file`):

- an output never equals, contains or lies inside an input (a bundle, a checkpoint, a prompts,
  calibration or baseline file): inputs are never modified;
- an existing output is replaced only with `--force`, and `--force` replaces only what specdec
  wrote: a bundle (its manifest lists every file), a bench results directory, a `specdec draft`
  checkpoint or a `generate` replies file. Anything else is refused with the names of what is
  there, never deleted;
- the place must be writable: a probe directory is created (and removed) in the nearest existing
  ancestor, so a read-only filesystem, a missing permission, a full disk or a path through a file
  is a one-line `InputError` (exit 2) naming the path, not a traceback after the work;
- one writer at a time: while an output is staged, an exclusive lock (`.NAME.lock` next to it,
  `hold_output`) makes a second specdec process writing the same output fail at once (exit 2).

Output is built under a hidden temporary name next to the destination and renamed into place on
`commit` (`StagedDirectory`, `StagedFile`): a failure, Ctrl-C, SIGTERM or SIGHUP leaves nothing
half-written, directories created on the way to the output are removed again if nothing was
committed, and the hidden leftovers of a writer that was killed outright (SIGKILL, a power cut) are
swept the next time the output is staged.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from specdec.pipeline.errors import BundleError, InputError, setting
from specdec.pipeline.records.manifest import MANIFEST_NAME, read_manifest

log = logging.getLogger(__name__)

RESULTS_FILE = "results.json"
# What `specdec bench` writes into its results directory (plots are `*.png`).
BENCH_FILES = frozenset({RESULTS_FILE, "summary.md", "events.jsonl", "trace.json"})
DRAFT_REPORT = "draft_report.json"  # what `specdec draft` writes next to the checkpoint (pipeline/draft/report.py)

# errno -> (what went wrong, how to fix it); {flag} becomes the command's output flag.
_WRITE_ERRORS: dict[int, tuple[str, str]] = {
    errno.EROFS: ("is on a read-only filesystem", "choose {flag} on a writable filesystem"),
    errno.EACCES: ("is not writable (permission denied)", "choose {flag} you can write to, or fix its permissions"),
    errno.EPERM: ("is not writable (operation not permitted)", "choose {flag} you can write to"),
    errno.ENOSPC: ("cannot be written: no space left on the device", "free space or choose {flag} on another disk"),
    errno.EDQUOT: ("cannot be written: disk quota exceeded", "free space or choose {flag} on another disk"),
    errno.EFBIG: ("cannot be written: a file would exceed the size limit (ulimit -f, or the filesystem's)",
                  "raise the limit (ulimit -f unlimited) or choose {flag} on another filesystem"),
    errno.ENOTDIR: ("cannot be created: a part of its path is a file", "choose another {flag}"),
    errno.ENAMETOOLONG: ("has a name that is too long", "choose a shorter {flag}"),
}
# Errors that only a write raises: whatever path they name, they are about the output.
_WRITE_ONLY = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def write_error(exc: OSError, path: Path | str, key: str = "output") -> InputError:
    """An OSError met while writing `path`, as one line naming the path and the fix (exit 2)."""
    problem, fix = _WRITE_ERRORS.get(exc.errno or 0, (f"cannot be written ({exc.strerror or exc})",
                                                      "choose another {flag}"))
    return InputError(f"output '{path}' {problem}", fix.format(flag=setting(key)))


def stray_write_error(exc: OSError, path: str) -> InputError:
    """`write_error` for a write no staged output made (the CLI's mapper): a file in the temporary directory
    (a bench payload, a calibration probe) is named as one, its fix another TMPDIR."""
    if Path(tempfile.gettempdir()).absolute() not in Path(path).absolute().parents:
        return write_error(exc, path)
    problem, fix = _WRITE_ERRORS[exc.errno or 0]
    return InputError(f"temporary file '{path}' {problem}", fix.format(flag="TMPDIR"))


def written_path(exc: OSError) -> str | None:
    """The file an OSError is about: a copy names its source first and the file it was writing second."""
    name = exc.filename2 if exc.filename2 is not None else exc.filename
    return None if name is None else os.fsdecode(name)


def is_write_error(exc: BaseException, *paths: Path) -> bool:
    """Whether `exc` is an OSError about writing one of `paths` (or below them), or, naming no file or
    with no `paths` given, a write-only error (a full disk, a file-size limit)."""
    if not isinstance(exc, OSError) or exc.errno is None or exc.errno not in _WRITE_ERRORS:
        return False
    name = written_path(exc)
    if name is None or not paths:
        return exc.errno in _WRITE_ONLY
    named = Path(name).absolute()
    return any(named == p.absolute() or p.absolute() in named.parents for p in paths)


# ---- what specdec wrote ------------------------------------------------------------------------

def _json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _bundle_files(directory: Path) -> set[str] | None:
    """The files of the bundle at `directory` (its manifest's reader decides what is a bundle)."""
    try:
        manifest = read_manifest(directory)
    except BundleError:
        return None
    return {*manifest.files, MANIFEST_NAME}


def _bench_files(directory: Path) -> set[str] | None:
    data = _json(directory / RESULTS_FILE)
    if not (isinstance(data, dict) and str(data.get("schema", "")).startswith("specdec.bench/")):
        return None
    return set(BENCH_FILES) | {p.name for p in directory.glob("*.png")}


def _draft_files(directory: Path) -> set[str] | None:
    """`specdec draft`'s checkpoint: its draft_report.json lists what it wrote."""
    data = _json(directory / DRAFT_REPORT)
    if not (isinstance(data, dict) and str(data.get("schema", "")).startswith("specdec.draft/")):
        return None
    files = data.get("files")
    return {str(name) for name in files} if isinstance(files, list) else None


# kind -> the files a directory of that kind owns (None: not of that kind)
OWNED: dict[str, Callable[[Path], set[str] | None]] = {
    "specdec bundle": _bundle_files,
    "bench results directory": _bench_files,
    "specdec draft": _draft_files,
}

REPLY_KEYS = frozenset({"id", "output_ids", "stats"})  # what every line of `generate -o` holds (generate/stage.py)


def _replies_file(path: Path) -> bool:
    """`specdec generate --prompts P -o R.jsonl`'s replies: one JSON object per line, each a reply."""
    try:
        with path.open("rb") as handle:
            lines = [line for line in handle.read().decode("utf-8").splitlines() if line.strip()]
        return all(isinstance(r := json.loads(line), dict) and r.keys() >= REPLY_KEYS for line in lines)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return False


# kind -> whether a file is of that kind: the single files --force may replace
OWNED_FILES: dict[str, Callable[[Path], bool]] = {
    "generate replies file": _replies_file,
}


def _listing(names: list[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return f"{shown} and {len(names) - limit} more" if len(names) > limit else shown


def foreign_entries(directory: Path) -> tuple[str | None, list[str]]:
    """What kind of specdec output `directory` is (None: none), and the entries specdec did not write."""
    files = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if not p.is_dir())
    for kind, owned in OWNED.items():
        names = owned(directory)
        if names is not None:
            return kind, [f for f in files if f not in names]
    top = sorted(p.name + ("/" if p.is_dir() else "") for p in directory.iterdir())
    return None, top


# ---- the checks --------------------------------------------------------------------------------

def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path.cwd()


def probe_writable(directory: Path, out: Path, key: str = "output") -> None:
    """Create and remove a hidden directory where `out` will be staged: the OS says whether it can."""
    anchor = _nearest_existing(directory.absolute())
    if not anchor.is_dir():
        raise InputError(f"output '{out}' cannot be created: '{anchor}' is a file, not a directory",
                         f"choose another {setting(key)}")
    try:
        Path(tempfile.mkdtemp(prefix=".specdec-probe-", dir=anchor)).rmdir()
    except OSError as exc:
        raise write_error(exc, out, key) from None


def _same(a: Path, b: Path) -> bool:
    """One file or directory under two names (a symlink, a hard link)?"""
    try:
        return a.samefile(b)
    except (OSError, ValueError):
        return False


def check_inputs(out: Path, sources: tuple[Path | None, ...], key: str = "output") -> None:
    """The output may not equal, contain or lie inside any input (inputs are never modified)."""
    resolved = out.resolve()
    for source in (s for s in sources if s is not None):
        src = source.resolve()
        if resolved == src or _same(out, source):
            how = "is the input"
        elif src in resolved.parents:
            how = "lies inside the input"
        elif resolved in src.parents:
            how = "contains the input"
        else:
            continue
        raise InputError(f"output '{out}' {how} '{source}'",
                         f"choose {setting(key)} outside every input (inputs are never modified)")


def check_output_dir(out: Path, *, force: bool, sources: tuple[Path | None, ...] = (), key: str = "output") -> None:
    """Refuse an output directory that would clobber something or cannot be written, before any work."""
    check_inputs(out, sources, key)
    flag = setting(key)
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise InputError(f"output '{out}' exists and is not a directory", f"remove it or choose another {flag}")
        if not force:
            raise InputError(f"output '{out}' already exists", f"pass --force to replace it, or choose another {flag}")
        kind, foreign = foreign_entries(out)
        if foreign:
            what = f"is a {kind} but also holds files specdec did not write" if kind else \
                "is not a specdec bundle or bench results directory"
            raise InputError(f"output '{out}' {what} ({_listing(foreign)})",
                             f"--force replaces only what specdec wrote: move those away or choose another {flag}")
    probe_writable(out.parent, out, key)


def check_output_file(out: Path, *, force: bool, sources: tuple[Path | None, ...] = (), key: str = "output") -> None:
    """The same rules for a single output file (`generate -o replies.jsonl`): --force replaces a file
    of a kind specdec writes (`OWNED_FILES`), or an empty one, nothing else."""
    flag = setting(key)
    check_inputs(out, sources, key)
    if out.is_dir():
        raise InputError(f"output '{out}' is a directory", f"pass a file name as {flag}")
    if out.exists() or out.is_symlink():
        if not force:
            raise InputError(f"output '{out}' already exists", f"pass --force to replace it, or choose another {flag}")
        if not out.is_file():
            raise InputError(f"output '{out}' is not a regular file", f"choose another {flag}")
        if out.stat().st_size and not any(recognise(out) for recognise in OWNED_FILES.values()):
            raise InputError(f"output '{out}' is not a file specdec wrote (not a {' or '.join(OWNED_FILES)})",
                             f"--force replaces only what specdec wrote: move it away or choose another {flag}")
    probe_writable(out.parent, out, key)


def writable_directory(directory: Path, key: str) -> Path:
    """Create `directory` (a cache: it stays) and check it can be written; InputError naming `key` if not."""
    probe_writable(directory, directory, key)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        Path(tempfile.mkdtemp(prefix=".specdec-probe-", dir=directory)).rmdir()
    except OSError as exc:
        raise write_error(exc, directory, key) from None
    return directory


# ---- one writer at a time ----------------------------------------------------------------------

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


# ---- staging -----------------------------------------------------------------------------------

class _Staged:
    """Shared by StagedDirectory and StagedFile: parents made on the way, the output's lock, stale
    leftovers swept, OS errors as one line."""

    def __init__(self, out: str | Path, key: str) -> None:
        self.out = Path(out)
        self.key = key
        self._made: list[Path] = []  # parent directories this output created, deepest first
        self._done = False
        self._tmp: Path | None = None
        self._lock = contextlib.ExitStack()

    def _check(self) -> None:
        raise NotImplementedError

    def _open(self) -> None:
        """Parents, then the lock (a second writer fails here, at once), then the checks again under the
        lock (another writer may have committed since), then the leftovers of a killed writer go."""
        self._make_parents()
        try:
            self._lock.enter_context(hold_output(self.out, self.key))
            self._check()
        except BaseException:
            self._lock.close()
            self._remove_parents()
            raise
        for stale in sweep_leftovers(self.out):
            log.info("removed %s, left by an earlier run that was killed", stale)

    def _make_parents(self) -> None:
        missing = [p for p in (self.out.parent.absolute(), *self.out.parent.absolute().parents) if not p.exists()]
        try:
            for parent in reversed(missing):
                parent.mkdir()
                self._made.insert(0, parent)
        except OSError as exc:
            self._remove_parents()
            raise write_error(exc, self.out, self.key) from None

    def _remove_parents(self) -> None:
        for parent in self._made:
            with contextlib.suppress(OSError):
                parent.rmdir()  # only if still empty
        self._made = []

    def _cleanup(self) -> None:
        raise NotImplementedError

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self._done:
            self._cleanup()
        self._lock.close()
        if not self._done:
            self._remove_parents()
        if exc is not None and self._tmp is not None and is_write_error(exc, self._tmp, self.out):
            assert isinstance(exc, OSError)
            raise write_error(exc, self.out, self.key) from exc


class StagedDirectory(_Staged):
    """A directory built under a hidden temporary name and renamed into place on `commit`.

    Use as a context manager: any exception (Ctrl-C included) removes the partial output, and
    an existing output is replaced only once the new one is complete.
    """

    def __init__(self, out: str | Path, *, force: bool = False, sources: tuple[Path | None, ...] = (),
                 key: str = "output") -> None:
        super().__init__(out, key)
        self.force = force
        self.sources = sources
        self._check()

    def _check(self) -> None:
        check_output_dir(self.out, force=self.force, sources=self.sources, key=self.key)

    def __enter__(self) -> Self:
        self._open()
        try:
            self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", suffix=".partial", dir=self.out.parent))
        except OSError as exc:
            self._lock.close()
            self._remove_parents()
            raise write_error(exc, self.out, self.key) from None
        return self

    def _cleanup(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    @property
    def dir(self) -> Path:
        if self._tmp is None:
            raise RuntimeError(f"{type(self).__name__} used outside its `with` block")
        return self._tmp

    def commit(self) -> Path:
        old: Path | None = None
        try:
            if self.out.exists():
                old = self.out.parent / f".{self.out.name}.old-{os.getpid()}"
                self.out.replace(old)
            self.dir.replace(self.out)
        except OSError as exc:
            if old is not None and not self.out.exists():
                old.replace(self.out)  # put the previous output back
            raise write_error(exc, self.out, self.key) from None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self._done = True
        return self.out


class StagedFile(_Staged):
    """A text file written under a hidden temporary name and renamed into place on `commit`."""

    def __init__(self, out: str | Path, *, force: bool = False, sources: tuple[Path | None, ...] = (),
                 key: str = "output") -> None:
        super().__init__(out, key)
        self.force = force
        self.sources = sources
        self._check()
        self._handle: IO[str] | None = None

    def _check(self) -> None:
        check_output_file(self.out, force=self.force, sources=self.sources, key=self.key)

    def __enter__(self) -> Self:
        self._open()
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.out.name}.", suffix=".partial", dir=self.out.parent)
        except OSError as exc:
            self._lock.close()
            self._remove_parents()
            raise write_error(exc, self.out, self.key) from None
        self._tmp = Path(tmp)
        self._handle = os.fdopen(fd, "w", encoding="utf-8")
        return self

    def write(self, text: str) -> None:
        if self._handle is None:
            raise RuntimeError(f"{type(self).__name__} used outside its `with` block")
        self._handle.write(text)

    def _cleanup(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)

    def commit(self) -> Path:
        assert self._handle is not None and self._tmp is not None
        try:
            self._handle.close()
            self._tmp.replace(self.out)
        except OSError as exc:
            raise write_error(exc, self.out, self.key) from None
        self._done = True
        return self.out

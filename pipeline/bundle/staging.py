"""The one place that opens outputs: every directory and file a command writes goes through here.

The rules, checked before any long work starts (`check_output_dir`, `check_output_file`):

- an output never overlaps an input (inputs are never modified);
- an existing output is replaced only with `--force`, and `--force` replaces only what specdec
  wrote: a bundle (its manifest lists every file) or a bench results directory. A directory that
  holds anything else is refused with the names of what is there, never deleted;
- the place must be writable: a probe directory is created (and removed) in the nearest existing
  ancestor, so a read-only filesystem, a missing permission, a full disk or a path through a file
  is a one-line `InputError` (exit 2) naming the path, not a traceback after the work.

Output is built under a hidden temporary name next to the destination and renamed into place on
`commit` (`StagedDirectory`, `StagedFile`): a failure or Ctrl-C leaves nothing half-written, and
directories created on the way to the output are removed again if nothing was committed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from specdec.pipeline.errors import BundleError, InputError, setting
from specdec.pipeline.records.manifest import MANIFEST_NAME, read_manifest

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
    errno.ENOTDIR: ("cannot be created: a part of its path is a file", "choose another {flag}"),
    errno.ENAMETOOLONG: ("has a name that is too long", "choose a shorter {flag}"),
}
# Errors that only a write raises: whatever path they name, they are about the output.
_WRITE_ONLY = frozenset({errno.EROFS, errno.ENOSPC, errno.EDQUOT})


def write_error(exc: OSError, path: Path | str, key: str = "output") -> InputError:
    """An OSError met while writing `path`, as one line naming the path and the fix (exit 2)."""
    problem, fix = _WRITE_ERRORS.get(exc.errno or 0, (f"cannot be written ({exc.strerror or exc})",
                                                      "choose another {flag}"))
    return InputError(f"output '{path}' {problem}", fix.format(flag=setting(key)))


def is_write_error(exc: BaseException, *paths: Path) -> bool:
    """Whether `exc` is an OSError about writing one of `paths` (or below them), or a write-only error."""
    if not isinstance(exc, OSError) or exc.errno is None:
        return False
    if exc.errno in _WRITE_ONLY:
        return True
    if exc.errno not in _WRITE_ERRORS or exc.filename is None:
        return False
    named = Path(os.fsdecode(exc.filename)).absolute()
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


def _check_overlap(out: Path, sources: tuple[Path, ...]) -> None:
    resolved = out.resolve()
    for source in sources:
        src = source.resolve()
        if resolved == src or src in resolved.parents or resolved in src.parents:
            raise InputError(
                f"output '{out}' overlaps the input '{source}'",
                "choose an output directory outside the input (inputs are never modified)",
            )


def check_output_dir(out: Path, *, force: bool, sources: tuple[Path, ...] = (), key: str = "output") -> None:
    """Refuse an output directory that would clobber something or cannot be written, before any work."""
    _check_overlap(out, sources)
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


def check_output_file(out: Path, *, force: bool, key: str = "output") -> None:
    """The same rules for a single output file (`generate -o replies.jsonl`)."""
    flag = setting(key)
    if out.is_dir():
        raise InputError(f"output '{out}' is a directory", f"pass a file name as {flag}")
    if out.exists() and not force:
        raise InputError(f"output '{out}' already exists", f"pass --force to replace it, or choose another {flag}")
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


# ---- staging -----------------------------------------------------------------------------------

class _Staged:
    """Shared by StagedDirectory and StagedFile: parents made on the way, OS errors as one line."""

    def __init__(self, out: str | Path, key: str) -> None:
        self.out = Path(out)
        self.key = key
        self._made: list[Path] = []  # parent directories this output created, deepest first
        self._done = False
        self._tmp: Path | None = None

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
            self._remove_parents()
        if exc is not None and self._tmp is not None and is_write_error(exc, self._tmp, self.out):
            assert isinstance(exc, OSError)
            raise write_error(exc, self.out, self.key) from exc


class StagedDirectory(_Staged):
    """A directory built under a hidden temporary name and renamed into place on `commit`.

    Use as a context manager: any exception (Ctrl-C included) removes the partial output, and
    an existing output is replaced only once the new one is complete.
    """

    def __init__(self, out: str | Path, *, force: bool = False, sources: tuple[Path, ...] = (),
                 key: str = "output") -> None:
        super().__init__(out, key)
        self.force = force
        check_output_dir(self.out, force=force, sources=sources, key=key)

    def __enter__(self) -> Self:
        self._make_parents()
        try:
            self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", suffix=".partial", dir=self.out.parent))
        except OSError as exc:
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

    def __init__(self, out: str | Path, *, force: bool = False, key: str = "output") -> None:
        super().__init__(out, key)
        check_output_file(self.out, force=force, key=key)
        self._handle: IO[str] | None = None

    def __enter__(self) -> Self:
        self._make_parents()
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.out.name}.", suffix=".partial", dir=self.out.parent)
        except OSError as exc:
            self._remove_parents()
            raise write_error(exc, self.out, self.key) from None
        self._tmp = Path(tmp)
        self._handle = os.fdopen(fd, "w")
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

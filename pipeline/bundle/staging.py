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
import logging
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from specdec.pipeline.bundle.locks import hold_output, sweep_leftovers
from specdec.pipeline.bundle.owned import OWNED_FILES, foreign_entries, listing
from specdec.pipeline.bundle.write_errors import is_write_error, write_error
from specdec.pipeline.errors import InputError, setting

log = logging.getLogger(__name__)

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
            raise InputError(f"output '{out}' {what} ({listing(foreign)})",
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

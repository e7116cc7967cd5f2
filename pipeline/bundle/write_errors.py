"""OS errors of writes as one line naming the path and the fix (exit 2): what staging raises for an output,
and what the CLI's mapper (cli/console.py) makes of a write error that slips past staging."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from specdec.pipeline.errors import InputError, setting

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

"""What every hostile-input test asserts: one line, the documented exit code, no traceback,
nothing written outside the output, every input byte unchanged."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import Result

# README's exit codes: what each error class exits with (pipeline/errors.py)
BAD_INPUT, BUNDLE, UNSUPPORTED = 2, 3, 4


def one_line(result: Result, code: int, *, after_progress: bool = False) -> str:
    """The error's line; fails unless the command printed exactly one line and exited `code`.

    `after_progress`: the error can only be found by doing the work (transformers tells which weights a
    checkpoint lacks as it loads them), so the plain progress lines of the work done so far may precede it."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    if after_progress:
        lines = [line for line in lines if not re.match(r"\w+: .* elapsed \d+s$", line)]
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == code, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def snapshot(root: Path) -> dict[str, str]:
    """Every entry below `root` (itself included): a file's sha256, a symlink's target, a directory's mark."""
    found: dict[str, str] = {}
    for path in [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]:
        key = path.relative_to(root).as_posix() if root.is_dir() else path.name
        if path.is_symlink():
            found[key] = "-> " + str(path.readlink())
        elif path.is_dir():
            found[key] = "dir"
        elif path.is_file():
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def edit_manifest(bundle: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = bundle / "manifest.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def rehash(bundle: Path, rel: str) -> None:
    """Make the manifest's entry for `rel` match the file as it is now (so only what the test means fails)."""
    data = (bundle / rel).read_bytes()
    edit_manifest(bundle, lambda m: m["files"].__setitem__(rel, {"sha256": hashlib.sha256(data).hexdigest(),
                                                                 "size": len(data)}))

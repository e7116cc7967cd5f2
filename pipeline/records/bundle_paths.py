"""The path policy of bundles (docs/bundles.md): every path a manifest names is relative, in normal form and
inside the bundle, so a bundle, which is data a user may have received from anyone, can direct no read
or write outside its directory. `read_manifest` (records/manifest.py) checks it for every reader, on the
host and on the device (stdlib only). And a graph file must be the graph its entry describes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from pathlib import Path

from specdec.pipeline.errors import BundleError


def bundle_path_problem(rel: str) -> str | None:
    """What is wrong with `rel` as a path inside a bundle (None: nothing), by the path policy of
    docs/bundles.md: relative, in normal form (`a/b`: no `.`, `..`, empty part or backslash), no NUL.

    A bundle is data a user may have received from someone else, so no path it names may direct
    a read or a write outside its directory. Symlinks are checked against the directory itself
    (`check_bundle_paths`)."""
    if not rel:
        return "is empty"
    if "\x00" in rel:
        return "contains a NUL byte"
    if "\\" in rel:
        return "contains a backslash (bundle paths use '/')"
    if rel.startswith("/"):
        return "is absolute"
    if ".." in rel.split("/"):
        return "climbs out of the bundle ('..')"
    if posixpath.normpath(rel) != rel or rel == ".":
        return f"is not in normal form (write it '{posixpath.normpath(rel)}')"
    if any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in rel.split("/")):
        return "has a name longer than a file system allows (255 bytes)"
    return None


def io_mismatch(role: str, file: str, expected_inputs: Iterable[str], inputs: Iterable[str]) -> str | None:
    """How a graph file's input names differ from its manifest entry's (None: they do not, or the entry
    lists none), so a graph swapped with another (the target's file under the draft's entry) is named
    before it runs. The caller raises BundleError with it, whatever else it adds."""
    expected, found = set(expected_inputs), set(inputs)
    if not expected or expected == found:
        return None
    missing, extra = sorted(expected - found), sorted(found - expected)
    parts = [f"lacks {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}" if missing else "",
             f"has {', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''}" if extra else ""]
    return (f"'{file}' is not the graph the manifest's {role} entry describes: it "
            f"{' and '.join(p for p in parts if p)}")


def check_bundle_paths(root: Path, paths: Iterable[tuple[str, str]]) -> None:
    """Every (entry, path) of a manifest (`Manifest.paths`) obeys the path policy (`bundle_path_problem`) and,
    where it exists, resolves inside `root` (a symlink inside the bundle may point elsewhere inside it, never
    out).

    BundleError (exit 3) naming the entry otherwise, before any file is opened."""
    base = root.resolve()
    for where, rel in paths:
        problem = bundle_path_problem(rel)
        if problem is None:
            try:
                inside = (base / rel).resolve().is_relative_to(base)
            except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
                problem = f"cannot be resolved ({getattr(exc, 'strerror', None) or exc})"
            else:
                problem = None if inside else "leads outside the bundle through a symlink"
        if problem is not None:
            raise BundleError(f"bundle '{root}': manifest entry {where} '{rel}' {problem}",
                              "a bundle's paths are relative and inside it: re-create the bundle with specdec, "
                              "and do not run bundles you cannot trust")

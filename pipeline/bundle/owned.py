"""What specdec wrote: the kinds of output `--force` may replace, each recognised by what it holds
(pipeline/bundle/staging.py's output policy; docs/bundles.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from specdec.pipeline.errors import BundleError
from specdec.pipeline.records.manifest import MANIFEST_NAME, read_manifest

RESULTS_FILE = "results.json"
# What `specdec bench` writes into its results directory (plots are `*.png`).
BENCH_FILES = frozenset({RESULTS_FILE, "summary.md", "events.jsonl", "trace.json"})
DRAFT_REPORT = "draft_report.json"  # what `specdec draft` writes next to the checkpoint (pipeline/draft/report.py)


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


def listing(names: list[str], limit: int = 4) -> str:
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

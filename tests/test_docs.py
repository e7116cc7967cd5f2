"""The user-facing docs: the CLI reference matches the CLI, the README stays short and says nothing about the
project's own history (that belongs in git and benchmarks/RESULTS-archive.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HISTORY = re.compile(r"\b[Ii]ssue \d+|\b[Tt]his round\b|\b[Rr]uns? [A-F]\b|\b[Ll]ast round\b|\b[Tt]his session\b")


def test_cli_reference_is_current() -> None:
    done = subprocess.run([sys.executable, "scripts/gen_cli_docs.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr.strip()  # says: run `python scripts/gen_cli_docs.py`


def test_readme_is_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_user_docs_have_no_project_history() -> None:
    found = [f"{path.relative_to(ROOT)}: {match.group(0)!r}" for path in USER_DOCS
             for match in HISTORY.finditer(path.read_text())]
    assert not found


def test_code_has_no_issue_references() -> None:
    """Code says why in its own words: an "issue N" means nothing to a reader without the tracker."""
    sources = [path for folder in ("pipeline", "cli", "custom_ops", "benchmarks", "scripts", "tests", "profiles")
               for path in (ROOT / folder).rglob("*") if path.suffix in (".py", ".yaml", ".sh")]
    found = [f"{path.relative_to(ROOT)}: {match.group(0)!r}" for path in sources
             for match in re.finditer(r"\b[Ii]ssues? #?\d+", path.read_text(errors="replace"))]
    assert not found


def test_docs_links_resolve() -> None:
    """Relative links in the README and docs/ point at files that exist."""
    broken = []
    for path in USER_DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if "://" not in target and not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not broken

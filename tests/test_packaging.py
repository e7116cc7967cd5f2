"""The repository root is the `specdec` package: every subpackage and data file must ship."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"tests", "scripts", "benchmarks", "docs", "build", ".typing", ".venv"}  # not shipped


def _declared() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def _ignored(paths: list[Path]) -> set[Path]:
    """Which of `paths` git ignores: what the project's own commands write (specdec-out/, .venv/, caches)."""
    if not (ROOT / ".git").exists():
        return set()
    done = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--stdin"], input="\n".join(map(str, paths)),
                          capture_output=True, text=True, check=False)
    return {Path(line) for line in done.stdout.splitlines()}


def test_every_shipped_directory_is_declared() -> None:
    """Code packages and data-only directories alike: setuptools warns about every undeclared one.
    Directories git ignores are not the project's (the demo's specdec-out/, a build/, caches)."""
    candidates = []
    for directory in ROOT.rglob("*"):
        rel = directory.relative_to(ROOT)
        if (not directory.is_dir() or rel.parts[0] in SKIP or rel.name == "__pycache__"
                or any(p.startswith(".") or p.endswith(".egg-info") for p in rel.parts)):
            continue
        if any(child.is_file() for child in directory.iterdir()):
            candidates.append(directory)
    ignored = _ignored(candidates)
    found = {".".join(("specdec", *d.relative_to(ROOT).parts)) for d in candidates
             if not any(d == i or i in d.parents for i in ignored)}
    assert found | {"specdec"} == _declared()


def test_readme_installs_this_projects_distribution() -> None:
    """`pip install specdec` gets an unrelated project (specdec 0.2.0 on PyPI): the README's install
    line must name the distribution pyproject.toml builds, and the command stays `specdec`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    readme = (ROOT / "README.md").read_text()
    installs = re.findall(r"^pip install (?!torch|-e)(\S+)", readme, flags=re.MULTILINE)
    assert installs == [project["name"]]
    assert project["name"] != "specdec"
    assert "specdec" in project["scripts"]


def test_what_the_project_writes_is_ignored_by_git() -> None:
    """The README's commands write specdec-out/ (the demo), .venv/, and `specdec bench` bench-results/ by
    default: the tests and git must not see them."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    written = [ROOT / "specdec-out" / "bench" / "results.json", ROOT / "bench-results" / "results.json",
               ROOT / ".venv" / "bin" / "python",
               ROOT / "benchmarks" / "results" / "x.json", ROOT / "pipeline" / "__pycache__" / "x.pyc"]
    assert _ignored(written) == set(written)


@pytest.mark.slow
def test_wheel_carries_code_and_data(tmp_path: Path) -> None:
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                            "-v", "-w", str(tmp_path)], check=True, capture_output=True, text=True, timeout=300)
    assert "would be ignored" not in build.stdout + build.stderr  # no setuptools warning flood on install
    wheel = next(tmp_path.glob("specdec_toolchain-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("specdec/cli/app.py", "specdec/pipeline/engine/engine.py",
                     "specdec/custom_ops/block_sparse_verify/function.py", "specdec/profiles/local-cpu.yaml",
                     "specdec/profiles/scenarios/chat.yaml", "specdec/pipeline/demo/target/model.safetensors",
                     "specdec/pipeline/demo/draft/tokenizer.json", "specdec/pipeline/demo/calib.txt",
                     "specdec/pipeline/demo/eval_prompts.jsonl", "specdec/pipeline/quantize/calib_default.txt",
                     "specdec/pipeline/demo/smollm2/pipeline.yaml", "specdec/pipeline/demo/smollm2/prompts.jsonl",
                     "specdec/pipeline/checkpoints/builtin.py",
                     "specdec/pipeline/portable/specdec-run", "specdec/pipeline/portable/boot.py"):
        assert required in names, required
    assert not any(n.startswith("specdec/tests/") for n in names)

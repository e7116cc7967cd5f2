"""The repository root is the `specdec` package: every subpackage and data file must ship."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIP = {"tests", "scripts", "benchmarks", "build", ".typing", ".venv"}


def _declared() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def test_every_shipped_directory_is_declared() -> None:
    """Code packages and data-only directories alike: setuptools warns about every undeclared one."""
    found = {"specdec"}
    for directory in ROOT.rglob("*"):
        rel = directory.relative_to(ROOT)
        if (not directory.is_dir() or rel.parts[0] in SKIP or rel.name == "__pycache__"
                or any(p.startswith(".") or p.endswith(".egg-info") for p in rel.parts)):
            continue
        if any(child.is_file() for child in directory.iterdir()):
            found.add(".".join(("specdec", *rel.parts)))
    assert found == _declared()


@pytest.mark.slow
def test_wheel_carries_code_and_data(tmp_path: Path) -> None:
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                            "-v", "-w", str(tmp_path)], check=True, capture_output=True, text=True, timeout=300)
    assert "would be ignored" not in build.stdout + build.stderr  # no setuptools warning flood on install
    wheel = next(tmp_path.glob("specdec-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("specdec/cli/app.py", "specdec/pipeline/runtime/engine.py",
                     "specdec/custom_ops/block_sparse_verify/function.py", "specdec/profiles/local-cpu.yaml",
                     "specdec/profiles/scenarios/chat.yaml", "specdec/pipeline/demo/target/model.safetensors",
                     "specdec/pipeline/demo/draft/tokenizer.json", "specdec/pipeline/demo/calib.txt",
                     "specdec/pipeline/demo/eval_prompts.jsonl", "specdec/pipeline/quantize/calib_default.txt",
                     "specdec/pipeline/portable/specdec-run", "specdec/pipeline/portable/boot.py"):
        assert required in names, required
    assert not any(n.startswith("specdec/tests/") for n in names)

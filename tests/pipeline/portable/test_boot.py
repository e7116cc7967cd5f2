"""boot.py's `run` mode: the runner module from a zip, with -I's sys.path (this machine's Python)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from specdec.pipeline.portable import assemble, recipe


def test_run_mode_imports_then_runs_the_module_from_the_zip(tmp_path: Path) -> None:
    boot = tmp_path / "boot.py"
    boot.write_text(recipe.device_files()["boot.py"])
    runner = tmp_path / "runner.zip"
    with zipfile.ZipFile(runner, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        archive.writestr("pkg/main.py", "import sys\nprint('argv', sys.argv[1:])\nsys.exit(7)\n")
    result = subprocess.run([sys.executable, "-I", "-B", str(boot), "run", str(runner), "pkg.main", "a", "--b"],
                            capture_output=True, text=True, timeout=120, check=False)
    lines = result.stdout.splitlines()
    assert result.returncode == 7, result.stderr
    assert lines[0].startswith("specdec-step loader ok python=") and lines[1].startswith("specdec-step import ok")
    assert lines[2] == "argv ['a', '--b']"
    assert not (tmp_path / "__pycache__").exists()  # -B: nothing written next to the runtime's files


def test_usage_error(tmp_path: Path) -> None:
    boot = tmp_path / "boot.py"
    boot.write_text(recipe.device_files()["boot.py"])
    result = subprocess.run([sys.executable, "-I", str(boot), "run", "only-a-zip"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 2 and "usage" in result.stderr


def test_probe_model_is_small_and_valid() -> None:
    import onnxruntime

    model = assemble.probe_model_bytes()
    assert len(model) < 1000 and model == assemble.probe_model_bytes()  # deterministic bytes
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x"]

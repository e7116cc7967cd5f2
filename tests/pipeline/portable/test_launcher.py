"""bin/specdec-run: POSIX sh for Android's mksh + toybox, starting Python through the loader."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from specdec.pipeline.portable import assemble, recipe

from .conftest import FakeRuntime, needs_toybox

TEMPLATE = recipe.device_files()["specdec-run"]
# Constructs bash (or GNU tools) accept and mksh/dash/toybox do not, or not the same way.
BASHISMS = {
    r"\[\[": "[[ ]] test", r"\bfunction\s": "function keyword", r"\$'": "$'...' quoting", r"<<<": "here-string",
    r"&>": "&> redirection", r"\$\{\w+//": "${var//pat/rep}", r"\$\{\w+:\d": "${var:offset}", r"\bdeclare\b": "declare",
    r"(?m)(^|;)\s*local\s": "local", r"\bsource\b": "source", r"\becho\s+-[neE]": "echo options", r"\bpushd\b": "pushd",
    r"\$RANDOM": "$RANDOM", r"\w=\(": "arrays", r"\blet\b": "let", r"\(\(": "(( ))", r"\[\s[^]]*==": "== in [ ]",
    r"\breadlink\s+-f": "readlink -f (GNU)", r"\bsed\s+-i": "sed -i", r"\bmktemp\b": "mktemp",
}
_OWN_LONG_OPTIONS = {"--run-dir", "--cpu-mask", "--library-path"}


def _code(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def test_launcher_has_no_bashisms_or_gnu_options() -> None:
    code = _code(TEMPLATE)
    found = [name for pattern, name in BASHISMS.items() if re.search(pattern, code)]
    assert not found, f"not POSIX sh: {found}"
    long_options = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", code)) - _OWN_LONG_OPTIONS
    assert not long_options, f"GNU-style long options of tools: {long_options}"


def test_launcher_parses_in_posix_shells(fake_runtime: FakeRuntime) -> None:
    launcher = fake_runtime() / assemble.LAUNCHER
    assert not re.search(r"@[A-Z]+@", launcher.read_text()), "placeholders left in the rendered launcher"
    shells = [path for name in ("dash", "mksh", "sh") if (path := shutil.which(name))]
    if not any(Path(s).name == "mksh" for s in shells):
        needs_toybox()
    for shell in shells:
        result = subprocess.run([shell, "-n", str(launcher)], capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{shell}: {result.stderr}"


def _argv_loader(root: Path) -> None:
    """A loader that prints what it was given and its environment."""
    loader = root / "lib" / recipe.ABIS[recipe.DEFAULT_ABI].loader
    loader.write_text('#!/bin/sh\nfor a in "$@"; do echo "arg:$a"; done\nenv | sort | sed "s/^/env:/"\n')
    loader.chmod(0o755)


def _run(shell: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([shell, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def test_launcher_command_and_environment(fake_runtime: FakeRuntime, android_shell: tuple[str, dict[str, str]],
                                          tmp_path: Path) -> None:
    shell, env = android_shell
    root = fake_runtime()
    _argv_loader(root)
    run_dir = tmp_path / "run"
    env = {**env, "LD_PRELOAD": "/system/lib64/libsigchain.so", "LD_LIBRARY_PATH": "/vendor/lib64",
           "PYTHONPATH": "/sdcard/evil", "PYTHONHOME": "/sdcard"}
    result = _run(shell, env, str(root / assemble.LAUNCHER), "--run-dir", str(run_dir), "probe", "MODEL")
    assert result.returncode == 0, result.stderr
    args = [line[4:] for line in result.stdout.splitlines() if line.startswith("arg:")]
    assert args == ["--library-path", f"{root}/lib", f"{root}/bin/python3.11", "-I", "-B",
                    f"{root}/share/specdec/boot.py", "probe", "MODEL"]
    seen = dict(line[4:].split("=", 1) for line in result.stdout.splitlines() if line.startswith("env:"))
    assert seen["HOME"] == f"{run_dir}/home" and seen["TMPDIR"] == f"{run_dir}/tmp"
    assert all(seen[f"XDG_{k}_HOME"].startswith(f"{run_dir}/home/") for k in ("CACHE", "CONFIG", "DATA", "STATE"))
    assert seen["ORT_DISABLE_TELEMETRY"] == "1"
    assert not {"LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME"} & set(seen)
    assert (run_dir / "home").is_dir() and (run_dir / "tmp").is_dir()


def test_launcher_exec_wrapper_and_cpu_mask(fake_runtime: FakeRuntime, android_shell: tuple[str, dict[str, str]],
                                            tmp_path: Path) -> None:
    shell, env = android_shell
    root = fake_runtime()
    _argv_loader(root)
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("taskset", "emulator"):  # print where they stand in the chain, then run the rest
        skip = 1 if name == "taskset" else 2  # the mask; "-cpu max"
        (tools / name).write_text(f'#!/bin/sh\necho "{name}:$*"\nshift {skip}\nexec "$@"\n')
        (tools / name).chmod(0o755)
    env = {**env, "PATH": f"{tools}:{env['PATH']}", "SPECDEC_EXEC_WRAPPER": f"{tools}/emulator -cpu max"}
    result = _run(shell, env, str(root / assemble.LAUNCHER), "--run-dir", str(tmp_path / "r"), "--cpu-mask", "f0",
                  "run", "R.zip", "mod", "--flag")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    loader = str(root / "lib" / recipe.ABIS[recipe.DEFAULT_ABI].loader)
    # taskset (the device's own tool) outermost, then the emulator (word-split), then the loader
    assert lines[0].startswith(f"taskset:f0 {tools}/emulator -cpu max {loader} --library-path")
    assert lines[1].startswith(f"emulator:-cpu max {loader} --library-path")
    assert [line[4:] for line in lines if line.startswith("arg:")][-4:] == ["run", "R.zip", "mod", "--flag"]


def test_launcher_usage_errors(fake_runtime: FakeRuntime, android_shell: tuple[str, dict[str, str]],
                               tmp_path: Path) -> None:
    shell, env = android_shell
    launcher = str(fake_runtime() / assemble.LAUNCHER)
    assert _run(shell, env, launcher, "probe", "M").returncode == 125  # no --run-dir
    assert _run(shell, env, launcher, "--run-dir").returncode == 125
    relative = _run(shell, {**env}, "specdec-run", "--run-dir", str(tmp_path), "probe", "M")
    assert relative.returncode != 0


@pytest.mark.parametrize(("knobs", "rc", "step"), [
    ({}, 0, None),
    ({"hide": "onnxruntime"}, 3, "import"),
    ({"probe_model": b"not an onnx model"}, 4, "session"),
])
def test_launcher_runs_boot_steps(fake_runtime: FakeRuntime, android_shell: tuple[str, dict[str, str]],
                                  tmp_path: Path, knobs: dict[str, object], rc: int, step: str | None) -> None:
    shell, env = android_shell
    root = fake_runtime(**knobs)
    result = _run(shell, env, str(root / assemble.LAUNCHER), "--run-dir", str(tmp_path / "r"), "probe",
                  str(root / assemble.PROBE_MODEL))
    assert result.returncode == rc, result.stdout + result.stderr
    steps = dict(line.split()[1:3] for line in result.stdout.splitlines() if line.startswith("specdec-step"))
    if step is None:
        assert steps == {"loader": "ok", "import": "ok", "session": "ok"}
    else:
        assert steps[step] == "failed"

"""The import layering the code follows, checked statically (ast): nothing imports upwards or sideways.

    cli (one module per command + console, render)
     └─ pipeline/chain.py (the pipeline command) ─ stages: export, surgery, quantize, compile, bench
         └─ shared: tune (the tune command, plans in a bench run), ondevice (running the device runner),
            bundle, settings, profiles, graph_io, passes, prompts, devices, portable, ...
             └─ runtime (device: numpy + onnxruntime + stdlib) ─ records ─ errors
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("export", "surgery", "quantize", "compile", "bench")
RUNTIME_THIRD_PARTY = {"numpy", "onnxruntime"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return names


def _modules(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "demo" not in p.parts)


def _part(module: str, index: int) -> str | None:
    parts = module.split(".")
    return parts[index] if len(parts) > index else None


def _stage_of(module: str) -> str | None:
    stage = _part(module, 2) if module.startswith("specdec.pipeline.") else None
    return stage if stage in STAGES else None


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_library_code_never_imports_the_cli() -> None:
    offenders = [(_rel(p), m) for p in _modules("pipeline") + _modules("custom_ops") for m in _imports(p)
                 if m.startswith("specdec.cli")]
    assert not offenders


def test_stages_do_not_import_each_other() -> None:
    offenders = []
    for path in _modules("pipeline"):
        parts = path.relative_to(ROOT / "pipeline").parts
        own = parts[0] if len(parts) > 1 else None
        for module in _imports(path):
            stage = _stage_of(module)
            if stage is None or stage == own:
                continue
            if own in STAGES or _rel(path) != "pipeline/chain.py":  # only the pipeline command chains stages
                offenders.append((_rel(path), module))
    assert not offenders


def test_commands_do_not_import_each_other() -> None:
    offenders = [(_rel(p), m) for p in _modules("cli") for m in _imports(p)
                 if m.startswith("specdec.cli.") and m.endswith("_cmd") and p.stem != "app"]
    assert not offenders


@pytest.mark.parametrize("folder, allowed", [
    # the device runtime: what runs on a phone
    ("pipeline/runtime", ("specdec.pipeline.runtime", "specdec.pipeline.records", "specdec.pipeline.errors",
                          "specdec.custom_ops")),
    # shared records: below the runtime, except the decode settings record it stores (runtime/config.py)
    ("pipeline/records", ("specdec.pipeline.records", "specdec.pipeline.errors", "specdec.pipeline.runtime.config")),
])
def test_device_side_imports_only_device_side_code(folder: str, allowed: tuple[str, ...]) -> None:
    offenders = []
    for path in _modules(folder):
        for module in _imports(path):
            top = module.split(".")[0]
            if top == "specdec":
                ok = module in {"specdec", "specdec.pipeline"} or module.startswith(allowed)
            else:
                ok = top in sys.stdlib_module_names or top in RUNTIME_THIRD_PARTY or top == "__future__"
            if not ok:
                offenders.append((_rel(path), module))
    assert not offenders


def _calls(path: Path, names: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in names:
                found.add(name)
    return found


def test_outputs_are_opened_in_one_place() -> None:
    """Hidden temporary outputs are made only by pipeline/staging.py (the overwrite and writability rules
    live there); the device runtime keeps to its own work dir."""
    offenders = [(_rel(p), sorted(c)) for p in _modules("cli") + _modules("pipeline")
                 if _rel(p) != "pipeline/staging.py" and "runtime" not in p.parts
                 and (c := _calls(p, {"mkdtemp", "mkstemp"}))]
    assert not offenders


def test_commands_load_bundles_through_the_verifying_loader() -> None:
    """`Bundle.load` checks every sha256; the runtime's manifest reader does not, so commands never use it."""
    offenders = [(_rel(p), m) for p in _modules("cli") for m in _imports(p)
                 if m.startswith(("specdec.pipeline.runtime.manifest", "specdec.pipeline.runtime.engine"))]
    assert not offenders

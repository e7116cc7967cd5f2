"""The import layering the code follows, checked statically (ast): nothing imports upwards or sideways.

    cli (one module per command + console, render)
     └─ pipeline/chain/stage.py (the pipeline command) ─ stages: export, surgery, quantize, compile, bench
         └─ shared: tune (the tune command, plans in a bench run), ondevice (running the device runner),
            bundle, settings, graphs, inputs, passes, devices, portable, ...
             └─ engine (device: numpy + onnxruntime + stdlib) ─ records ─ errors
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("export", "surgery", "quantize", "compile", "bench")
# the logits processors' libraries ship in the portable runtime too (manylinux aarch64 wheels)
RUNTIME_THIRD_PARTY = {"numpy", "onnxruntime", "ahocorasick", "llguidance"}


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


# The only modules loose at the top of pipeline/: the foundations every layer uses. Anything else
# belongs in a named package (docs/development.md has the map).
LOOSE_MODULES = {"__init__.py", "errors.py", "progress.py"}


def test_pipeline_has_no_loose_modules_beyond_its_foundations() -> None:
    loose = {p.name for p in (ROOT / "pipeline").glob("*.py")}
    assert loose - LOOSE_MODULES == set(), "put new modules in a named package under pipeline/"


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
            if own in STAGES or _rel(path) != "pipeline/chain/stage.py":  # only the pipeline command chains stages
                offenders.append((_rel(path), module))
    assert not offenders


def test_commands_do_not_import_each_other() -> None:
    offenders = [(_rel(p), m) for p in _modules("cli") for m in _imports(p)
                 if m.startswith("specdec.cli.") and m.endswith("_cmd") and p.stem != "app"]
    assert not offenders


@pytest.mark.parametrize("folder, allowed", [
    # the device runtime: what runs on a phone
    ("pipeline/engine", ("specdec.pipeline.engine", "specdec.pipeline.records", "specdec.pipeline.errors",
                          "specdec.custom_ops")),
    # shared records: below the runtime
    ("pipeline/records", ("specdec.pipeline.records", "specdec.pipeline.errors")),
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
    """Hidden temporary outputs are made only by pipeline/bundle/staging.py (the overwrite and writability rules
    live there); the device runtime keeps to its own work dir."""
    offenders = [(_rel(p), sorted(c)) for p in _modules("cli") + _modules("pipeline")
                 if _rel(p) != "pipeline/bundle/staging.py" and "engine" not in p.parts
                 and (c := _calls(p, {"mkdtemp", "mkstemp"}))]
    assert not offenders


def test_commands_load_bundles_through_the_verifying_loader() -> None:
    """`Bundle.load` checks every sha256; the runtime's manifest reader does not, so commands never use it."""
    offenders = [(_rel(p), m) for p in _modules("cli") for m in _imports(p)
                 if m.startswith(("specdec.pipeline.engine.bundle_info", "specdec.pipeline.engine.engine"))]
    assert not offenders


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(["specdec", *(parts[:-1] if parts[-1] == "__init__" else parts)])


def _import_graph() -> dict[str, set[str]]:
    """specdec module -> the specdec modules it imports (TYPE_CHECKING imports too: they are cycles in waiting)."""
    modules = {_module_name(p): p for folder in ("cli", "pipeline", "custom_ops", "profiles")
               for p in (ROOT / folder).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                # `from pkg import module` imports the module; `from pkg import name`, the package
                imported |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                             for a in node.names}
        graph[name] = {module for module in imported if module in modules and module != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _package(module: str) -> str:
    """The unit of the layering: `specdec.pipeline.X` (a package or a module), `specdec.cli`, ..."""
    parts = module.split(".")
    return ".".join(parts[:3] if parts[1] == "pipeline" and len(parts) > 2 else parts[:2])


def test_no_import_cycles() -> None:
    """Neither modules nor packages import each other in a circle (a package's own modules aside)."""
    graph = _import_graph()
    assert not _cycles(graph)
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        packages.setdefault(_package(module), set()).update(_package(t) for t in targets)
    assert not _cycles({name: targets - {name} for name, targets in packages.items()})


def test_one_reader_of_the_manifest() -> None:
    """manifest.json is named, and so read, in records/manifest.py only (everyone else: read_manifest, Bundle.load)."""
    offenders = []
    for path in [*_modules("pipeline"), *_modules("cli"), *sorted((ROOT / "benchmarks").glob("*.py"))]:
        tree = ast.parse(path.read_text(), str(path))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and node.body
                      and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        if _rel(path) != "pipeline/records/manifest.py" and any(
                isinstance(node, ast.Constant) and node.value == "manifest.json" and id(node) not in docstrings
                for node in ast.walk(tree)):
            offenders.append(_rel(path))
    assert not offenders

"""Lay out the runtime tree from unpacked .debs and wheels, prune it, and close its libraries.

    bin/python3.11, bin/specdec-run       the interpreter and the launcher
    lib/ld-linux-aarch64.so.1, lib/*.so*  glibc's loader and every library anything here links
    lib/python3.11/                       the standard library, site-packages/{numpy,onnxruntime}
    share/specdec/{boot.py,probe.onnx,runtime.json}
    share/licenses/                       the Debian packages' copyright files
    FILES.sha256                          `sha256sum -c` input, checked on the device

Python finds its home from its own path (lib/python3.11/os.py next to bin/..), so the tree
needs no configuration file and works wherever it is unpacked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from specdec.pipeline.errors import RuntimeBuildError
from specdec.pipeline.portable import elf, recipe
from specdec.pipeline.portable.fetch import Deb
from specdec.pipeline.portable.recipe import AbiSpec

log = logging.getLogger(__name__)

MANIFEST = "FILES.sha256"
SHARE = "share/specdec"
LAUNCHER = "bin/specdec-run"
BOOT = f"{SHARE}/boot.py"
PROBE_MODEL = f"{SHARE}/probe.onnx"
METADATA = f"{SHARE}/runtime.json"


def stdlib_dir(root: Path) -> Path:
    return root / "lib" / recipe.PYTHON_PACKAGE


def site_packages(root: Path) -> Path:
    return stdlib_dir(root) / "site-packages"


def bytecode_supported() -> bool:
    """.pyc files are written by this interpreter, so only when it is the runtime's CPython."""
    return sys.implementation.name == "cpython" and f"{sys.version_info[0]}.{sys.version_info[1]}" == recipe.PYTHON


# ----------------------------------------------------------------------------------------- layout
def _copy_tree(source: Path, dest: Path, skip: Iterable[str] = ()) -> None:
    """Copy `source` into `dest`, dereferencing links inside the package tree and dropping links that
    point out of it (Debian's sitecustomize.py points into /etc)."""
    skipped = set(skip)
    for entry in sorted(source.iterdir()):
        if entry.name in skipped or entry.name.startswith(recipe.STDLIB_PRUNE_PREFIXES):
            continue
        if entry.is_symlink() and not entry.exists():
            continue
        if entry.is_dir():
            _copy_tree(entry, dest / entry.name)
        else:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(entry, dest / entry.name)


def layout_python(debroot: Path, root: Path) -> None:
    python = debroot / "usr/bin" / recipe.PYTHON_PACKAGE
    stdlib = debroot / "usr/lib" / recipe.PYTHON_PACKAGE
    if not python.is_file() or not (stdlib / "os.py").is_file():
        raise RuntimeBuildError(f"runtime build, step 'assemble': the Debian packages lack {python.name} or its "
                                "standard library", "delete the runtime cache's downloads and build again")
    (root / "bin").mkdir(parents=True)
    shutil.copyfile(python, root / "bin" / python.name)
    (root / "bin" / python.name).chmod(0o755)
    _copy_tree(stdlib, stdlib_dir(root), skip=recipe.STDLIB_PRUNE)
    site_packages(root).mkdir(parents=True, exist_ok=True)


def copy_licenses(debroot: Path, root: Path, debs: list[Deb]) -> None:
    for deb in debs:
        source = debroot / "usr/share/doc" / deb.package / "copyright"
        if source.is_file():
            dest = root / "share/licenses/debian" / deb.package / "copyright"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)


def prune(root: Path) -> int:
    """Drop tests, headers, build-time libraries and tooling the runner never imports; bytes freed."""
    freed = 0

    def drop(path: Path) -> None:
        nonlocal freed
        if path.is_dir() and not path.is_symlink():
            freed += sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            shutil.rmtree(path)
        elif path.exists():
            freed += path.stat().st_size
            path.unlink()

    site = site_packages(root)
    for rel in recipe.SITE_PRUNE:
        drop(site / rel)
    for name in recipe.DIST_INFO_PRUNE:
        for path in site.glob(f"*.dist-info/{name}"):
            drop(path)
    for path in sorted(root.rglob("*"), reverse=True):  # children before their parents
        if not path.exists():
            continue
        pruned_dir = path.is_dir() and path.name in recipe.TREE_PRUNE_DIRS
        if pruned_dir or (path.is_file() and path.name.endswith(recipe.FILE_PRUNE_SUFFIXES)):
            drop(path)
    dynload = stdlib_dir(root) / "lib-dynload"
    for module in dynload.glob("*.so"):
        if module.name.startswith(recipe.DYNLOAD_PRUNE_PREFIXES):
            drop(module)
    return freed


# ----------------------------------------------------------------------------------------- libraries
def _library_index(debroot: Path, abi: AbiSpec) -> dict[str, Path]:
    index: dict[str, Path] = {}
    for folder in (f"lib/{abi.triplet}", f"usr/lib/{abi.triplet}", "lib", "usr/lib"):
        for path in sorted((debroot / folder).glob("*.so*")):
            if path.exists() and (path.is_file() or path.is_symlink()):
                index.setdefault(path.name, path.resolve())
    return index


def resolve_libraries(debroot: Path, root: Path, abi: AbiSpec) -> list[str]:
    """Copy every library the interpreter, the standard library's extensions and the wheels link
    against from the .debs into lib/; drop standard-library extensions whose libraries the recipe
    does not ship (their modules then fail to import, as they would on a minimal Python).

    Returns the names of the dropped extensions. A wheel or the interpreter needing a library
    that is not there is an error: the runtime would fail on the phone instead."""
    index = _library_index(debroot, abi)
    if abi.loader not in index:
        raise RuntimeBuildError(f"runtime build, step 'libraries': {abi.loader} is not in the libc6 package",
                                "delete the runtime cache's downloads and build again")
    shipped = {path.name for path in root.rglob("*") if path.is_file() and elf.is_elf(path)}
    copied: set[str] = set()

    def closure(names: Iterable[str]) -> set[str] | None:
        """Libraries to copy for `names`, or None when one is missing."""
        todo, seen = list(names), set()
        while todo:
            name = todo.pop()
            if name in seen or name in shipped:
                continue
            if name not in index:
                return None
            seen.add(name)
            todo.extend(elf.read_dynamic(index[name]).needed)
        return seen

    dynload = stdlib_dir(root) / "lib-dynload"
    dropped: list[str] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and elf.is_elf(p)):
        needs = closure(elf.read_dynamic(path).needed)
        if needs is None:
            if path.parent == dynload:
                dropped.append(path.name.split(".")[0])
                path.unlink()
                continue
            missing = [n for n in elf.read_dynamic(path).needed if n not in index and n not in shipped]
            raise RuntimeBuildError(f"runtime build, step 'libraries': {path.relative_to(root)} needs "
                                    f"{', '.join(missing)}, which no package of the recipe provides",
                                    "add the Debian package that provides it to recipe.DEBS")
        copied |= needs
    for name in sorted(copied | {abi.loader}):
        dest = root / "lib" / name
        shutil.copyfile(index[name], dest)
        dest.chmod(0o755)
    if dropped:
        log.info("standard-library extensions without their libraries, dropped: %s", ", ".join(dropped))
    return dropped


# ----------------------------------------------------------------------------------------- device files
def probe_model_bytes() -> bytes:
    """MatMul by a reversed identity, then Softmax: enough to make onnxruntime pick and run CPU
    kernels (where an unsupported CPU fails) while staying a few hundred bytes."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.eye(4, dtype=np.float32)[::-1].copy(), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["logits"]), helper.make_node("Softmax", ["logits"], ["y"], axis=-1)],
        "specdec_probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                              producer_name="specdec-runtime")
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString(deterministic=True))


def write_device_files(root: Path, abi: AbiSpec, metadata: dict[str, object]) -> None:
    files = recipe.device_files()
    launcher = files["specdec-run"].replace("@LOADER@", abi.loader).replace("@PYTHON@", recipe.PYTHON_PACKAGE)
    (root / LAUNCHER).write_text(launcher)
    (root / LAUNCHER).chmod(0o755)
    (root / SHARE).mkdir(parents=True, exist_ok=True)
    (root / BOOT).write_text(files["boot.py"])
    (root / PROBE_MODEL).write_bytes(probe_model_bytes())
    (root / METADATA).write_text(json.dumps(metadata, indent=1, sort_keys=True) + "\n")


def compile_bytecode(root: Path) -> bool:
    """Unchecked-hash .pyc next to every module: Python starts without compiling (seconds on a
    phone, more under an emulator), never checks source mtimes (which tar and adb do not keep
    reliably) and never writes into the verified tree (the launcher passes -B as well)."""
    if not bytecode_supported():
        log.warning("this is Python %d.%d, not %s: the runtime ships without precompiled bytecode and "
                    "compiles modules on the device at each start", *sys.version_info[:2], recipe.PYTHON)
        return False
    # One fresh interpreter, files in a fixed order: marshal's output depends on reference counts in
    # the compiling process, so a busy one (a test run) or a worker pool would change bytes. -d: a
    # fixed source path in the bytecode, not the random build dir (importlib puts the real one back).
    source_dir = f"/specdec-runtime/lib/{recipe.PYTHON_PACKAGE}"
    result = subprocess.run([sys.executable, "-I", "-m", "compileall", "-q", "-q", "--invalidation-mode",
                             "unchecked-hash", "-d", source_dir, str(stdlib_dir(root))],
                            capture_output=True, text=True, check=False, timeout=1800)
    if result.returncode != 0:
        log.info("some modules did not compile to bytecode (Python 2 leftovers); they compile on import")
    return True


def write_manifest(root: Path) -> tuple[int, int]:
    """FILES.sha256 in `sha256sum` format; (files, bytes)."""
    lines, total = [], 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel == MANIFEST:
            continue
        data = path.read_bytes()
        total += len(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  ./{rel}\n")
    (root / MANIFEST).write_text("".join(lines))
    return len(lines), total

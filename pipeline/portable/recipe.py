"""What goes into the portable runtime: pinned inputs per Android ABI, and what is pruned.

Python is Debian bookworm's 3.11 (its security updates come with each build, so the exact
package versions are recorded in the archive, not pinned here); numpy and onnxruntime are pinned
wheels, onnxruntime the version the host exports and tests with (1.32: the bundles' contrib ops
and opsets need it). The recipe's digest names the inputs, so a changed pin builds a new archive.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from importlib import resources

from specdec.pipeline.errors import InputError

RECIPE_VERSION = 1  # bump when assembly changes what the same inputs produce
PYTHON = "3.11"
PYTHON_PACKAGE = f"python{PYTHON}"
DEBIAN_SUITES = ("bookworm", "bookworm-updates")
DEBIAN_SECURITY_SUITE = "bookworm-security"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# The interpreter, its standard library and every library they or the wheels link against;
# anything a standard-library extension needs beyond these (ssl, sqlite, curses, ...) is dropped
# together with that extension (see assemble.resolve_libraries).
DEBS = ("libc6", "libgcc-s1", "libstdc++6", "zlib1g", "libexpat1", "libffi8",
        f"{PYTHON_PACKAGE}-minimal", f"lib{PYTHON_PACKAGE}-minimal", f"lib{PYTHON_PACKAGE}-stdlib")
# --no-deps: onnxruntime's declared flatbuffers/protobuf/packaging/sympy serve its tools, not
# InferenceSession (the probe proves the import and a session work without them).
# pyahocorasick and llguidance serve the logits processors (engine/processors/); llguidance 1.6.1 is
# the newest with a manylinux aarch64 wheel on the index (the host may run a newer one: same API).
WHEELS = ("numpy==2.4.6", "onnxruntime==1.32.0", "pyahocorasick==2.3.1", "llguidance==1.6.1")

# Standard-library parts the runner never imports.
STDLIB_PRUNE = frozenset({
    "idlelib", "tkinter", "turtledemo", "turtle.py", "ensurepip", "lib2to3", "pydoc_data", "venv", "test",
    "distutils", "__phello__", "sitecustomize.py", "site-packages", "dist-packages", "msilib", "EXTERNALLY-MANAGED",
})
STDLIB_PRUNE_PREFIXES = (f"config-{PYTHON}-",)  # the static libpython and its Makefile
# Directory names dropped anywhere (tests, build-time headers and libraries).
TREE_PRUNE_DIRS = frozenset({"__pycache__", "test", "tests", "include", "_pyinstaller"})
# Wheel parts that serve building or model tooling, not running a session.
SITE_PRUNE = frozenset({
    "numpy/f2py", "numpy/distutils", "numpy/_core/lib", "numpy/random/lib", "numpy/typing",
    "onnxruntime/transformers", "onnxruntime/tools", "onnxruntime/quantization", "onnxruntime/backend",
    "onnxruntime/datasets", "bin",
    # The C API library: the Python module carries its own copy of the runtime (checked by
    # the library closure, which would fail without it).
    "onnxruntime/capi/libonnxruntime.so.1.32.0",
})
# pip's install records: direct_url.json names this machine's cache path (the archive would differ
# per machine), RECORD lists it; importlib.metadata needs neither.
DIST_INFO_PRUNE = frozenset({"direct_url.json", "RECORD", "INSTALLER", "REQUESTED"})
FILE_PRUNE_SUFFIXES = (".pyi", ".pxd", ".h", ".a", ".c", ".cpp", ".pc", ".exe")
# Standard-library extensions that only exist for CPython's own test suite.
DYNLOAD_PRUNE_PREFIXES = ("_test", "_ctypes_test", "xxlimited", "_xxtestfuzz", "_xxsubinterpreters")


@dataclass(frozen=True)
class AbiSpec:
    """How one Android ABI maps to Debian and PyPI."""

    abi: str  # ro.product.cpu.abi
    deb_arch: str
    triplet: str  # Debian's multiarch directory
    loader: str  # glibc's dynamic loader, started by hand on Android
    wheel_platform: str
    machine: str  # uname -m
    # older manylinux tags the same glibc runs (pip matches an explicit --platform exactly)
    older_platforms: tuple[str, ...] = ()

    @property
    def python_abi(self) -> str:
        return "cp" + PYTHON.replace(".", "")


ABIS: dict[str, AbiSpec] = {
    "arm64-v8a": AbiSpec(abi="arm64-v8a", deb_arch="arm64", triplet="aarch64-linux-gnu",
                         loader="ld-linux-aarch64.so.1", wheel_platform="manylinux_2_28_aarch64",
                         machine="aarch64", older_platforms=("manylinux_2_17_aarch64", "manylinux2014_aarch64")),
}
DEFAULT_ABI = "arm64-v8a"


def abi_spec(abi: str) -> AbiSpec:
    spec = ABIS.get(abi)
    if spec is None:
        raise InputError(f"no portable runtime for ABI '{abi}'",
                         f"use one of: {', '.join(sorted(ABIS))} (`adb shell getprop ro.product.cpu.abi`)")
    return spec


def device_files() -> dict[str, str]:
    """The two files of this package that run on the device, by name, as text."""
    base = resources.files("specdec.pipeline.portable")
    return {name: (base / name).read_text() for name in ("specdec-run", "boot.py")}


def recipe(abi: AbiSpec, bytecode: bool) -> dict[str, object]:
    return {"recipe_version": RECIPE_VERSION, "abi": asdict(abi), "python": PYTHON, "suites": DEBIAN_SUITES,
            "debs": DEBS, "wheels": WHEELS, "bytecode": bytecode,
            "prune": [sorted(STDLIB_PRUNE), STDLIB_PRUNE_PREFIXES, sorted(TREE_PRUNE_DIRS), sorted(SITE_PRUNE),
                      FILE_PRUNE_SUFFIXES, DYNLOAD_PRUNE_PREFIXES, sorted(DIST_INFO_PRUNE)],
            "device_files": hashlib.sha256(json.dumps(device_files(), sort_keys=True).encode()).hexdigest()}


def recipe_digest(abi: AbiSpec, bytecode: bool) -> str:
    """Names the inputs: archives built from the same recipe are interchangeable."""
    text = json.dumps(recipe(abi, bytecode), sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16]

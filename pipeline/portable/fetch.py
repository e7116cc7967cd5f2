"""Download the runtime's inputs: Debian .debs with apt, wheels with pip.

apt runs with a private state directory, its own sources list (Debian bookworm for the target
architecture, whatever this machine's distribution is) and APT::Architecture set to the target:
the machine's apt configuration and package state are never touched. A source that cannot be
reached is one line naming the step and the URL, not pages of apt or pip output.
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from specdec.pipeline.errors import RuntimeBuildError
from specdec.pipeline.portable import recipe
from specdec.pipeline.portable.recipe import AbiSpec

log = logging.getLogger(__name__)

# What apt and pip print when the network, not the package, is the problem.
UNREACHABLE = ("could not connect", "could not resolve", "temporary failure resolving", "connection refused",
               "connection timed out", "network is unreachable", "no route to host", "newconnectionerror",
               "failed to establish a new connection", "name or service not known", "max retries exceeded",
               "connecttimeout", "readtimeout", "proxyerror", "sslerror", "certificate verify failed",
               "unable to connect", "connection reset", "http error 40", "http error 50", "404  not found",
               "503  service unavailable")
_APT_TIMEOUT_S = 600
_PIP_TIMEOUT_S = 900


@dataclass(frozen=True)
class Sources:
    """Where packages come from; tests point these at unreachable URLs."""

    apt_mirror: str = recipe.DEBIAN_MIRROR
    apt_security_mirror: str | None = recipe.DEBIAN_SECURITY_MIRROR
    pip_index_url: str | None = None  # None: pip's own configuration (pip.conf, PIP_INDEX_URL)


@dataclass(frozen=True)
class Deb:
    path: Path
    package: str
    version: str


def _unreachable(text: str) -> bool:
    lowered = text.lower()
    return any(pattern in lowered for pattern in UNREACHABLE)


def _first_error(text: str, prefixes: tuple[str, ...] = ("E:", "ERROR:", "error:")) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    chosen = next((line for line in lines if line.startswith(prefixes)), lines[-1] if lines else "no output")
    return " ".join(chosen.split())[:300]


def _run(argv: list[str], *, step: str, cwd: Path | None = None, timeout_s: float) -> subprocess.CompletedProcess[str]:
    log.debug("runtime build, %s: %s", step, " ".join(argv))
    try:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace", timeout=timeout_s,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError as exc:
        raise RuntimeBuildError(f"runtime build, step '{step}': {argv[0]} is not installed",
                                "the runtime is built from Debian packages with apt-get and dpkg-deb: run "
                                "`specdec runtime build` on Debian or Ubuntu") from exc
    except subprocess.TimeoutExpired as exc:
        raise RuntimeBuildError(f"runtime build, step '{step}': no answer within {timeout_s:g} s",
                                "check the network or proxy, then run `specdec runtime build` again") from exc


# ----------------------------------------------------------------------------------------- apt
def apt_options(state: Path, abi: AbiSpec) -> list[str]:
    user = "root" if os.geteuid() == 0 else getpass.getuser()
    options = {
        "APT::Architecture": abi.deb_arch, "APT::Architectures": abi.deb_arch,
        "Dir::State::Lists": state / "lists", "Dir::State::Status": state / "status", "Dir::Cache": state / "cache",
        "Dir::Etc::SourceList": state / "sources.list", "Dir::Etc::SourceParts": state / "sources.list.d",
        "Dir::Etc::Preferences": state / "preferences", "Dir::Etc::PreferencesParts": state / "preferences.d",
        # as root apt drops to _apt, which cannot write the user's cache dir
        "APT::Sandbox::User": user, "Debug::NoLocking": "1", "Acquire::Retries": "1",
    }
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]


def _sources_list(sources: Sources, abi: AbiSpec) -> str:
    keyring = recipe.DEBIAN_KEYRING
    options = f"[arch={abi.deb_arch} signed-by={keyring}]"
    lines = [f"deb {options} {sources.apt_mirror} {suite} main" for suite in recipe.DEBIAN_SUITES]
    if sources.apt_security_mirror:
        lines.append(f"deb {options} {sources.apt_security_mirror} {recipe.DEBIAN_SECURITY_SUITE} main")
    return "\n".join(lines) + "\n"


def _prepare_state(state: Path, sources: Sources, abi: AbiSpec) -> None:
    for sub in ("lists/partial", "cache/archives/partial", "sources.list.d", "preferences.d"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    (state / "status").touch()
    (state / "sources.list").write_text(_sources_list(sources, abi))
    if not Path(recipe.DEBIAN_KEYRING).is_file():
        raise RuntimeBuildError(f"runtime build, step 'apt update': Debian's archive keyring "
                                f"{recipe.DEBIAN_KEYRING} is missing",
                                "install it: apt-get install debian-archive-keyring")


def fetch_debs(state: Path, dest: Path, abi: AbiSpec, sources: Sources) -> list[Deb]:
    """apt-get update + download of recipe.DEBS into `dest` (already present files are reused)."""
    _prepare_state(state, sources, abi)
    options = apt_options(state, abi)
    update = _run(["apt-get", *options, "update"], step="apt update", timeout_s=_APT_TIMEOUT_S)
    # apt-get update exits 0 even when a source failed (it only warns) unless nothing at all came.
    problems = "\n".join(line for line in (update.stdout + update.stderr).splitlines()
                         if line.startswith(("E:", "W: Failed to fetch", "Err:")))
    if update.returncode != 0 or problems:
        detail = _first_error(problems or update.stderr or update.stdout, ("E:", "W:", "Err:"))
        where = " and ".join(filter(None, (sources.apt_mirror, sources.apt_security_mirror)))
        if _unreachable(problems or update.stderr):
            raise RuntimeBuildError(f"runtime build, step 'apt update': cannot reach {where} ({detail})",
                                    "check the network or proxy, or pass --apt-mirror URL of a reachable "
                                    "Debian mirror")
        raise RuntimeBuildError(f"runtime build, step 'apt update' failed for {where}: {detail}",
                                "check the mirror URL (--apt-mirror) and that it carries bookworm "
                                f"for {abi.deb_arch}")
    dest.mkdir(parents=True, exist_ok=True)
    download = _run(["apt-get", *options, "download", *recipe.DEBS], step="apt download", cwd=dest,
                    timeout_s=_APT_TIMEOUT_S)
    if download.returncode != 0:
        detail = _first_error(download.stderr + download.stdout)
        if _unreachable(download.stderr):
            raise RuntimeBuildError(f"runtime build, step 'apt download': cannot reach {sources.apt_mirror} "
                                    f"({detail})", "check the network or proxy, or pass --apt-mirror URL")
        raise RuntimeBuildError(f"runtime build, step 'apt download' failed: {detail}",
                                f"check that {sources.apt_mirror} carries {', '.join(recipe.DEBS)} "
                                f"for {abi.deb_arch}")
    return [_newest(dest, package, abi) for package in recipe.DEBS]


def _newest(dest: Path, package: str, abi: AbiSpec) -> Deb:
    """The downloaded .deb of `package` (apt names them NAME_VERSION_ARCH.deb, ':' as %3a)."""
    found = []
    for path in dest.glob(f"{package}_*_{abi.deb_arch}.deb"):
        name, version, _arch = path.stem.split("_")
        if name == package:
            found.append(Deb(path, package, unquote(version)))
    if not found:
        raise RuntimeBuildError(f"runtime build, step 'apt download': {package} was not downloaded",
                                "run again with SPECDEC_DEBUG=1 to see apt's output")
    # Several versions after a security update: the newest file is the one apt just fetched.
    return max(found, key=lambda deb: deb.path.stat().st_mtime)


def unpack_deb(deb: Path, into: Path) -> None:
    result = _run(["dpkg-deb", "-x", str(deb), str(into)], step="unpack", timeout_s=_APT_TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeBuildError(f"runtime build, step 'unpack': dpkg-deb cannot unpack {deb.name}: "
                                f"{_first_error(result.stderr)}", f"delete {deb} and build again")


# ----------------------------------------------------------------------------------------- pip
def _pip_platform_args(abi: AbiSpec) -> list[str]:
    platforms = [arg for platform in (abi.wheel_platform, *abi.older_platforms) for arg in ("--platform", platform)]
    return ["--only-binary=:all:", "--no-deps", *platforms, "--python-version",
            recipe.PYTHON, "--implementation", "cp", "--abi", abi.python_abi]


def _wheel_name(requirement: str) -> tuple[str, str]:
    name, _, version = requirement.partition("==")
    return re.sub(r"[-_.]+", "_", name).lower(), version


def cached_wheels(dest: Path, abi: AbiSpec) -> list[Path] | None:
    """The pinned wheels when all are already in `dest` (no network needed), else None."""
    arch = abi.wheel_platform.split("_", 3)[-1]
    found = []
    for requirement in recipe.WHEELS:
        name, version = _wheel_name(requirement)
        # a CPython-version wheel, or a stable-ABI one (cp39-abi3: llguidance)
        matches = sorted(p for p in dest.glob(f"{name}-{version}-*.whl") if arch in p.name
                         and (f"-{abi.python_abi}-" in p.name or "-abi3-" in p.name))
        if not matches:
            return None
        found.append(matches[-1])
    return found


def fetch_wheels(dest: Path, abi: AbiSpec, sources: Sources) -> list[Path]:
    """`pip download` of recipe.WHEELS for the target platform (reuses wheels already in `dest`)."""
    cached = cached_wheels(dest, abi)
    if cached is not None:
        return cached
    dest.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--dest", str(dest), "--disable-pip-version-check",
            "--progress-bar", "off", "--retries", "1", "--timeout", "30", *_pip_platform_args(abi)]
    if sources.pip_index_url:
        argv += ["--index-url", sources.pip_index_url]
    result = _run([*argv, *recipe.WHEELS], step="pip download", timeout_s=_PIP_TIMEOUT_S)
    where = sources.pip_index_url or "pip's configured index"
    if result.returncode != 0:
        detail = _first_error(result.stderr or result.stdout)
        if "no module named pip" in result.stderr.lower():
            raise RuntimeBuildError(f"runtime build, step 'pip download': pip is not installed in {sys.executable}",
                                    f"{sys.executable} -m ensurepip")
        if _unreachable(result.stderr):
            raise RuntimeBuildError(f"runtime build, step 'pip download': cannot reach {where} ({detail})",
                                    "check the network or proxy, or pass --index-url URL of a reachable "
                                    "package index")
        raise RuntimeBuildError(f"runtime build, step 'pip download' failed at {where}: {detail}",
                                f"the index must carry {', '.join(recipe.WHEELS)} for {abi.wheel_platform}")
    wheels = cached_wheels(dest, abi)
    if wheels is None:
        raise RuntimeBuildError(f"runtime build, step 'pip download': pip did not save {', '.join(recipe.WHEELS)}",
                                "run again with SPECDEC_DEBUG=1")
    return wheels


def install_wheels(wheels: list[Path], target: Path, abi: AbiSpec) -> None:
    """pip unpacks them for the target platform (pip, not unzip: it knows the .data layout)."""
    argv = [sys.executable, "-m", "pip", "install", "--no-index", "--no-compile", "--disable-pip-version-check",
            "--no-warn-script-location", "--target", str(target), *_pip_platform_args(abi),
            *(str(w) for w in wheels)]
    result = _run(argv, step="install wheels", timeout_s=_PIP_TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeBuildError(f"runtime build, step 'install wheels' failed: {_first_error(result.stderr)}",
                                "delete the wheels in the runtime cache and build again")


def missing_tools() -> list[str]:
    """Host tools the build needs that this machine lacks (empty: the build can run)."""
    return [tool for tool in ("apt-get", "dpkg-deb") if shutil.which(tool) is None]

"""`specdec runtime build|info`: the content-addressed runtime archive and its cache.

The archive is a reproducible .tar.gz (sorted entries, fixed times and owners, gzip without a
timestamp): the same inputs give the same bytes, and its sha256 names it. It lives in
`$XDG_CACHE_HOME/specdec/runtime/<abi>/<id>.tar.gz` with a `<id>.json` beside it, written last,
so an interrupted build leaves nothing that looks finished. A build whose recipe (the pinned
inputs, see recipe.py) already has an archive reuses it without touching the network.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import hashlib
import json
import logging
import os
import tarfile
import tempfile
import time
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specdec import __version__
from specdec.pipeline.bundle.locks import hold_output
from specdec.pipeline.bundle.staging import check_inputs, writable_directory
from specdec.pipeline.errors import InputError, RuntimeBuildError
from specdec.pipeline.portable import assemble, fetch, recipe
from specdec.pipeline.portable.fetch import Sources
from specdec.pipeline.progress import Progress, SilentProgress

log = logging.getLogger(__name__)

ARCHIVE_SCHEMA = "specdec.runtime/1"
_MTIME = 1577836800  # 2020-01-01: fixed, so equal trees give equal archives
_GZIP_LEVEL = 9


def cache_root(cache_dir: Path | None = None) -> Path:
    """`cache_dir`, else $XDG_CACHE_HOME/specdec/runtime, else ~/.cache/specdec/runtime."""
    if cache_dir is not None:
        return cache_dir
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specdec" / "runtime"


@dataclass(frozen=True)
class BuildConfig:
    abi: str = recipe.DEFAULT_ABI
    cache_dir: Path | None = None
    sources: Sources = field(default_factory=Sources)
    force: bool = False  # rebuild even when the recipe's archive is cached


@dataclass(frozen=True)
class RuntimeArchive:
    """A built archive in the cache (`<id>.json` describes it)."""

    path: Path
    sha256: str
    abi: str
    recipe: str
    size: int  # compressed bytes
    unpacked_size: int
    files: int
    python: str
    numpy: str
    onnxruntime: str
    packages: dict[str, str]  # Debian package -> version
    dropped_extensions: list[str]
    bytecode: bool
    created: str
    tool_version: str
    build_s: float | None = None

    @property
    def id(self) -> str:
        """Directory name on the device: the first 16 hex digits of the archive's sha256."""
        return self.sha256[:16]

    def current(self) -> bool:
        """Built from this specdec's recipe (else `runtime build` makes a new one)."""
        spec = recipe.ABIS.get(self.abi)
        return spec is not None and self.recipe == recipe.recipe_digest(spec, assemble.bytecode_supported())


def _load(meta: Path) -> RuntimeArchive | None:
    try:
        data = json.loads(meta.read_text())
        if data.pop("schema", None) != ARCHIVE_SCHEMA:
            return None
        archive = RuntimeArchive(path=meta.with_suffix(".tar.gz"), **data)
    except (OSError, ValueError, TypeError):
        log.warning("ignoring unreadable runtime metadata %s", meta)
        return None
    return archive if archive.path.is_file() else None


def list_cached(cache_dir: Path | None = None) -> list[RuntimeArchive]:
    """Every complete archive in the cache, newest first."""
    root = cache_root(cache_dir)
    found = [a for meta in sorted(root.glob("*/*.json")) if (a := _load(meta)) is not None]
    return sorted(found, key=lambda a: a.created, reverse=True)


def find_current(abi: str = recipe.DEFAULT_ABI, cache_dir: Path | None = None) -> RuntimeArchive | None:
    return next((a for a in list_cached(cache_dir) if a.abi == abi and a.current()), None)


# ----------------------------------------------------------------------------------------- build
def local_sources(sources: Sources) -> tuple[Path, ...]:
    """The package sources that are directories on this machine (`file://` mirrors, a local index): inputs,
    so the cache may not overlap them (pipeline/bundle/staging.py's output policy)."""
    found = []
    for url in (sources.apt_mirror, sources.apt_security_mirror, sources.pip_index_url):
        if url and url.startswith("file://"):
            found.append(Path(urllib.parse.unquote(urllib.parse.urlparse(url).path)))
        elif url and "://" not in url:
            found.append(Path(url))
    return tuple(found)


def build_runtime(config: BuildConfig, progress: Progress | None = None) -> RuntimeArchive:
    """The cached archive for this recipe, or a new one (downloads, assembles, compresses)."""
    progress = progress or SilentProgress()
    abi = recipe.abi_spec(config.abi)
    root = cache_root(config.cache_dir)
    if not config.force and (cached := find_current(abi.abi, config.cache_dir)) is not None:
        log.info("runtime %s for %s is cached at %s", cached.id, abi.abi, cached.path)
        return cached
    writable_directory(root, key="cache_dir")  # before any download: a read-only cache is one line, exit 2
    check_inputs(root, local_sources(config.sources), key="cache_dir")
    with hold_output(root, key="cache_dir"):  # one build per cache at a time: a second fails at once
        return _build(config, abi, root, progress)


def _build(config: BuildConfig, abi: recipe.AbiSpec, root: Path, progress: Progress) -> RuntimeArchive:
    if missing := fetch.missing_tools():
        raise RuntimeBuildError(f"runtime build needs {' and '.join(missing)}, which this machine lacks",
                                      "build it on Debian or Ubuntu (apt-get install apt dpkg), then copy "
                                      f"{root} over")
    started = time.monotonic()
    downloads = root / "downloads"
    with progress.task(f"apt: Debian bookworm packages for {abi.deb_arch}") as task:
        debs = fetch.fetch_debs(downloads / f"apt-{abi.deb_arch}", downloads / f"debs-{abi.deb_arch}", abi,
                                config.sources)
        task.describe(f"apt: {len(debs)} Debian packages for {abi.deb_arch}")
    with progress.task(f"pip: {', '.join(recipe.WHEELS)} for {abi.wheel_platform}"):
        wheels = fetch.fetch_wheels(downloads / "wheels", abi, config.sources)
    (root / abi.abi).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root / abi.abi, prefix=".build-") as scratch:
        work = Path(scratch)
        tree = work / "runtime"
        facts = _assemble(work, tree, debs, wheels, abi, progress)
        with progress.task("compressing the runtime archive"):
            staged = work / "runtime.tar.gz"
            files, unpacked = assemble.write_manifest(tree)
            write_archive(tree, staged)
        sha = hashlib.sha256(staged.read_bytes()).hexdigest()
        archive = RuntimeArchive(
            path=root / abi.abi / f"{sha[:16]}.tar.gz", sha256=sha, abi=abi.abi,
            recipe=recipe.recipe_digest(abi, facts.bytecode), size=staged.stat().st_size, unpacked_size=unpacked,
            files=files, python=facts.python, numpy=facts.numpy, onnxruntime=facts.onnxruntime,
            packages=facts.packages, dropped_extensions=facts.dropped_extensions, bytecode=facts.bytecode,
            created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), tool_version=__version__,
            build_s=round(time.monotonic() - started, 1))
        staged.replace(archive.path)
    meta = archive.path.with_suffix("").with_suffix(".json")
    data = {"schema": ARCHIVE_SCHEMA, **{k: v for k, v in asdict(archive).items() if k != "path"}}
    tmp = meta.with_name(f".{meta.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(meta)  # last: only now does the archive count as built
    log.info("built runtime %s (%.1f MB) in %.0f s", archive.id, archive.size / 1e6, archive.build_s or 0)
    return archive


def _wheel_version(wheels: list[Path], name: str) -> str:
    return next(w.name.split("-")[1] for w in wheels if w.name.startswith(f"{name}-"))


@dataclass(frozen=True)
class _TreeFacts:
    python: str
    numpy: str
    onnxruntime: str
    packages: dict[str, str]
    dropped_extensions: list[str]
    bytecode: bool


def _assemble(work: Path, tree: Path, debs: list[fetch.Deb], wheels: list[Path], abi: recipe.AbiSpec,
              progress: Progress) -> _TreeFacts:
    with progress.task("assembling the runtime (unpack, prune, libraries)", total=len(debs) + 4) as task:
        debroot = work / "debroot"
        for deb in debs:
            fetch.unpack_deb(deb.path, debroot)
            task.advance()
        assemble.layout_python(debroot, tree)
        fetch.install_wheels(wheels, assemble.site_packages(tree), abi)
        task.advance()
        assemble.copy_licenses(debroot, tree, debs)
        freed = assemble.prune(tree)
        task.advance()
        dropped = assemble.resolve_libraries(debroot, tree, abi)
        task.advance()
        facts = _TreeFacts(
            python=next(d.version for d in debs if d.package == f"{recipe.PYTHON_PACKAGE}-minimal"),
            numpy=_wheel_version(wheels, "numpy"), onnxruntime=_wheel_version(wheels, "onnxruntime"),
            packages={d.package: d.version for d in debs}, dropped_extensions=dropped,
            bytecode=assemble.bytecode_supported())
        log.info("pruned %.1f MB of tests, headers and tooling", freed / 1e6)
        assemble.write_device_files(tree, abi, {"abi": abi.abi, "loader": abi.loader, **asdict(facts)})
        task.advance()
    with progress.task("compiling bytecode"):
        assemble.compile_bytecode(tree)
    return facts


def write_archive(tree: Path, dest: Path) -> None:
    """A reproducible tar.gz of `tree`'s contents (paths relative to it)."""

    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = _MTIME
        info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
        return info

    with dest.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,
                                               compresslevel=_GZIP_LEVEL) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(tree.rglob("*")):
            if path.is_symlink():
                raise InputError(f"{path} is a symlink; the runtime tree must hold plain files",
                                 "this is a bug in the runtime assembly")
            tar.add(path, arcname=path.relative_to(tree).as_posix(), recursive=False, filter=normalise)


def describe(archive: RuntimeArchive) -> dict[str, Any]:
    """What `runtime info --json` and results.json record about an archive."""
    data = asdict(archive)
    data.update(path=str(archive.path), id=archive.id, current=archive.current())
    return data

"""`specdec runtime build|info`: the portable device runtime (no Python needed on the phone)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from specdec.cli import options
from specdec.cli.console import RichProgress, err, guarded, out
from specdec.pipeline.portable import recipe
from specdec.pipeline.portable.archive import (
    BuildConfig,
    RuntimeArchive,
    build_runtime,
    cache_root,
    describe,
    list_cached,
)
from specdec.pipeline.portable.fetch import Sources

app = typer.Typer(no_args_is_help=True, add_completion=False)


@app.callback()
def runtime_group() -> None:
    """The portable arm64 device runtime (no Python needed on the phone): build, info."""


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def archive_table(archives: list[RuntimeArchive], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("id", "ABI", "archive", "unpacked", "files", "python", "numpy", "onnxruntime", "built", "recipe"):
        table.add_column(column, no_wrap=column == "id")
    for a in archives:
        table.add_row(a.id, a.abi, _mb(a.size), _mb(a.unpacked_size), str(a.files), a.python, a.numpy, a.onnxruntime,
                      a.created, "[green]current[/]" if a.current() else "[yellow]older specdec[/]")
    return table


@app.command("build")
@guarded
def build(
    abi: str = typer.Option(recipe.DEFAULT_ABI, "--abi", help=f"Android ABI ({', '.join(sorted(recipe.ABIS))})."),
    force: options.Rebuild = False,
    apt_mirror: str = typer.Option(recipe.DEBIAN_MIRROR, "--apt-mirror", help="Debian mirror with bookworm."),
    apt_security_mirror: str = typer.Option(recipe.DEBIAN_SECURITY_MIRROR, "--apt-security-mirror",
                                            help="Debian security mirror, or 'none'."),
    index_url: str = typer.Option(None, "--index-url", help="Package index for the wheels (default: pip's own "
                                                            "configuration)."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Cache directory (default: "
                                                             "$XDG_CACHE_HOME/specdec/runtime)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Build (or reuse) the portable arm64 runtime: Debian's CPython + glibc + numpy/onnxruntime wheels."""
    sources = Sources(apt_mirror=apt_mirror, pip_index_url=index_url,
                      apt_security_mirror=None if apt_security_mirror == "none" else apt_security_mirror)
    archive = build_runtime(BuildConfig(abi=abi, cache_dir=cache_dir, sources=sources, force=force),
                            RichProgress(stage="runtime build"))
    if as_json:
        out.print_json(json.dumps(describe(archive)))
        return
    out.print(archive_table([archive], f"portable runtime for {archive.abi}"))
    how = f"built in {archive.build_s:.0f} s" if archive.build_s is not None else "built earlier"
    err.print(f"{escape(str(archive.path))} ({_mb(archive.size)}, {how}; "
              f"dropped extensions: {', '.join(archive.dropped_extensions) or 'none'})", soft_wrap=True)


@app.command("info")
@guarded
def info(
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Cache directory (default: "
                                                             "$XDG_CACHE_HOME/specdec/runtime)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the cached portable runtimes (the bench pushes the current one to a phone once)."""
    archives = list_cached(cache_dir)
    if as_json:
        out.print_json(json.dumps([describe(a) for a in archives]))
        return
    if not archives:
        err.print(f"no portable runtime in {escape(str(cache_root(cache_dir)))} — build one with "
                  "`specdec runtime build`", soft_wrap=True)
        return
    out.print(archive_table(archives, f"portable runtimes in {cache_root(cache_dir)}"))

"""`specdec profiles list|show`."""

from __future__ import annotations

import json

import typer
import yaml
from rich.table import Table

from specdec.cli.console import guarded, out
from specdec.pipeline.settings import profiles

app = typer.Typer(no_args_is_help=True)


@app.callback()
def profiles_group() -> None:
    """Device profiles and scenario templates (validated YAML in profiles/): list, show."""


def _table(title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]], descriptions: list[str]) -> None:
    """Names never wrap (they are what people type); on a narrow terminal the descriptions go below the
    table instead of squeezing every column into a sliver."""
    wide = out.width >= 120
    table = Table(title=title, title_justify="left")
    for column in (*columns, "description") if wide else columns:
        table.add_column(column, no_wrap=column == "name", overflow="fold")
    for row, description in zip(rows, descriptions, strict=True):
        table.add_row(*row, *((description,) if wide else ()))
    out.print(table)
    if not wide:
        for row, description in zip(rows, descriptions, strict=True):
            out.print(f"  [bold]{row[0]}[/]: {description}", highlight=False)


@app.command("list")
@guarded
def list_profiles() -> None:
    """List the built-in device profiles and scenario templates."""
    devices = [profiles.load_device(name) for name in profiles.builtin_names("device")]
    _table("device profiles", ("name", "transport", "SoC", "threads / mask", "max context", "buckets"),
           [(p.name, p.transport.value, p.soc or "—", f"{p.runtime.threads} / {p.runtime.cpu_mask or '—'}",
             str(p.compile.max_context), ", ".join(map(str, p.compile.buckets))) for p in devices],
           [p.description for p in devices])
    scenarios = [profiles.load_scenario(name) for name in profiles.builtin_names("scenario")]
    _table("scenario templates", ("name", "beta_base", "entropy low / high", "rho min / max", "depth / width"),
           [(s.name, f"{s.beta_base:g}", f"{s.entropy_low:g} / {s.entropy_high:g}", f"{s.rho_min:g} / {s.rho_max:g}",
             f"{s.depth or '—'} / {s.width or '—'}") for s in scenarios],
           [s.description for s in scenarios])


@app.command("show")
@guarded
def show(
    name: str = typer.Argument(..., help="Profile or scenario name, or a YAML path."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of YAML."),
) -> None:
    """Print one profile (built-in name or YAML path) with every field, validated."""
    kind = "scenario" if name in profiles.builtin_names("scenario") else "device"
    profile = profiles.load(name, kind)
    data = json.loads(profile.model_dump_json())
    if as_json:
        out.print_json(json.dumps(data))
    else:
        out.print(yaml.safe_dump(data, sort_keys=False).rstrip(), highlight=False, markup=False)

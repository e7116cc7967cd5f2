"""`specdec profiles list|show`."""

from __future__ import annotations

import json

import typer
import yaml
from rich.table import Table

from specdec.cli.console import guarded, out
from specdec.pipeline import profiles

app = typer.Typer(help="Device profiles and scenario templates (validated YAML in profiles/).", no_args_is_help=True)


@app.command("list", help="List the built-in device profiles and scenario templates.")
@guarded
def list_profiles() -> None:
    table = Table(title="device profiles", title_justify="left")
    for column in ("name", "transport", "SoC", "threads / mask", "max context", "buckets", "description"):
        table.add_column(column)
    for name in profiles.builtin_names("device"):
        p = profiles.load_device(name)
        table.add_row(p.name, p.transport.value, p.soc or "—", f"{p.runtime.threads} / {p.runtime.cpu_mask or '—'}",
                      str(p.compile.max_context), ",".join(map(str, p.compile.buckets)), p.description)
    out.print(table)
    scenarios = Table(title="scenario templates", title_justify="left")
    for column in ("name", "beta_base", "entropy low / high", "rho min / max", "depth / width", "description"):
        scenarios.add_column(column)
    for name in profiles.builtin_names("scenario"):
        s = profiles.load_scenario(name)
        scenarios.add_row(s.name, f"{s.beta_base:g}", f"{s.entropy_low:g} / {s.entropy_high:g}",
                          f"{s.rho_min:g} / {s.rho_max:g}", f"{s.depth or '—'} / {s.width or '—'}", s.description)
    out.print(scenarios)


@app.command("show", help="Print one profile (built-in name or YAML path) with every field, validated.")
@guarded
def show(
    name: str = typer.Argument(..., help="Profile or scenario name, or a YAML path."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of YAML."),
) -> None:
    kind = "scenario" if name in profiles.builtin_names("scenario") else "device"
    profile = profiles.load(name, kind)
    data = json.loads(profile.model_dump_json())
    if as_json:
        out.print_json(json.dumps(data))
    else:
        out.print(yaml.safe_dump(data, sort_keys=False).rstrip(), highlight=False, markup=False)

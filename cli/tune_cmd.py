"""`specdec tune BUNDLE -o OUT --device local|adb`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from specdec.cli.console import RichProgress, err, note, out
from specdec.pipeline.bench.tune import TuneConfig, tune_bundle
from specdec.pipeline.bundle import Bundle
from specdec.pipeline.profiles import Transport
from specdec.pipeline.records.plan import DevicePlan


def plan_table(plan: DevicePlan) -> Table:
    table = Table(title=f"plan for {plan.device}", title_justify="left")
    for column in ("drafter", "nodes", "depth", "width", "tok/round", "round ms", "predicted"):
        table.add_column(column, justify="left" if column == "drafter" else "right", no_wrap=True)
    for index, c in enumerate([plan.choice, *[c for c in plan.candidates if c != plan.choice][:5]]):
        style = "bold green" if index == 0 else None
        table.add_row(c.drafter, str(c.budget), str(c.depth), str(c.width), f"{c.expected_tokens:.2f}",
                      f"{c.round_ms:.2f}", f"{c.predicted_speedup:.2f}×", style=style)
    return table


def tune(
    bundle: Path = typer.Argument(..., help="Bundle to tune (any stage with a draft graph)."),
    output: Path = typer.Option(..., "--output", "-o", help="Bundle directory to write (the input plus the plan)."),
    device: Transport = typer.Option(Transport.local, "--device", help="local or adb."),
    profile: str = typer.Option(None, "--profile", "-p", help="Device profile (default local-cpu / android-generic)."),
    serial: str = typer.Option(None, "--serial", "-s", help="adb serial (else ANDROID_SERIAL or the only device)."),
    adb_host: str = typer.Option(None, "--adb-host", "-H", help="Host of a remote adb server (device farm)."),
    adb_port: int = typer.Option(None, "--adb-port", "-P", help="Port of the adb server (default 5037)."),
    calib: Path = typer.Option(None, "--calib", help="Calibration prompts (JSONL; default: held-out demo prompts)."),
    threads: int = typer.Option(None, help="onnxruntime threads on the device (profile's by default)."),
    python: str = typer.Option(None, "--python", help="Python on the device (profile's runtime.python)."),
    max_new_tokens: int = typer.Option(48, "--max-new-tokens", "-n", help="Tokens per calibration reply."),
    exact_layout: bool = typer.Option(None, "--exact-layout/--tree-layout",
                                      help="Plan chains in the exact layout (default: on for int8-compute bundles)."),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Measure the device's cost curve and the bundle's acceptance on it; store the best tree as the plan."""
    config = TuneConfig(output=output, device=device, profile=profile, serial=serial, adb_host=adb_host,
                        adb_port=adb_port, calib=calib, threads=threads, python=python, max_new_tokens=max_new_tokens,
                        exact_layout=exact_layout, force=force)
    source = Bundle.load(bundle)
    with RichProgress().task("tuning on the device (plain timing, verify cost curve, calibration)"):
        result, plan = tune_bundle(config, source)
    out.print(plan_table(plan))
    fit = plan.verify_fit
    err.print(f"verify cost: {fit.intercept_ms:.2f} ms + {fit.ms_per_node:.3f} ms/node (worst residual of the line "
              f"{fit.max_residual * 100:.0f} %; the plan uses the measured curve), "
              f"plain step {plan.plain_step_ms:.2f} ms")
    if not plan.choice.speculative:
        note("the plan is plain decoding: no tree is predicted to beat it by 5 % on this device")
    err.print(f"wrote [bold]{result.path}[/] (generate and bench use the plan on this device; flags override)")

"""`specdec tune BUNDLE -o OUT --device local|adb`."""

from __future__ import annotations

from pathlib import Path

import typer

from specdec.cli.console import RichProgress, err, note, out
from specdec.cli.render import plan_fit_line, plan_table
from specdec.pipeline.bundle import Bundle
from specdec.pipeline.profiles import Transport
from specdec.pipeline.records.decode import DrafterKind
from specdec.pipeline.tune import TuneConfig, tune_bundle


def tune(
    bundle: Path = typer.Argument(..., help="Bundle to tune (any stage; without a draft graph only prompt lookup)."),
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
    drafter: DrafterKind = typer.Option(None, "--drafter",
                                        help="Plan for this drafter only (default: measure model, lookup and "
                                             "model+lookup, as the bundle allows, and choose)."),
    exact_layout: bool = typer.Option(None, "--exact-layout/--tree-layout",
                                      help="Plan chains in the exact layout (default: on for int8-compute bundles)."),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Measure the device's cost curve and the bundle's acceptance on it; store the best tree as the plan."""
    config = TuneConfig(output=output, device=device, profile=profile, serial=serial, adb_host=adb_host,
                        adb_port=adb_port, calib=calib, threads=threads, python=python, max_new_tokens=max_new_tokens,
                        drafter=drafter, exact_layout=exact_layout, force=force)
    source = Bundle.load(bundle)
    with RichProgress().task("tuning on the device (plain timing, verify cost curve, calibration per drafter)"):
        result, plan = tune_bundle(config, source)
    out.print(plan_table(plan))
    err.print(plan_fit_line(plan))
    if not plan.choice.speculative and not plan.notes:
        note("the plan is plain decoding: no tree is predicted to beat it by 5 % on this device")
    err.print(f"wrote [bold]{result.path}[/] (generate and bench use the plan on this device; flags override)")

"""`specdec tune BUNDLE -o OUT --device local|adb`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specdec.cli import options
from specdec.cli.console import RichProgress, err, note, out
from specdec.cli.render import plan_fit_line, plan_table
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.settings.profiles import Transport
from specdec.pipeline.tune import TuneConfig, tune_bundle


def tune(
    bundle: Annotated[Path, typer.Argument(help="Bundle to tune (any stage; without a draft graph: prompt lookup).")],
    output: options.BundleOutput,
    device: options.Device = Transport.local,
    profile: options.Profile = None,
    serial: options.Serial = None,
    adb_host: options.AdbHost = None,
    adb_port: options.AdbPort = None,
    calib: options.CalibPrompts = None,
    threads: options.Threads = None,
    python: options.Python = None,
    runtime: options.Runtime = None,
    max_new_tokens: options.MaxNewTokens = None,
    drafter: options.Drafter = None,
    exact_layout: options.ExactLayout = None,
    force: options.Force = False,
) -> None:
    """Measure the device's cost curve and acceptance; store the tree that maximizes tokens/s as the plan.

    --max-new-tokens is each calibration reply's length (default 48, at least 8); with --drafter only
    that drafter is calibrated and planned for."""
    config = options.config_from(TuneConfig, locals(), **options.one_device(serial, adb_host, adb_port))
    source = Bundle.load(bundle)
    result, plan = tune_bundle(config, source, progress=RichProgress(stage="tune"))
    out.print(plan_table(plan))
    err.print(plan_fit_line(plan))
    if not plan.choice.speculative and not plan.notes:
        note("the plan is plain decoding: no tree is predicted to beat it by 5 % on this device")
    err.print(f"wrote [bold]{result.path}[/] (generate and bench use the plan on this device; flags override)")

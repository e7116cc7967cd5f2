"""`specdec bench BUNDLE --device local|adb`, on one device or a fleet (`--fleet FILE`, `-s` repeated)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import typer

from specdec.cli import options
from specdec.cli.console import RichProgress
from specdec.cli.render import report_fleet, report_outcome
from specdec.pipeline.bench import BenchConfig, run_bench
from specdec.pipeline.bench.fleet import FleetConfig, run_fleet
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.progress import Task
from specdec.pipeline.settings.fleet import fleet_from
from specdec.pipeline.settings.profiles import Transport
from specdec.pipeline.settings.resolve import parse_controllers


def bench(
    bundle: Path = typer.Argument(..., help="Bundle to benchmark (any stage; compiled bundles use their buckets)."),
    output: Path = typer.Option(Path("bench-results"), "--output", "--out", "-o", help="Results directory to write."),
    device: options.Device = Transport.local,
    profile: options.Profile = None,
    scenario: options.Scenario = None,
    serial: options.Serial = None,
    adb_host: options.AdbHost = None,
    adb_port: options.AdbPort = None,
    fleet: options.Fleet = None,
    jobs: int = typer.Option(None, "--jobs", "-j", help="Fleet: devices measured at once (default: the fleet "
                                                        "file's jobs, else all of them)."),
    prompts: options.Prompts = None,
    chat: options.Chat = False,
    limit: int = typer.Option(None, "--limit", help="Use the first N prompts only."),
    max_new_tokens: options.MaxNewTokens = None,
    repeats: int = typer.Option(1, "--repeats", help="Times each prompt runs in each mode."),
    temperature: options.Temperature = None,
    mode: options.Mode = None,
    seed: options.Seed = None,
    tree_budget: options.TreeBudget = None,
    depth: options.Depth = None,
    width: options.Width = None,
    drafter: options.Drafter = None,
    lookup_max_ngram: options.LookupMaxNgram = None,
    lookup_min_ngram: options.LookupMinNgram = None,
    draft_min_prob: options.DraftMinProb = None,
    tune: bool = typer.Option(True, "--tune/--no-tune",
                              help="Without a plan for this device in the bundle, measure the device's cost curve "
                                   "and the acceptance first and plan the tree (else: profile/scenario tree)."),
    calib: options.CalibPrompts = None,
    exact_layout: options.ExactLayout = None,
    ban: options.Ban = None,
    ban_policy: options.BanPolicyOption = None,
    refusal: options.Refusal = None,
    json_schema: options.JsonSchema = None,
    regex: options.Regex = None,
    threads: options.Threads = None,
    python: options.Python = None,
    runtime: options.Runtime = None,
    cooldown: bool = typer.Option(True, "--cooldown/--no-cooldown", help="Wait for the profile's start temperature."),
    controllers: options.Controllers = None,
    asserts: list[str] = typer.Option(None, "--assert", help="CI gate (repeatable), e.g. 'speedup>=1.3', 'lossless'; "
                                                             "a fleet checks it on every device."),
    baseline: Path = typer.Option(None, "--baseline", help="results.json of an earlier run to compare with (a fleet: "
                                                           "an earlier fleet.json, device by device, or one "
                                                           "results.json for every device)."),
    max_regression_pct: float = typer.Option(5.0, "--max-regression", help="Allowed regression vs --baseline, in %."),
    force: options.Force = False,
) -> None:
    """Plain vs speculative decoding on a device, or on a fleet of devices side by side: latency, acceptance,
    power, thermal, CI gates.

    Writes results.json, summary.md, PNG plots and trace.json into the output directory (a fleet: one such
    directory per device, plus fleet.json, fleet.md and fleet.png). At temperature 0 the two modes' outputs are
    compared token for token (losslessness). Defaults: --prompts the demo's held-out prompts, --controllers
    fallback,thermal,power."""
    serials = serial or []
    fleet_run = fleet is not None or len(serials) > 1
    device_options = {"serial": None, "adb_host": None, "adb_port": None} if fleet_run else \
        options.one_device(serials, adb_host, adb_port)
    config = options.config_from(BenchConfig, locals(), controllers=parse_controllers(controllers),
                                 asserts=tuple(asserts or ()), ban=options.read_ban(ban),
                                 json_schema=options.read_json_schema(json_schema), **device_options)
    members = fleet_from(fleet, serials, profile=profile, host=adb_host, port=adb_port, jobs=jobs) if fleet_run \
        else None
    source = Bundle.load(bundle)
    progress = RichProgress(stage="bench")
    if members is not None:
        _bench_fleet(config, FleetConfig(tuple(members.devices), members.jobs), source, progress)
        return
    # Opened at the runner's first event: the runtime push before it draws bars of its own.
    with contextlib.ExitStack() as bars:
        tasks: list[Task] = []

        def on_event(event: dict[str, Any]) -> None:
            if not tasks:
                tasks.append(bars.enter_context(
                    progress.task("benchmarking (warm-up, then plain and speculative per prompt)")))
            if event.get("type") == "reply":
                tasks[0].advance()
                tasks[0].describe(f"benchmarking: {event['mode']} prompt {event['prompt']}")

        outcome = run_bench(config, source, on_event=on_event, progress=progress)
    report_outcome(outcome)


def _bench_fleet(config: BenchConfig, fleet: FleetConfig, source: Bundle, progress: RichProgress) -> None:
    names = [entry.name for entry in fleet.devices]
    finished: list[str] = []
    lock = threading.Lock()
    # Opened at the first event (from a device's worker thread), so input errors print alone.
    with contextlib.ExitStack() as bars:
        tasks: list[Task] = []

        def on_event(label: str, event: dict[str, Any]) -> None:
            with lock:
                if not tasks:
                    tasks.append(bars.enter_context(progress.task(
                        f"benchmarking {len(names)} device{'s' * (len(names) != 1)}, {fleet.workers} at a time",
                        total=len(names))))
                if event.get("type") == "fleet_device":
                    finished.append(label)
                    tasks[0].advance()
                    tasks[0].describe(f"{label}: {event['status']} ({len(finished)} of {len(names)} done)")
                elif event.get("type") == "reply":
                    tasks[0].describe(f"{label}: {event['mode']} prompt {event['prompt']}")

        outcome = run_fleet(config, fleet, source, on_event=on_event, progress=progress)
    report_fleet(outcome)

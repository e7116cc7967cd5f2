"""`specdec bench BUNDLE --device local|adb`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import typer

from specdec.cli.console import RichProgress
from specdec.cli.render import report_outcome
from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.bundle import Bundle
from specdec.pipeline.profiles import RuntimeKind, Transport
from specdec.pipeline.progress import Task
from specdec.pipeline.records.decode import DrafterKind, VerifyMode
from specdec.pipeline.settings import parse_controllers


def bench(
    bundle: Path = typer.Argument(..., help="Bundle to benchmark (any stage; compiled bundles use their buckets)."),
    device: Transport = typer.Option(Transport.local, "--device", help="local or adb."),
    output: Path = typer.Option(Path("bench-results"), "--out", "-o", help="Results directory."),
    profile: str = typer.Option(None, "--profile", "-p", help="Device profile (default local-cpu / android-generic)."),
    scenario: str = typer.Option(None, "--scenario", help="Scenario template: code, chat, creative, knowledge."),
    serial: str = typer.Option(None, "--serial", "-s", help="adb serial (else ANDROID_SERIAL or the only device)."),
    adb_host: str = typer.Option(None, "--adb-host", "-H", help="Host of a remote adb server (device farm)."),
    adb_port: int = typer.Option(None, "--adb-port", "-P", help="Port of the adb server (default 5037)."),
    prompts: Path = typer.Option(None, "--prompts", help="JSONL prompts (default: the demo's held-out prompts)."),
    limit: int = typer.Option(None, "--limit", help="Use the first N prompts only."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", "-n", help="Tokens per reply."),
    repeats: int = typer.Option(1, "--repeats", help="Times each prompt runs in each mode."),
    temperature: float = typer.Option(0.0, help="0 = greedy (outputs compared for losslessness)."),
    mode: VerifyMode = typer.Option(None, help="Verification mode (greedy / match / rrs)."),
    seed: int = typer.Option(0, help="Philox seed."),
    tree_budget: int = typer.Option(None, "--tree-budget", help="Tree nodes per round (the plan's by default)."),
    depth: int = typer.Option(None, help="Tree depth (the plan's, scenario's or profile's by default)."),
    width: int = typer.Option(None, help="Frontier width (the plan's, scenario's or profile's by default)."),
    drafter: DrafterKind = typer.Option(None, "--drafter",
                                        help="Who drafts: model, lookup (prompt lookup, no model call) or "
                                             "model+lookup (default: the plan's, scenario's or profile's, else model; "
                                             "lookup on bundles without a draft graph)."),
    lookup_max_ngram: int = typer.Option(None, "--lookup-max-ngram",
                                         help="Longest context suffix prompt lookup matches (default 3)."),
    lookup_min_ngram: int = typer.Option(None, "--lookup-min-ngram",
                                         help="Shortest context suffix prompt lookup matches (default 1)."),
    tune: bool = typer.Option(True, "--tune/--no-tune",
                              help="Without a plan for this device in the bundle, measure the device's cost curve "
                                   "and the acceptance first and plan the tree (else: profile/scenario tree)."),
    calib: Path = typer.Option(None, "--calib", help="Calibration prompts for tuning (JSONL; default: prompts of "
                                                     "--prompts the run does not measure)."),
    exact_layout: bool = typer.Option(None, "--exact-layout/--tree-layout",
                                      help="Exact layout (chains, no single-row calls: bitwise-exact decoding); "
                                           "default on for int8-compute bundles."),
    threads: int = typer.Option(None, help="onnxruntime threads on the device (profile's by default)."),
    python: str = typer.Option(None, "--python", help="Python on the device (profile's runtime.python)."),
    runtime: RuntimeKind = typer.Option(
        None, "--runtime", help="What runs the bench on the device: its own Python (device-python), the portable "
                                "runtime pushed once (portable), or auto: the device's Python if it has numpy and "
                                "onnxruntime, else portable (profile's runtime.use, default auto)."),
    cooldown: bool = typer.Option(True, "--cooldown/--no-cooldown", help="Wait for the profile's start temperature."),
    controllers: str = typer.Option(None, "--controllers",
                                    help="Adaptive controllers: all, none, or a list of beta,width,fallback,thermal,"
                                         "power (default fallback,thermal,power)."),
    assertion: list[str] = typer.Option(None, "--assert", help="CI gate, e.g. 'speedup>=1.3' or 'lossless'."),
    baseline: Path = typer.Option(None, "--baseline", help="results.json of an earlier run to compare with."),
    max_regression: float = typer.Option(5.0, "--max-regression", help="Allowed regression vs --baseline, in %."),
    force: bool = typer.Option(False, "--force", help="Replace the results directory if it exists."),
) -> None:
    """Run plain vs speculative decoding on a device; write results.json, summary.md, plots, trace.json."""
    config = BenchConfig(output=output, device=device, profile=profile, scenario=scenario, serial=serial,
                         adb_host=adb_host, adb_port=adb_port, prompts=prompts, limit=limit,
                         max_new_tokens=max_new_tokens, repeats=repeats, temperature=temperature, mode=mode,
                         seed=seed, tree_budget=tree_budget, depth=depth, width=width, drafter=drafter,
                         lookup_max_ngram=lookup_max_ngram, lookup_min_ngram=lookup_min_ngram, threads=threads,
                         python=python, runtime=runtime, cooldown=cooldown, tune=tune, calib=calib,
                         exact_layout=exact_layout,
                         controllers=parse_controllers(controllers),
                         asserts=tuple(assertion or ()), baseline=baseline,
                         max_regression_pct=max_regression, force=force)
    source = Bundle.load(bundle)
    progress = RichProgress()
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

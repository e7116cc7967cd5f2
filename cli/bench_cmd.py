"""`specdec bench BUNDLE --device local|adb`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from specdec.cli.console import RichProgress, err, out
from specdec.pipeline.bench.controls import parse_controllers
from specdec.pipeline.bench.stage import BenchConfig, BenchOutcome, run_bench
from specdec.pipeline.bundle import Bundle
from specdec.pipeline.errors import DeviceLostError, GateFailedError
from specdec.pipeline.profiles import RuntimeKind, Transport
from specdec.pipeline.progress import Task
from specdec.pipeline.runtime.config import VerifyMode


def _fmt(value: Any, unit: str = "") -> str:
    return "—" if value is None else f"{value:.3g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def results_table(results: dict[str, Any]) -> Table:
    f = results["figures"]
    details = results["details"]
    table = Table(title=f"bench on {results['device']['model']} ({results['device']['serial']})",
                  title_justify="left")
    table.add_column("figure")
    table.add_column("plain", justify="right")
    table.add_column("speculative", justify="right")
    table.add_row("tokens/s", _fmt(f["plain_tokens_per_s"]), _fmt(f["tokens_per_s"]))
    table.add_row("reply latency ms", _fmt(details["reply_ms"].get("plain")), _fmt(f["reply_ms"]))
    table.add_row("TTFT ms", _fmt(details["ttft_ms"]["plain"].get("mean")), _fmt(f["ttft_ms"]))
    table.add_row("energy / token mJ", _fmt(f["plain_energy_per_token_mj"]), _fmt(f["energy_per_token_mj"]))
    table.add_row("speedup (measured | predicted)", "", f"{_fmt(f['speedup'])} | {_fmt(f['predicted_speedup'])}")
    table.add_row("mean accepted length | α", "", f"{_fmt(f['mean_accepted_len'])} | {_fmt(f['acceptance_rate'])}")
    table.add_row("draft/target cost r | call overhead ms", "",
                  f"{_fmt(f['cost_ratio_r'])} | {_fmt(f['fixed_call_ms'])}")
    lossless = results["lossless"]
    table.add_row("lossless", "", "identical" if lossless["equal"] else "not compared" if not lossless["checked"]
                  else f"{len(lossless['mismatches'])} differ")
    return table


def bench(
    bundle: Path = typer.Argument(..., help="Bundle to benchmark (any stage; compiled bundles use their buckets)."),
    device: Transport = typer.Option(Transport.local, "--device", help="local or adb."),
    output: Path = typer.Option(Path("bench-results"), "--out", "-o", help="Results directory."),
    profile: str = typer.Option(None, "--profile", "-p", help="Device profile (default local-cpu / android-generic)."),
    scenario: str = typer.Option(None, "--scenario", help="Scenario template: code, chat, creative, knowledge."),
    serial: str = typer.Option(None, "--serial", "-s", help="adb serial (else ANDROID_SERIAL or the only device)."),
    adb_host: str = typer.Option(None, "-H", help="adb server host (remote device farms)."),
    adb_port: int = typer.Option(None, "-P", help="adb server port."),
    prompts: Path = typer.Option(None, "--prompts", help="JSONL prompts (default: the demo's held-out prompts)."),
    limit: int = typer.Option(None, "--limit", help="Use the first N prompts only."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", "-n", help="Tokens per reply."),
    repeats: int = typer.Option(1, "--repeats", help="Times each prompt runs in each mode."),
    temperature: float = typer.Option(0.0, help="0 = greedy (outputs compared for losslessness)."),
    mode: VerifyMode = typer.Option(None, help="Verification mode (greedy / match / rrs)."),
    seed: int = typer.Option(0, help="Philox seed."),
    tree_budget: int = typer.Option(None, "--tree-budget", help="Tree nodes per round (profile's by default)."),
    depth: int = typer.Option(None, help="Tree depth (profile's or scenario's by default)."),
    width: int = typer.Option(None, help="Frontier width (profile's or scenario's by default)."),
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
                         seed=seed, tree_budget=tree_budget, depth=depth, width=width, threads=threads,
                         python=python, runtime=runtime, cooldown=cooldown,
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


def report_outcome(outcome: BenchOutcome) -> None:
    results = outcome.results
    out.print(results_table(results))
    for warning in results["warnings"]:
        err.print(f"[yellow]warning[/]: {warning}")
    for gate in outcome.gates:
        err.print(f"{'[green]pass[/]' if gate.passed else '[red]FAIL[/]'} {gate.gate}: {gate.message}")
    err.print(f"wrote [bold]{outcome.output}[/] (results.json, summary.md, trace.json, plots)")
    if results["partial"]:
        raise DeviceLostError(f"partial results: {results['partial_reason']}",
                              f"what was measured before is in {outcome.output}")
    failed = outcome.failed_gates
    if failed:
        first = failed[0]
        raise GateFailedError(f"gate '{first.gate}' failed: {first.message}",
                              f"{len(failed)} of {len(outcome.gates)} gates failed; see {outcome.output}/summary.md")

"""Tables and outcome reports that more than one command prints (commands do not import each other)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from specdec.cli.console import err, out
from specdec.pipeline.bench.stage import BenchOutcome
from specdec.pipeline.errors import DeviceLostError, GateFailedError
from specdec.pipeline.records.results import BenchResults


def human_bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.1f} GB"


def readiness_table(readiness: dict[str, dict[str, Any]]) -> Table:
    """`specdec compile` and `specdec inspect --mobile`: what NNAPI and CoreML could take per variant."""
    table = Table(title="mobile readiness (share of nodes each provider could take)", title_justify="left")
    for column in ("variant", "size", "dynamic dims", "NNAPI", "CoreML", "XNNPACK / QNN", "op types"):
        table.add_column(column)
    for name, report in readiness.items():
        cells = []
        for provider in ("NNAPI", "CoreML"):
            info = report["providers"][provider]
            cells.append(f"{info['share']:.0%} in {info['partitions']} part." if "share" in info else info["status"])
        table.add_row(name, human_bytes(report["bytes"]), ", ".join(report["dynamic_dims"]) or "none", *cells,
                      "not checked here", str(len(report["op_types"])))
    return table


def _fmt(value: Any, unit: str = "") -> str:
    return "—" if value is None else f"{value:.3g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def results_table(results: BenchResults) -> Table:
    f = results.figures
    details = results.details
    plain_ttft = details.ttft_ms.plain
    table = Table(title=f"bench on {results.device.model} ({results.device.serial})", title_justify="left")
    table.add_column("figure")
    table.add_column("plain", justify="right")
    table.add_column("speculative", justify="right")
    table.add_row("tokens/s", _fmt(f.plain_tokens_per_s), _fmt(f.tokens_per_s))
    table.add_row("reply latency ms", _fmt(details.reply_ms.plain), _fmt(f.reply_ms))
    table.add_row("TTFT ms", _fmt(plain_ttft.mean if plain_ttft else None), _fmt(f.ttft_ms))
    table.add_row("energy / token mJ", _fmt(f.plain_energy_per_token_mj), _fmt(f.energy_per_token_mj))
    table.add_row("speedup (measured | predicted)", "", f"{_fmt(f.speedup)} | {_fmt(f.predicted_speedup)}")
    table.add_row("mean accepted length | α", "", f"{_fmt(f.mean_accepted_len)} | {_fmt(f.acceptance_rate)}")
    table.add_row("draft/target cost r | call overhead ms", "", f"{_fmt(f.cost_ratio_r)} | {_fmt(f.fixed_call_ms)}")
    sources = " | ".join(f"{name} {s.accepted}/{s.proposed}" for name, s in details.by_source.items() if s.proposed)
    table.add_row(f"drafter {results.config.decode.drafter.value}: accepted/proposed", "", sources or "—")
    lossless = results.lossless
    table.add_row("lossless", "", "identical" if lossless.equal else "not compared" if not lossless.checked
                  else f"{len(lossless.mismatches)} differ")
    return table


def report_outcome(outcome: BenchOutcome) -> None:
    """Print a bench run (`specdec bench`, `specdec pipeline`) and exit as its gates say."""
    results = outcome.results
    out.print(results_table(results))
    for warning in results.warnings:
        err.print(f"[yellow]warning[/]: {warning}")
    for gate in outcome.gates:
        err.print(f"{'[green]pass[/]' if gate.passed else '[red]FAIL[/]'} {gate.gate}: {gate.message}")
    err.print(f"wrote [bold]{outcome.output}[/] (results.json, summary.md, trace.json, plots)")
    if results.partial:
        raise DeviceLostError(f"partial results: {results.partial_reason}",
                              f"what was measured before is in {outcome.output}")
    failed = outcome.failed_gates
    if failed:
        first = failed[0]
        raise GateFailedError(f"gate '{first.gate}' failed: {first.message}",
                              f"{len(failed)} of {len(outcome.gates)} gates failed; see {outcome.output}/summary.md")

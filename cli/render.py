"""Tables and outcome reports that more than one command prints (commands do not import each other)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from specdec.cli.console import err, out, warn
from specdec.pipeline.bench.fleet import FleetOutcome
from specdec.pipeline.bench.stage import BenchOutcome
from specdec.pipeline.errors import DeviceLostError, FleetError, GateFailedError
from specdec.pipeline.records.fleet import DeviceStatus, FleetResults
from specdec.pipeline.records.plan import DevicePlan
from specdec.pipeline.records.quantization import Quantization
from specdec.pipeline.records.reports import CompileReport, QuantizeReport
from specdec.pipeline.records.results import BenchResults

NARROW = 100  # columns under which wide tables switch to fewer columns or a vertical layout


def narrow(console: Console) -> bool:
    """Whether `console` is too narrow for a table of many columns (headers would be cut to "tok…")."""
    return console.width < NARROW


def vertical(title: str, records: list[tuple[str, list[tuple[str, str]]]]) -> Table:
    """Records as one block each (a heading row, then a label and value per row): a wide table's layout
    for a narrow terminal."""
    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 1))
    table.add_column("field", style="dim", no_wrap=True)
    table.add_column("value", overflow="fold")
    for index, (heading, fields) in enumerate(records):
        if index:
            table.add_row("", "")
        table.add_row(f"[bold]{escape(heading)}[/]", "")
        for label, value in fields:
            table.add_row(label, value)
    return table


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
        table.add_column(column, no_wrap=column == "variant")
    for name, report in readiness.items():
        cells = []
        for provider in ("NNAPI", "CoreML"):
            info = report["providers"][provider]
            cells.append(f"{info['share']:.0%} in {info['partitions']} part." if "share" in info else info["status"])
        table.add_row(name, human_bytes(report["bytes"]), ", ".join(report["dynamic_dims"]) or "none", *cells,
                      "not checked here", str(len(report["op_types"])))
    return table


def qdq_lines(report: CompileReport) -> list[str]:
    """`specdec compile` and `specdec inspect --mobile` of a static-qdq bundle: what the QDQ form costs
    against dynamic w8a8 (lossy, measured) and what it gains in NNAPI/CoreML share."""
    qdq = report.activations
    if not qdq:
        return []
    lines = []
    for role, g in qdq["graphs"].items():
        lines.append(f"{role}: static-qdq activations are lossy vs dynamic w8a8: on {g['tokens']} held-out "
                     f"calibration tokens, max logits error {g['max_logits_error']:.3g}, "
                     f"{g['greedy_mismatch_rate']:.1%} of greedy tokens differ, perplexity "
                     f"{g['perplexity_w8a8']:.3f} -> {g['perplexity_qdq']:.3f}" + _invariant(g.get("invariance")))
    for name, before in qdq.get("readiness_matmulinteger", {}).items():
        after = (report.readiness or {}).get(name, {}).get("providers", {})
        shares = []
        for provider in ("NNAPI", "CoreML"):
            was, now = before[provider], after.get(provider, {})
            if was.get("share") is not None and now.get("share") is not None:
                shares.append(f"{provider} {was['share']:.0%} in {was['partitions']} part. -> {now['share']:.0%} in "
                              f"{now['partitions']} part.")
        lines.append(f"{name}: node share in MatMulInteger form -> QDQ form: {', '.join(shares) or 'not checked'}")
    return lines


def _invariant(invariance: dict[str, Any] | None) -> str:
    if invariance is None:
        return ""
    return f"; batch invariant: {'yes' if invariance['tree'] and invariance['single_row'] else 'NO'}"


def _mb(size: float) -> str:
    return f"{size / 1e6:.2f} MB" if size >= 1e5 else f"{size / 1e3:.1f} KB"


def _delta(before: float, after: float, digits: int = 3) -> tuple[str, str, str]:
    change = f"{100 * (after / before - 1):+.1f}%" if before else "—"
    return f"{before:.{digits}f}", f"{after:.{digits}f}", change


def quality_table(report: QuantizeReport, quantization: Quantization) -> Table:
    """`specdec quantize`, `specdec inspect` and the pipeline: the quality report of a quantized bundle."""
    table = Table(title="quantization quality (measured, same data before and after)", title_justify="left")
    for column, justify in (("graph", "left"), ("figure", "left"), ("before", "right"), ("after", "right"),
                            ("change", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for role, g in report.graphs.items():
        q = quantization.graphs[role]
        summary = q.summary
        tables = sorted({"float" if r.is_float else f"int{r.bits}" for r in q.embeddings.values()})
        label = (f"{role} ({q.method}, {summary['int4']}×int4 {summary['int8']}×int8 {summary['float']}×float; "
                 f"embeddings {'/'.join(tables) or 'none'})")
        ratio = f"×{g['size_ratio']:.2f}"
        table.add_row(label, "size on disk", _mb(g["bytes_before"]), _mb(g["bytes_after"]), ratio)
        table.add_row("", "perplexity", *_delta(g["perplexity_before"], g["perplexity_after"]))
    spec = report.speculative
    if spec:
        table.add_row("pair", "draft top-1 agreement", *_delta(spec["top1_agreement_before"],
                                                               spec["top1_agreement_after"]))
        table.add_row("", "mean accepted length", *_delta(spec["mean_accepted_len_before"],
                                                          spec["mean_accepted_len_after"], 2))
        layout = spec.get("layout", "tree")
        table.add_row("", f"greedy lossless (spec = plain, {layout} layout)", "",
                      f"{spec['lossless_prompts']}/{spec['prompts']}", "")
        tree = spec.get("tree_layout")
        if tree is not None:
            table.add_row("", "tokens differing in the tree layout", "", f"{tree['token_mismatch_rate']:.1%}", "")
    total = report.total
    table.add_row("bundle", "graphs on disk", _mb(total.bytes_before), _mb(total.bytes_after),
                  f"×{total.size_ratio:.2f}")
    return table


def plan_table(plan: DevicePlan) -> Table:
    table = Table(title=f"plan for {plan.device}", title_justify="left")
    for column in ("drafter", "nodes", "depth", "width", "tok/round", "round ms", "predicted"):
        table.add_column(column, justify="left" if column == "drafter" else "right", no_wrap=True)
    others = [c for c in plan.candidates if c != plan.choice]
    best_of_each = [c for i, c in enumerate(others)
                    if all((c.drafter, c.lookup_ngrams) != (o.drafter, o.lookup_ngrams) for o in others[:i])]
    shown = others[:4] + [c for c in best_of_each if c not in others[:4]]
    for index, c in enumerate([plan.choice, *shown]):
        style = "bold green" if index == 0 else None
        drafter = f"{c.drafter} {c.lookup_ngrams[0]}-{c.lookup_ngrams[1]}" if c.lookup_ngrams else c.drafter
        drafter += f", gate {c.draft_min_prob:g}" if c.draft_min_prob else ""
        table.add_row(drafter, str(c.budget), str(c.depth), str(c.width), f"{c.expected_tokens:.2f}",
                      f"{c.round_ms:.2f}", f"{c.predicted_speedup:.2f}×", style=style)
    return table


def plan_fit_line(plan: DevicePlan) -> str:
    fit = plan.verify_fit
    confirmed = (f"; the choice measured {plan.confirmed_speedup:.2f}× plain decoding on the calibration prompts"
                 if plan.confirmed_speedup is not None else "")
    return (f"verify cost: {fit.intercept_ms:.2f} ms + {fit.ms_per_node:.3f} ms/node (worst residual of the line "
            f"{fit.max_residual * 100:.0f} %; the plan uses the measured curve), "
            f"plain step {plan.plain_step_ms:.2f} ms{confirmed}"
            + (f", under the KV policy {plan.kv_policy}" if plan.kv_policy else "")
            + "".join(f"\n{note}" for note in plan.notes)
            + "".join(f"\n  {line}" for line in plan.formats_compared))


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
    table.add_row("peak RSS MiB", _fmt(f.plain_peak_memory_mb), _fmt(f.peak_memory_mb))
    policy = results.memory.kv_policy if results.memory is not None else "?"
    table.add_row(f"KV ({policy}): B/token | MiB at the longest reply", "",
                  f"{_fmt(f.kv_bytes_per_token)} | {_fmt(f.kv_mb_end)}")
    pushed = results.memory.payload_bytes if results.memory is not None else None
    table.add_row("weights MiB | pushed to the device MiB", "",
                  f"{_fmt(f.weights_mb)} | {_fmt(pushed / 2**20 if pushed is not None else None)}")
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
        warn(warning)
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


_STATUS_STYLE = {DeviceStatus.complete: "green", DeviceStatus.lost: "red", DeviceStatus.partial: "yellow",
                 DeviceStatus.unusable: "red", DeviceStatus.error: "red"}


def fleet_table(results: FleetResults) -> Table:
    """One row per device: what fleet.md shows, narrowed to fit a terminal."""
    s = results.summary
    devices = f"{s.devices} device{'s' * (s.devices != 1)}"
    table = Table(title=f"bench on {devices} ({s.wall_s:.1f} s, {s.jobs} at a time)", title_justify="left")
    for column in ("device", "status", "tok/s plain→spec", "speedup (pred.)", "α", "mJ/tok", "°C", "lossless"):
        table.add_column(column, justify="left" if column in ("device", "status", "lossless") else "right")
    for row in results.devices:
        status = f"[{_STATUS_STYLE[row.status]}]{row.status.value}[/]"
        if row.results is None:
            table.add_row(row.label, status, "—", "—", "—", "—", "—", "—")
            continue
        f = row.results.figures
        same = row.results.lossless
        lossless = "yes" if same.equal else "—" if not same.checked else f"{len(same.mismatches)} differ"
        table.add_row(row.label, status, f"{_fmt(f.plain_tokens_per_s)}→{_fmt(f.tokens_per_s)}",
                      f"{_fmt(f.speedup)} ({_fmt(f.predicted_speedup)})", _fmt(f.acceptance_rate),
                      _fmt(f.energy_per_token_mj), _fmt(f.peak_temp_c), lossless)
    return table


def report_fleet(outcome: FleetOutcome) -> None:
    """Print a fleet run and exit with the code of its failure classes (errors.FleetFailure)."""
    results = outcome.results
    out.print(fleet_table(results))
    for row in results.devices:
        if row.reason:
            warn(f"{row.label}: {row.status.value}: {row.reason}")
    for warning in results.warnings:
        warn(warning)
    for gate in results.gates:
        err.print(f"{'[green]pass[/]' if gate.passed else '[red]FAIL[/]'} {gate.gate}: {gate.message}")
    for row in results.devices:
        for gate in row.failed_gates if row.status is DeviceStatus.complete else []:
            err.print(f"[red]FAIL[/] {row.label} {gate.gate}: {gate.message}")
    err.print(f"wrote [bold]{outcome.output}[/] (fleet.json, fleet.md, fleet.png, one results directory per device)")
    failures = outcome.failures
    if failures:
        s = results.summary
        counts = ", ".join(f"{n} {status.value}" for status, n in s.statuses.items())
        raise FleetError(f"fleet: {', '.join(s.failures)} ({counts})",
                         f"see {outcome.output}/fleet.md; exit code {s.exit_code} is 16 + the failure classes "
                         "(docs/devices.md)", failures)

"""`specdec inspect BUNDLE`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from specdec.cli.console import out
from specdec.cli.render import (
    human_bytes,
    narrow,
    plan_fit_line,
    plan_table,
    qdq_lines,
    quality_table,
    readiness_table,
    vertical,
)
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.bundle.summary import summarize
from specdec.pipeline.errors import BundleError
from specdec.pipeline.records.manifest import CheckpointFormat
from specdec.pipeline.records.quantization import GraphQuantization, Quantization


def _shape(shape: list[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def render(summary: dict[str, Any], bundle: Bundle) -> None:
    out.print(f"[bold]{escape(summary['path'])}[/]  schema {summary['schema_version']}, "
              f"specdec {summary['tool_version']}, stages: {' → '.join(summary['stages'])}, "
              f"{human_bytes(summary['total_bytes'])}; a runner opens {human_bytes(summary['runner_bytes'])} "
              "(what bench pushes to a device)")
    out.print(graph_table(summary["graphs"]))
    for role, spec in bundle.manifest.graphs.items():
        origin = spec.source_format
        kind = "format not recorded" if origin is None else origin.describe() + (
            f", dequantized to {spec.dtype} on export" if origin.format is CheckpointFormat.gguf else "")
        out.print(f"{role} from {escape(spec.source)}: {kind}", highlight=False)
    draft = summary.get("draft")
    if draft is not None:
        out.print(draft_line(draft))
    shared = summary["reports"].get("export", {}).get("shared")
    if isinstance(shared, dict) and shared.get("file"):
        line = (f"shared by target and draft: {human_bytes(shared['bytes'])} in {shared['tensors']} tensors "
                f"({shared['file']})")
        rewritten = [stage for stage in bundle.stages() if stage != "export"]
        out.print(line + (", stored once" if shared["file"] in bundle.manifest.files else
                          f"; {', '.join(rewritten)} rewrote the graphs, each with its own copy"))
    for role, g in summary["graphs"].items():
        io = Table(title=f"{role} inputs / outputs", title_justify="left")
        for column in ("", "name", "dtype", "shape"):
            io.add_column(column, no_wrap=column == "name", overflow="fold")
        for kind in ("inputs", "outputs"):
            for row in g[kind]:
                io.add_row(kind[:-1], row["name"], row["dtype"], _shape(row["shape"]))
        out.print(io)
    tok = summary["tokenizer"]
    out.print(f"tokenizer: {tok['vocab_size']} tokens, eos {tok['eos_token_ids']}, bos {tok['bos_token_id']}, "
              f"pad {tok['pad_token_id']}")
    lineage = Table(title="lineage", title_justify="left")
    for column in ("stage", "created", "specdec", "config", "fingerprint"):
        lineage.add_column(column, no_wrap=column == "stage", overflow="fold")
    for entry in summary["lineage"]:
        lineage.add_row(entry["stage"], entry["created"], entry["tool_version"],
                        json.dumps(entry["config"], sort_keys=True), entry["fingerprint"][:12])
    out.print(lineage)
    render_quantization(bundle)
    out.print(kv_policy_line(summary))
    render_compiled(summary)
    render_plan(bundle)
    validation = summary["reports"].get("export", {}).get("validation")
    if isinstance(validation, dict):
        for role, report in validation.items():
            worst = max(report["checks"], key=lambda c: c["max_abs_diff"])
            out.print(f"validation {role}: passed, worst {worst['case']}/{worst['output']} "
                      f"max |diff| {worst['max_abs_diff']:.2g}")


def draft_line(draft: dict[str, Any]) -> str:
    """What the draft is: a model or a feature draft (the layer it reads), and its vocabulary."""
    kind = "model draft" if draft["kind"] == "model" else (
        f"feature draft: reads the target's layer {draft['feature_layer']} output (before the final norm, "
        f"width {draft['hidden_size']})")
    vocab = (f"its vocabulary: {draft['vocab_size']} of the target's {draft['target_vocab_size']} tokens "
             f"({escape(draft['vocab_file'])})" if draft["vocab_file"] else "its vocabulary: the target's")
    return f"draft: {kind}; {vocab}"


def _files(g: dict[str, Any]) -> str:
    """The graph's files in the bundle: the exported one, or what a compiled bundle keeps instead of it."""
    kept = [rel for rel in g["files"] if not rel.endswith(".data") and not rel.endswith(".weights")]
    if g["file"] in kept:
        return str(g["file"])
    shown = ", ".join(kept[:2]) + (f" (+{len(kept) - 2})" if len(kept) > 2 else "")
    return f"{shown or 'none'} (compiled from {g['file']})"


def graph_table(graphs: dict[str, dict[str, Any]]) -> Table:
    """One row per graph; on a terminal under render.NARROW columns, one block per graph instead."""
    rows = {role: [("file", _files(g)), ("architecture", g["architecture"]), ("precision", g["precision"]),
                   ("layers", str(g["num_layers"])), ("kv heads × dim", f"{g['num_kv_heads']} × {g['head_dim']}"),
                   ("vocab", str(g["vocab_size"])), ("params", f"{g['parameters'] / 1e6:.2f} M"),
                   ("size", human_bytes(g["bytes"]))] for role, g in graphs.items()}
    if narrow(out):
        return vertical("graphs", list(rows.items()))
    table = Table(title="graphs", title_justify="left")
    table.add_column("role", no_wrap=True)
    for label, _ in next(iter(rows.values())):
        table.add_column(label, no_wrap=label == "file")
    for role, fields in rows.items():
        table.add_row(role, *(value for _, value in fields))
    return table


def _compute(quantization: Quantization, graph: GraphQuantization) -> str:
    if graph.mix is not None:  # mixed: the format per layer class, and how many layers each got
        counts = {name: sum(1 for layer in graph.layers.values() if layer.format == name) for name in ("nbits", "w8a8")}
        classes = ", ".join(f"{kind} {chosen}" for kind, chosen in graph.mix.items())
        level = "int8" if graph.accuracy_level >= 4 else "float"
        return (f"mixed by layer class ({classes}): {counts['w8a8']} w8a8 layers (int{graph.weight_bits} weights x "
                f"uint8 rows), {counts['nbits']} nbits ({level} compute, level {graph.accuracy_level})")
    if quantization.row_invariant:
        return (f"int{graph.weight_bits} weights x uint8 rows, int32 sums "
                "(matmuls exact by construction: a row computes as if alone)")
    return "int8 activations (level 4)" if graph.accuracy_level >= 4 else f"float (level {graph.accuracy_level})"


def render_quantization(bundle: Bundle) -> None:
    """How each graph was quantized, and the quality report measured then."""
    quantization = bundle.manifest.quantization
    if quantization is None:
        return
    table = Table(title=f"quantization ({quantization.format}, {quantization.domain})", title_justify="left")
    for column in ("role", "method", "group", "zero point", "compute", "layers int4 / int8 / float", "embeddings"):
        table.add_column(column, no_wrap=column == "role")
    for role, g in quantization.graphs.items():
        embeddings = ", ".join(sorted({"float" if e.is_float else f"int{e.bits}" for e in g.embeddings.values()}))
        table.add_row(role, g.method, str(g.group_size), "symmetric" if g.symmetric else "asymmetric",
                      _compute(quantization, g),
                      f"{g.summary.get('int4', 0)} / {g.summary.get('int8', 0)} / {g.summary.get('float', 0)}",
                      embeddings or "float")
    out.print(table)
    quality = bundle.manifest.reports.quantize
    if quality is not None:
        out.print(quality_table(quality, quantization))
    for name, variant in bundle.manifest.variants.items():  # the target in further weight formats
        size = bundle.manifest.files.get(variant.graph.file)
        report = quality.variants.get(name) if quality is not None else None
        ppl = report.graphs.get("target", {}).get("perplexity_increase_pct") if report is not None else None
        out.print(f"target also in {name} ({variant.format}): {variant.graph.file}"
                  f"{f', {human_bytes(size.size)}' if size else ''}"
                  f"{f', perplexity {ppl:+.2f} %' if ppl is not None else ''}"
                  f"{f', fused {variant.fused.file}' if variant.fused else ''}; `tune` chooses per device")


def render_plan(bundle: Bundle) -> None:
    """The tuned plans (`specdec tune`), one per device they were measured on."""
    plan = bundle.manifest.plan
    for device_plan in plan.devices if plan is not None else []:
        layout = ", exact layout" if device_plan.exact_layout else ""
        out.print(f"plan for {escape(device_plan.device)} ({device_plan.created}, {device_plan.threads} threads"
                  f"{layout}, {device_plan.calibration_rounds} calibration rounds)")
        out.print(plan_table(device_plan))
        out.print(f"  {plan_fit_line(device_plan)}")


def kv_policy_line(summary: dict[str, Any]) -> str:
    """`KV cache: window S=4 W=256 float32 (lossy), 4096 B/token (target 2048 + draft 2048), 2.1 MiB for 580 slots`."""
    kv = summary["kv_cache"]
    per_role = kv["bytes_per_token"]
    parts = " + ".join(f"{role} {value}" for role, value in per_role.items())
    return (f"KV cache: {kv['policy']}{' (lossy)' if kv['lossy'] else ''}, {sum(per_role.values())} B/token ({parts}), "
            f"{human_bytes(kv['bytes_held'])} for {kv['slots']} slots, replies up to {kv['reply_positions']} positions")


def render_compiled(summary: dict[str, Any]) -> None:
    """The compiled flavour: fused graphs with their ops (cpu), or the bucket table (npu)."""
    table = summary.get("buckets")
    if not table:
        return
    flavour = table.get("flavour", "npu")
    out.print(f"compiled: {flavour} flavour, KV buffer {table['max_context']} slots, format {table['format']}, "
              f"profile {table['profile']}")
    for role, graph in table.get("fused", {}).items():
        ops = ", ".join(f"{op} ×{count}" for op, count in graph["ops"].items())
        out.print(f"  {role}: {graph.get('ort_file') or graph['file']} — {ops}")
    if table.get("graphs"):
        sizes = summary["reports"].get("compile", {}).get("sizes", {})
        out.print(bucket_grid(table))
        for line in shared_weights_lines(table, sizes):
            out.print(line)
    invariance = summary["reports"].get("compile", {}).get("invariance")
    if invariance:
        out.print(f"  batch invariance (target): single row {invariance['single_row']}, exact-layout chain "
                  f"{invariance['chain']}, tree {invariance['tree']}")


def bucket_grid(table: dict[str, Any]) -> Table:
    """The npu dispatch table: one row per role and query bucket q, one column per context bucket."""
    contexts = sorted({v.get("context") or table["max_context"] for vs in table["graphs"].values() for v in vs})
    grid = Table(title="variants q × context", title_justify="left")
    grid.add_column("role")
    grid.add_column("q", justify="right")
    for context in contexts:
        grid.add_column(str(context), justify="center")
    for role, variants in table["graphs"].items():
        have = {(v["q"], v.get("context") or table["max_context"]) for v in variants}
        for q in sorted({q for q, _ in have}):
            grid.add_row(role, str(q), *("✓" if (q, c) in have else "·" for c in contexts))
    return grid


def shared_weights_lines(table: dict[str, Any], sizes: dict[str, Any]) -> list[str]:
    """Where each role's onnx variants read their weights, and what sharing them saves."""
    lines = []
    for role, data in table.get("weights", {}).items():
        line = f"  {role} weights: {data}, shared by its onnx variants"
        shared = sizes.get(role)
        if shared:
            line += (f" ({human_bytes(shared['shared_weights_bytes'])}; "
                     f"{human_bytes(shared['inline_weights_bytes'])} if each variant held its own)")
        lines.append(line)
    return lines


def inspect(
    bundle: Path = typer.Argument(..., help="Bundle directory."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    mobile: bool = typer.Option(False, "--mobile", help="Mobile-readiness report of a compiled bundle."),
) -> None:
    """Summarise a bundle: graphs, inputs/outputs, sizes, lineage, tokenizer."""
    loaded = Bundle.load(bundle)
    with _readable_reports(bundle), out.capture() as shown:  # all or nothing: no summary cut off by an error
        _show(loaded, bundle, as_json=as_json, mobile=mobile)
    out.file.write(shown.get())


@contextmanager
def _readable_reports(bundle: Path) -> Iterator[None]:
    """A manifest's reports are free-form JSON (`Manifest.reports: dict[str, Any]`, written by the stages and
    read only for display here): one without the shape a stage writes is a damaged bundle (exit 3), not a
    traceback. A bundle may come from anyone."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise BundleError(f"bundle '{bundle}' holds a report specdec cannot show ({type(exc).__name__}: {exc})",
                          "re-create the bundle") from None


def _show(loaded: Bundle, bundle: Path, *, as_json: bool, mobile: bool) -> None:
    if mobile:
        compiled = loaded.manifest.reports.compile
        report = compiled.readiness if compiled is not None else None
        if compiled is None or not report:
            raise BundleError(f"bundle '{bundle}' is not compiled, so it has no readiness report",
                              "run `specdec compile` first")
        if as_json:
            out.print_json(json.dumps(report))
        else:
            out.print(readiness_table(report))
            for line in qdq_lines(compiled):
                out.print(line)
        return
    summary = summarize(loaded)
    if as_json:
        out.print_json(json.dumps(summary, default=str))
    else:
        render(summary, loaded)

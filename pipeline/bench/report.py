"""summary.md of a bench run: short enough for a CI job summary, complete enough to act on."""

from __future__ import annotations

from typing import Any

from specdec.pipeline.engine.stats import PROCESS
from specdec.pipeline.records.results import BenchResults, Figures


def _fmt(value: Any, digits: int = 3, unit: str = "") -> str:
    if value is None:
        return "unavailable"
    if isinstance(value, float):
        return f"{value:.{digits}g}{unit}"
    return f"{value}{unit}"


def _chain_formula(f: Figures) -> str:
    """The textbook chain formula's figure, or why it has none (e.g. no draft model ran: r is unknown)."""
    inputs = (f"α = {_fmt(f.acceptance_rate)}, γ = {_fmt(f.mean_tree_depth)} (mean tree depth), "
              f"r = {_fmt(f.cost_ratio_r)} (draft/target cost)")
    if f.analytic_speedup is None:
        return f"the chain formula has no figure here ({inputs})."
    return f"the chain formula would predict {_fmt(f.analytic_speedup)}× from {inputs}."


def why_formula_differs(results: BenchResults) -> str:
    """Without a plan there is no cost model of this device: say in general why the chain formula misses."""
    f = results.figures
    return (f"Why predicted and measured differ: the chain formula assumes a round costs γ draft steps (r each) "
            f"plus one target step that verifies γ + 1 tokens as fast as it decodes one, and nothing else; "
            f"the run also paid a fixed "
            f"{_fmt(f.fixed_call_ms)} ms per target call, verified trees rather than chains "
            f"({_fmt(f.per_node_ms)} ms per extra node), and host work between calls. "
            f"`specdec tune` measures this device's cost curve and explains the difference term by term.")


def _drafter_line(results: BenchResults) -> str:
    """`Drafter model+lookup: model 402 of 812 nodes accepted (49.5 %), lookup 88 of 120 (73.3 %) in 40 rounds.`"""
    decode = results.config.decode
    parts = []
    for name, stats in results.details.by_source.items():
        if stats.proposed:
            share = f" ({stats.acceptance:.1%})" if stats.acceptance is not None else ""
            parts.append(f"{name} {stats.accepted} of {stats.proposed} nodes accepted{share} in {stats.rounds} rounds")
    lookup = (f", n-grams {decode.lookup_min_ngram}–{decode.lookup_max_ngram}"
              if decode.drafter.uses_lookup else "")
    return f"Drafter `{decode.drafter.value}`{lookup}: " + ("; ".join(parts) or "nothing proposed") + "."


def _processors_line(results: BenchResults) -> str | None:
    """`Logits processors: ban (mask, 3 phrases), json_schema; 0.42 ms per speculative round (mean).`"""
    names = results.config.processors
    if not names:
        return None
    stage = results.details.stage_latency_ms.get(PROCESS)
    cost = (f"; {_fmt(stage.mean)} ms per speculative round (mean, p90 {_fmt(stage.p90)}, stage `{PROCESS}`)"
            if stage is not None else "")
    return f"Logits processors: {', '.join(names)}{cost}."


def _memory_line(results: BenchResults) -> str:
    """`Memory (KV full float32): weights 12.1 MiB, KV 4096 B/token, 8 MiB held at the end of the longest
    reply; peak RSS plain 180 MiB, speculative 190 MiB.`"""
    f = results.figures
    policy = results.memory.kv_policy if results.memory is not None else "unknown"
    pushed = results.memory.payload_bytes if results.memory is not None else None
    pushed_text = f" ({_fmt(pushed / 2**20, 4, ' MiB')} pushed to the device)" if pushed is not None else ""
    return (f"Memory (KV {policy}): weights {_fmt(f.weights_mb, 4, ' MiB')}{pushed_text}, "
            f"KV {_fmt(f.kv_bytes_per_token, 6, ' B')}"
            f"/token, {_fmt(f.kv_mb_end, 4, ' MiB')} held at the end of the longest reply; peak RSS plain "
            f"{_fmt(f.plain_peak_memory_mb, 4, ' MiB')}, speculative {_fmt(f.peak_memory_mb, 4, ' MiB')}.")


def summary_markdown(results: BenchResults) -> str:
    f = results.figures
    device = results.device
    details = results.details
    mode = results.config.decode.mode
    plain_ttft = details.ttft_ms.plain
    lines = [
        f"## specdec bench — {device.model} ({device.transport}, {device.serial})",
        "",
        f"Bundle `{results.bundle.path}` (stages: {' → '.join(results.bundle.stages)}), "
        f"profile `{results.profile}`, {results.config.prompts} prompts × {results.config.repeats}, "
        f"mode `{mode.value if mode else 'greedy'}`.",
        "",
    ]
    if results.partial:
        lines += [f"> **Partial results**: {results.partial_reason}.", ""]
    lossless = results.lossless
    verdict = ("✅ identical" if lossless.equal else
               "⚠️ not compared" if not lossless.checked else f"❌ {len(lossless.mismatches)} replies differ")
    lines += [
        "| figure | plain | speculative |",
        "|---|---|---|",
        f"| tokens/s | {_fmt(f.plain_tokens_per_s)} | {_fmt(f.tokens_per_s)} |",
        f"| reply latency (ms) | {_fmt(details.reply_ms.plain)} | {_fmt(f.reply_ms)} |",
        f"| TTFT (ms) | {_fmt(plain_ttft.mean if plain_ttft else None)} | {_fmt(f.ttft_ms)} |",
        f"| energy/token (mJ) | {_fmt(f.plain_energy_per_token_mj)} | {_fmt(f.energy_per_token_mj)} |",
        "",
        f"**Speedup {_fmt(f.speedup)}×** measured in the same run; {_chain_formula(f)}",
        f"Mean accepted length {_fmt(f.mean_accepted_len)} tokens/round; fixed cost per target call "
        f"{_fmt(f.fixed_call_ms)} ms + {_fmt(f.per_node_ms)} ms per tree node. Lossless: {verdict}.",
    ]
    lines.append(_drafter_line(results))
    processors = _processors_line(results)
    if processors:
        lines.append(processors)
    plan = results.plan
    if plan is not None:
        c = plan.choice
        tree = (f"{c.budget} nodes, depth {c.depth}, width {c.width}, drafter {c.drafter}"
                + (f", confidence gate {c.draft_min_prob:g}" if c.draft_min_prob else "") if c.speculative
                else "plain decoding")
        decode = (f" (decoding alone: predicted {_fmt(plan.decode_predicted_speedup)}×, measured "
                  f"{_fmt(plan.decode_measured_speedup)}×; prefill is not sped up)"
                  if plan.decode_predicted_speedup is not None else "")
        lines += ["", f"**Plan** ({plan.source}, `{plan.device}`): {tree}; cost model predicts "
                      f"{_fmt(plan.predicted_speedup)}×, measured {_fmt(plan.measured_speedup)}×{decode}. "
                      f"Biggest difference: {plan.explanation}.",
                  "", "| cost-model term | predicted | measured |", "|---|---|---|"]
        lines += [f"| {t.name} | {_fmt(t.predicted)} | {_fmt(t.measured)} |" for t in plan.terms]
        lines.append("")
    elif f.analytic_speedup is not None and f.speedup is not None:
        lines += ["", why_formula_differs(results), ""]
    rule = results.enable_rule
    lines.append(f"Enable rule: gain {_fmt(rule.gain_ms)} ms/reply vs threshold {rule.threshold_ms:g} ms "
                 f"→ **speculation {rule.recommendation.value}**.")
    if f.peak_temp_c is not None or f.mean_power_mw is not None:
        lines.append(f"Mean power {_fmt(f.mean_power_mw, 4, ' mW')}, "
                     f"peak temperature {_fmt(f.peak_temp_c, 3, ' °C')}.")
    lines.append(_memory_line(results))
    if details.padding:
        lines.append("Bucket padding (rows computed and thrown away): " + ", ".join(
            f"{role} {p.waste:.0%}" for role, p in sorted(details.padding.items())) + ".")
    controllers = results.controllers.counts
    if controllers:
        lines.append("Controller actions: " + ", ".join(f"{k} {v}" for k, v in sorted(controllers.items())) + ".")
    if results.gates:
        lines += ["", "| gate | result |", "|---|---|"]
        lines += [f"| `{g.gate}` | {'✅' if g.passed else '❌'} {g.message} |" for g in results.gates]
    notes = results.warnings + [f"{k}: {v}" for k, v in results.unavailable.items()]
    if notes:
        lines += ["", "Notes:"] + [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"

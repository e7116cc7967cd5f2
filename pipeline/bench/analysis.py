"""Turn runner events and sensor samples into the figures of docs/design.md §6.

Every figure is computed from measurements of one run (plain and speculative side by side);
what cannot be measured is reported as None with the reason in `unavailable`, never invented.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specdec.pipeline.devices.sensor_log import SensorLog
from specdec.pipeline.engine.stats import SOURCES, STAGES, VERIFY
from specdec.pipeline.records.results import (
    Details,
    Figures,
    Lossless,
    Memory,
    Mismatch,
    ModeCounts,
    ModePercentiles,
    ModeValues,
    Padding,
    Percentiles,
    ReplyMemory,
    RoundCounts,
    SourceStats,
)

# Figures a CI gate can name, with the direction that counts as better.
HIGHER_IS_BETTER = {"speedup", "tokens_per_s", "plain_tokens_per_s", "mean_accepted_len", "acceptance_rate",
                    "predicted_speedup", "latency_gain_ms", "model_acceptance", "lookup_acceptance"}
LOWER_IS_BETTER = {"ttft_ms", "reply_ms", "energy_per_token_mj", "peak_memory_mb", "plain_peak_memory_mb", "kv_mb_end",
                   "mean_power_mw", "peak_temp_c", "verify_p50_ms"}


@dataclass
class Analysis:
    figures: Figures
    details: Details
    lossless: Lossless
    memory: Memory
    unavailable: dict[str, str] = field(default_factory=dict)


def _percentiles(values: list[float]) -> Percentiles | None:
    if not values:
        return None
    array = np.asarray(values)
    return Percentiles(mean=float(array.mean()), p50=float(np.percentile(array, 50)),
                       p90=float(np.percentile(array, 90)), p99=float(np.percentile(array, 99)), n=len(values))


def _ms(ns: float) -> float:
    return ns / 1e6


def predicted_speedup(alpha: float, gamma: float, cost_ratio: float) -> float | None:
    """S = (1 - alpha^(gamma+1)) / ((1 - alpha)(1 + gamma r)) (Leviathan et al.), chain-equivalent gamma."""
    if gamma <= 0:
        return None
    expected = gamma + 1.0 if alpha >= 1.0 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return expected / (1 + gamma * cost_ratio)


def _fixed_cost(rounds: list[dict[str, Any]], plain_rounds: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """Least-squares t(q) = a + b q over target verifications: a is the per-call overhead."""
    points = [(r["tree_size"], _stage_ns(r, VERIFY)) for r in rounds + plain_rounds]
    sizes = {q for q, _ in points}
    if len(sizes) < 2:
        return None, None
    q = np.array([p[0] for p in points], float)
    t = np.array([_ms(p[1]) for p in points], float)
    slope, intercept = np.polyfit(q, t, 1)
    return float(intercept), float(slope)


def _stage_ns(round_event: dict[str, Any], stage: str) -> int:
    return sum(duration for name, _start, duration in round_event["slices"] if name == stage)


def by_source(rounds: list[dict[str, Any]]) -> dict[str, SourceStats]:
    """Proposed / accepted tree nodes per drafting source over speculative rounds (runner `by_source`)."""
    result = {}
    for source in SOURCES:
        counts = [r.get("by_source", {}).get(source, {"proposed": 0, "accepted": 0}) for r in rounds]
        proposed = sum(c["proposed"] for c in counts)
        accepted = sum(c["accepted"] for c in counts)
        result[source] = SourceStats(proposed=proposed, accepted=accepted,
                                     rounds=sum(1 for c in counts if c["proposed"]),
                                     acceptance=accepted / proposed if proposed else None)
    return result


def _energy(sensors: SensorLog | None, windows: dict[str, list[tuple[int, int]]], tokens: dict[str, int],
            unavailable: dict[str, str]) -> tuple[ModeValues, float | None]:
    if sensors is None:
        unavailable["energy_per_token_mj"] = "no sensor log (the sampler did not run or the device was lost)"
        return ModeValues(), None
    start = sensors.start_epoch_s
    timed = [(start + s.t_s, s.power_mw if s.power_mw is not None else s.rapl_power_mw) for s in sensors.samples
             if start is not None]
    powered = [(t, p) for t, p in timed if p is not None]
    if not powered:
        unavailable["energy_per_token_mj"] = ("no power reading: battery current/voltage and RAPL were "
                                              "unreadable or of unknown sign")
        return ModeValues(), None
    overall = statistics.fmean(p for _, p in powered)
    per_token: dict[str, float | None] = {}
    for mode, spans in windows.items():
        inside = [p for t, p in powered if any(a / 1e9 <= t <= b / 1e9 for a, b in spans)]
        power = statistics.fmean(inside) if inside else overall  # replies shorter than the interval
        seconds = sum(b - a for a, b in spans) / 1e9
        per_token[mode] = power * seconds / tokens[mode] if tokens.get(mode) else None
    return ModeValues(**per_token), overall


def _memory(events: list[dict[str, Any]], replies: list[dict[str, Any]]) -> Memory:
    """Per reply what the runner read of its memory (older runners wrote none of it)."""
    start = next((e for e in events if e.get("type") == "start"), {})
    measured = [r for r in replies if "kv_bytes" in r]
    return Memory(kv_policy="", weights_bytes=None, kv_bytes_per_token=start.get("kv_bytes_per_token"),
                  peak_reset=bool(measured) and all(r.get("peak_reset") for r in measured),
                  replies=[ReplyMemory(mode=r["mode"], tokens=r.get("context_tokens", r["new_tokens"]),
                                       peak_rss_kb=r.get("peak_rss_kb"), kv_bytes=r["kv_bytes"],
                                       kv_live_bytes=r["kv_live_bytes"]) for r in measured])


def _peak_mb(memory: Memory, mode: str) -> float | None:
    peaks = [r.peak_rss_kb for r in memory.replies if r.mode == mode and r.peak_rss_kb is not None]
    return max(peaks) / 1024 if peaks else None


def _kv_mb_end(memory: Memory) -> float | None:
    """KV memory held at the end of the longest reply (the speculative one where lengths tie)."""
    if not memory.replies:
        return None
    longest = max(memory.replies, key=lambda r: (r.tokens, r.mode == "speculative"))
    return longest.kv_bytes / 2**20


def analyze(events: list[dict[str, Any]], sensors: SensorLog | None, *, greedy_equivalent: bool) -> Analysis:
    replies = [e for e in events if e.get("type") == "reply"]
    rounds = [e for e in events if e.get("type") == "round"]
    by_mode = {mode: [r for r in replies if r["mode"] == mode] for mode in ("plain", "speculative")}
    unavailable: dict[str, str] = {}
    tokens = {m: sum(r["new_tokens"] for r in rs) for m, rs in by_mode.items()}
    seconds = {m: sum(r["total_ns"] for r in rs) / 1e9 for m, rs in by_mode.items()}
    rate = {m: tokens[m] / seconds[m] if seconds[m] else None for m in by_mode}
    spec_rounds = [r for r in rounds if r["mode"] == "speculative" and r["kind"] == "speculative"]
    plain_rounds = [r for r in rounds if r["mode"] == "plain"]
    accepted = [r["accepted_len"] for r in spec_rounds]
    accepted_drafts = sum(a - 1 for a in accepted)
    rejections = sum(1 for r in spec_rounds if r["accepted_len"] - 1 < r["tree_depth"])
    alpha = accepted_drafts / (accepted_drafts + rejections) if accepted_drafts + rejections else None
    stage_ms = {stage: _percentiles([_ms(_stage_ns(r, stage)) for r in spec_rounds]) for stage in STAGES}
    plain_step_ms = _percentiles([_ms(_stage_ns(r, VERIFY)) for r in plain_rounds])
    draft_calls = sum(r["draft_calls"] for r in spec_rounds)
    draft_ms = sum(_ms(_stage_ns(r, "Draft_Generate")) for r in spec_rounds)
    cost_ratio = (draft_ms / draft_calls) / plain_step_ms.mean if draft_calls and plain_step_ms else None
    if spec_rounds and not draft_calls:
        unavailable["cost_ratio_r"] = "no draft model call was made (prompt lookup drafts without one)"
    sources = by_source(spec_rounds)
    fixed, per_node = _fixed_cost(spec_rounds, plain_rounds)
    gamma = statistics.fmean(r["tree_depth"] for r in spec_rounds) if spec_rounds else 0.0
    predicted = predicted_speedup(alpha, gamma, cost_ratio) if alpha is not None and cost_ratio else None
    reply_ms = {m: statistics.fmean(_ms(r["total_ns"]) for r in rs) if rs else None for m, rs in by_mode.items()}
    ttft = {m: _percentiles([_ms(r["ttft_ns"]) for r in rs]) for m, rs in by_mode.items()}
    windows = {m: [(r["start_ns"], r["end_ns"]) for r in rs] for m, rs in by_mode.items()}
    energy, mean_power = _energy(sensors, windows, tokens, unavailable)
    done = next((e for e in events if e.get("type") == "done"), {})
    memory = _memory(events, replies)
    peak_rss = done.get("peak_rss_kb")
    if peak_rss is None and not memory.replies:
        unavailable["peak_memory_mb"] = "the runner could not read its peak RSS (run incomplete or no resource module)"
    spec_peak = _peak_mb(memory, "speculative") if memory.peak_reset else None
    plain_peak = _peak_mb(memory, "plain") if memory.peak_reset else None
    if memory.replies and not memory.peak_reset:
        unavailable["plain_peak_memory_mb"] = ("the device refused to reset the peak RSS between replies "
                                               "(/proc/self/clear_refs): peak_memory_mb is the whole run's")
    peak_temp = sensors.peak_temp_c() if sensors else None
    if peak_temp is None:
        unavailable["peak_temp_c"] = "no readable thermal zone"
    # lossless: the same prompt gives the same tokens plainly and speculatively
    pairs: dict[tuple[int, int], dict[str, list[int]]] = {}
    for r in replies:
        pairs.setdefault((r["prompt"], r["repeat"]), {})[r["mode"]] = r["output_ids"]
    compared = [(key, v) for key, v in pairs.items() if len(v) == 2]
    mismatches = [Mismatch(prompt=k[0], repeat=k[1]) for k, v in compared if v["plain"] != v["speculative"]]
    lossless = Lossless(checked=greedy_equivalent and bool(compared), pairs=len(compared),
                        equal=greedy_equivalent and bool(compared) and not mismatches, mismatches=mismatches,
                        note=None if greedy_equivalent else "rrs sampling differs draw by draw by design; its "
                        "losslessness is distributional (tested statistically), so outputs are not compared")
    speedup = rate["speculative"] / rate["plain"] if rate["plain"] and rate["speculative"] else None
    gain = reply_ms["plain"] - reply_ms["speculative"] if reply_ms["plain"] and reply_ms["speculative"] else None
    ttft_spec, verify_ms = ttft["speculative"], stage_ms[VERIFY]
    figures = Figures(
        speedup=speedup,
        tokens_per_s=rate["speculative"],
        plain_tokens_per_s=rate["plain"],
        latency_gain_ms=gain,
        reply_ms=reply_ms["speculative"],
        mean_accepted_len=statistics.fmean(accepted) if accepted else None,
        acceptance_rate=alpha,
        model_acceptance=sources["model"].acceptance,
        lookup_acceptance=sources["lookup"].acceptance,
        predicted_speedup=predicted, analytic_speedup=predicted,
        cost_ratio_r=cost_ratio,
        fixed_call_ms=fixed,
        per_node_ms=per_node,
        mean_tree_depth=gamma if spec_rounds else None,
        mean_tree_size=statistics.fmean(r["tree_size"] for r in spec_rounds) if spec_rounds else None,
        ttft_ms=ttft_spec.mean if ttft_spec else None,
        verify_p50_ms=verify_ms.p50 if verify_ms else None,
        peak_memory_mb=spec_peak if spec_peak is not None else peak_rss / 1024 if peak_rss else None,
        plain_peak_memory_mb=plain_peak,
        kv_bytes_per_token=memory.kv_bytes_per_token,
        kv_mb_end=_kv_mb_end(memory),
        energy_per_token_mj=energy.speculative,
        plain_energy_per_token_mj=energy.plain,
        mean_power_mw=mean_power,
        peak_temp_c=peak_temp,
    )
    details = Details(
        tokens=ModeCounts(**tokens), decode_seconds=ModeValues(**seconds), reply_ms=ModeValues(**reply_ms),
        ttft_ms=ModePercentiles(**ttft), stage_latency_ms=stage_ms, plain_step_ms=plain_step_ms,
        accepted_len_histogram=dict(sorted(Counter(accepted).items())),
        by_source=sources,
        rounds=RoundCounts(speculative=len(spec_rounds), plain=len(plain_rounds),
                           fallback=sum(1 for r in rounds if r["mode"] == "speculative" and r["kind"] == "plain")),
        energy_per_token_mj=energy,
        padding={role: Padding(rows_padded=c["rows_padded"], rows_computed=c["rows_computed"],
                               waste=c["rows_padded"] / c["rows_computed"] if c["rows_computed"] else 0.0)
                 for role, c in done.get("padding", {}).items()},
    )
    return Analysis(figures=figures, details=details, lossless=lossless, memory=memory, unavailable=unavailable)

"""Plans in a bench run: which plan a device gets, what to ask it to tune, and prediction vs measurement.

A bundle carries tuned plans per device (records.plan.TunePlan). A run on a device the bundle has
a plan for uses it; otherwise the device runner tunes first (its warm-up: `RunSpec.tune`) unless
the user fixed the whole tree or turned tuning off. Afterwards the plan's cost model is set next
to what the run measured, term by term, and the largest relative miss is named in plain words.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping
from typing import Any

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.engine.tune.measure import apply_choice
from specdec.pipeline.records.codec import RecordError, from_dict
from specdec.pipeline.records.manifest import GraphFlavour, Manifest
from specdec.pipeline.records.plan import DevicePlan, TuneRequest
from specdec.pipeline.records.results import PlanReport, PlanTerm
from specdec.pipeline.settings.decode_options import DECODE_KEYS, DecodeOptions
from specdec.pipeline.settings.resolve import ResolvedSettings, bundle_requirements

TREE_SETTINGS = ("tree_budget", "depth", "width")
GATE_SETTING = "draft_min_prob"
LOOKUP_SETTINGS = ("lookup_min_ngram", "lookup_max_ngram")
# prompt lookup's (min, max) suffix lengths a tuning pass tries when the user fixed neither
LOOKUP_NGRAMS = ([1, 3], [2, 4])


def tune_request(bundle: Bundle, options: DecodeOptions, device: str, prompts: list[list[int]],
                 only: bool = False, max_new_tokens: int | None = None) -> TuneRequest | None:
    """What to tune on the device, or None when there is nothing left to choose.

    Settings the user fixed stay fixed: a fixed drafter is the only one calibrated, fixed lookup
    lengths the only ones tried; with the whole tree fixed there is nothing to plan (unless `only`).
    """
    given = options.given()
    pinned = [key for key in TREE_SETTINGS if key in given]
    if options.speculative is False or (len(pinned) == len(TREE_SETTINGS) and not only):
        return None
    table = bundle.manifest.buckets
    budgets = table.sizes("target") if table is not None and table.flavour is GraphFlavour.npu else None
    drafter = options.drafter
    lookup_pinned = [key for key in LOOKUP_SETTINGS if key in given]
    request = TuneRequest(prompts=[], device=device, budgets=[b for b in budgets if b >= 2] if budgets else None,
                          drafters=[getattr(drafter, "value", str(drafter))] if drafter is not None else [],
                          lookup_ngrams=[] if lookup_pinned else [list(n) for n in LOOKUP_NGRAMS],
                          pinned=pinned + (["drafter"] if drafter is not None else []) + lookup_pinned
                          + ([GATE_SETTING] if GATE_SETTING in given else []), only=only)
    if max_new_tokens is not None:
        request.max_new_tokens = max_new_tokens
    # Calibration decodes max_new_tokens past the prompt and then verifies trees of up to max_budget nodes:
    # keep the end of prompts that would not leave that much room in the bundle's context.
    room = bundle.context - request.max_new_tokens - request.max_budget - 1
    if room < 2:
        request.max_budget = max(2, bundle.context - request.max_new_tokens - 3)
        room = 2
    request.prompts = [p[-room:] for p in prompts if p]
    return request


def with_tuned(settings: ResolvedSettings, tuned: DevicePlan | None, request: TuneRequest | None
               ) -> ResolvedSettings:
    """The settings the device decoded with after tuning: the tuned drafter and tree wherever the user
    fixed neither (what the device runner's `apply_choice` did), their source named `plan (tuned)`."""
    if tuned is None or request is None:
        return settings
    config = apply_choice(settings.config, tuned.choice, frozenset(request.pinned))
    sources = dict(settings.sources)
    for key in DECODE_KEYS:
        if getattr(config, key) != getattr(settings.config, key):
            sources[key] = "plan (tuned on the device)"
    return dataclasses.replace(settings, config=config, sources=sources)


def tuned_plan(events: list[dict[str, Any]]) -> DevicePlan | None:
    """The plan the device runner measured (its `tune` event), if it tuned."""
    for event in events:
        if event.get("type") == "tune":
            try:
                return from_dict(DevicePlan, event["plan"], "tune.plan")
            except (RecordError, KeyError):
                return None
    return None


def choose_format(measured: Mapping[str | None, DevicePlan], manifest: Manifest) -> DevicePlan:
    """Of plans measured on one device for the weight formats the bundle carries (by format; None: its
    own), the one with the best predicted decoding tokens/s among the exact ones, the others compared
    in its `formats_compared`. Exact: a format whose target needs the exact layout
    (settings.bundle_requirements) was planned in it. A lone plan is returned as it is."""
    if len(measured) == 1:
        return next(iter(measured.values()))

    def exact(name: str | None, plan: DevicePlan) -> bool:
        return plan.exact_layout or not bundle_requirements(manifest.with_format(name).quantization)

    eligible = {name: plan for name, plan in measured.items() if exact(name, plan)}
    name, chosen = max((eligible or measured).items(), key=lambda item: item[1].predicted_tokens_per_s)
    chosen = dataclasses.replace(chosen, notes=list(chosen.notes), formats_compared=[])
    for other, plan in measured.items():
        tree = (f"{plan.choice.drafter} tree of {plan.choice.budget}" if plan.choice.speculative
                else "plain decoding")
        chosen.formats_compared.append(
            f"{other}: {plan.predicted_tokens_per_s:.1f} tok/s predicted ({tree}, plain step "
            f"{plan.plain_step_ms:.2f} ms){'' if exact(other, plan) else ', not exact'}")
    chosen.notes.append(f"weight format {name}: the best predicted tokens/s of {', '.join(map(str, measured))}"
                        f"{'' if eligible else ' (no format was exact)'}")
    return chosen


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def measured_terms(events: list[dict[str, Any]]) -> dict[str, float | None]:
    """The cost model's terms as this run measured them (speculative replies' rounds, plain replies)."""
    spec_rounds = [e for e in events if e.get("type") == "round" and e.get("mode") == "speculative"
                   and e.get("kind") == "speculative"]
    plain_rounds = [e for e in events if e.get("type") == "round" and e.get("mode") == "plain"]
    return {
        "tokens per round": _mean([float(e["accepted_len"]) for e in spec_rounds]),
        "round ms": _mean([e["wall_ns"] / 1e6 for e in spec_rounds if e.get("wall_ns")]),
        "plain step ms": _mean([e["wall_ns"] / 1e6 for e in plain_rounds if e.get("wall_ns")]),
    }


_EXPLAIN = {  # term -> (word when measured < predicted, word when above, sentence)
    "tokens per round": ("fewer", "more", "{pct} % {word} tokens per round were accepted than in calibration "
                         "({measured:.3g} vs {predicted:.3g})"),
    "round ms": ("shorter", "longer", "speculative rounds took {pct} % {word} than the cost curve predicted "
                 "({measured:.3g} vs {predicted:.3g} ms)"),
    "plain step ms": ("shorter", "longer", "plain steps took {pct} % {word} than when the plan was measured "
                      "({measured:.3g} vs {predicted:.3g} ms)"),
}


def explain(terms: list[PlanTerm]) -> str:
    """The term that missed most, as a sentence."""
    scored = [t for t in terms if t.ratio is not None]
    if not scored:
        return "the run measured too little to compare (no speculative rounds)"
    worst = max(scored, key=lambda t: abs((t.ratio or 1.0) - 1.0))
    ratio = worst.ratio or 1.0
    below, above, sentence = _EXPLAIN[worst.name]
    return sentence.format(pct=f"{abs(ratio - 1) * 100:.0f}", word=below if ratio < 1 else above,
                           measured=worst.measured, predicted=worst.predicted)


def _decode_phase(events: list[dict[str, Any]], mode: str) -> tuple[float, float, int]:
    """(prefill + first token ms, decoding ms, tokens decoded after the first) over `mode`'s replies."""
    replies = [e for e in events if e.get("type") == "reply" and e.get("mode") == mode]
    first = sum(e["ttft_ns"] for e in replies) / 1e6
    return first, sum(e["total_ns"] for e in replies) / 1e6 - first, sum(e["new_tokens"] - 1 for e in replies)


def run_prediction(decode_speedup: float, events: list[dict[str, Any]]) -> tuple[float, float | None]:
    """(predicted end-to-end speedup of this run, measured speedup of the decoding phase alone).

    The plan predicts decoding rounds; a reply also pays its prefill, which speculation does not
    shorten. So the run's prediction keeps the plain replies' measured prefill and divides only
    their decoding time by the plan's speedup — what `measured_speedup` (tokens over the whole
    reply time) is to be compared with."""
    first, decode, tokens = _decode_phase(events, "plain")
    if decode <= 0 or tokens <= 0:
        return decode_speedup, None
    predicted = (first + decode) / (first + decode / decode_speedup)
    _, spec_decode, spec_tokens = _decode_phase(events, "speculative")
    if spec_decode <= 0 or spec_tokens <= 0:
        return predicted, None
    return predicted, (spec_tokens / spec_decode) / (tokens / decode)


def report(plan: DevicePlan, source: str, events: list[dict[str, Any]], measured_speedup: float | None,
           tuned: DevicePlan | None = None) -> PlanReport:
    choice = plan.choice
    measured = measured_terms(events)
    terms = [PlanTerm("tokens per round", choice.expected_tokens, measured["tokens per round"]),
             PlanTerm("round ms", choice.round_ms, measured["round ms"]),
             PlanTerm("plain step ms", plan.plain_step_ms, measured["plain step ms"])]
    explanation = ("the plan chose plain decoding: no tree was predicted to beat it by 5 %"
                   if not choice.speculative else explain(terms))
    predicted, decode_measured = run_prediction(choice.predicted_speedup, events)
    return PlanReport(source=source, device=plan.device, choice=choice, predicted_speedup=predicted,
                      measured_speedup=measured_speedup, terms=terms, explanation=explanation, tuned=tuned,
                      decode_predicted_speedup=choice.predicted_speedup, decode_measured_speedup=decode_measured)

"""The quality report: what quantization cost, measured on the same data before and after.

Per graph: bytes on disk, perplexity on the held-out slice (or `--eval`) and how far the quantized
graph's logits moved from the float graph's there (`logits_error`). For the pair: the
draft's teacher-forced top-1 agreement with the target on those windows (a greedy acceptance
proxy) and the engine's mean accepted length on greedy prompts from the held-out slice, for the
float pair and for the quantized pair. The quantized bundle is also checked to decode
losslessly: greedy speculative output must equal its own plain greedy output on every prompt.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from specdec.pipeline.bundle.store import GraphSpec
from specdec.pipeline.engine.graph import Graph
from specdec.pipeline.errors import ValidationError, setting
from specdec.pipeline.graphs.files import SHARED_DATA, external_bytes
from specdec.pipeline.inputs.calibration import (
    MAX_EVAL_WINDOWS,
    CalibrationData,
    draft_features,
    graph_info,
    prefill,
    reads_features,
)
from specdec.pipeline.progress import Progress

log = logging.getLogger(__name__)

# The engine check decodes every prompt three times (float and quantized speculative, quantized
# plain), one target verify per round, so it costs about prompts x new tokens x parameters. Full
# size (8 x 32) up to 40M parameters; above, the tokens shrink in proportion to the parameters,
# one prompt of at least 4 tokens at the least: at a 1.24B target the check is 1 x 8 (the float
# model's 8 x 32 took 19m48s of a 22 min quantize at 0.1B; docs/quantize.md has the measurements).
ENGINE_CHECK = (8, 32)  # prompts, new tokens at full size
ENGINE_CHECK_BUDGET = ENGINE_CHECK[0] * ENGINE_CHECK[1] * 40_000_000  # parameter-tokens
ENGINE_CHECK_MIN_TOKENS = 4


def engine_check_size(parameters: int, prompts: int | None = None, new_tokens: int | None = None) -> tuple[int, int]:
    """(prompts, new tokens) of the engine check for a target of `parameters` (0: unknown, full size);
    given values are kept."""
    full_prompts, full_tokens = ENGINE_CHECK
    tokens = full_prompts * full_tokens if parameters <= 0 else ENGINE_CHECK_BUDGET // parameters
    auto_prompts = max(1, min(full_prompts, tokens // full_tokens))
    chosen_prompts = prompts if prompts is not None else auto_prompts
    auto_tokens = max(ENGINE_CHECK_MIN_TOKENS, min(full_tokens, tokens // chosen_prompts))
    return chosen_prompts, new_tokens if new_tokens is not None else auto_tokens


# Perplexity and the draft's top-1 agreement run every held-out window through each graph before
# and after: about windows x window length x parameters, the other cost of the report. At a 1.24B
# target the 6 windows x 128 tokens of the built-in text were about half of a 14-minute rtn run.
# Sized like the engine check: the full MAX_EVAL_WINDOWS up to 40M parameters, fewer above, never
# under EVAL_MIN_WINDOWS (two windows, ~250 predicted tokens, still a perplexity that catches a
# broken layer; not one precise to a tenth of a percent).
EVAL_BUDGET = MAX_EVAL_WINDOWS * 128 * 40_000_000  # parameter-tokens
EVAL_MIN_WINDOWS = 2


# The batch-invariance probe (engine/invariance.py: ~20 target calls, most of them single rows)
# took 2m18s of a 12-minute rtn run at 1.24B on a loaded machine. In quantize it is informational:
# `specdec compile` measures it again on the graph that will run. Above this size it is left out.
INVARIANCE_MAX_PARAMETERS = 200_000_000


def eval_window_count(parameters: int, seq_len: int, windows: int | None = None) -> int:
    """Most held-out windows the perplexity pass scores for the largest graph of `parameters`
    (0: unknown, full size) at `seq_len` tokens a window; a given count is kept."""
    if windows is not None:
        return windows
    if parameters <= 0:
        return MAX_EVAL_WINDOWS
    return max(EVAL_MIN_WINDOWS, min(MAX_EVAL_WINDOWS, EVAL_BUDGET // (parameters * max(seq_len, 1))))


def graph_bytes(root: Path, spec: GraphSpec) -> int:
    """The graph file, its external-data side file, and its tensors in the pair's shared file, if any."""
    own = sum(path.stat().st_size for path in (root / spec.file, root / f"{spec.file}.data") if path.is_file())
    shared = external_bytes(root / spec.file, SHARED_DATA) if (root / SHARED_DATA).is_file() else 0
    return own + shared


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    wide = logits.astype(np.float64)
    top = wide.max(axis=-1, keepdims=True)
    result: np.ndarray = wide - top - np.log(np.exp(wide - top).sum(axis=-1, keepdims=True))
    return result


class LogitsError:
    """How far a graph's logits move from a reference's on the same windows, measured the way compile's
    validators measure a fused or static graph against its dynamic one (compile/fused/validate.py):
    max|after - before| / max(1, max|before|), over all the windows. `record` keeps each window's
    reference logits (float32, windows x length x vocab: ~130 MB for 2 x 128 tokens at a 128k
    vocabulary); `compare` consumes them."""

    def __init__(self) -> None:
        self._reference: list[np.ndarray] = []
        self._diff, self._scale = 0.0, 0.0

    def record(self, index: int, logits: np.ndarray) -> None:
        self._reference.append(logits.astype(np.float32))

    def compare(self, index: int, logits: np.ndarray) -> None:
        want = self._reference[index]
        self._diff = max(self._diff, float(np.max(np.abs(logits.astype(np.float32) - want))))
        self._scale = max(self._scale, float(np.max(np.abs(want))))
        self._reference[index] = np.empty(0, np.float32)  # compared: free it

    @property
    def value(self) -> float:
        return self._diff / max(1.0, self._scale)


def _score(graph: Graph, windows: list[np.ndarray], each: Callable[[int, np.ndarray], None] | None = None,
           features: list[np.ndarray] | None = None, vocab: np.ndarray | None = None
           ) -> tuple[float, list[np.ndarray]]:
    """Perplexity over the windows (next-token NLL) and each position's argmax; `each` sees every
    window's logits. `features`: a feature draft's input per window (the float target's features).
    `vocab`: a reduced draft vocabulary (draft row -> target id): argmaxes are mapped to target ids,
    and the perplexity is over the positions whose next token it covers (before and after alike)."""
    row_of = None
    if vocab is not None:  # target id -> draft row, -1 where the vocabulary lacks it
        row_of = np.full(int(vocab.max()) + 1, -1, np.int64)
        row_of[vocab] = np.arange(vocab.size)
    nll, count, argmax = 0.0, 0, []
    for index, window in enumerate(windows):
        logits, _ = prefill(graph, window, features=features[index] if features is not None else None)
        assert logits is not None
        if each is not None:
            each(index, logits)
        best = np.argmax(logits, axis=-1)
        argmax.append(vocab[best] if vocab is not None else best)
        if window.size > 1:
            logprobs = _log_softmax(logits[:-1])
            rows, following = np.arange(window.size - 1), window[1:]
            if row_of is not None:
                mapped = np.where(following < row_of.size, row_of[np.minimum(following, row_of.size - 1)], -1)
                rows, following = rows[mapped >= 0], mapped[mapped >= 0]
            nll -= float(logprobs[rows, following].sum())
            count += rows.size
    return (math.exp(nll / count) if count else float("nan")), argmax


def _engine_figures(bundle_dir: Path, prompts: list[list[int]], new_tokens: int,
                    check_lossless: bool) -> dict[str, Any]:
    """Mean accepted length; for the quantized bundle also whether it decodes losslessly.

    The lossless check runs in the layout the bundle decodes in (the exact layout where int8
    compute needs it, settings.bundle_requirements). Such a bundle is also decoded in the tree
    layout, to report what the exact layout protects against: the share of tokens that would
    differ from plain decoding there.
    """
    from specdec.pipeline.engine.engine import Engine
    from specdec.pipeline.records.decode import DecodeConfig
    from specdec.pipeline.settings.resolve import bundle_requirements

    engine = Engine(bundle_dir)
    exact = bool(bundle_requirements(engine.info.quantization).get("exact_layout")) if check_lossless else False
    accepted, rounds, lossless, tree_differ, tree_tokens, tree_mismatch = 0, 0, 0, 0, 0, 0
    for prompt in prompts:
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=new_tokens, exact_layout=exact))
        accepted += sum(r.accepted_len for r in spec.speculative_rounds)
        rounds += len(spec.speculative_rounds)
        if check_lossless:
            plain = engine.generate(prompt, DecodeConfig(max_new_tokens=new_tokens, speculative=False,
                                                         exact_layout=exact))
            lossless += plain.output_ids == spec.output_ids
        if exact:
            tree = engine.generate(prompt, DecodeConfig(max_new_tokens=new_tokens))
            tree_plain = engine.generate(prompt, DecodeConfig(max_new_tokens=new_tokens, speculative=False))
            tree_differ += tree.output_ids != tree_plain.output_ids
            tree_tokens += len(tree_plain.output_ids)
            tree_mismatch += sum(a != b for a, b in zip(tree.output_ids, tree_plain.output_ids, strict=False))
    figures: dict[str, Any] = {"mean_accepted_len": accepted / rounds if rounds else 0.0, "rounds": rounds}
    if check_lossless:
        figures["lossless_prompts"] = lossless
        figures["layout"] = "exact" if exact else "tree"
    if exact:
        figures["tree_layout"] = {"prompts_differing": tree_differ,
                                  "token_mismatch_rate": tree_mismatch / tree_tokens if tree_tokens else 0.0}
    return figures


def invariance(bundle_dir: Path) -> dict[str, Any]:
    """Which batch invariance the quantized target has (engine/invariance.py), on the graph as written."""
    from specdec.pipeline.engine.bundle_info import read_bundle
    from specdec.pipeline.engine.invariance import measure
    from specdec.pipeline.engine.runner import DynamicRunner

    target = read_bundle(bundle_dir).graphs["target"]
    return measure(DynamicRunner(target), target.vocab_size).as_dict()


def evaluate(source_dir: Path, output_dir: Path, specs: dict[str, GraphSpec], data: CalibrationData,
             *, new_tokens: int, progress: Progress, quantized: tuple[str, ...] | None = None,
             after: dict[str, GraphSpec] | None = None) -> dict[str, Any]:
    """Measure both bundles; `output_dir` must already hold a (provisional) manifest.

    `quantized`: the graphs that changed (default all); the others are the same file, so they are
    scored once and only for the pair's agreement. `after`: the output's graphs where their files
    are not the source's (a target stored in a further weight format); default `specs`.
    """
    after = after or specs
    changed = tuple(specs) if quantized is None else quantized
    graphs: dict[str, Any] = {}
    argmax: dict[tuple[str, str], list[np.ndarray]] = {}
    from specdec.pipeline.engine.bundle_info import read_bundle

    source_info = read_bundle(source_dir)
    vocab = {"draft": source_info.draft_vocab()} if "draft" in specs else {}
    features: dict[str, list[np.ndarray] | None] = {role: None for role in specs}
    if "draft" in specs and reads_features(specs["draft"]):  # the float target's, before and after alike
        target_graph = Graph(graph_info("target", specs["target"], source_dir / specs["target"].file))
        features["draft"] = draft_features(target_graph, data.eval_windows)
        del target_graph
    with progress.task("measuring quality before and after", total=len(specs) + len(changed) + 2) as task:
        windows = len(data.eval_windows)
        # one step each, so a log shows (with its time) which of the report's passes a large model spends on
        for role in (r for r in specs if r not in changed):
            with progress.task(f"{role}: scoring {windows} windows"):
                graph = Graph(graph_info(role, specs[role], source_dir / specs[role].file))
                _, argmax[(role, "before")] = _score(graph, data.eval_windows, features=features[role],
                                                     vocab=vocab.get(role))
                del graph
            argmax[(role, "after")] = argmax[(role, "before")]
            task.advance()
        for role in changed:
            spec = specs[role]
            record: dict[str, Any] = {"bytes_before": graph_bytes(source_dir, spec),
                                      "bytes_after": graph_bytes(output_dir, after[role])}
            record["size_ratio"] = record["bytes_after"] / record["bytes_before"]
            error = LogitsError()
            for when, root, which, each in (("before", source_dir, spec, error.record),
                                            ("after", output_dir, after[role], error.compare)):
                with progress.task(f"{role} {when}: perplexity on {windows} windows"):
                    graph = Graph(graph_info(role, which, root / which.file))
                    record[f"perplexity_{when}"], argmax[(role, when)] = _score(
                        graph, data.eval_windows, each, features=features[role], vocab=vocab.get(role))
                    del graph  # one graph's session at a time (5 GB at 1.24B)
                task.advance()
            record["perplexity_increase_pct"] = 100.0 * (record["perplexity_after"] / record["perplexity_before"] - 1)
            # what the format itself moves the logits: compile scales its int8-compute tolerance by it
            record["logits_error"] = error.value
            graphs[role] = record
        unchanged = sum(graph_bytes(source_dir, specs[role]) for role in specs if role not in changed)
        total_before = unchanged + sum(g["bytes_before"] for g in graphs.values())
        total_after = unchanged + sum(g["bytes_after"] for g in graphs.values())
        report: dict[str, Any] = {
            "calibration": {"source": data.source, "samples": int(data.windows.shape[0]),
                            "seq_len": int(data.windows.shape[1]), "tokens": data.tokens_used},
            "eval": {"source": data.eval_source, "windows": len(data.eval_windows),
                     "tokens": int(sum(w.size for w in data.eval_windows))},
            "graphs": graphs,
            "total": {"bytes_before": total_before, "bytes_after": total_after,
                      "size_ratio": total_after / total_before},
            "warnings": list(data.warnings),
        }
        if "draft" in specs and "target" in specs:
            speculative: dict[str, Any] = {"prompts": len(data.prompts), "new_tokens": new_tokens}
            for when, root in (("before", source_dir), ("after", output_dir)):
                target, draft = argmax[("target", when)], argmax[("draft", when)]
                agree = sum(int(np.sum(t == d)) for t, d in zip(target, draft, strict=True))
                speculative[f"top1_agreement_{when}"] = agree / sum(t.size for t in target)
                with progress.task(f"pair {when}: engine check, {len(data.prompts)} x {new_tokens} tokens"):
                    figures = _engine_figures(root, data.prompts, new_tokens, check_lossless=when == "after")
                speculative[f"mean_accepted_len_{when}"] = figures["mean_accepted_len"]
                for key in ("lossless_prompts", "layout", "tree_layout"):
                    if key in figures:
                        speculative[key] = figures[key]
                task.advance()
            if max(spec.parameters for spec in specs.values()) <= INVARIANCE_MAX_PARAMETERS:
                with progress.task("target after: batch invariance"):
                    speculative["invariance"] = invariance(output_dir)
            else:
                speculative["invariance"] = {"measured": False, "reason": f"above {INVARIANCE_MAX_PARAMETERS:,} "
                                             "parameters: `specdec compile` measures it on the compiled graph"}
            speculative["exact"] = speculative.get("lossless_prompts") == len(data.prompts)
            if not speculative["exact"]:
                message = (f"greedy speculative output of the quantized bundle differed from its plain greedy output "
                           f"on {len(data.prompts) - speculative['lossless_prompts']} of {len(data.prompts)} prompts "
                           f"({speculative['layout']} layout): the bundle is not exact for speculation")
                log.warning(message)
                report["warnings"].append(message)
            report["speculative"] = speculative
    return report


def enforce(report: dict[str, Any], max_increase_pct: float | None) -> None:
    """`--max-ppl-increase`: fail when any graph's perplexity rose by more than the limit."""
    if max_increase_pct is None:
        return
    for role, record in report["graphs"].items():
        if record["perplexity_increase_pct"] > max_increase_pct:
            raise ValidationError(
                f"{role} perplexity rose from {record['perplexity_before']:.4g} to {record['perplexity_after']:.4g} "
                f"(+{record['perplexity_increase_pct']:.2f}%), above {setting('max_ppl_increase')} "
                f"{max_increase_pct:g}%",
                f"try {setting('method')} gptq or awq, more {setting('calib')} text, {setting('keep_float')} for "
                "sensitive layers, or raise the limit")

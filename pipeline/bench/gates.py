"""CI gates of `specdec bench`: named figure comparisons, losslessness, regression vs a baseline."""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.bench.analysis import HIGHER_IS_BETTER, LOWER_IS_BETTER
from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.records.codec import RecordError, to_dict
from specdec.pipeline.records.results import BenchResults, Figures, GateResult, read_figures

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq,
}
_PATTERN = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|==|>|<)\s*(-?[0-9.]+(?:e-?[0-9]+)?)\s*$")


# Compared against a baseline: the performance figures, not environment readings like temperature.
REGRESSION_FIGURES = ("speedup", "tokens_per_s", "plain_tokens_per_s", "mean_accepted_len", "acceptance_rate",
                      "ttft_ms", "reply_ms", "energy_per_token_mj", "peak_memory_mb")


def parse_assertion(text: str) -> tuple[str, str, float] | None:
    """`name OP number` -> parts; `lossless` -> None. Anything else is an InputError."""
    if text.strip() == "lossless":
        return None
    match = _PATTERN.match(text)
    if match is None:
        raise InputError(f"{setting('asserts')} '{text}' is not 'FIGURE OP NUMBER' or 'lossless'",
                         f"write e.g. {setting('asserts')} 'speedup>=1.3'")
    name, op, number = match.group(1), match.group(2), float(match.group(3))
    if name not in Figures.names():
        known = ", ".join(sorted(HIGHER_IS_BETTER | LOWER_IS_BETTER))
        raise InputError(f"{setting('asserts')} names an unknown figure '{name}'", f"known figures: {known}")
    return name, op, number


def check_assertions(assertions: list[str], results: BenchResults) -> list[GateResult]:
    outcomes = []
    for text in assertions:
        parsed = parse_assertion(text)
        if parsed is None:
            lossless = results.lossless
            ok = lossless.equal
            why = ("greedy outputs identical" if ok else
                   f"not checked ({lossless.note or 'no replies to compare'})" if not lossless.checked else
                   f"{len(lossless.mismatches)} of {lossless.pairs} replies differ")
            outcomes.append(GateResult("lossless", ok, why))
            continue
        name, op, bound = parsed
        value = results.figures.get(name)
        if value is None:
            reason = results.unavailable.get(name, "not measured in this run")
            outcomes.append(GateResult(text, False, f"{name} is unavailable ({reason})"))
            continue
        ok = _OPS[op](float(value), bound)
        verdict = "satisfies" if ok else "violates"
        outcomes.append(GateResult(text, ok, f"{name} = {value:.4g} {verdict} {op} {bound:g}"))
    return outcomes


@dataclass(frozen=True)
class Baseline:
    """A `--baseline` results.json, read and checked before the run starts."""

    path: Path
    figures: Figures
    setup: dict[str, str]  # what it measured (see `run_setup`), to name what differs from this run


def load_baseline(path: Path) -> Baseline:
    """Read a baseline now, so a missing or wrong file fails before any device work (exit 2)."""
    if not path.is_file():
        raise InputError(f"{setting('baseline')} '{path}' does not exist",
                         "pass a results.json of an earlier bench run")
    try:
        text = path.read_text()
        figures = read_figures(text)
        data = json.loads(text)
    except (RecordError, UnicodeDecodeError, OSError) as exc:
        raise InputError(f"{setting('baseline')} '{path}' is not a specdec results.json ({exc})",
                         "pass the results.json an earlier `specdec bench` wrote") from None
    return Baseline(path, figures, run_setup(data))


def run_setup(data: dict[str, Any]) -> dict[str, str]:
    """What a results.json measured, as comparable text: workload, decoding, bundle and device."""
    def section(parent: dict[str, Any], key: str) -> dict[str, Any]:
        value = parent.get(key)
        return value if isinstance(value, dict) else {}

    config, bundle, device = section(data, "config"), section(data, "bundle"), section(data, "device")
    decode = section(config, "decode")
    temperature = decode.get("temperature")
    mode = "greedy" if temperature == 0 else decode.get("mode") or ("match" if temperature is not None else None)
    fingerprint = bundle.get("fingerprint")
    values = {
        "prompts × tokens": f"{config['prompts']} × {decode['max_new_tokens']}"
        if "prompts" in config and "max_new_tokens" in decode else None,
        "repeats": config.get("repeats"),
        "temperature": temperature,
        "mode": mode,
        "bundle": fingerprint[:12] if isinstance(fingerprint, str) and fingerprint else None,
        "device": device.get("model"),
    }
    return {key: f"{value:g}" if isinstance(value, float) else str(value)
            for key, value in values.items() if value is not None}


def baseline_differences(baseline: Baseline, results: BenchResults) -> list[str]:
    """A warning naming each way the baseline's run differs from this one (compared anyway: a new
    bundle or device against an old one is what a regression check is for, but a different workload
    makes the numbers mean something else)."""
    now = run_setup(to_dict(results))
    changed = [f"{key} {value} (now {now[key]})" for key, value in baseline.setup.items()
               if key in now and now[key] != value]
    if not changed:
        return []
    return [f"baseline {baseline.path} was measured differently: {', '.join(changed)}; "
            "the regression gates compare the figures anyway"]


def check_baseline(baseline: Baseline, max_regression_pct: float, results: BenchResults) -> list[GateResult]:
    return compare_figures(baseline.figures, results.figures, max_regression_pct)


def compare_figures(old: Figures, new: Figures, max_regression_pct: float,
                    prefix: str = "regression:") -> list[GateResult]:
    """One gate per figure both measured: it fails when the figure got worse by more than the limit."""
    outcomes = []
    for name in REGRESSION_FIGURES:
        before, now = old.get(name), new.get(name)
        if before is None or now is None or before == 0:
            continue
        change = (now - before) / abs(before) * 100
        worse = -change if name in HIGHER_IS_BETTER else change
        ok = worse <= max_regression_pct
        outcomes.append(GateResult(f"{prefix}{name}", ok,
                                   f"{name} {before:.4g} -> {now:.4g} ({change:+.1f}%, limit {max_regression_pct:g}%)"))
    return outcomes

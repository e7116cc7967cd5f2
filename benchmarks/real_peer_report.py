"""The table benchmarks/real_peers.py prints: speeds, agreement with the float reference, perplexity."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from real_peers import Config

PEERS = ("genai", "llama.cpp")
RUNNER_NAMES = {"transformers": "transformers", "genai": "onnxruntime-genai", "llama.cpp": "llama.cpp",
                "specdec": "specdec"}


def divergence(outputs: list[list[int]], reference: list[list[int]]) -> tuple[int, int | None]:
    """(prompts whose output equals the reference's, the earliest token index where any other differs)."""
    same, first = 0, None
    for got, want in zip(outputs, reference, strict=True):
        if got == want:
            same += 1
            continue
        index = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
        first = index if first is None else min(first, index)
    return same, first


def tokens_per_round(config: Config) -> float | None:
    """Tokens a speculative round committed, from the runtime's own counters (llama-cpp-python keeps none)."""
    stats = config.stats
    if config.runner == "specdec" and stats.get("speculative_rounds"):
        return stats["speculative_tokens"] / stats["speculative_rounds"]
    if config.runner == "genai" and stats.get("rounds"):
        # a round commits its accepted drafts and one token of the target's (a correction or a bonus)
        return (stats["draft_tokens_accepted"] + stats["rounds"]) / stats["rounds"]
    return None


def median(config: Config) -> float | None:
    return statistics.median(config.tok_s) if config.tok_s and config.error is None else None


def print_table(configs: list[Config], reference: Config, perplexity: dict[str, float | str]) -> list[dict[str, Any]]:
    """Print the markdown table; return its rows (the JSON output's)."""
    peer_rates = [rate for c in configs if c.runner in PEERS and (rate := median(c)) is not None]
    fastest = max(peer_rates, default=None)
    by_key = {c.key: c for c in configs}
    rows: list[dict[str, Any]] = []
    print("\n| runner | format | decoding | tok/s (median) | × fastest peer | = reference (first diff) | "
          "= own plain | tokens/round | perplexity |\n|---|---|---|---|---|---|---|---|---|")
    for config in configs:
        if config.skipped is not None or config.error is not None or not config.outputs:
            continue
        rate = median(config)
        same, first = divergence(config.outputs, reference.outputs) if reference.outputs else (None, None)
        plain = by_key.get(f"{config.runner} {config.fmt} plain")
        own = (divergence(config.outputs, plain.outputs)[0]
               if config.mode != "plain" and plain is not None and plain.outputs else None)
        ppl = perplexity.get(config.scored)
        row: dict[str, Any] = {
            "key": config.key, "runner": config.runner, "format": config.fmt, "mode": config.mode,
            "model": config.model, "tok_s": rate, "tok_s_runs": config.tok_s,
            "vs_fastest_peer": rate / fastest if rate and fastest else None, "prompts": len(config.outputs),
            "identical_to_reference": same, "first_divergence": first, "identical_to_own_plain": own,
            "tokens_per_round": tokens_per_round(config), "stats": config.stats, "perplexity": ppl,
            "outputs": config.outputs}
        rows.append(row)
        agreement = "—" if same is None else f"{same}/{len(config.outputs)}" + ("" if first is None else f" ({first})")
        print(f"| {RUNNER_NAMES[config.runner]} | {config.fmt} | {config.mode} | {_num(rate, 1)} | "
              f"{_num(row['vs_fastest_peer'], 2)} | {agreement} | "
              f"{'—' if own is None else f'{own}/{len(config.outputs)}'} | {_num(row['tokens_per_round'], 2)} | "
              f"{ppl if isinstance(ppl, str) else _num(ppl, 3)} |")
    return rows


def _num(value: float | None, digits: int) -> str:
    return "—" if value is None else f"{value:.{digits}f}"

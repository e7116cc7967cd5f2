"""What a lossy KV cache policy costs in output quality, measured at compile time.

A policy other than the full float cache changes the target (records/kv_policy.py), so compile
measures it against the full cache on calibration text, both run by the same fused graph the way
the runtime runs it (teacher-forced: each position predicts the next token of the text):

- `mismatch_rate`: the share of positions whose greedy token differs from the full cache's, over
  every position and over the positions past the policy's reach (where it can differ at all);
- `perplexity_full`, `perplexity_policy` and `perplexity_delta` (policy − full) of the text.

The text is `--kv-calib`, else the default calibration text (inputs/calibration.py, the same as
quantize's), cut into windows of max_context tokens (the most the full cache holds).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from specdec.pipeline.engine.bundle_info import GraphInfo
from specdec.pipeline.engine.fused import FusedRunner
from specdec.pipeline.engine.graph import SessionOptions
from specdec.pipeline.engine.runner import DynamicRunner, Runner, causal, no_scratch
from specdec.pipeline.inputs.calibration import default_calib_path, read_tokens
from specdec.pipeline.records.kv_policy import KVPolicy

log = logging.getLogger(__name__)

def calibration_tokens(tokenizer_dir: Path, path: Path | None, vocab_size: int) -> list[int]:
    """The text a lossy policy is measured on: `--kv-calib`, else the default calibration text, read by
    the one calibration reader (inputs/calibration.py) and tokenised with the bundle's tokenizer."""
    from specdec.pipeline.inputs.text import TextCodec

    return read_tokens(path or default_calib_path(), TextCodec(tokenizer_dir).encode, vocab_size, key="kv_calib")


def _logits(runner: Runner, ids: np.ndarray) -> np.ndarray:
    runner.reset()
    logits, _ = runner.forward(ids, np.arange(ids.size), no_scratch(ids.size), causal(ids.size))
    assert logits is not None
    return logits


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logz = np.log(np.exp(shifted).sum(axis=-1))
    return np.asarray(logz - shifted[np.arange(targets.size), targets])


def measure(info: GraphInfo, reference: Path, graph: Path, max_context: int, policy: KVPolicy, tokens: list[int],
            windows: int = 4) -> dict[str, Any]:
    """The quality report of `policy` (the fused `graph`) against the full float cache (the fused
    `reference`, the same file unless the policy changed the graph) on up to `windows` windows of `tokens`."""
    options = SessionOptions(threads=1)
    full = FusedRunner(info, reference, max_context, options)
    lossy = FusedRunner(info, graph, max_context, options, policy=policy)
    return compare(full, lossy, info.dtype, max_context, policy, tokens, windows)


def measure_dynamic(info: GraphInfo, max_context: int, policy: KVPolicy, tokens: list[int],
                    windows: int = 4) -> dict[str, Any]:
    """The quality report of a window `policy` run by the dynamic graph `info` (the npu flavour's
    variants are that graph, and its window runner masks what the dynamic one masks)."""
    options = SessionOptions(threads=1)
    return compare(DynamicRunner(info, options), DynamicRunner(info, options, policy=policy), info.dtype,
                   max_context, policy, tokens, windows)


def compare(full: Runner, lossy: Runner, dtype: str, max_context: int, policy: KVPolicy, tokens: list[int],
            windows: int = 4) -> dict[str, Any]:
    """The quality report of the `lossy` runner (under `policy`) against the `full` one."""
    length = min(max_context, len(tokens))
    reach = policy.sinks + policy.window if policy.windowed else 0  # positions before it are exact
    differ, past, nll_full, nll_policy = [], [], [], []
    for start in range(0, len(tokens) - length + 1, length)[:windows]:
        ids = np.asarray(tokens[start : start + length], np.int64)
        want, got = _logits(full, ids), _logits(lossy, ids)
        mismatch = want[:-1].argmax(-1) != got[:-1].argmax(-1)
        differ.append(mismatch)
        past.append(mismatch[reach:])
        nll_full.append(_nll(want[:-1], ids[1:]))
        nll_policy.append(_nll(got[:-1], ids[1:]))
    all_full, all_policy = np.concatenate(nll_full), np.concatenate(nll_policy)
    beyond = np.concatenate(past)
    perplexity_full, perplexity_policy = float(np.exp(all_full.mean())), float(np.exp(all_policy.mean()))
    report: dict[str, Any] = {
        "policy": policy.describe(dtype), "windows": len(differ), "tokens": int(all_full.size),
        "positions_past_reach": int(beyond.size),
        "mismatch_rate": float(np.concatenate(differ).mean()),
        "mismatch_rate_past_reach": float(beyond.mean()) if beyond.size else 0.0,
        "perplexity_full": perplexity_full, "perplexity_policy": perplexity_policy,
        "perplexity_delta": perplexity_policy - perplexity_full,
    }
    log.info("KV policy %s: mismatch %.3f, perplexity %.3f -> %.3f", report["policy"], report["mismatch_rate"],
             perplexity_full, perplexity_policy)
    return report

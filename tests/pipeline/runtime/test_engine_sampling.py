"""End to end, sampling follows the target's distribution (match and rrs, warped or not)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats
from transformers import AutoModelForCausalLM

from specdec.custom_ops.block_sparse_verify import target_probs
from specdec.pipeline.runtime.config import DecodeConfig
from specdec.pipeline.runtime.engine import Engine

PROMPT = [3, 4, 5]
SAMPLES = 1200


@pytest.fixture(scope="module")
def tiny_vocab_bundle(bundle_factory):  # type: ignore[no-untyped-def]
    return bundle_factory("llama", tokenizer_kind="words", vocab_size=24, hidden=32)


def _second_token_distribution(source: Path, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """Exact P(second generated token) = sum_t1 p(t1 | prompt) p(t2 | prompt, t1), warped like the engine."""
    model = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32).eval()
    with torch.no_grad():
        first = model(torch.tensor([PROMPT])).logits[0, -1].numpy()
        p1 = target_probs(first, temperature, top_k, top_p)[0].astype(np.float64)
        vocab = p1.size
        batch = torch.tensor([[*PROMPT, t] for t in range(vocab)])
        second = model(batch).logits[:, -1].numpy()
    p2 = target_probs(second, temperature, top_k, top_p).astype(np.float64)
    return p1 @ p2


@pytest.mark.slow
@pytest.mark.parametrize("mode,temperature,top_k,top_p", [
    ("match", 1.0, 0, 1.0),
    ("rrs", 1.0, 0, 1.0),
    ("rrs", 0.7, 8, 0.9),
])
def test_second_token_follows_target(tiny_vocab_bundle, mode: str, temperature: float, top_k: int,  # type: ignore[no-untyped-def]
                                     top_p: float) -> None:
    engine = Engine(tiny_vocab_bundle.path)
    expected = _second_token_distribution(Path(tiny_vocab_bundle.manifest.graphs["target"].source),
                                          temperature, top_k, top_p)
    counts = np.zeros_like(expected)
    config = {"max_new_tokens": 2, "temperature": temperature, "top_k": top_k, "top_p": top_p, "mode": mode}
    for seed in range(SAMPLES):
        reply = engine.generate(PROMPT, DecodeConfig(seed=seed, **config))  # type: ignore[arg-type]
        if len(reply.output_ids) == 2:
            counts[reply.output_ids[1]] += 1
    assert counts.sum() > 0.9 * SAMPLES
    keep = expected * counts.sum() >= 5  # chi-square needs expected counts >= 5: pool the rest
    observed = np.append(counts[keep], counts[~keep].sum())
    wanted = np.append(expected[keep], expected[~keep].sum()) * counts.sum()
    observed, wanted = observed[wanted > 0], wanted[wanted > 0]
    assert stats.chisquare(observed, wanted * observed.sum() / wanted.sum()).pvalue > 1e-3

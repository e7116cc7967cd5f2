"""Sampling with a logits processor follows the processed target distribution (match and rrs).

The reference masks with a brute-force byte search (no automaton): a token is banned after a
reply iff the reply's bytes plus the token's bytes contain a banned phrase.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from support.tiny_models import drop_layers, make_model, make_tokenizer, save
from transformers import AutoModelForCausalLM

from specdec.custom_ops.block_sparse_verify import target_probs
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.records.decode import DecodeConfig

PROMPT = [3, 4, 5]
SAMPLES = 1000
BAN = ("e", "th", "in ", "s t")  # single bytes ban tokens anywhere; the rest depend on the prefix


@pytest.fixture(scope="module")
def peaked(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("constrained-sampling")
    tokenizer = make_tokenizer("bpe", 300)
    target = make_model("llama", len(tokenizer), layers=2, hidden=32, seed=3)
    with torch.no_grad():
        target.lm_head.weight.mul_(6.0)  # a spread a few hundred samples can test
    save(target, tokenizer, root / "target")
    save(drop_layers(target, 1), tokenizer, root / "draft")
    bundle = export_bundle(ExportConfig(target=str(root / "target"), draft=str(root / "draft"), output=root / "b"))
    return bundle, tokenizer


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: printable bytes stand for themselves, the rest from U+0100."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _token_bytes(tokenizer) -> list[bytes]:  # type: ignore[no-untyped-def]
    decoder = _byte_decoder()
    out = []
    for i, piece in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        special = i in tokenizer.all_special_ids
        out.append(b"" if special else bytes(decoder[c] for c in piece))
    return out


def _allowed(reply: bytes, texts: list[bytes]) -> np.ndarray:
    phrases = [p.encode() for p in BAN]
    return np.array([not any(p in reply + t for p in phrases) for t in texts])


def _expected(source: str, texts: list[bytes], temperature: float) -> np.ndarray:
    """P(second token), with a last entry for "the reply ended at the first" (EOS, id 0)."""
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    with torch.no_grad():
        first = model(torch.tensor([PROMPT])).logits[0, -1].numpy()
        vocab = first.size
        second = model(torch.tensor([[*PROMPT, t] for t in range(vocab)])).logits[:, -1].numpy()
    p1 = target_probs(np.where(_allowed(b"", texts), first, -np.inf), temperature)[0].astype(np.float64)
    p2 = np.zeros((vocab, vocab))
    for t in np.flatnonzero(p1 > 0):
        p2[t] = target_probs(np.where(_allowed(texts[t], texts), second[t], -np.inf), temperature)[0]
    go = p1.copy()
    go[0] = 0.0
    return np.append(go @ p2, p1[0])


@pytest.mark.slow
@pytest.mark.parametrize("mode,drafter", [("match", "model"), ("rrs", "model"), ("rrs", "model+lookup")])
def test_second_token_follows_the_processed_target(peaked, mode: str, drafter: str) -> None:  # type: ignore[no-untyped-def]
    bundle, tokenizer = peaked
    engine = Engine(bundle.path)
    texts = _token_bytes(tokenizer)
    expected = _expected(str(bundle.manifest.graphs["target"].source), texts, 1.0)
    counts = np.zeros_like(expected)
    for seed in range(SAMPLES):
        reply = engine.generate(PROMPT, DecodeConfig(max_new_tokens=2, temperature=1.0, mode=mode,  # type: ignore[arg-type]
                                                     drafter=drafter, ban=BAN, seed=seed))  # type: ignore[arg-type]
        counts[reply.output_ids[1] if len(reply.output_ids) == 2 else -1] += 1
        text = b"".join(texts[t] for t in reply.output_ids)
        assert not any(p.encode() in text for p in BAN)
    assert expected[counts > 0].min() > 0  # nothing the processed target cannot produce
    keep = expected * counts.sum() >= 5  # chi-square needs expected counts >= 5: pool the rest
    observed = np.append(counts[keep], counts[~keep].sum())
    wanted = np.append(expected[keep], expected[~keep].sum()) * counts.sum()
    observed, wanted = observed[wanted > 0], wanted[wanted > 0]
    assert stats.chisquare(observed, wanted * observed.sum() / wanted.sum()).pvalue > 1e-3

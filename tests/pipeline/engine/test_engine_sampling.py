"""End to end, sampling follows the target's distribution (match and rrs, warped or not)."""

from __future__ import annotations

from pathlib import Path

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


# ---- a reduced draft vocabulary: ids outside it have draft probability 0 ----------------------------

@pytest.fixture(scope="module")
def reduced_vocab_bundles(feature_factory, pair_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The tiny-vocabulary target with (a) a feature draft that is the target itself restricted to every
    second id and (b) its layer-dropped model draft restricted to every third id (--draft-vocab)."""
    shape = {"tokenizer_kind": "words", "vocab_size": 24, "hidden": 32}
    feature = feature_factory(copy_target=True, vocab_step=2, **shape)
    target, draft = pair_factory("llama", **shape)
    root = tmp_path_factory.mktemp("reduced")
    np.save(root / "vocab.npy", np.arange(0, 24, 3))
    model = export_bundle(ExportConfig(target=str(target), draft=str(draft), output=root / "b",
                                       draft_vocab=root / "vocab.npy"))
    return {"feature": feature, "model": model}


@pytest.mark.slow
@pytest.mark.parametrize("kind,mode,temperature", [("feature", "match", 1.0), ("feature", "rrs", 1.0),
                                                   ("feature", "rrs", 0.6), ("model", "rrs", 1.0)])
def test_a_reduced_vocabulary_draft_keeps_the_targets_distribution(reduced_vocab_bundles, kind: str, mode: str,  # type: ignore[no-untyped-def]
                                                                   temperature: float) -> None:
    """Depth-2 rounds from the first: the second and third tokens follow the target's distribution."""
    bundle = reduced_vocab_bundles[kind]
    engine = Engine(bundle.path)
    vocab = set(np.load(bundle.path / "draft_vocab.npy").tolist())
    assert len(vocab) < engine.vocab
    second, third = _token_distributions(Path(bundle.manifest.graphs["target"].source), PROMPT, temperature)
    counts = [np.zeros_like(second), np.zeros_like(third)]
    accepted = 0
    for seed in range(SAMPLES):
        reply = engine.generate(PROMPT, DecodeConfig(seed=seed, max_new_tokens=4, temperature=temperature,
                                                     mode=mode))  # type: ignore[arg-type]
        accepted += sum(r.accepted_len - 1 for r in reply.speculative_rounds)
        out = reply.output_ids
        for position, tally in ((1, counts[0]), (2, counts[1])):
            tally[out[position] if len(out) > position else STOP] += 1
    assert accepted > SAMPLES // 10  # drafted tokens were accepted, not only the target's own
    outside = [token for token in range(engine.vocab) if token not in vocab]
    assert counts[0][outside].sum() > 0  # and tokens the draft cannot propose still come out
    pvalues = [_chi_square_p(counts[0], second), _chi_square_p(counts[1], third)]
    assert min(pvalues) * 2 > 1e-3  # Bonferroni over the two tokens


# ---- with prompt lookup: deterministic (point-mass) branches next to the draft's draws -----------

STOP = -1  # the reply ended (EOS) before the token


@pytest.fixture(scope="module")
def peaked_bundle(tmp_path_factory):  # type: ignore[no-untyped-def]
    """Tiny random models are nearly uniform; a scaled head makes the target confident enough that
    sampled replies repeat themselves, so prompt lookup's copies are often accepted."""
    root = tmp_path_factory.mktemp("peaked")
    tokenizer = make_tokenizer("words", 24)
    target = make_model("llama", len(tokenizer), layers=2, hidden=32, seed=0)
    with torch.no_grad():
        target.lm_head.weight.mul_(60.0)
    save(target, tokenizer, root / "target")
    save(drop_layers(target, 1), tokenizer, root / "draft")
    return export_bundle(ExportConfig(target=str(root / "target"), draft=str(root / "draft"), output=root / "b"))


def _lookup_prompt(engine: Engine) -> list[int]:
    """A start and the target's greedy continuation of it: the sampled reply tends to repeat it."""
    start = [3, 4, 5, 6]
    return [*start, *engine.generate(start, DecodeConfig(max_new_tokens=12, speculative=False)).output_ids]


def _token_distributions(source: Path, prompt: list[int], temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact P(second token) and P(third token), each with a last entry for "stopped before it" (EOS)."""
    model = AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32).eval()
    with torch.no_grad():
        p1 = target_probs(model(torch.tensor([prompt])).logits[0, -1].numpy(), temperature)[0].astype(np.float64)
        vocab = p1.size
        p2 = target_probs(model(torch.tensor([[*prompt, t] for t in range(vocab)])).logits[:, -1].numpy(),
                          temperature).astype(np.float64)
        pairs = torch.tensor([[*prompt, a, b] for a in range(vocab) for b in range(vocab)])
        p3 = target_probs(model(pairs).logits[:, -1].numpy(), temperature).astype(np.float64).reshape(vocab, vocab, -1)
    go1 = p1.copy()
    go1[0] = 0.0  # EOS (id 0) ends the reply
    second = np.append(go1 @ p2, p1[0])
    joint = go1[:, None] * p2  # P(t1, t2)
    go2 = joint.copy()
    go2[:, 0] = 0.0
    third = np.append(np.einsum("ab,abc->c", go2, p3), p1[0] + joint[:, 0].sum())
    return second, third


def _chi_square_p(counts: np.ndarray, expected: np.ndarray) -> float:
    keep = expected * counts.sum() >= 5  # pool the rare outcomes
    observed = np.append(counts[keep], counts[~keep].sum())
    wanted = np.append(expected[keep], expected[~keep].sum()) * counts.sum()
    observed, wanted = observed[wanted > 0], wanted[wanted > 0]
    return float(stats.chisquare(observed, wanted * observed.sum() / wanted.sum()).pvalue)


@pytest.mark.slow
@pytest.mark.parametrize("mode,drafter", [("rrs", "lookup"), ("rrs", "model+lookup"), ("match", "model+lookup")])
def test_tokens_follow_target_with_lookup_branches(peaked_bundle, mode: str, drafter: str) -> None:  # type: ignore[no-untyped-def]
    """Depth-2 trees with lookup chains (alone, or grafted and merged with the draft's draws): the
    second and third tokens follow the target's distribution."""
    engine = Engine(peaked_bundle.path)
    prompt = _lookup_prompt(engine)
    temperature = 1.0
    second, third = _token_distributions(Path(peaked_bundle.manifest.graphs["target"].source), prompt, temperature)
    counts = [np.zeros_like(second), np.zeros_like(third)]
    lookup_accepted = 0
    for seed in range(SAMPLES):
        config = DecodeConfig(max_new_tokens=4, temperature=temperature, mode=mode, seed=seed,  # type: ignore[arg-type]
                              drafter=drafter)  # type: ignore[arg-type]
        reply = engine.generate(prompt, config)
        out = reply.output_ids
        for position, tally in ((1, counts[0]), (2, counts[1])):
            tally[out[position] if len(out) > position else STOP] += 1
        lookup_accepted += reply.by_source()["lookup"]["accepted"]
    assert lookup_accepted > SAMPLES // 4  # the test exercises accepted lookup nodes, not only rejections
    pvalues = [_chi_square_p(counts[0], second), _chi_square_p(counts[1], third)]
    assert min(pvalues) * 2 > 1e-3  # Bonferroni over the two tokens

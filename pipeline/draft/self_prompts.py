"""Requests the target writes itself: the user turn of its chat template, sampled.

The built-in pool (chat_prompts.py) is word lists and templates: its topics are the lists' topics,
and a feature draft trained on it measured 0.72 first-token acceptance on its own held-out rows
but 0.48 on hand-written chat requests (the SmolLM2 demo's), knowledge questions lowest. An
instruction-tuned target has seen many user turns; sampled from the start of one, it writes
requests over its whole range of topics and phrasings at the cost of a short generation, and
what the draft must learn is the target's answer to whatever is asked. (Self-distillation of the
prompts as well as the answers, as Medusa-2 and EAGLE's follow-ups did when the original
instruction data was not at hand.) Measured on SmolLM2 (English chat), half the batches written
this way gave the same acceptance on the demo's requests as the built-in pool (0.427 against
0.430, benchmarks/RESULTS-archive.md), so it is an option (`--requests`), for targets whose users
the English word lists miss.

Sampled here, top-k with a seeded generator, rather than with transformers' `generate`: its
top-p sorts the whole 49k vocabulary of every row at every step and its sampler draws over all
of it, 18 s for 128 requests x 16 tokens on one core against 3.3 s of the model's own matmuls.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch

from specdec.pipeline.draft import decode_cache
from specdec.pipeline.draft.chat_prompts import allowed
from specdec.pipeline.draft.device import model_device

log = logging.getLogger(__name__)

_SENTINEL = "\u2063specdec-request\u2063"  # invisible separator: never in a template's own text
MAX_TOKENS = 64  # a request longer than this is cut (and still asked)
TEMPERATURE = 1.0
TOP_K = 64  # the draw is over the target's 64 likeliest tokens: varied, never its long tail
_MIN_CHARS = 12


def user_turn_start(tokenizer: Any) -> list[int] | None:
    """The chat template's ids up to where a user's first message begins (its default system turn
    included), or None when the template does not render a user message."""
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": _SENTINEL}], tokenize=False)
    except Exception as exc:  # a template may raise anything (jinja2 `raise_exception`, ValueError, ...)
        log.info("the chat template cannot render a user turn (%s): no self-written requests", exc)
        return None
    if not isinstance(text, str) or _SENTINEL not in text:
        return None
    ids = tokenizer.encode(text[:text.index(_SENTINEL)], add_special_tokens=False)
    return [int(i) for i in ids] or None


def clean(texts: Iterable[str]) -> list[str]:
    """Distinct, non-trivial requests on allowed (not held-out) topics, in order."""
    kept: dict[str, None] = {}
    for text in texts:
        request = text.strip()
        if len(request) >= _MIN_CHARS and allowed(request):
            kept.setdefault(request)
    return list(kept)


@torch.no_grad()
def write_requests(model: Any, tokenizer: Any, start: list[int], count: int, *, seed: int,
                   stop_ids: set[int]) -> list[str]:
    """`count` sampled user turns (fewer after `clean`), deterministic for `seed` on one machine."""
    device = model_device(model)
    generator = torch.Generator().manual_seed(seed)  # the CPU's: the same requests whatever the device
    cache = decode_cache.preallocated(model, len(start) + MAX_TOKENS)
    ids = torch.tensor([start] * count, dtype=torch.int64, device=device)
    out = model.model(input_ids=ids, cache=cache, use_cache=True)
    written = torch.zeros(count, 0, dtype=torch.int64, device="cpu")
    done = torch.zeros(count, dtype=torch.bool, device="cpu")
    stops = torch.tensor(sorted(stop_ids), dtype=torch.int64, device="cpu")
    for _ in range(MAX_TOKENS):
        logits = model.lm_head(out.last_hidden_state[:, -1]).float() / TEMPERATURE
        top = logits.topk(min(TOP_K, logits.shape[-1]), dim=-1)
        values, indices = top.values.cpu(), top.indices.cpu()
        pick = torch.multinomial(values.softmax(-1), 1, generator=generator)
        following = indices.gather(1, pick)[:, 0]
        written = torch.cat([written, following[:, None]], dim=1)
        done |= torch.isin(following, stops)
        if bool(done.all()):
            break
        out = model.model(input_ids=following[:, None].to(device), cache=cache, use_cache=True)
    texts = []
    for row in written.tolist():
        ended = next((i for i, token in enumerate(row) if token in stop_ids), len(row))
        texts.append(tokenizer.decode(row[:ended], skip_special_tokens=True))
    return clean(texts)

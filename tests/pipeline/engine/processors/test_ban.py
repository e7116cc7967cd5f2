"""Banned phrases on bytes: split across tokens, inside one token, UTF-8 split, both policies."""

from __future__ import annotations

import numpy as np

from specdec.pipeline.engine.processors.ban import BanList, BanProcessor
from specdec.pipeline.engine.processors.base import Constraints
from specdec.pipeline.records.decode import BanPolicy

# a toy vocabulary: bytes as latin-1 strings, like vocab.token_texts gives them ("" = special)
CAFE = "café".encode().decode("latin-1")  # 'caf' + two bytes for é
TEXTS = ["", "bad", " wo", "rd", "b", "ad", "a", " word", "ok", "caf", CAFE[3], CAFE[4], "x"]
ID = {text: i for i, text in enumerate(TEXTS)}


def _banned(processor: BanProcessor, extra: list[int]) -> set[str]:
    mask = processor.allowed(extra)
    assert mask is not None
    return {TEXTS[i] for i in np.flatnonzero(~mask)}


def test_mask_bans_tokens_that_complete_a_phrase_across_tokens() -> None:
    bans = BanList(["bad", " word", "café"], TEXTS)
    processor = BanProcessor(bans, BanPolicy.mask)
    assert _banned(processor, []) == {"bad", " word"}  # a whole phrase inside one token: always
    assert _banned(processor, [ID["b"]]) == {"bad", " word", "ad"}  # 'b' + 'ad'
    assert _banned(processor, [ID["b"], ID["a"]]) == {"bad", " word"}  # no token starts with "d"
    assert _banned(processor, [ID[" wo"]]) == {"bad", " word", "rd"}
    assert _banned(processor, [ID["caf"], ID[CAFE[3]]]) == {"bad", " word", CAFE[4]}  # é split in two bytes
    processor.advance([ID["ok"], ID[" wo"]])
    assert _banned(processor, []) == {"bad", " word", "rd"}  # the committed reply's tail counts
    processor.advance([ID["x"]])
    assert _banned(processor, []) == {"bad", " word"}


def test_refuse_stops_before_the_completing_token_and_masks_nothing() -> None:
    processor = BanProcessor(BanList(["bad"], TEXTS), BanPolicy.refuse)
    assert processor.allowed([]) is None
    assert processor.stop_at([ID["ok"], ID["b"], ID["ad"], ID["x"]]) == 2
    assert processor.stop_at([ID["ok"], ID["b"]]) is None
    processor.advance([ID["ok"], ID["b"]])
    assert processor.stop_at([ID["ad"]]) == 0  # the phrase began in an earlier round


def test_constraints_process_each_tree_node_with_its_own_path() -> None:
    constraints = Constraints([BanProcessor(BanList(["bad"], TEXTS), BanPolicy.mask)], len(TEXTS))
    # root -> 'b' -> ? ; root -> 'ok' -> ?
    tokens = np.array([ID["x"], ID["b"], ID["ok"]])
    parents = np.array([-1, 0, 0])
    logits = np.zeros((3, len(TEXTS)), np.float32)
    out = constraints.process_tree(logits, tokens, parents)
    assert np.isneginf(out[1, ID["ad"]]) and np.isfinite(out[2, ID["ad"]])  # only below 'b'
    assert np.isneginf(out[:, ID["bad"]]).all()
    assert np.array_equal(logits, np.zeros_like(logits))  # the input is untouched
    kept, stopped = constraints.accept([ID["b"], ID["ad"]])
    assert (kept, stopped) == ([ID["b"], ID["ad"]], False)  # mask never stops: it only masks


def test_filter_candidates_renormalises_the_proposal() -> None:
    constraints = Constraints([BanProcessor(BanList(["bad"], TEXTS), BanPolicy.mask)], len(TEXTS))
    ids = np.array([[ID["bad"], ID["ok"], ID["x"], -1], [ID["ad"], ID["ok"], -1, -1]])
    logprob = np.log(np.array([[0.5, 0.3, 0.2, 1e-300], [0.9, 0.1, 1e-300, 1e-300]]))
    logprob[ids < 0] = -np.inf
    kept_ids, kept_logprob = constraints.filter_candidates([[], [ID["b"]]], ids, logprob)
    assert kept_ids.tolist() == [[-1, ID["ok"], ID["x"], -1], [-1, ID["ok"], -1, -1]]
    assert np.allclose(np.exp(kept_logprob[0, 1:3]), [0.6, 0.4]) and np.isclose(kept_logprob[1, 1], 0.0)
    untouched = constraints.filter_candidates([[]], ids[:1, 1:], logprob[:1, 1:])
    assert untouched[1] is logprob[:1, 1:] or np.array_equal(untouched[1], logprob[:1, 1:])
    assert constraints.compliant_prefix([ID["ok"], ID["b"], ID["ad"], ID["x"]]) == 2

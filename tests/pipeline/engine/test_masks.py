"""The attention-mask builders (engine/runner.py, engine/masks.py) the runtime and the validations share."""

from __future__ import annotations

import numpy as np

from specdec.pipeline.engine.masks import FULL_MASK, SLIDING_MASK, hide_beyond_window, mask_names
from specdec.pipeline.engine.runner import build_mask, causal, causal_mask, no_scratch, tree_mask


def test_tree_mask_semantics() -> None:
    mask = tree_mask((-1, 0, 0, 1), past=2, dtype=np.dtype("float32"))[0, 0]
    visible = mask == 0
    assert visible[:, :2].all()
    assert visible[3, 2:].tolist() == [True, True, False, True]  # node 3 sees root, its parent 1, itself
    assert visible[2, 2:].tolist() == [True, False, True, False]
    assert (mask[~visible] == np.finfo(np.float32).min).all()


def test_a_chain_tree_is_the_causal_mask() -> None:
    dtype = np.dtype("float16")
    chain = tree_mask(tuple(range(-1, 4)), past=3, dtype=dtype)
    assert np.array_equal(chain, causal_mask(5, 3, dtype, np.finfo(dtype).min))
    assert np.array_equal(chain, build_mask(dtype, np.finfo(dtype).min, 3, 3, no_scratch(5), causal(5)))


def test_the_window_rule_is_transformers_own() -> None:
    """A query at position p sees p - W + 1 … p, as transformers' sliding-window mask function says,
    whatever order the keys sit in (a compacted buffer, a tree's scratch rows)."""
    import torch
    from transformers.masking_utils import sliding_window_causal_mask_function

    window, length = 4, 11
    hf_rule = sliding_window_causal_mask_function(window)

    def rule(q: int, k: int) -> bool:
        return bool(hf_rule(torch.tensor(0), torch.tensor(0), torch.tensor(q), torch.tensor(k)))

    rng = np.random.default_rng(0)
    keys = rng.permutation(length)  # key rows in any order: the rule reads their positions
    every_key = np.zeros((1, 1, length, length), np.float32)
    got = hide_beyond_window(every_key, np.arange(length), keys, window, -1e30)[0, 0] == 0
    want = np.array([[rule(q, k) or k > q for k in keys] for q in range(length)])
    assert np.array_equal(got, want)  # later keys are the tree mask's business, not the window's
    assert got.sum(axis=1).tolist() == [min(q + 1, window) + (length - q - 1) for q in range(length)]


def test_mask_names_follow_the_layer_kinds() -> None:
    from specdec.pipeline.records.decoder import Activation, Decoder, NormStyle

    def decoder(windows: list[int | None]) -> Decoder:
        return Decoder(windows=windows, rope=[None] * len(windows), ropes={}, norm=NormStyle.rms, norm_eps=1e-6,
                       activation=Activation.silu)

    assert mask_names(None) == mask_names(decoder([None, None])) == (FULL_MASK,)
    assert mask_names(decoder([8, 8, None])) == (FULL_MASK, SLIDING_MASK)
    assert mask_names(decoder([8, 8])) == (SLIDING_MASK,)  # Mistral, Phi-3: every layer windowed

"""The one attention-mask builder (runtime/runner.py) that the runtime and the stages' validations share."""

from __future__ import annotations

import numpy as np

from specdec.pipeline.runtime.runner import build_mask, causal, causal_mask, no_scratch, tree_mask


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

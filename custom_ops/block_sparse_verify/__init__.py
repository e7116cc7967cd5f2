"""BlockSparseVerify: accept the longest path of a draft tree on the target side (docs/design.md §3-4)."""

from specdec.custom_ops.block_sparse_verify.reference import (
    MODES,
    SCHEMA,
    Mode,
    block_sparse_verify,
    rrs_tests,
    sample_token,
    target_probs,
    verify_rrs,
)

__all__ = ["MODES", "SCHEMA", "Mode", "block_sparse_verify", "rrs_tests", "sample_token", "target_probs", "verify_rrs"]

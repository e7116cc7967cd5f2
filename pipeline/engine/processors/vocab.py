"""The bundle's tokenizer as the processors see it: the bytes of every token.

llguidance's tokenizer reads the bundle's `tokenizer.json` itself (no `tokenizers` or
`transformers`, so it works on the phone too) and gives each token's bytes; banned phrases are
matched on those bytes (engine/processors/ban.py), and the grammar matcher works on them.
"""

from __future__ import annotations

import functools
from pathlib import Path

from specdec.pipeline.errors import BundleError, setting


@functools.lru_cache(maxsize=4)
def load_tokenizer(tokenizer_json: Path, vocab: int) -> object:
    """An llguidance tokenizer of `vocab` ids (the target's logits width) from a tokenizer.json."""
    try:
        import llguidance
    except ImportError as exc:
        raise BundleError(f"{setting('ban')}, {setting('json_schema')} and {setting('regex')} need the "
                          "llguidance package, which is not installed",
                          "pip install llguidance (the portable device runtime ships it)") from exc
    if not tokenizer_json.is_file():
        raise BundleError(f"constrained decoding needs the bundle's tokenizer, but '{tokenizer_json}' is missing",
                          "re-create the bundle with `specdec export`")
    try:
        return llguidance.LLTokenizer(str(tokenizer_json), n_vocab=vocab)
    except (ValueError, RuntimeError) as exc:
        raise BundleError(f"llguidance cannot read '{tokenizer_json}' ({exc})".replace("\n", " "),
                          "re-create the bundle with `specdec export`") from exc


@functools.lru_cache(maxsize=4)
def token_texts(tokenizer_json: Path, vocab: int) -> tuple[str, ...]:
    """Every token's bytes as a latin-1 string (one character per byte); special tokens are empty.

    Working on bytes keeps a phrase whose UTF-8 character is split across tokens matchable;
    latin-1 maps bytes to characters one to one, so a str automaton matches bytes.
    """
    tokenizer = load_tokenizer(tokenizer_json, vocab)
    decode = tokenizer.decode_bytes  # type: ignore[attr-defined]
    special = tokenizer.is_special_token  # type: ignore[attr-defined]
    return tuple("" if special(i) else decode([i]).decode("latin-1") for i in range(vocab))

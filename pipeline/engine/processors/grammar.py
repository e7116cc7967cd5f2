"""Structured output: replies that follow a JSON schema or match a regular expression.

llguidance (Rust, with manylinux aarch64 wheels, so the portable device runtime ships it) computes
the token mask of a grammar state in microseconds and reads the bundle's tokenizer.json itself (no
tokenizers or transformers on the phone); xgrammar and outlines-core were not measured beside it. One
matcher follows the committed reply; a tree node's mask is computed by consuming the node's path,
reading the mask and rolling back, so every node is constrained by its own prefix. Once the
grammar is complete only end-of-sequence is allowed, so a reply that ends is valid by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specdec.pipeline.engine.processors.vocab import load_tokenizer
from specdec.pipeline.errors import GenerationError, InputError, setting


class Grammar:
    """A compiled grammar over one vocabulary: new matchers for replies."""

    def __init__(self, tokenizer_json: Path, vocab: int, *, json_schema: str | None = None,
                 regex: str | None = None) -> None:
        import llguidance

        self.tokenizer = load_tokenizer(tokenizer_json, vocab)
        self.vocab = vocab
        # eos_tokens is newer than the llguidance the portable runtime ships (1.6): fall back to eos_token
        eos = getattr(self.tokenizer, "eos_tokens", None) or [self.tokenizer.eos_token]  # type: ignore[attr-defined]
        self.eos = set(eos)
        if json_schema is not None:
            self.name, key = "json_schema", setting("json_schema")
            try:
                # compact separators unless the schema's "x-guidance" says otherwise: with free
                # whitespace small models fill replies with newlines and never close the object
                self.grammar = llguidance.LLMatcher.grammar_from_json_schema(
                    json_schema, defaults={"whitespace_flexible": False})
            except ValueError as exc:
                raise InputError(f"{key} is not a JSON schema llguidance accepts ({exc})", "fix the schema") from None
        elif regex is not None:
            self.name, key = "regex", setting("regex")
            self.grammar = llguidance.LLMatcher.grammar_from_regex(regex)
        else:
            raise ValueError("a Grammar needs a json_schema or a regex")
        error = llguidance.LLMatcher.validate_grammar(self.grammar, self.tokenizer)  # type: ignore[arg-type]
        if error:
            raise InputError(f"{key} cannot be compiled: {error}".replace("\n", " "), f"fix {key}")
        # A grammar whose language is empty (a regex like `a[^\s\S]`) compiles; the first mask llguidance
        # computes for it then puts the matcher in its error state, allowing end-of-sequence only, so
        # every reply would be empty with stop reason eos. Its derivative-based lexer prunes every dead
        # branch, so a language with no text the tokenizer can write is known before the first token.
        if GrammarProcessor(self).dead():
            raise InputError(f"no reply can satisfy {key}: it matches no text this bundle's tokenizer can write",
                             f"fix {key}")

    def matcher(self) -> object:
        import llguidance

        return llguidance.LLMatcher(self.tokenizer, self.grammar, log_level=0)  # type: ignore[arg-type]


class GrammarProcessor:
    """A grammar bound to one reply: a matcher at the committed reply."""

    def __init__(self, grammar: Grammar) -> None:
        self.grammar = grammar
        self.name = grammar.name
        self.matcher = grammar.matcher()
        self._bits = np.zeros((grammar.vocab + 31) // 32, np.int32)

    def _mask(self) -> np.ndarray:
        self.matcher.unsafe_compute_mask_ptr(  # type: ignore[attr-defined]
            self._bits.ctypes.data, self._bits.nbytes)
        mask: np.ndarray = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: self.grammar.vocab]
        return mask.astype(bool)

    def dead(self) -> bool:
        """No reply can start: the matcher is in its error state once its first mask is computed."""
        self._mask()
        return bool(self.matcher.is_error())  # type: ignore[attr-defined]

    def allowed(self, extra: Sequence[int]) -> np.ndarray | None:
        matcher = self.matcher
        if not extra:
            return self._mask()
        consumed = int(matcher.try_consume_tokens(list(extra)))  # type: ignore[attr-defined]
        try:
            if consumed < len(extra):  # the path leaves the grammar: no node below it is ever accepted
                return None
            return self._mask()
        finally:
            if consumed:
                matcher.rollback(consumed)  # type: ignore[attr-defined]

    def advance(self, tokens: Sequence[int]) -> None:
        tokens = list(tokens)
        consumed = int(self.matcher.try_consume_tokens(tokens)) if tokens else 0  # type: ignore[attr-defined]
        if consumed == len(tokens):
            return
        # a complete grammar stops the matcher; the end-of-sequence token its mask allowed then ends the reply
        if self.matcher.is_stopped() and tokens[consumed] in self.grammar.eos:  # type: ignore[attr-defined]
            return
        if not self.matcher.consume_tokens(tokens[consumed:]):  # type: ignore[attr-defined]
            error = self.matcher.get_error()  # type: ignore[attr-defined]
            raise GenerationError(f"the {self.name} constraint rejected an emitted token ({error})",
                                  "report this: emitted tokens are drawn from the constraint's mask")

    def stop_at(self, tokens: Sequence[int]) -> int | None:
        return None

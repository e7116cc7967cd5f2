"""Helpers shared by the tests (tiny models, tokenizers)."""

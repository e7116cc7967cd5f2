"""Tiny random-init Hugging Face checkpoints for tests (no hub access needed).

`make_pair` writes a target and a draft sharing one tokenizer. The draft is the target with
layers dropped (self-speculation), so it agrees with the target often enough for acceptance
to be non-trivial even at random init.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

CORPUS = (
    "the quick brown fox jumps over the lazy dog. speculative decoding drafts tokens with a small model "
    "and verifies them with a large one in a single pass. def add(a, b):\n    return a + b\n"
    "a tree of drafts shares its prefix; the target accepts the longest matching path. "
) * 20

EOS = "<|endoftext|>"


def make_tokenizer(kind: str = "bpe", vocab_size: int = 320) -> PreTrainedTokenizerFast:
    if kind == "words":
        words = sorted(set(CORPUS.replace("\n", " ").split()))[: vocab_size - 2]
        vocab = {EOS: 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(words)}}
        tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
        return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token="<unk>")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([CORPUS], trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS)


def _config(arch: str, vocab: int, layers: int, hidden: int, tie: bool) -> Any:
    if arch == "gpt2":
        return GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=4, n_positions=512,
                          bos_token_id=0, eos_token_id=0)
    cls = {"qwen2": Qwen2Config, "mistral": MistralConfig}.get(arch, LlamaConfig)
    extra = {"sliding_window": 256} if arch == "mistral" else {}  # export caps the context at the window
    return cls(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=2 * hidden, max_position_embeddings=512,
        tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0, **extra,
    )


_MODEL_CLASSES = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "mistral": MistralForCausalLM,
                  "gpt2": GPT2LMHeadModel}


def make_model(arch: str, vocab: int, layers: int = 2, hidden: int = 64, seed: int = 0,
               tie: bool | None = None) -> Any:
    torch.manual_seed(seed)
    config = _config(arch, vocab, layers, hidden, arch == "qwen2" if tie is None else tie)
    config._attn_implementation = "eager"
    return _MODEL_CLASSES[arch](config).eval()


def drop_layers(model: Any, keep: int) -> Any:
    """A draft made of the target's first `keep` layers, embeddings and head."""
    draft = copy.deepcopy(model)
    inner = draft.transformer if hasattr(draft, "transformer") else draft.model
    blocks = inner.h if hasattr(inner, "h") else inner.layers
    del blocks[keep:]
    draft.config.num_hidden_layers = keep
    if hasattr(draft.config, "layer_types") and draft.config.layer_types is not None:
        draft.config.layer_types = draft.config.layer_types[:keep]
    return draft


def save(model: Any, tokenizer: Any, path: Path) -> Path:
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


def make_pair(root: Path, arch: str = "llama", *, target_layers: int = 2, draft_layers: int = 1,
              hidden: int = 64, tokenizer_kind: str = "bpe", vocab_size: int = 320, seed: int = 0,
              independent_draft: bool = False) -> tuple[Path, Path]:
    tokenizer = make_tokenizer(tokenizer_kind, vocab_size)
    vocab = len(tokenizer)
    target = make_model(arch, vocab, target_layers, hidden, seed)
    draft = (make_model(arch, vocab, draft_layers, hidden, seed + 1) if independent_draft
             else drop_layers(target, draft_layers))
    return save(target, tokenizer, root / f"{arch}-target"), save(draft, tokenizer, root / f"{arch}-draft")

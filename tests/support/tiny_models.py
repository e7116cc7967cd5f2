"""Tiny random-init Hugging Face checkpoints for tests (no hub access needed).

`make_pair` writes a target and a draft sharing one tokenizer. The draft is the target with
layers dropped (self-speculation), so it agrees with the target often enough for acceptance
to be non-trivial even at random init.

The shapes of the newer families follow their released checkpoints at toy width: Qwen3 (q/k
norms, tied), Gemma 3 (local:global 2:1 with a 16-token window, its own rotary base per kind,
query_pre_attn_scalar unlike head_dim), Phi-3 (Phi-4-mini-shaped: packed projections, longrope,
partial rotary 0.75, and a 16-token window on every layer as in Phi-3-mini) and SmolLM3 (every
second layer without rotary). Their norm weights are randomised: at init they are all ones
(zeros for Gemma's 1 + w), which would hide a norm applied to the wrong tensor.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    SmolLM3Config,
    SmolLM3ForCausalLM,
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


def _gemma3_layer_types(layers: int) -> list[str]:
    return ["full_attention" if i % 3 == 2 else "sliding_attention" for i in range(layers)]


def _phi3_rope(hidden: int) -> dict[str, Any]:
    rotary_half = int(hidden // 2 * 0.75) // 2  # 2 heads, partial rotary 0.75
    return {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": [1.0 + 0.05 * i for i in range(rotary_half)],
            "long_factor": [2.0 + 0.5 * i for i in range(rotary_half)]}


def _config(arch: str, vocab: int, layers: int, hidden: int, tie: bool, window: int | None = None) -> Any:
    common: dict[str, Any] = {"vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": layers,
                              "intermediate_size": 2 * hidden, "max_position_embeddings": 512,
                              "tie_word_embeddings": tie, "bos_token_id": 0, "eos_token_id": 0}
    if arch in NEW_ARCHS:  # their configs' default pad ids lie beyond a tiny vocabulary
        common["pad_token_id"] = 0
    if arch == "gpt2":
        return GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=4, n_positions=512,
                          bos_token_id=0, eos_token_id=0)
    if arch == "gemma3_text":
        return Gemma3TextConfig(**common, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4,
                                query_pre_attn_scalar=24, sliding_window=window or 16,
                                layer_types=_gemma3_layer_types(layers))
    if arch == "phi3":
        # Phi-4-mini's shape: 2 heads of 64 (so 0.75 of a head rotates in multiples of 8, as
        # GroupQueryAttention needs), longrope trained to 128 positions, a window on every layer
        return Phi3Config(**common, num_attention_heads=2, num_key_value_heads=1,
                          original_max_position_embeddings=128, rope_parameters=_phi3_rope(hidden),
                          sliding_window=window or 16)
    if arch == "smollm3":
        return SmolLM3Config(**common, num_attention_heads=4, num_key_value_heads=2, no_rope_layer_interval=2)
    cls = {"qwen2": Qwen2Config, "mistral": MistralConfig, "qwen3": Qwen3Config}.get(arch, LlamaConfig)
    extra: dict[str, Any] = {"sliding_window": window or 256} if arch == "mistral" else {}
    if arch == "qwen3":
        extra["head_dim"] = hidden // 4
    return cls(**common, num_attention_heads=4, num_key_value_heads=2, **extra)


_MODEL_CLASSES = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "mistral": MistralForCausalLM,
                  "gpt2": GPT2LMHeadModel, "qwen3": Qwen3ForCausalLM, "gemma3_text": Gemma3ForCausalLM,
                  "phi3": Phi3ForCausalLM, "smollm3": SmolLM3ForCausalLM}
_TIED = {"qwen2", "qwen3", "gemma3_text", "smollm3"}
_RANDOM_NORMS = {"qwen3", "gemma3_text", "phi3", "smollm3"}
NEW_ARCHS = ("qwen3", "gemma3_text", "phi3", "smollm3")


def _randomise_norms(model: Any) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.add_(0.3 * torch.randn_like(param))


def make_model(arch: str, vocab: int, layers: int = 2, hidden: int = 64, seed: int = 0,
               tie: bool | None = None, window: int | None = None) -> Any:
    torch.manual_seed(seed)
    config = _config(arch, vocab, layers, hidden, arch in _TIED if tie is None else tie, window)
    config._attn_implementation = "eager"
    model = _MODEL_CLASSES[arch](config).eval()
    if arch in _RANDOM_NORMS:
        _randomise_norms(model)
    return model


def drop_layers(model: Any, keep: int) -> Any:
    """A draft made of the target's first `keep` layers, embeddings and head."""
    draft = copy.deepcopy(model)
    inner = draft.transformer if hasattr(draft, "transformer") else draft.model
    blocks = inner.h if hasattr(inner, "h") else inner.layers
    del blocks[keep:]
    draft.config.num_hidden_layers = keep
    for per_layer in ("layer_types", "no_rope_layers"):
        if getattr(draft.config, per_layer, None) is not None:
            setattr(draft.config, per_layer, getattr(draft.config, per_layer)[:keep])
    return draft


def save(model: Any, tokenizer: Any, path: Path) -> Path:
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


def make_pair(root: Path, arch: str = "llama", *, target_layers: int = 2, draft_layers: int = 1,
              hidden: int = 64, tokenizer_kind: str = "bpe", vocab_size: int = 320, seed: int = 0,
              independent_draft: bool = False, window: int | None = None,
              chat_template: str | None = None, head_scale: float = 1.0) -> tuple[Path, Path]:
    """`head_scale` > 1 makes the target confident (tiny random models are nearly uniform), so a draft
    that agrees with it sees its chains accepted deep."""
    tokenizer = make_tokenizer(tokenizer_kind, vocab_size)
    tokenizer.chat_template = chat_template  # saved with the tokenizer files, as chat checkpoints ship it
    vocab = len(tokenizer)
    target = make_model(arch, vocab, target_layers, hidden, seed, window=window)
    if head_scale != 1.0:
        with torch.no_grad():
            target.get_output_embeddings().weight.mul_(head_scale)
    draft = (make_model(arch, vocab, draft_layers, hidden, seed + 1, window=window) if independent_draft
             else drop_layers(target, draft_layers))
    return save(target, tokenizer, root / f"{arch}-target"), save(draft, tokenizer, root / f"{arch}-draft")


def make_feature_draft(target_dir: Path, path: Path, *, layers: int = 1, vocab_step: int = 1, seed: int = 0,
                       copy_target: bool = False, input_norms: bool = False) -> Path:
    """A feature draft (pipeline/draft/feature_model.py) for the checkpoint in `target_dir`, saved to `path`.

    vocab_step > 1: a reduced vocabulary (every vocab_step-th id, EOS 0 included). copy_target: the
    draft is the target itself in the feature format — its layers copied, fc passing the embedding
    through (fc = [I, 0]) — so its proposals are the target's own and long chains are accepted; a
    random draft (the default) is accepted rarely.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specdec.pipeline.draft.feature_model import FeatureDraft

    target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(target_dir))
    vocab = None if vocab_step == 1 else torch.arange(0, target.config.vocab_size, vocab_step)
    count = target.config.num_hidden_layers if copy_target else layers
    draft = FeatureDraft.from_target(target, layers=count, draft_vocab=vocab, seed=seed, input_norms=input_norms)
    if copy_target:
        hidden = target.config.hidden_size
        with torch.no_grad():
            for mine, theirs in zip(draft.model.layers, target.model.layers, strict=True):
                mine.load_state_dict(theirs.state_dict())
            draft.fc.weight.zero_()
            draft.fc.weight[:, :hidden] = torch.eye(hidden)
    return draft.save(path, tokenizer)

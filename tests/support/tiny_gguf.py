"""Tiny GGUF files for tests, written with the `gguf` package's own writer (as llama.cpp's converter does).

`write_llama` writes a 2-layer Llama (hidden 64, 4 heads / 2 KV heads) with random weights in F32 or a
quantized GGML type, and the byte-level BPE vocabulary of `tiny_models.make_tokenizer` as GGUF tokenizer
metadata (tokens, token types, merges, a chat template), so transformers' GGUF loader builds the model,
its config and its fast tokenizer from the file alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType, TokenType
from gguf.quants import quantize

from support.tiny_models import make_tokenizer

CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|endoftext|>' + message['role'] + ': ' + message['content'] }}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|endoftext|>assistant: ' }}{% endif %}")
FILE_TYPES = {GGMLQuantizationType.F32: LlamaFileType.ALL_F32, GGMLQuantizationType.Q8_0: LlamaFileType.MOSTLY_Q8_0,
              GGMLQuantizationType.Q4_0: LlamaFileType.MOSTLY_Q4_0}
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 128


def _vocabulary() -> tuple[list[str], list[int], list[str]]:
    data = json.loads(make_tokenizer("bpe").backend_tokenizer.to_str())
    vocab: dict[str, int] = data["model"]["vocab"]
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    special = {added["content"] for added in data["added_tokens"] if added["special"]}
    types = [TokenType.CONTROL if token in special else TokenType.NORMAL for token in tokens]
    merges = [" ".join(pair) if isinstance(pair, list) else pair for pair in data["model"]["merges"]]
    return tokens, [int(t) for t in types], merges


def write_llama(path: Path, qtype: GGMLQuantizationType = GGMLQuantizationType.F32, *, seed: int = 0,
                architecture: str = "llama") -> Path:
    """A tiny Llama GGUF at `path`; `qtype` stores every 2-D weight (norms stay F32, as llama.cpp keeps them).

    `architecture` only relabels `general.architecture` (and the metadata keys under it): an error test's
    file of an architecture specdec does not export.
    """
    tokens, types, merges = _vocabulary()
    rng = np.random.default_rng(seed)
    head_dim = HIDDEN // HEADS
    writer = GGUFWriter(str(path), architecture)
    writer.add_name("tiny-llama")
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(FILE_TYPES[qtype])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    writer.add_chat_template(CHAT_TEMPLATE)

    def weight(name: str, rows: int, columns: int, scale: float = 0.3) -> None:
        data = (rng.standard_normal((rows, columns)) * scale).astype(np.float32)
        if qtype == GGMLQuantizationType.F32:
            writer.add_tensor(name, data)
        else:
            writer.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)

    def norm(name: str) -> None:
        writer.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))

    weight("token_embd.weight", len(tokens), HIDDEN, scale=0.5)  # tied: no output.weight
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        norm(f"{block}.attn_norm.weight")
        weight(f"{block}.attn_q.weight", HEADS * head_dim, HIDDEN)
        weight(f"{block}.attn_k.weight", KV_HEADS * head_dim, HIDDEN)
        weight(f"{block}.attn_v.weight", KV_HEADS * head_dim, HIDDEN)
        weight(f"{block}.attn_output.weight", HIDDEN, HEADS * head_dim)
        norm(f"{block}.ffn_norm.weight")
        weight(f"{block}.ffn_gate.weight", FFN, HIDDEN)
        weight(f"{block}.ffn_up.weight", FFN, HIDDEN)
        weight(f"{block}.ffn_down.weight", HIDDEN, FFN)
    norm("output_norm.weight")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path

"""Helpers for ``scripts/train_demo.py``: corpus, tokenizer, models, batches, evaluation.

Everything here is deterministic for a given seed and thread count: the corpus split
is by content hash, batches come from a seeded ``torch.Generator``, and the models run
with ``torch.use_deterministic_algorithms(True)``.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

EOS = "<|endoftext|>"
DOC_SEP = "\n<|endoftext|>\n"
# Corpus file -> benchmark scenario its held-out prompts are labelled with.
CORPUS_FILES: dict[str, str] = {
    "python_code.txt": "code",
    "python_docstrings.txt": "chat",
    "licenses.txt": "creative",
    "python_reference.txt": "knowledge",
}
HELDOUT_MOD = 20  # a document is held out when sha256(text) % 20 == 0 (~5%)


def seed_everything(seed: int, threads: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    # Deterministic mode NaN-fills every fresh tensor by default; that doubles step time.
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- corpus


@dataclass
class Corpus:
    train: list[str] = field(default_factory=list)
    heldout: list[tuple[str, str]] = field(default_factory=list)  # (source file, text)


def load_corpus(root: Path) -> Corpus:
    corpus = Corpus()
    for name in CORPUS_FILES:
        text = (root / name).read_text(encoding="utf-8")
        for doc in text.rstrip("\n").split(DOC_SEP):
            h = int.from_bytes(hashlib.sha256(doc.encode()).digest()[:8], "big")
            if h % HELDOUT_MOD == 0:
                corpus.heldout.append((name, doc))
            else:
                corpus.train.append(doc)
    return corpus


# ------------------------------------------------------------------------ tokenizer


def train_tokenizer(docs: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE (GPT-2 style) with ``<|endoftext|>`` as id 0 (bos = eos = pad)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=EOS,
        pad_token=EOS,
        unk_token=None,
        clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )
    return fast


def encode_docs(tok: PreTrainedTokenizerFast, docs: list[str]) -> torch.Tensor:
    """One token stream: ``eos doc eos doc ...`` (eos doubles as the document start)."""
    eos = tok.eos_token_id
    ids: list[int] = []
    for enc in tok.backend_tokenizer.encode_batch(docs, add_special_tokens=False):
        ids.append(eos)
        ids.extend(enc.ids)
    return torch.tensor(ids, dtype=torch.long)


def check_round_trip(tok: PreTrainedTokenizerFast, samples: list[str]) -> None:
    for s in (x[:2000] for x in samples):  # stay under model_max_length (no warning)
        back = tok.decode(tok(s, add_special_tokens=False)["input_ids"])
        if back != s:
            raise RuntimeError(f"tokenizer does not round-trip: {s[:60]!r}")


# --------------------------------------------------------------------------- models


def make_config(
    vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, inter: int, eos: int
) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=inter,
        max_position_embeddings=1024,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        initializer_range=0.02,
        tie_word_embeddings=False,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
        attn_implementation="eager",
    )


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_model(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, out: Path) -> None:
    """float16 safetensors + config + generation config + tokenizer files."""
    out.mkdir(parents=True, exist_ok=True)
    eos = tok.eos_token_id
    model.generation_config = GenerationConfig(
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, do_sample=False
    )
    half = copy.deepcopy(model).to(torch.float16)
    half.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    # transformers 5 writes its new class name; the classic name loads in 4.x and 5.x.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")


def load_model(path: Path) -> LlamaForCausalLM:
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    return model


def load_tokenizer(path: Path) -> PreTrainedTokenizerFast:
    return AutoTokenizer.from_pretrained(path)


# -------------------------------------------------------------------------- batches


def batches(
    stream: torch.Tensor, seq: int, batch: int, steps: int, seed: int
) -> Iterator[torch.Tensor]:
    """``steps`` batches of ``[batch, seq + 1]`` windows; each epoch shuffles the
    non-overlapping windows of the stream (shifted by a seeded offset) once."""
    gen = torch.Generator().manual_seed(seed)
    pending: list[torch.Tensor] = []
    done = 0
    while done < steps:
        offset = int(torch.randint(0, seq, (1,), generator=gen))
        n = (len(stream) - offset - 1) // (seq + 1)
        windows = stream[offset : offset + n * (seq + 1)].view(n, seq + 1)
        pending.extend(windows[torch.randperm(n, generator=gen)])
        while len(pending) >= batch and done < steps:
            yield torch.stack(pending[:batch])
            del pending[:batch]
            done += 1


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * frac)))


def make_optimizer(model: torch.nn.Module, lr: float, wd: float) -> torch.optim.AdamW:
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, foreach=False)


def distill_loss(
    student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, ce_weight: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward KL(teacher || student) at temperature 1 plus a little hard-label CE."""
    v = student.shape[-1]
    s_logp = F.log_softmax(student.reshape(-1, v), dim=-1)
    t_logp = F.log_softmax(teacher.reshape(-1, v), dim=-1)
    kl = F.kl_div(s_logp, t_logp, log_target=True, reduction="batchmean")
    ce = F.nll_loss(s_logp, labels.reshape(-1))
    return kl + ce_weight * ce, kl


# ----------------------------------------------------------------------- evaluation


def eval_windows(stream: torch.Tensor, seq: int) -> torch.Tensor:
    n = (len(stream) - 1) // (seq + 1)
    return stream[: n * (seq + 1)].view(n, seq + 1)


@torch.no_grad()
def heldout_metrics(
    target: LlamaForCausalLM, draft: LlamaForCausalLM | None, windows: torch.Tensor, bs: int = 16
) -> dict[str, float]:
    """Teacher-forced held-out loss of each model, top-1 accuracy, draft/target agreement."""
    tot = {"target_nll": 0.0, "draft_nll": 0.0, "target_acc": 0, "draft_acc": 0, "agree": 0}
    count = 0
    for i in range(0, len(windows), bs):
        w = windows[i : i + bs]
        x, y = w[:, :-1], w[:, 1:]
        t = target(input_ids=x).logits
        tot["target_nll"] += F.cross_entropy(t.flatten(0, 1), y.flatten(), reduction="sum").item()
        tot["target_acc"] += int((t.argmax(-1) == y).sum())
        if draft is not None:
            d = draft(input_ids=x).logits
            tot["draft_nll"] += F.cross_entropy(
                d.flatten(0, 1), y.flatten(), reduction="sum"
            ).item()
            tot["draft_acc"] += int((d.argmax(-1) == y).sum())
            tot["agree"] += int((d.argmax(-1) == t.argmax(-1)).sum())
        count += y.numel()
    out = {
        "tokens": count,
        "target_loss": tot["target_nll"] / count,
        "target_ppl": math.exp(tot["target_nll"] / count),
        "target_top1_acc": tot["target_acc"] / count,
    }
    if draft is not None:
        out |= {
            "draft_loss": tot["draft_nll"] / count,
            "draft_ppl": math.exp(tot["draft_nll"] / count),
            "draft_top1_acc": tot["draft_acc"] / count,
            "teacher_forced_agreement": tot["agree"] / count,
        }
    return out


@torch.no_grad()
def greedy(model: LlamaForCausalLM, ids: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy continuation of ``n`` tokens for a batch of equal-length prompts."""
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=n,
        min_new_tokens=n,
        do_sample=False,
        pad_token_id=model.config.pad_token_id,
    )
    return out[:, ids.shape[1] :]


def prefix_match(a: torch.Tensor, b: torch.Tensor) -> list[int]:
    """Length of the common prefix of each row of ``a`` and ``b``."""
    same = (a == b).int()
    return [int(r) for r in same.cumprod(dim=1).sum(dim=1)]


def acceptance_proxy(matches: list[int], k_max: int) -> dict[str, float]:
    m = len(matches)
    res = {f"k{k}": sum(x >= k for x in matches) / m for k in range(1, k_max + 1)}
    res["mean_matched_prefix"] = sum(matches) / m
    res["n"] = m
    return res


def write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n", encoding="utf-8")

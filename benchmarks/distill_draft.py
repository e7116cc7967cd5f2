"""Distil a wider draft for the compute-realistic target (benchmarks/realistic.py).

The demo draft (0.9M parameters, hidden 128) agrees with its target on ~65 % of held-out tokens,
which caps what any tree can accept. A user pairing a 60M-class target would pick a draft about
1/25 of its size; this script builds one: the target's width (hidden 256), half its depth (2
layers), initialised from the target's embeddings, first layers, final norm and head (layer-skip
init, so distillation starts from a model that already speaks the target's language), then
distilled with the same loss as `scripts/train_demo.py` on the demo corpus' training split and on
the target's own greedy continuations of training-split prefixes (DistillSpec, Zhou et al. 2023:
data the target generates is what aligns a draft with what verification will accept).

How well it drafts is measured the way greedy verification accepts: the target continues held-out
contexts greedily, and the draft, fed the same tokens, must predict each next one
(`accept_rate`, with `mean_chain` the expected accepted run of an unbounded chain, capped at 8).

The teacher is the demo target: the grown realistic target computes the same function (its extra
neurons and layers contribute zero), so its logits are the demo target's at 1/15 of the cost.

    .venv/bin/python benchmarks/distill_draft.py OUT [--steps 6000] [--generated 8192] [--layers 2] [--threads 2]

The defaults take about 38 minutes on 2 cores. They were 2000 steps on 2048 continuations (10 min):
held-out agreement 0.754, on-policy mean chain 3.07; the agreement was still rising when the
learning rate ran out, and three times the steps on four times the target's text give 0.777 and
3.24 (benchmarks/RESULTS-archive.md, 2026-12-05).

Writes `OUT` (a Hugging Face checkpoint, float16 safetensors, with the demo tokenizer) and
`OUT/distill_report.json` (held-out agreement before and after, per-step history, wall time).
Deterministic for a given seed and thread count.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import demo_train_lib as lib  # noqa: E402

from specdec.pipeline.checkpoints.builtin import tiny_dir as demo_dir  # noqa: E402


def layer_skip_init(target: lib.LlamaForCausalLM, layers: int) -> lib.LlamaForCausalLM:
    """The target truncated to its first `layers` decoder layers (same width, same head)."""
    config = type(target.config).from_dict({**target.config.to_dict(), "num_hidden_layers": layers})
    draft = lib.LlamaForCausalLM(config)
    state = {k: v for k, v in target.state_dict().items()
             if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
    draft.load_state_dict(state)
    return draft


@torch.no_grad()
def continuations(target: lib.LlamaForCausalLM, stream: torch.Tensor, count: int, context: int, length: int,
                  seed: int, batch: int = 64) -> torch.Tensor:
    """`count` rows of `context` stream tokens followed by the target's greedy `length` tokens."""
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(stream) - context - 1, (count,), generator=generator)
    prefixes = torch.stack([stream[s:s + context] for s in starts.tolist()])
    chunks = prefixes.split(batch)  # type: ignore[no-untyped-call]  # torch's stubs leave split untyped
    rows = [torch.cat([chunk, lib.greedy(target, chunk, length)], dim=1) for chunk in chunks]
    return torch.cat(rows)


@torch.no_grad()
def on_policy(draft: lib.LlamaForCausalLM, rows: torch.Tensor, context: int) -> dict[str, float]:
    """Greedy acceptance of the draft on the target's own continuations (`rows` from `continuations`)."""
    predicted = draft(input_ids=rows[:, :-1]).logits.argmax(-1)[:, context - 1:]
    hits = (predicted == rows[:, context:]).float()
    runs = hits[:, :8].cumprod(dim=1).sum(dim=1)  # tokens a chain of 8 drafted from the context would keep
    return {"accept_rate": hits.mean().item(), "mean_chain": runs.mean().item()}


def distill(out: Path, steps: int = 6000, layers: int = 2, seq: int = 128, batch: int = 16,
            lr: float = 1.5e-3, seed: int = 1234, threads: int = 2, eval_every: int = 100,
            generated: int = 8192) -> Path:
    lib.seed_everything(seed, threads)
    started = time.time()
    tokenizer = lib.load_tokenizer(demo_dir("target"))
    teacher = lib.load_model(demo_dir("target"))
    corpus = lib.load_corpus(ROOT / "scripts" / "demo_corpus")
    stream = lib.encode_docs(tokenizer, corpus.train)
    held_stream = lib.encode_docs(tokenizer, [d for _, d in corpus.heldout])
    held = lib.eval_windows(held_stream, seq)
    half = seq // 2
    held_policy = continuations(teacher, held_stream, 256, half, half, seed + 3)
    generated_rows = continuations(teacher, stream, generated, half, seq + 1 - half, seed + 4) if generated else None
    print(f"{generated} target continuations generated ({time.time() - started:.0f} s)", flush=True)
    draft = layer_skip_init(teacher, layers)
    before = on_policy(draft, held_policy, half)
    print(f"draft {lib.n_params(draft):,} params; at init {before}", flush=True)

    optimizer = lib.make_optimizer(draft, lr, wd=0.05)
    history: list[dict[str, float]] = []
    draft.train()
    picker = torch.Generator().manual_seed(seed + 5)
    for step, window in enumerate(lib.batches(stream, seq, batch, steps, seed + 2)):
        for group in optimizer.param_groups:
            group["lr"] = lib.lr_at(step, steps, lr, warmup=min(50, steps // 10))
        if generated_rows is not None:  # half of each batch is the target's own text
            chosen = torch.randint(0, len(generated_rows), (batch // 2,), generator=picker)
            window = torch.cat([window[: batch - batch // 2], generated_rows[chosen]])
        inputs, labels = window[:, :-1], window[:, 1:]
        with torch.no_grad():
            teacher_logits = teacher(input_ids=inputs).logits
        loss, kl = lib.distill_loss(draft(input_ids=inputs).logits, teacher_logits, labels, 0.1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            draft.eval()
            agreement = lib.heldout_metrics(teacher, draft, held)["teacher_forced_agreement"]
            record = {"step": step + 1, "kl": kl.item(), "agreement": agreement,
                      **on_policy(draft, held_policy, half), "elapsed_s": time.time() - started}
            draft.train()
            history.append(record)
            print(json.dumps({k: round(v, 4) for k, v in record.items()}), flush=True)
    draft.eval()
    lib.save_model(draft, tokenizer, out)
    saved = lib.load_model(out)
    demo = lib.load_model(demo_dir("draft"))
    lib.write_json(out / "distill_report.json", {
        "command": " ".join(sys.argv), "layers": layers, "params": lib.n_params(draft),
        "steps": steps, "seq": seq, "batch": batch, "lr": lr, "seed": seed, "threads": threads,
        "generated_rows": generated, "on_policy_at_init": before,
        "heldout_after_save": lib.heldout_metrics(teacher, saved, held) | on_policy(saved, held_policy, half),
        "demo_draft": lib.heldout_metrics(teacher, demo, held) | on_policy(demo, held_policy, half),
        "history": history, "wall_s": time.time() - started})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1.5e-3)
    parser.add_argument("--generated", type=int, default=8192, help="target continuations to train on (0: corpus only)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    distill(args.out, steps=args.steps, layers=args.layers, lr=args.lr, threads=args.threads,
            generated=args.generated)


if __name__ == "__main__":
    main()

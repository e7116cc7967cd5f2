"""Train the built-in demo model pair (target + distilled draft) for specdec.

Trains a byte-level BPE tokenizer, a small Llama (GQA) target and a smaller Llama
draft distilled from it, all on the committed corpus in ``scripts/demo_corpus``,
then saves Hugging Face checkpoints (float16 safetensors) plus calibration text,
benchmark prompts, a measured report and a README into ``--out``.

    python scripts/train_demo.py                      # full run (~30-40 min, 2 CPU threads)
    python scripts/train_demo.py --quick --out /tmp/d # smoke run (~1-2 min)

Deterministic for a given seed and thread count.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import demo_train_lib as lib

ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = ROOT / "scripts" / "demo_corpus"
TARGET_SHAPE = {"hidden": 256, "layers": 4, "heads": 8, "kv_heads": 2, "inter": 704}
DRAFT_SHAPE = {"hidden": 128, "layers": 2, "heads": 4, "kv_heads": 2, "inter": 384}


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "pipeline" / "demo")
    ap.add_argument("--steps", type=int, default=900, help="target training steps")
    ap.add_argument("--draft-steps", type=int, default=1200, help="draft distillation steps")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--draft-lr", type=float, default=3e-3)
    ap.add_argument("--ce-weight", type=float, default=0.1, help="hard-label CE in distillation")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="tiny smoke run")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.draft_steps, args.log_every, args.eval_every = 30, 30, 10, 30
    return args


def cut(text: str, limit: int, code: bool) -> str:
    """A prompt prefix of ``text``: whole lines for code, whole words for prose."""
    head = text[:limit]
    sep = "\n" if code else " "
    if len(text) > limit and sep in head:
        head = head[: head.rindex(sep)]
    return head.rstrip()


def pick_prompts_and_calib(
    heldout: list[tuple[str, str]], per_scenario: int, calib_bytes: int
) -> tuple[list[dict[str, str]], str]:
    """Benchmark prompts (first docs of each source by hash order) and calibration text."""
    by_source: dict[str, list[str]] = {name: [] for name in lib.CORPUS_FILES}
    for name, doc in heldout:
        by_source[name].append(doc)
    for docs in by_source.values():
        docs.sort(key=lambda d: hashlib.sha256(d.encode()).hexdigest())
    prompts: list[dict[str, str]] = []
    used: set[str] = set()
    for name, scenario in lib.CORPUS_FILES.items():
        picked = [d for d in by_source[name] if len(d) >= 300][:per_scenario]
        for i, doc in enumerate(picked):
            text = cut(doc, 240, code=scenario == "code")
            prompts.append({"id": f"{scenario}-{i:02d}", "text": text, "scenario": scenario})
            used.add(doc)
    # Scenarios interleaved (code-00, chat-00, creative-00, knowledge-00, code-01, ...): `bench --limit N`
    # measures the first N prompts and tunes on the last ones, so both must span every scenario. Grouped,
    # --limit 8 measured code and chat while tune calibrated on knowledge documents, where prompt lookup
    # copies well: it planned lookup alone for the demo draft (benchmarks/RESULTS-archive.md, 2026-12-03).
    prompts.sort(key=lambda p: int(p["id"].rsplit("-", 1)[1]))  # stable: scenario order within an index
    rest = [[d for d in docs if d not in used] for docs in by_source.values()]
    parts: list[str] = []
    size = 0
    for i in range(max(map(len, rest))):
        for docs in rest:
            if i < len(docs) and size < calib_bytes:
                parts.append(docs[i])
                size += len(docs[i].encode()) + 2
    return prompts, "\n\n".join(parts) + "\n"


def train_target(
    model: torch.nn.Module, stream: torch.Tensor, held: torch.Tensor, args: argparse.Namespace
) -> list[dict[str, float]]:
    opt = lib.make_optimizer(model, args.lr, wd=0.1)
    history: list[dict[str, float]] = []
    run, t0 = 0.0, time.time()
    model.train()
    for step, w in enumerate(lib.batches(stream, args.seq, args.batch, args.steps, args.seed)):
        for g in opt.param_groups:
            g["lr"] = lib.lr_at(step, args.steps, args.lr, warmup=min(100, args.steps // 10))
        x, y = w[:, :-1], w[:, 1:]
        loss = F.cross_entropy(model(input_ids=x).logits.flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        run += loss.item()
        done = step + 1
        if done % args.log_every == 0 or done == args.steps:
            n = args.log_every if done % args.log_every == 0 else done % args.log_every
            rec = {"step": done, "loss": run / n, "elapsed_s": time.time() - t0}
            if done % args.eval_every == 0 or done == args.steps:
                model.eval()
                rec["heldout_loss"] = lib.heldout_metrics(model, None, held)["target_loss"]
                model.train()
            history.append(rec)
            print(f"[target] {json.dumps({k: round(v, 4) for k, v in rec.items()})}", flush=True)
            run = 0.0
    model.eval()
    return history


def train_draft(
    draft: torch.nn.Module,
    target: torch.nn.Module,
    stream: torch.Tensor,
    held: torch.Tensor,
    args: argparse.Namespace,
) -> list[dict[str, float]]:
    opt = lib.make_optimizer(draft, args.draft_lr, wd=0.05)
    history: list[dict[str, float]] = []
    run, run_kl, t0 = 0.0, 0.0, time.time()
    target.eval()
    draft.train()
    seed = args.seed + 1
    for step, w in enumerate(lib.batches(stream, args.seq, args.batch, args.draft_steps, seed)):
        for g in opt.param_groups:
            g["lr"] = lib.lr_at(
                step, args.draft_steps, args.draft_lr, warmup=min(100, args.draft_steps // 10)
            )
        x, y = w[:, :-1], w[:, 1:]
        with torch.no_grad():
            teacher = target(input_ids=x).logits
        loss, kl = lib.distill_loss(draft(input_ids=x).logits, teacher, y, args.ce_weight)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        run += loss.item()
        run_kl += kl.item()
        done = step + 1
        if done % args.log_every == 0 or done == args.draft_steps:
            n = args.log_every if done % args.log_every == 0 else done % args.log_every
            rec = {"step": done, "loss": run / n, "kl": run_kl / n, "elapsed_s": time.time() - t0}
            if done % args.eval_every == 0 or done == args.draft_steps:
                draft.eval()
                m = lib.heldout_metrics(target, draft, held)
                rec |= {"heldout_loss": m["draft_loss"], "agree": m["teacher_forced_agreement"]}
                draft.train()
            history.append(rec)
            print(f"[draft] {json.dumps({k: round(v, 4) for k, v in rec.items()})}", flush=True)
            run, run_kl = 0.0, 0.0
    draft.eval()
    return history


def free_running(
    target: torch.nn.Module,
    draft: torch.nn.Module,
    tok: lib.PreTrainedTokenizerFast,
    prompts: list[dict[str, str]],
    held: torch.Tensor,
    n_contexts: int,
    k_max: int = 4,
) -> dict[str, object]:
    """Greedy k-token continuations of draft vs target (acceptance proxy)."""
    per_prompt: list[int] = []
    per_scenario: dict[str, list[int]] = {}
    for p in prompts:
        ids = torch.tensor([tok(p["text"], add_special_tokens=False)["input_ids"]])
        m = lib.prefix_match(lib.greedy(target, ids, k_max), lib.greedy(draft, ids, k_max))[0]
        per_prompt.append(m)
        per_scenario.setdefault(p["scenario"], []).append(m)
    # Many equal-length contexts from the held-out stream, evenly spaced.
    ctx = 64
    flat = held.flatten()
    starts = torch.linspace(0, len(flat) - ctx - 1, n_contexts).long()
    ids = torch.stack([flat[s : s + ctx] for s in starts.tolist()])
    matches: list[int] = []
    for i in range(0, len(ids), 32):
        b = ids[i : i + 32]
        matches += lib.prefix_match(lib.greedy(target, b, k_max), lib.greedy(draft, b, k_max))
    return {
        "eval_prompts": lib.acceptance_proxy(per_prompt, k_max),
        "eval_prompts_by_scenario": {
            s: lib.acceptance_proxy(v, k_max) for s, v in per_scenario.items()
        },
        "heldout_contexts": lib.acceptance_proxy(matches, k_max) | {"context_tokens": ctx},
    }


def write_readme(path: Path, r: dict) -> None:  # type: ignore[type-arg]
    t, d, h, f = r["target"], r["draft"], r["heldout"], r["free_running"]
    ep, hc = f["eval_prompts"], f["heldout_contexts"]
    row = "| {} | {:.1%} | {:.1%} | {:.1%} | {:.1%} | {:.2f} | {} |"
    lines = [
        "# Built-in tiny demo pair (`demo-tiny`)",
        "",
        "A small Llama target and a smaller Llama draft distilled from it, sharing one",
        "byte-level BPE tokenizer. `specdec export demo-tiny` exports this pair; the tests run on it.",
        "Generated by `scripts/train_demo.py` (do not edit by hand; numbers are measured",
        "by the script from the saved float16 files reloaded in float32, also in",
        "`train_report.json`).",
        "",
        "| | target | draft |",
        "| --- | --- | --- |",
        f"| architecture | Llama, {t['shape']} | Llama, {d['shape']} |",
        f"| parameters | {t['params']:,} | {d['params']:,} |",
        f"| `model.safetensors` (fp16) | {t['file_bytes']:,} B | {d['file_bytes']:,} B |",
        f"| held-out loss (nats/token) | {h['target_loss']:.3f} | {h['draft_loss']:.3f} |",
        f"| held-out perplexity | {h['target_ppl']:.2f} | {h['draft_ppl']:.2f} |",
        f"| held-out top-1 accuracy | {h['target_top1_acc']:.1%} | {h['draft_top1_acc']:.1%} |",
        f"| training | {t['steps']} steps, CE | {d['steps']} steps, KL to target + "
        f"{r['args']['ce_weight']} CE |",
        "",
        f"Vocabulary {r['tokenizer']['vocab_size']} (byte-level BPE, `<|endoftext|>` = id "
        f"{r['tokenizer']['eos_token_id']} is bos, eos and pad); context 1024 positions "
        f"(trained on {r['args']['seq']}-token windows). Load with",
        "`AutoModelForCausalLM.from_pretrained(dir, dtype=torch.float32,"
        ' attn_implementation="eager")` and `AutoTokenizer.from_pretrained(dir)`.',
        "",
        "## Draft/target agreement",
        "",
        f"- Teacher-forced greedy top-1 agreement on held-out text "
        f"({h['tokens']:,} positions): **{h['teacher_forced_agreement']:.1%}**.",
        "- Free-running: both models continue the same prompt greedily for 4 tokens;",
        "  `k=n` is the fraction of prompts whose first n draft tokens all equal the",
        "  target's (what a chain of n drafted tokens would get accepted in greedy mode).",
        "",
        "| prompts | k=1 | k=2 | k=3 | k=4 | mean matched prefix | n |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        row.format("`eval_prompts.jsonl`", ep["k1"], ep["k2"], ep["k3"], ep["k4"],
                   ep["mean_matched_prefix"], ep["n"]),
    ]
    for s, v in f["eval_prompts_by_scenario"].items():
        lines.append(row.format(f"  {s}", v["k1"], v["k2"], v["k3"], v["k4"],
                                v["mean_matched_prefix"], v["n"]))
    lines += [
        row.format(f"held-out contexts ({hc['context_tokens']} tokens)", hc["k1"], hc["k2"],
                   hc["k3"], hc["k4"], hc["mean_matched_prefix"], hc["n"]),
        "",
        "## Data",
        "",
        "`scripts/demo_corpus/` (see its `SOURCES.md`): Python 3.11 reference topics,",
        "standard-library docstrings and source (PSF licence) and Debian's common licence",
        f"texts. {r['corpus']['train_docs']} training documents "
        f"({r['corpus']['train_tokens']:,} tokens); {r['corpus']['heldout_docs']} documents "
        f"({r['corpus']['heldout_tokens']:,} tokens) held out by content hash and never trained on.",
        "",
        "- `calib.txt`: held-out text for INT4 calibration "
        f"({r['files']['calib_bytes']:,} bytes, disjoint from the prompts).",
        "- `eval_prompts.jsonl`: held-out prompts, scenario by source: code = stdlib source,",
        "  chat = docstrings, creative = licence prose, knowledge = reference topics (the",
        "  corpus has no dialogue, so these labels are approximate), the four interleaved so that",
        "  the first N (what `bench --limit N` measures) and the last 4 (what tune calibrates on) span them all.",
        "",
        "## Reproduce",
        "",
        "```",
        r["command"],
        "```",
        "",
        f"Wall time {r['timing']['total_s'] / 60:.1f} min on {r['machine']} "
        f"({r['args']['threads']} threads): tokenizer {r['timing']['tokenizer_s']:.0f} s, "
        f"target {r['timing']['target_s']:.0f} s, draft {r['timing']['draft_s']:.0f} s, "
        f"evaluation {r['timing']['eval_s']:.0f} s (wall time depends on what else shares "
        "the CPU; `train_report.json` has elapsed time per logged step). Seeded and run with "
        "`torch.use_deterministic_algorithms(True)`; results are reproducible for the same "
        "thread count and torch build.",
        "",
    ]
    path.write_text("\n".join(lines), encoding="utf-8")


def main() -> None:
    args = parse_args()
    t_start = time.time()
    lib.seed_everything(args.seed, args.threads)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    corpus = lib.load_corpus(CORPUS_DIR)
    t0 = time.time()
    tok = lib.train_tokenizer(corpus.train, args.vocab)
    lib.check_round_trip(tok, [d for _, d in corpus.heldout[:50]])
    t_tok = time.time() - t0
    train_stream = lib.encode_docs(tok, corpus.train)
    held_stream = lib.encode_docs(tok, [d for _, d in corpus.heldout])
    held = lib.eval_windows(held_stream, args.seq)
    held_quick = held[:16] if args.quick else held
    print(f"corpus: {len(corpus.train)} train docs / {len(train_stream):,} tokens; "
          f"{len(corpus.heldout)} held-out docs / {len(held_stream):,} tokens; "
          f"tokenizer {t_tok:.1f}s", flush=True)

    prompts, calib = pick_prompts_and_calib(corpus.heldout, 6, 32_000)
    eos = tok.eos_token_id
    torch.manual_seed(args.seed)
    target = lib.LlamaForCausalLM(lib.make_config(len(tok), **TARGET_SHAPE, eos=eos))
    torch.manual_seed(args.seed + 1)
    draft = lib.LlamaForCausalLM(lib.make_config(len(tok), **DRAFT_SHAPE, eos=eos))
    print(f"params: target {lib.n_params(target):,}, draft {lib.n_params(draft):,}", flush=True)

    t0 = time.time()
    target_hist = train_target(target, train_stream, held_quick, args)
    t_target = time.time() - t0
    t0 = time.time()
    draft_hist = train_draft(draft, target, train_stream, held_quick, args)
    t_draft = time.time() - t0

    for name, model in (("target", target), ("draft", draft)):
        lib.save_model(model, tok, out / name)
    (out / "calib.txt").write_text(calib, encoding="utf-8")
    with (out / "eval_prompts.jsonl").open("w", encoding="utf-8") as fh:
        for p in prompts:
            fh.write(json.dumps(p) + "\n")

    # Everything below is measured on the saved files (fp16 on disk, fp32 in memory).
    t0 = time.time()
    tok2 = lib.load_tokenizer(out / "target")
    assert tok2.get_vocab() == lib.load_tokenizer(out / "draft").get_vocab()
    lib.check_round_trip(tok2, [p["text"] for p in prompts])
    target2, draft2 = lib.load_model(out / "target"), lib.load_model(out / "draft")
    heldout = lib.heldout_metrics(target2, draft2, held_quick)
    fr = free_running(target2, draft2, tok2, prompts, held_quick, 64 if args.quick else 512)
    t_eval = time.time() - t0

    cmd = "python scripts/train_demo.py" + (" --quick" if args.quick else "")
    if args.out != ROOT / "pipeline" / "demo":
        cmd += f" --out {args.out}"
    report = {
        "command": cmd,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": f"{platform.machine()} CPU, torch {torch.__version__}",
        "tokenizer": {"vocab_size": len(tok2), "eos_token_id": tok2.eos_token_id},
        "corpus": {
            "train_docs": len(corpus.train),
            "train_tokens": len(train_stream),
            "heldout_docs": len(corpus.heldout),
            "heldout_tokens": len(held_stream),
        },
        "target": {
            "shape": ", ".join(f"{k} {v}" for k, v in TARGET_SHAPE.items()),
            "params": lib.n_params(target2),
            "steps": args.steps,
            "file_bytes": (out / "target" / "model.safetensors").stat().st_size,
            "history": target_hist,
        },
        "draft": {
            "shape": ", ".join(f"{k} {v}" for k, v in DRAFT_SHAPE.items()),
            "params": lib.n_params(draft2),
            "steps": args.draft_steps,
            "file_bytes": (out / "draft" / "model.safetensors").stat().st_size,
            "history": draft_hist,
        },
        "heldout": heldout,
        "free_running": fr,
        "files": {"calib_bytes": len(calib.encode()), "eval_prompts": len(prompts)},
        "timing": {
            "tokenizer_s": t_tok,
            "target_s": t_target,
            "draft_s": t_draft,
            "eval_s": t_eval,
            "total_s": time.time() - t_start,
        },
    }
    lib.write_json(out / "train_report.json", report)
    write_readme(out / "README.md", report)
    print("final:", json.dumps({"heldout": heldout, "free_running": fr["eval_prompts"],
                                "heldout_contexts": fr["heldout_contexts"],
                                "timing": report["timing"]}, indent=1), flush=True)


if __name__ == "__main__":
    main()

"""`specdec draft` on the compute-realistic target, against the hand-trained demo draft.

    .venv/bin/python benchmarks/draft_from_target.py OUT [--minutes 15] [--bench] [--steps N] [--size S [S ...]]
    .venv/bin/python benchmarks/draft_from_target.py OUT --size S [S ...] --reuse --bench --bench-sizes S
    .venv/bin/python benchmarks/draft_from_target.py OUT --layers 2 [--heads H] [--ffn F] --bench --bench-repeats 3

1. `benchmarks/realistic.py` builds the 61.5M-parameter target (the demo target grown to 24 layers;
   18 of them and most FFN channels compute but contribute nothing) with the demo draft;
2. `specdec draft` makes a draft from it with its default budget, on the demo corpus' training
   text (`--calib`) and the target's own text; `--size` gives one or more sizes (a draft each,
   named `made-SIZE`), so that sizes are compared within one run;
3. both drafts are measured the same way on the demo corpus' held-out documents: teacher-forced
   top-1 agreement with the target, and the greedy chain a draft keeps on the target's continuations
   (the demo target stands in for the grown one there: the same function at 1/15 of the cost);
4. with `--bench`: three bundles of the same target are exported and benched (`specdec bench`,
   default settings — it tunes its plan per bundle — 8 prompts), one after the other in this run:
   each made draft, the first made draft exported with `--no-share-tensors`, and the demo draft; each
   reports plain vs speculative tokens/s from the same process, whether the speculative replies
   equal plain greedy decoding, and the process's peak RSS. `--bench-repeats N` benches the shared
   bundles N times each, taking turns, and leaves the unshared one out.

Writes `OUT/draft_from_target.json`. The machine's load changes absolute times; compare ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import demo_train_lib as lib  # noqa: E402
from realistic import write_pair  # noqa: E402

from specdec.pipeline.checkpoints.builtin import tiny_dir as demo_dir  # noqa: E402
from specdec.pipeline.draft import DraftConfig, make_draft  # noqa: E402
from specdec.pipeline.draft.distill import CHAIN, continue_rows  # noqa: E402

SPECDEC = str(Path(sys.executable).with_name("specdec"))


@torch.no_grad()
def chain_metrics(draft: Any, rows: torch.Tensor, context: int) -> dict[str, float]:
    predicted = draft(input_ids=rows[:, :-1]).logits.argmax(-1)[:, context - 1:]
    hits = (predicted == rows[:, context:]).float()
    accepted = hits.unfold(1, CHAIN, 1).cumprod(dim=-1).sum(dim=-1)
    return {"on_policy_match": hits.mean().item(), "expected_accepted": accepted.mean().item()}


def measure(target_dir: Path, drafts: dict[str, Path]) -> dict[str, Any]:
    tokenizer = lib.load_tokenizer(target_dir)
    corpus = lib.load_corpus(ROOT / "scripts" / "demo_corpus")
    held_stream = lib.encode_docs(tokenizer, [d for _, d in corpus.heldout])
    windows = lib.eval_windows(held_stream, 128)
    # the grown target computes the demo target's function (its extra neurons and layers add zero),
    # so the demo target stands in for it here at 1/15 of the cost
    target = AutoModelForCausalLM.from_pretrained(str(demo_dir("target")), dtype=torch.float32)
    target.train(False)
    generator = torch.Generator().manual_seed(7)
    starts = torch.randint(0, len(held_stream) - 65, (128,), generator=generator)
    prefixes = torch.stack([held_stream[s:s + 64] for s in starts.tolist()])
    rows = continue_rows(target, prefixes, 64, None)
    results: dict[str, Any] = {}
    for name, path in drafts.items():
        draft = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
        draft.train(False)
        agreement = lib.heldout_metrics(target, draft, windows)["teacher_forced_agreement"]
        results[name] = {"heldout_agreement": agreement, **chain_metrics(draft, rows, 64),
                         "params": sum(p.numel() for p in draft.parameters())}
    return results


def export(target_dir: Path, draft_dir: Path, out: Path, share: bool = True) -> dict[str, Any]:
    bundle = out / "bundle"
    started = time.time()
    subprocess.run(["nice", "-n", "10", SPECDEC, "export", str(target_dir), "--draft", str(draft_dir), "-o",
                    str(bundle), "--force", *([] if share else ["--no-share-tensors"])], check=True)
    sizes = {p.name: p.stat().st_size for p in bundle.iterdir() if p.is_file()}
    return {"bundle_files": sizes, "bundle_bytes": sum(sizes.values()), "export_s": time.time() - started}


def bench(out: Path, repeat: int = 0) -> dict[str, Any]:
    """One `specdec bench` of OUT/bundle (default settings: it tunes its own plan), into OUT/bench[-REPEAT]."""
    results = out / ("bench" if repeat == 0 else f"bench-{repeat}")
    started = time.time()
    subprocess.run(["nice", "-n", "10", SPECDEC, "bench", str(out / "bundle"), "-o", str(results), "--limit", "8",
                    "--force"], check=True)
    data = json.loads((results / "results.json").read_text())
    return {"results": str(results / "results.json"), "bench_s": time.time() - started, "load_after": os.getloadavg(),
            "figures": {k: v for k, v in data.items() if k in ("figures", "lossless", "plan")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--minutes", type=float, default=None, help="specdec draft's budget (default: its own)")
    parser.add_argument("--steps", type=int, default=None, help="specdec draft's step count (a quick check)")
    parser.add_argument("--samples", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None, help="specdec draft's --layers (default: its own)")
    parser.add_argument("--heads", type=int, default=None, help="specdec draft's --heads (default: its own)")
    parser.add_argument("--ffn", type=int, default=None, help="specdec draft's --ffn (default: its own)")
    parser.add_argument("--size", type=float, nargs="+", default=[None],
                        help="specdec draft's --size; several: one draft each (default: its own)")
    parser.add_argument("--bench", action="store_true", help="export and bench both pairs")
    parser.add_argument("--bench-sizes", type=float, nargs="+", default=None,
                        help="bench only the made drafts of these sizes (default: all)")
    parser.add_argument("--bench-repeats", type=int, default=1,
                        help="bench every bundle this many times, taking turns (made, demo, made, demo, ...)")
    parser.add_argument("--reuse", action="store_true",
                        help="keep the drafts and quality figures OUT already holds (a run stopped before its benches)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    target_dir, demo_draft = write_pair(args.out / "pair")
    corpus = lib.load_corpus(ROOT / "scripts" / "demo_corpus")
    calib = args.out / "calib.txt"
    calib.write_text("\n\n".join(corpus.train))
    record = args.out / "draft_from_target.json"
    earlier: dict[str, Any] = json.loads(record.read_text()) if args.reuse and record.is_file() else {}
    summary: dict[str, Any] = {"command": " ".join(sys.argv), "load_at_start": os.getloadavg(), "made": {}}
    if earlier:
        summary["earlier"] = {k: earlier[k] for k in ("command", "load_at_start") if k in earlier}
    made: dict[str, Path] = {}
    for size in args.size:
        name = "made" if size is None else f"made-{size:g}"
        if name in earlier.get("made", {}) and (args.out / name / "config.json").is_file():
            made[name] = args.out / name
            summary["made"][name] = earlier["made"][name]
            continue
        started = time.time()
        options: dict[str, Any] = {k: v for k, v in {"minutes": args.minutes, "steps": args.steps,
                                                     "samples": args.samples, "size": size,
                                                     "layers": args.layers, "heads": args.heads,
                                                     "ffn": args.ffn}.items()
                                   if v is not None}
        result = make_draft(DraftConfig(target=str(target_dir), output=args.out / name, calib=calib, force=True,
                                        **options))
        made[name] = result.path
        summary["made"][name] = {"draft_wall_min": (time.time() - started) / 60, "load_after": os.getloadavg(),
                                 "report": {k: v for k, v in result.report.items() if k != "files"}}
        record.write_text(json.dumps(summary, indent=2) + "\n")  # each step kept as measured
    reused = earlier.get("quality") or {}
    summary["quality"] = reused if set(reused) == {*made, "demo"} else measure(target_dir, {**made, "demo": demo_draft})
    record.write_text(json.dumps(summary, indent=2) + "\n")
    if args.bench_sizes is not None:
        made = {name: path for name, path in made.items() if name in {f"made-{s:g}" for s in args.bench_sizes}}
    if args.bench:
        first = next(iter(made))
        # the unshared bundle before the demo draft's: a run cut short still has peak RSS with and without sharing
        runs = [*((name, path, True) for name, path in made.items()), (f"{first}_unshared", made[first], False),
                ("demo", demo_draft, True)]
        if args.bench_repeats > 1:  # repeats compare drafts, not sharing: the unshared bundle is left out
            runs = [run for run in runs if run[2]]
        summary["bench"] = {name: export(target_dir, path, args.out / f"bench-{name}", share)
                            for name, path, share in runs}
        # the bundles take turns, so that a drifting machine load falls on each of them alike
        for repeat in range(args.bench_repeats):
            for name, _, _ in runs:
                summary["bench"][name].setdefault("runs", []).append(bench(args.out / f"bench-{name}", repeat))
                record.write_text(json.dumps(summary, indent=2) + "\n")
    summary["load_at_end"] = os.getloadavg()
    record.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary["quality"], indent=2))
    for name, record_ in summary.get("bench", {}).items():
        speedups = [run["figures"]["figures"].get("speedup") for run in record_.get("runs", [])]
        print(f"{name}: speedups {speedups}")


if __name__ == "__main__":
    main()

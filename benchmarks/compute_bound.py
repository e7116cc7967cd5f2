"""Plain vs speculative decoding where compute dominates: a ~100M-parameter target on this CPU.

Small models are overhead-bound (docs/design.md §6: assisted generation ran at 0.66-0.88x on 6M pairs).
Here the target is a random-init Llama of ~75M parameters and the draft its first layer
(self-speculation), so a draft call costs ~1/8 of a target call and the tree's extra nodes ride
on a compute-bound target forward. Random layers disagree with each other, so the output
projections of layers 1.. are scaled by --refine (0.1): every layer still costs its full
compute, but the later ones only refine the first layer's prediction, which gives the draft a
realistic acceptance. Both modes run in the same process on the same prompts; outputs are
checked identical.

    .venv/bin/python benchmarks/compute_bound.py [--hidden 1024 --layers 8 --tokens 64]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.tiny_models import drop_layers, make_model, make_tokenizer, save

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.records.decode import DecodeConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--budgets", default="4,8,16")
    parser.add_argument("--refine", type=float, default=0.1, help="scale of layers 1..'s output projections")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        tokenizer = make_tokenizer(vocab_size=2048)
        target = make_model("llama", len(tokenizer), layers=args.layers, hidden=args.hidden, seed=0)
        params = sum(p.numel() for p in target.parameters())
        with torch.no_grad():
            for layer in target.model.layers[1:]:
                layer.self_attn.o_proj.weight.mul_(args.refine)
                layer.mlp.down_proj.weight.mul_(args.refine)
        save(target, tokenizer, root / "target")
        save(drop_layers(target, 1), tokenizer, root / "draft")
        start = time.perf_counter()
        bundle = export_bundle(ExportConfig(target=str(root / "target"), draft=str(root / "draft"),
                                            output=root / "bundle", validate=False))
        print(f"target {params / 1e6:.0f}M parameters, exported in {time.perf_counter() - start:.0f} s")
        engine = Engine(bundle.path)
        rng = np.random.default_rng(0)
        prompts = [rng.integers(10, engine.vocab, size=16).tolist() for _ in range(args.prompts)]
        engine.generate(prompts[0], DecodeConfig(max_new_tokens=8))  # warm-up
        engine.generate(prompts[0], DecodeConfig(max_new_tokens=8, speculative=False))
        rows = []
        for budget in [int(b) for b in args.budgets.split(",")]:
            plain_s = spec_s = 0.0
            accepted = []
            for prompt in prompts:
                t = time.perf_counter()
                plain = engine.generate(prompt, DecodeConfig(max_new_tokens=args.tokens, speculative=False))
                plain_s += time.perf_counter() - t
                t = time.perf_counter()
                spec = engine.generate(prompt, DecodeConfig(max_new_tokens=args.tokens, tree_budget=budget))
                spec_s += time.perf_counter() - t
                assert spec.output_ids == plain.output_ids, "lossless check failed"
                accepted.append(spec.mean_accepted_len)
            rows.append({"tree_budget": budget, "speedup": round(plain_s / spec_s, 3),
                         "mean_accepted_len": round(float(np.mean(accepted)), 3),
                         "plain_tok_s": round(args.tokens * len(prompts) / plain_s, 2),
                         "spec_tok_s": round(args.tokens * len(prompts) / spec_s, 2)})
            print(json.dumps(rows[-1]))


if __name__ == "__main__":
    main()

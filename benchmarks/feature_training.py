"""Feature-draft training settings compared at equal CPU time on one kept set of the target's answers.

Trains one fresh draft per arm (`--arm '{"tokens_per_batch": 2048}'`: feature_train.TrainSettings
fields; by default the training-time test's depths, `--depths`) from the same data, each for the
steps its own measured pace fits in `--minutes` of process CPU time (so another process sharing
the machine slows a run without shortening it), with the cosine run to its end, then measures each
on the held-out answers and, with `--eval-prompts`, on the float32 target's greedy answers to those
prompts (what `specdec draft --eval-prompts` reports).

    .venv/bin/python benchmarks/feature_training.py TARGET --data DIR [--eval-prompts FILE]
        [--minutes 11] [--depths 1,2 | --arm JSON ...] [--threads 2]

TARGET: what `specdec draft` takes (a checkpoint directory, a GGUF file, `demo`); DIR: answers a
`specdec draft TARGET --kind feature --data DIR` run kept (its shard_*.pt files).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch

from specdec.pipeline.draft import feature_data, feature_eval, feature_train
from specdec.pipeline.draft.feature_model import FeatureDraft, frequent_vocab
from specdec.pipeline.draft.feature_stage import EVAL_DEPTH, EVAL_ROWS, VOCAB_SIZE, prompt_ids
from specdec.pipeline.draft.target import load_target, resolve_target
from specdec.pipeline.inputs.prompts import load_prompts
from specdec.pipeline.progress import SilentProgress

PROBE_STEPS = 8  # steps timed on a throwaway copy before a run's step count is fixed


def kept_rows(data: Path) -> tuple[list[feature_data.Row], list[feature_data.Row]]:
    """(train, held out) as the run that wrote `data` split them."""
    train: list[feature_data.Row] = []
    heldout: list[feature_data.Row] = []
    shards = sorted(data.glob(feature_data.SHARD_GLOB))
    if not shards:
        raise SystemExit(f"{data} holds no shard_*.pt: keep a run's answers with `specdec draft --data {data}`")
    for shard in shards:
        rows, _ = feature_data.load_shard(shard)
        more_train, more_heldout = feature_data.split(rows, len(train) + len(heldout))
        train += more_train
        heldout += more_heldout
    return train, heldout


def figures(quality: dict[str, Any]) -> dict[str, Any]:
    return {"alpha1": round(quality["alpha1"], 3), "alpha_cond": [round(a, 3) for a in quality["alpha_cond"][:4]],
            "tokens_per_round_chain4": round(quality["chain"]["4"]["tokens_per_round"], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target")
    parser.add_argument("--data", type=Path, required=True, help="a `specdec draft --data` directory")
    parser.add_argument("--eval-prompts", type=Path, help="JSONL prompts the drafts are also measured on")
    parser.add_argument("--minutes", type=float, default=11.0, help="process CPU minutes per thread, per run")
    parser.add_argument("--depths", default="1,2", help="training-time test depths to compare")
    parser.add_argument("--arm", action="append", default=[],
                        help="TrainSettings fields as JSON, one arm each (repeat); replaces --depths")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    known = {f.name for f in dataclasses.fields(feature_train.TrainSettings)} - {"steps", "bf16", "seed"}
    arms: list[dict[str, Any]] = []
    for text in args.arm:
        try:
            arm = json.loads(text)
        except json.JSONDecodeError as exc:
            parser.error(f"--arm {text!r} is not JSON ({exc.msg}): give an object such as '{{\"lr\": 0.002}}'")
        if not isinstance(arm, dict) or set(arm) - known:
            parser.error(f"--arm {text}: give a JSON object of {sorted(known)}")
        arms.append(arm)
    arms = arms or [{"depth": int(d)} for d in args.depths.split(",")]
    torch.set_num_threads(args.threads)
    target_config, tokenizer, target = load_target(resolve_target(args.target), lambda config: None)
    target.eval()
    for param in target.parameters():
        param.requires_grad_(False)
    feature_layer = int(target_config.num_hidden_layers) - 1
    vocab_size = int(target_config.vocab_size)
    train, heldout = kept_rows(args.data)
    on_prompts: list[feature_data.Row] = []
    if args.eval_prompts is not None:
        answering = feature_data.DataSettings()
        ids = prompt_ids(load_prompts(args.eval_prompts), tokenizer, vocab_size, answering.max_prompt)
        with torch.no_grad():
            on_prompts = feature_data.answer_all(target, tokenizer, ids, answering, feature_layer=feature_layer,
                                                 progress=SilentProgress(), description="answers")
    eos = feature_data.eos_ids(target, tokenizer)
    seen = torch.cat([torch.cat([r.ids[r.prompt_len:], r.labels[:r.prompt_len]]) for r in train])
    vocab = frequent_vocab(seen, min(VOCAB_SIZE, vocab_size), vocab_size, always=tuple(sorted(eos)))

    bf16 = feature_data.fastest_dtype(int(target_config.hidden_size),
                                      int(target_config.intermediate_size)) == torch.bfloat16

    def cpu() -> float:
        return float(time.process_time() / args.threads)

    print(json.dumps({"train_rows": len(train), "heldout_rows": len(heldout), "prompt_rows": len(on_prompts)}))
    for arm in arms:
        draft = FeatureDraft.from_target(target, layers=1, draft_vocab=vocab, seed=0, input_norms=True,
                                         feature_layer=feature_layer)
        feature_train.init_for_training(draft, 0)
        # a first call's kernel selection and allocation are no part of the pace
        warm = feature_train.TrainSettings(**arm, bf16=bf16, steps=2)
        feature_train.train(copy.deepcopy(draft), train, warm, clock=cpu, deadline=None, progress=SilentProgress())
        probe = feature_train.TrainSettings(**arm, bf16=bf16, steps=PROBE_STEPS)
        began = cpu()
        feature_train.train(copy.deepcopy(draft), train, probe, clock=cpu, deadline=None, progress=SilentProgress())
        steps = max(1, int(args.minutes * 60 / ((cpu() - began) / PROBE_STEPS)))
        settings = feature_train.TrainSettings(**arm, bf16=bf16, steps=steps)
        began = cpu()
        feature_train.train(draft, train, settings, clock=cpu, deadline=None, progress=SilentProgress())
        spent = cpu() - began
        result = {"arm": arm, "steps": steps, "cpu_minutes": round(spent / 60, 1),
                  "heldout": figures(feature_eval.evaluate(draft, heldout[:EVAL_ROWS], depth=EVAL_DEPTH, bf16=bf16))}
        if on_prompts:
            result["eval_prompts"] = figures(feature_eval.evaluate(draft, on_prompts, depth=EVAL_DEPTH))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

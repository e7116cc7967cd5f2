"""`specdec draft TARGET -o DRAFT_DIR`: a draft made from the target, for users who have none.

Two kinds (`DraftMethod`): a feature draft (feature_stage.py, EAGLE-style: one decoder layer over
the target's own hidden states) or a pruned one, below. Structured pruning at the target's width
(pruning.py), then distillation on the target's own text (distill.py); the output is a Hugging
Face checkpoint (config, safetensors in the target's dtype, the target's tokenizer) whose
embedding, final norm and head are the target's tensors bit for bit, plus `draft_report.json`
(report.py). `specdec export TARGET --draft DRAFT_DIR` takes it.

The output is staged and renamed into place at the end; the training state is checkpointed next
to it (`.NAME.draft-state.pt`) every few minutes and removed on success, so `--resume` continues
an interrupted run to the same weights.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdec.pipeline.bundle.locks import hold_output
from specdec.pipeline.bundle.staging import StagedDirectory, check_output_dir
from specdec.pipeline.checkpoints.source import CheckpointSource
from specdec.pipeline.draft import budget, distill, pruning, report
from specdec.pipeline.draft.config import DraftConfig, DraftMethod, MadeDraft
from specdec.pipeline.draft.feature_stage import make_feature_draft
from specdec.pipeline.draft.target import load_target, resolve_target
from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.inputs.calibration import read_tokens
from specdec.pipeline.progress import Progress, SilentProgress

log = logging.getLogger(__name__)

STATE_VERSION = 1


# chosen by measurement on the 61.6M realistic target (benchmarks/RESULTS-archive.md, "specdec draft: smaller
# sizes against the demo draft"): 0.1 keeps all 4 of its working layers (agreement 0.85-1.0 with
# the target; faster than the demo draft in 6 of 6 turns, float and w8a8: "specdec draft with its
# defaults against the demo draft", 2026-12-04); 0.03 (2 layers) and 0.02 (1 layer) agreed 0.58
# and 0.38 after the same 8-minute budget, below the demo draft's 0.64, so a shallower default
# drafts worse than the demo draft
DEFAULT_SIZE = 0.1
END_MARGIN = 0.05  # of the budget, kept for saving the draft
IMPORTANCE_BATCH = 4  # probe rows a pass (pruning.measure)


def state_path(output: Path) -> Path:
    return output.parent / f".{output.name}.draft-state.pt"


def _load(source: CheckpointSource, config: DraftConfig) -> tuple[Any, Any, Any]:
    """Config, tokenizer and float32 model; unsupported architectures and bad counts fail before the weights."""

    def check(target_config: Any) -> None:
        pruning.check_counts(pruning.geometry(target_config), layers=config.layers, heads=config.heads,
                             ffn=config.ffn)

    return load_target(source, check)


def _fingerprint(target: CheckpointSource, config: DraftConfig) -> str:
    digest = hashlib.sha256(json.dumps(config.record(), sort_keys=True, default=str).encode())
    for file in target.files():
        digest.update(file.name.encode() + str(file.stat().st_size).encode())
    return digest.hexdigest()


def _resume_state(config: DraftConfig, fingerprint: str) -> dict[str, Any] | None:
    import torch

    path = state_path(config.output)
    if not config.resume:
        return None
    if not path.is_file():
        raise InputError(f"nothing to resume: no checkpoint at {path}", f"run without {setting('resume')}")
    state: dict[str, Any] = torch.load(path, weights_only=False)
    if state.get("version") != STATE_VERSION or state.get("fingerprint") != fingerprint:
        raise InputError(f"the checkpoint {path} was made for another target or other options",
                         f"repeat that run's options, or run without {setting('resume')}")
    return state


def make_draft(config: DraftConfig, progress: Progress | None = None,
               step_cost: budget.StepCost | None = None) -> MadeDraft:
    """`step_cost`: the target's step time, instead of measuring it (tests size a budget with it)."""
    import torch
    from transformers.utils import logging as hf_logging

    threads, bars = torch.get_num_threads(), hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # progress is ours to report
    try:
        with hold_output(config.output):  # one writer of the output for the whole run, not only its last step
            return MAKERS[config.kind](config, progress, step_cost)
    finally:
        torch.set_num_threads(threads)  # config.threads is this run's, not the process's
        if bars:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def _chunk_sizer(cost: budget.StepCost, first: budget.PhasePlan, deadline: float, *,
                 samples: int, user_text: bool) -> Callable[[int], int]:
    """Rows of each text chunk: the planned first chunk, then what fits the share's remaining time,
    the model rescaled by what the previous chunk really took against its prediction."""
    last: dict[str, float] = {}

    def rows(done: int) -> int:
        now = time.time()
        scale = 1.0
        if last:
            scale = max(1e-3, (now - last["began"]) / max(1e-9, last["predicted"]))
        count = first.rows if done == 0 else budget.next_chunk(
            budget.StepCost(cost.fixed_s * scale, cost.token_s * scale), deadline - now,
            rows=min(distill.GENERATION_BATCH, samples - done), seq=first.tokens, user_text=user_text)
        last.update(began=now, predicted=budget.chunk_seconds(cost, max(1, count), first.tokens, user_text=user_text))
        return count

    return rows


def _budget_report(planned: dict[str, dict[str, Any]], phases: dict[str, float],
                   minutes: float | None) -> dict[str, Any] | None:
    """Planned against spent seconds per phase (the text phase's spent time includes loading the target)."""
    if minutes is None:
        return None
    spent = {"text": "corpus_s", "importance": "importance_s", "distillation": "train_s"}
    return {"seconds": minutes * 60, "phases": {
        name: planned.get(name, {}) | {"spent_s": round(phases[key], 1) if key in phases else None}
        for name, key in spent.items()}}


def _make_draft(config: DraftConfig, progress: Progress | None, step_cost: budget.StepCost | None) -> MadeDraft:
    import torch

    progress = progress or SilentProgress()
    started = time.time()
    source = resolve_target(config.target)
    target_path = Path(source.path)
    check_output_dir(config.output, force=config.force, sources=(target_path, config.calib))
    if config.calib is not None and not config.calib.is_file():
        raise InputError(f"{setting('calib')} file '{config.calib}' does not exist", "pass a text or JSONL file")
    fingerprint = _fingerprint(source, config)
    resume = _resume_state(config, fingerprint)
    torch.set_num_threads(config.threads or distill.default_threads())
    torch.manual_seed(config.seed)
    target_config, tokenizer, target = _load(source, config)
    shape = pruning.geometry(target_config)
    for param in target.parameters():
        param.requires_grad_(False)
    phases: dict[str, float] = {}
    budget_s = config.budget_minutes * 60 if config.budget_minutes is not None else None
    # --minutes bounds the whole run: loading and the target's text get up to CORPUS_SHARE of it, the
    # importance probe IMPORTANCE_SHARE, distillation what is left less the evaluation's measured
    # cost and a margin; the first chunk and the probe are sized from the target's measured step time
    end = started + budget_s * (1 - END_MARGIN) if budget_s is not None else None
    planned: dict[str, dict[str, Any]] = {}
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id or 0

    if resume is None:
        cost = (step_cost or budget.measure(target, int(start))) if budget_s is not None else None
        calib = (read_tokens(config.calib, lambda text: tokenizer.encode(text, add_special_tokens=False), shape.vocab)
                 if config.calib else None)
        seq, chunk_rows = config.seq, None
        if cost is not None and budget_s is not None:
            text = budget.first_chunk(cost, started + budget_s * budget.CORPUS_SHARE - time.time(),
                                      rows=min(distill.GENERATION_BATCH, config.samples), seq=config.seq,
                                      user_text=calib is not None)
            seq, chunk_rows = text.tokens, _chunk_sizer(cost, text, started + budget_s * budget.CORPUS_SHARE,
                                                        samples=config.samples, user_text=calib is not None)
            planned["text"] = {"first_chunk": text.record(), "share_s": round(budget_s * budget.CORPUS_SHARE, 1)}
            # the floor over its share: the budget will not be kept, which the user should see
            log.log(logging.INFO if text.fits else logging.WARNING,
                    "target step %.3f s + %.4f s a token: first chunk %d rows of %d tokens (%.0f s of %.0f s%s)",
                    cost.fixed_s, cost.token_s, text.rows, text.tokens, text.seconds, text.share_s,
                    "" if text.fits else ", the floor: over the share")
        corpus = distill.build_corpus(target, samples=config.samples, seq=seq, seed=config.seed,
                                      start_token=int(start), calib=calib, progress=progress,
                                      chunk_rows=chunk_rows)
        phases["corpus_s"] = time.time() - started
        rows, tokens = min(budget.PROBE_ROWS, len(corpus.train)), min(budget.PROBE_TOKENS, seq)
        if cost is not None and budget_s is not None:
            probe = budget.probe(cost, shape, budget_s * budget.IMPORTANCE_SHARE, available_rows=len(corpus.train),
                                 seq=seq, batch=IMPORTANCE_BATCH)
            rows, tokens = probe.rows, probe.tokens
            planned["importance"] = probe.record()
            log.log(logging.INFO if probe.fits else logging.WARNING,
                    "importance probe: %d rows of %d tokens (%.0f s of %.0f s%s)", rows, tokens, probe.seconds,
                    probe.share_s, "" if probe.fits else ", the floor: over the share")
        with progress.task("measuring layer, head and channel importance"):
            for param in target.parameters():
                param.requires_grad_(True)
            order = torch.randperm(len(corpus.train), generator=torch.Generator().manual_seed(config.seed))
            importance = pruning.measure(
                target, distill.chunks(corpus.train[order[:rows], :tokens + 1], IMPORTANCE_BATCH), shape)
            for param in target.parameters():
                param.requires_grad_(False)
        plan = pruning.choose(importance, shape, size=config.size or DEFAULT_SIZE, layers=config.layers,
                              heads=config.heads, ffn=config.ffn)
        phases["importance_s"] = time.time() - started - phases["corpus_s"]
        training: dict[str, Any] | None = None
    else:
        corpus = distill.Corpus.from_state(resume["corpus"])
        importance = pruning.Importance(**resume["importance"])
        plan = pruning.PrunePlan(**resume["plan"])
        planned = resume.get("budget", {})
        training = resume["training"]
    draft = pruning.build(target, plan, shape)
    evaluated = time.time()
    tops = distill.target_tops(target, corpus)
    at_init = distill.evaluate(target, draft, corpus, tops)
    # the final evaluation costs the draft's half of this one; the save costs less than that again
    deadline = end - (time.time() - evaluated) if end is not None else None
    pruned = {k: v.clone() for k, v in draft.state_dict().items()}
    log.info("draft at init: %s (%s)", at_init, phases)
    base = {"version": STATE_VERSION, "fingerprint": fingerprint, "corpus": corpus.state(),
            "importance": dataclasses.asdict(importance), "plan": dataclasses.asdict(plan), "budget": planned}

    def save(training_state: dict[str, Any]) -> None:
        distill.save_state(state_path(config.output), base | {"training": training_state})

    settings = distill.TrainSettings(steps=config.steps, minutes=config.minutes, batch=config.batch, lr=config.lr,
                                     seed=config.seed, checkpoint_minutes=config.checkpoint_minutes)
    began = time.time()
    trained = distill.train(target, draft, corpus, settings, deadline=deadline, resume=training, save=save,
                            progress=progress)
    phases["train_s"] = time.time() - began
    if deadline is not None:
        planned["distillation"] = {"share_s": round(deadline - began, 1)}
    quality = distill.evaluate(target, draft, corpus, tops)
    kept = "distilled"
    if quality["heldout_agreement"] < at_init["heldout_agreement"]:
        # pruning alone agreed better (a target whose dropped parts did nothing): training only moved
        # the draft off the target; the pruned weights are the better draft
        draft.load_state_dict(pruned)
        quality, kept = at_init, "pruned"
    dtype = getattr(target_config, "dtype", None) or torch.float32
    saved = draft.to(getattr(torch, str(dtype).removeprefix("torch.")) if not isinstance(dtype, torch.dtype)
                     else dtype)
    reference = target.to(saved.dtype)  # the target as its checkpoint stores it
    figures = report.sizes(reference, saved)
    result = {
        "target": source.path, "config": config.record(),
        "plan": {"layers": list(plan.layers), "kv_heads": plan.kv_heads, "intermediate": plan.intermediate,
                 "groups": [list(g) for g in plan.groups]},
        "importance": {"layer_kl": [round(v, 5) for v in importance.layer_kl]},
        "sizes": figures, "own_share_of_target": figures["own_bytes"] / figures["target_bytes"],
        "quality": quality, "quality_at_init": at_init, "kept": kept, "steps": trained["steps"],
        "final_kl": trained["final_kl"], "corpus_rows": {"train": len(corpus.train), "heldout": len(corpus.heldout),
                                                         "policy": len(corpus.policy)},
        "threads": distill.threads_note(), "phases_s": {k: round(v, 1) for k, v in phases.items()},
        "minutes": (time.time() - started) / 60,
        "budget": _budget_report(planned, phases, config.budget_minutes),
    }
    with StagedDirectory(config.output, force=config.force, sources=(target_path, config.calib)) as staged:
        saved.save_pretrained(str(staged.dir))
        tokenizer.save_pretrained(str(staged.dir))
        generation = target_path / "generation_config.json"
        if not source.is_gguf and generation.is_file():
            shutil.copy(generation, staged.dir / "generation_config.json")
        result["files"] = [*sorted(p.name for p in staged.dir.iterdir()), report.REPORT_NAME]
        report.write(staged.dir, result)
        path = staged.commit()
    state_path(config.output).unlink(missing_ok=True)
    return MadeDraft(path=path, report=result)


Maker = Callable[[DraftConfig, Progress | None, budget.StepCost | None], MadeDraft]
MAKERS: dict[DraftMethod, Maker] = {  # by --kind
    DraftMethod.pruned: _make_draft,
    DraftMethod.feature: lambda config, progress, _: make_feature_draft(config, progress),
}

"""`specdec draft TARGET --kind feature -o DRAFT_DIR`: an EAGLE-style feature draft made from the target.

1. **Data** (feature_data.py): the target answers chat-like prompts greedily (chat_prompts.py; windows
   of `--calib` text for a target without a chat template or when given), keeping its feature and
   its greedy choice at every position: up to DATA_SHARE of the budget, loading included.
2. **Training** (feature_train.py): one decoder layer (feature_model.py's format) on those rows,
   the rest of the budget less END_MARGIN, with the step count fixed from the first steps' time.
3. **Evaluation** (feature_eval.py) on held-out answers: acceptance by depth and tokens per round;
   with `--eval-prompts FILE` also on the target's greedy answers to the user's own prompts, which
   the built-in held-out answers can overstate (they come from the same prompt bank as the training
   answers; docs/draft.md). Those answers are made in float32 right after the data, on the budget.

The work directory `.NAME.feature-work` next to the output holds the answers (one shard a batch) and
the training checkpoint while the run lasts, so `--resume` continues after the last shard or from
the checkpoint with the same weights; it is removed on success. `--data DIR` keeps the answers in
DIR instead, and a later run with the same target, seed and data options reuses them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from specdec.pipeline.bundle.staging import StagedDirectory, check_output_dir
from specdec.pipeline.checkpoints.source import CheckpointSource
from specdec.pipeline.draft import device as draft_device
from specdec.pipeline.draft import feature_data, feature_eval, feature_train, prompt_source, report, self_prompts
from specdec.pipeline.draft.clock import Clock, ClockKind
from specdec.pipeline.draft.config import SELF_SHARE, DraftConfig, MadeDraft, RequestSource
from specdec.pipeline.draft.distill import default_threads
from specdec.pipeline.draft.feature_model import FeatureDraft, frequent_vocab
from specdec.pipeline.draft.pruning import SUPPORTED
from specdec.pipeline.draft.target import load_target, resolve_target
from specdec.pipeline.errors import InputError, UnsupportedModelError, setting
from specdec.pipeline.inputs.calibration import read_tokens
from specdec.pipeline.inputs.prompts import PromptItem, load_prompts
from specdec.pipeline.progress import Progress, SilentProgress

log = logging.getLogger(__name__)

STATE_VERSION = 1
# Of the budget: the target's answers (loading included) get DATA_SHARE, training the rest less
# END_MARGIN (evaluation and saving). 0.5 before. The draft overfits its answers (training top-1
# 0.94 against 0.60 held out at the end of a default run) and its acceptance levels off with the
# steps: on one AVX2 VM's 134k answer tokens, the demo's requests drafted 0.338 / 0.379 / 0.418 /
# 0.428 after 120 / 241 / 520 / 889 steps, so answers buy more than steps past ~500; default runs
# at 0.7 drafted them at 0.445 and 0.448 against 0.424 and 0.428 at 0.5 (196k answer tokens
# against 134k; benchmarks/RESULTS-archive.md, 2026-12-07 AVX2)
DATA_SHARE = 0.7
END_MARGIN = 0.04
ANSWER_TOKENS = 192  # the held-out chat answers of SmolLM2-135M average ~100 tokens; few run longer
VOCAB_SIZE = 8192  # draft vocabulary (the research prototype measured no acceptance lost against 49,152)
PROMPTS_WITHOUT_BUDGET = 1024  # prompts answered when only --steps bounds the run
EVAL_ROWS = 64  # held-out answers the report's acceptance is measured on
EVAL_DEPTH = 6


def work_dir(output: Path) -> Path:
    return output.parent / f".{output.name}.feature-work"


def _fingerprint(target: CheckpointSource, record: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode())
    for file in target.files():
        digest.update(file.name.encode() + str(file.stat().st_size).encode())
    return digest.hexdigest()


def _data_record(config: DraftConfig, settings: feature_data.DataSettings) -> dict[str, Any]:
    """What decides the target's answers (a data directory made with other values is not reused)."""
    requests = (hashlib.sha256(config.train_prompts.read_bytes()).hexdigest()
                if config.train_prompts is not None else None)
    return {"seed": config.seed, "calib": str(config.calib) if config.calib else None,
            "settings": settings.__dict__, "version": STATE_VERSION} | ({"train_prompts": requests} if requests else {})


def _warn_shared(train_ids: list[list[int]], eval_ids: list[list[int]] | None) -> None:
    """Acceptance measured on prompts the draft trained on is not held out: say so."""
    shared = len({tuple(p) for p in train_ids} & {tuple(p) for p in eval_ids or []})
    if shared:
        log.warning("%d of the %d evaluation prompts are also training prompts: their acceptance is not held out",
                    shared, len(eval_ids or []))


def _check_target(target_config: Any) -> None:
    """Before the weights are read: the architectures the feature draft's layers are made for."""
    model_type = getattr(target_config, "model_type", "?")
    if model_type not in SUPPORTED:
        raise UnsupportedModelError(f"specdec draft --kind feature cannot train on a {model_type} target yet",
                                    f"use a {', '.join(SUPPORTED)} target, or pass a draft to export")


def _prepare_work(config: DraftConfig, fingerprint: str, data_key: str) -> tuple[Path, dict[str, Any] | None]:
    """The work directory (and the training checkpoint to resume from), checked against this run."""
    work = config.data or work_dir(config.output)
    meta_path = work / "run.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else None
    checkpoint = work / "train-state.pt"
    if config.resume:
        if meta is None or meta.get("fingerprint") != fingerprint:
            raise InputError(f"nothing to resume for these options in {work}" if meta is None else
                             f"the run in {work} was made for another target or other options",
                             f"repeat that run's options, or run without {setting('resume')}")
    elif config.data is not None and meta is not None and meta.get("data") != data_key:
        raise InputError(f"{setting('data')} '{work}' holds answers made with another seed, text or settings",
                         f"pass another {setting('data')} directory, or the options that made it")
    elif config.data is None and work.exists():
        shutil.rmtree(work)  # an interrupted run's leftovers: this run starts over
    if config.data is not None and not config.resume:
        checkpoint.unlink(missing_ok=True)  # answers are reused, training starts over
    work.mkdir(parents=True, exist_ok=True)
    meta_path.write_text(json.dumps({"fingerprint": fingerprint, "data": data_key}) + "\n")
    resume = None
    if config.resume and checkpoint.is_file():
        import torch

        resume = torch.load(checkpoint, weights_only=False, map_location="cpu")  # train() moves it to its device
    return work, resume


def _spent_on_shards(work: Path) -> float:
    """Clock seconds the shards already in `work` took (their sidecar records)."""
    shards = sorted(work.glob(feature_data.SHARD_GLOB))
    return sum(float(feature_data.read_sidecar(shard).get("seconds", 0.0)) for shard in shards)


def make_feature_draft(config: DraftConfig, progress: Progress | None = None) -> MadeDraft:
    import torch

    progress = progress or SilentProgress()
    wall_began = time.time()
    source = resolve_target(config.target)
    # the output may not touch what the run reads
    sources = (Path(source.path), config.calib, config.eval_prompts, config.train_prompts)
    check_output_dir(config.output, force=config.force, sources=sources)
    if config.calib is not None and not config.calib.is_file():
        raise InputError(f"{setting('calib')} file '{config.calib}' does not exist", "pass a text or JSONL file")
    for key in ("eval_prompts", "train_prompts"):
        path = getattr(config, key)
        if path is not None and not path.is_file():
            raise InputError(f"{setting(key)} file '{path}' does not exist",
                             "pass a JSONL file with one prompt a line ('text', 'messages' or 'input_ids')")
    eval_items = load_prompts(config.eval_prompts) if config.eval_prompts is not None else None
    train_items = load_prompts(config.train_prompts) if config.train_prompts is not None else None
    layers = config.layers or 1
    device = draft_device.resolve(config.torch_device)  # before any weight is read: `cuda` without one is refused
    if device.type != "cpu" and config.clock is ClockKind.cpu:
        raise InputError(f"{setting('clock')} cpu counts this process's CPU time, not the GPU's "
                         f"({draft_device.describe(device)})",
                         f"drop {setting('clock')} (wall time), or pass {setting('torch_device')} cpu")
    threads = config.threads or default_threads()
    torch.set_num_threads(threads)
    clock = Clock(config.clock or ClockKind.wall, threads)  # loading the target counts against the budget
    target_config, tokenizer, target = load_target(source, _check_target)
    for param in target.parameters():
        param.requires_grad_(False)
    requests = config.requests or RequestSource.builtin
    settings = feature_data.DataSettings(max_new=config.answer_tokens or ANSWER_TOKENS, seed=config.seed,
                                         self_share=SELF_SHARE[requests])
    if requests is not RequestSource.builtin and self_prompts.user_turn_start(tokenizer) is None:
        raise InputError(f"{setting('requests')} {requests} needs a chat template that renders a user turn, "
                         f"and {source.path}'s tokenizer has none",
                         f"use {setting('requests')} builtin, or {setting('calib')} text to continue")
    eval_ids = (prompt_ids(eval_items, tokenizer, int(target_config.vocab_size), settings.max_prompt)
                if eval_items is not None else None)
    train_ids = (prompt_ids(train_items, tokenizer, int(target_config.vocab_size), settings.max_prompt,
                            option="train_prompts") if train_items is not None else [])
    _warn_shared(train_ids, eval_ids)
    data_key = hashlib.sha256(json.dumps(_data_record(config, settings), sort_keys=True).encode()).hexdigest()
    # --resume: the same requests too, and the same device (a GPU's arithmetic is not the CPU's)
    fingerprint = _fingerprint(source, config.record() | {"data": data_key, "device": device.type})
    work, resume = _prepare_work(config, fingerprint, data_key)
    clock.offset = _spent_on_shards(work)  # what an interrupted run spent on the answers it kept
    budget_s = config.budget_minutes * 60 if config.budget_minutes is not None else None
    phases: dict[str, float] = {}

    user_text = (read_tokens(config.calib, lambda text: tokenizer.encode(text, add_special_tokens=False),
                             int(target_config.vocab_size)) if config.calib else None)
    dtype = feature_data.fastest_dtype(int(target_config.hidden_size), int(target_config.intermediate_size),
                                       device=device)
    generator = answer_model(target, device, dtype)
    prompts = config.max_prompts or (None if budget_s is not None else PROMPTS_WITHOUT_BUDGET)
    batch = min(settings.batch, prompts) if prompts else settings.batch
    settings = feature_data.DataSettings(**{**settings.__dict__, "batch": batch})
    data_deadline = budget_s * DATA_SHARE if budget_s is not None else float("inf")
    max_batches = -(-prompts // batch) if prompts else None
    feature_layer = int(target_config.num_hidden_layers) - 1
    corpus = feature_data.build(generator, tokenizer, work, settings, feature_layer=feature_layer, clock=clock,
                                deadline=data_deadline, user_text=user_text, progress=progress,
                                max_batches=max_batches, requests=train_ids)
    # the float32 answers to --eval-prompts reuse a float32 generator; a bfloat16 one goes first
    float32_runner = generator if dtype == torch.float32 else None
    del generator
    phases["data_s"] = clock()
    if not corpus.train:
        raise InputError("the target wrote no answer to train on (every answer ended at once)",
                         f"give more {setting('minutes')} or text with {setting('calib')}")
    log.info("data: %d batches, %d answer + %d prompt tokens, %.0f s (%s on %s)", corpus.batches,
             corpus.generated_tokens, corpus.prompt_tokens, corpus.seconds, dtype, device)
    eval_rows: list[feature_data.Row] = []
    if eval_ids is not None:
        # float32, as the bundle's target decodes: bfloat16 answers and features measured lower
        # acceptance (0.363 against 0.404 on the SmolLM2 demo's requests, docs/draft.md)
        began = clock()
        evaluator = float32_runner if float32_runner is not None else answer_model(target, device, torch.float32)
        with torch.no_grad():
            eval_rows = feature_data.answer_all(evaluator, tokenizer, eval_ids, settings,
                                                feature_layer=feature_layer, progress=progress,
                                                description="the target answers your evaluation prompts")
        del evaluator
        phases["eval_prompts_s"] = clock() - began
    del float32_runner

    eos = feature_data.eos_ids(target, tokenizer)
    vocab_size = min(config.vocab_size or VOCAB_SIZE, int(target_config.vocab_size))
    seen = torch.cat([torch.cat([r.ids[r.prompt_len:], r.labels[:r.prompt_len]]) for r in corpus.train])
    vocab = None if vocab_size >= int(target_config.vocab_size) else \
        frequent_vocab(seen, vocab_size, int(target_config.vocab_size), always=tuple(sorted(eos)))
    draft = FeatureDraft.from_target(target, layers=layers, draft_vocab=vocab, seed=config.seed, input_norms=True,
                                     feature_layer=feature_layer)
    feature_train.init_for_training(draft, config.seed)  # on the CPU: the same start on any device
    draft.to(device)
    bf16 = dtype == torch.bfloat16
    train_settings = feature_train.TrainSettings(lr=config.lr, seed=config.seed, steps=config.steps, bf16=bf16)
    train_deadline = budget_s * (1 - END_MARGIN) if budget_s is not None else None
    checkpoint_path = work / "train-state.pt"

    def checkpoint(state: dict[str, Any]) -> None:
        feature_train.save_checkpoint(checkpoint_path, state)

    began = clock()
    trained = feature_train.train(draft, corpus.train, train_settings, clock=clock, deadline=train_deadline,
                                  progress=progress, checkpoint=checkpoint if config.checkpoint_minutes > 0 else None,
                                  checkpoint_s=config.checkpoint_minutes * 60, resume=resume)
    phases["train_s"] = clock() - began
    began = clock()
    with progress.task("measuring acceptance on held-out answers"):
        quality = feature_eval.evaluate(draft, corpus.heldout[:EVAL_ROWS], depth=EVAL_DEPTH, bf16=bf16)
        on_prompts = (feature_eval.evaluate(draft, eval_rows, depth=EVAL_DEPTH) | {"file": str(config.eval_prompts)}
                      if config.eval_prompts is not None else None)
    phases["eval_s"] = clock() - began
    draft.cpu()  # the files, and what the report measures below, are read from the CPU
    coverage = _coverage(draft.vocab, corpus.heldout)
    result: dict[str, Any] = {
        "kind": "feature", "target": source.path, "config": config.record(),
        "draft": {"layers": layers, "feature_layer": feature_layer, "vocab_size": int(draft.vocab.numel()),
                  "target_vocab_size": int(target_config.vocab_size), "heldout_vocab_coverage": coverage},
        "sizes": _sizes(draft, target),
        "quality": quality,
        **({"quality_eval_prompts": on_prompts} if on_prompts is not None else {}),
        "data": {"batches": corpus.batches, "batches_by_prompts": corpus.sources,
                 "rows": len(corpus.train) + len(corpus.heldout),
                 "answer_tokens": corpus.generated_tokens, "prompt_tokens": corpus.prompt_tokens,
                 "dtype": str(dtype).removeprefix("torch."), "seconds": round(corpus.seconds, 1),
                 "kept": str(config.data) if config.data else None},
        "training": {**train_settings.record(), "steps": trained.step, "planned_steps": trained.total},
        "clock": str(config.clock or ClockKind.wall), "threads": threads, "device": draft_device.describe(device),
        "phases_s": {k: round(v, 1) for k, v in phases.items()},
        "minutes": clock() / 60, "wall_minutes": (time.time() - wall_began) / 60,
        "budget_minutes": config.budget_minutes,
    }
    with StagedDirectory(config.output, force=config.force, sources=sources) as staged:
        draft.save(staged.dir, tokenizer)
        result["files"] = [*sorted(p.name for p in staged.dir.iterdir()), report.REPORT_NAME]
        report.write(staged.dir, result)
        path = staged.commit()
    if config.data is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        checkpoint_path.unlink(missing_ok=True)
    return MadeDraft(path=path, report=result)


def answer_model(target: Any, device: Any, dtype: Any) -> Any:
    """The target as it answers on `device` in `dtype`: itself on the CPU in float32 (its weights stay
    on the CPU, where the draft is made from them), else a copy."""
    import torch

    if device.type == "cpu" and dtype == torch.float32:
        return target
    return copy.deepcopy(target).to(device=device, dtype=dtype)


def prompt_ids(items: list[PromptItem], tokenizer: Any, vocab: int, max_prompt: int,
               option: str = "eval_prompts") -> list[list[int]]:
    """Each prompt of `--eval-prompts` or `--train-prompts` (`option`, named in errors) as the target
    reads it: `input_ids` as given, `messages` through its chat
    template, `text` as one user message when it has a template (plain text otherwise); the last
    `max_prompt` tokens, as the training prompts are cut. Not inputs.prompts.prompt_tokens: that reads a
    bundle's tokenizer files, and the target here may be a GGUF file whose tokenizer exists only as
    transformers loaded it; going through feature_data's encoders also renders them as the training
    prompts were."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    prompts = []
    for item in items:
        if item.input_ids is not None:
            ids = item.input_ids
            if max(ids) >= vocab or min(ids) < 0:
                raise InputError(f"{setting(option)} prompt '{item.id}' has token ids outside the target's "
                                 f"vocabulary (0..{vocab - 1})", "give text or messages, or ids of this target")
        elif item.messages is not None:
            if not has_template:
                raise InputError(f"{setting(option)} prompt '{item.id}' gives messages but the target has "
                                 "no chat template", "give 'text' lines for this target")
            ids = prompt_source.encode_messages(tokenizer, item.messages, max_prompt)
        elif has_template:
            ids = prompt_source.encode_chat(tokenizer, item.text or "", max_prompt)
        else:
            ids = [int(i) for i in tokenizer.encode(item.text or "")]
        if not ids:
            raise InputError(f"{setting(option)} prompt '{item.id}' has no tokens", "give it some text")
        prompts.append(ids[-max_prompt:])
    return prompts


def _coverage(vocab: Any, rows: list[feature_data.Row]) -> float | None:
    """Share of the held-out answers' tokens the draft vocabulary holds (what it can propose at all)."""
    import torch

    if not rows:
        return None
    tokens = torch.cat([r.ids[r.prompt_len:] for r in rows])
    return float(torch.isin(tokens, vocab).float().mean())


def _sizes(draft: Any, target: Any) -> dict[str, int]:
    """Parameters the draft stores (the target's embedding is shared, not stored) against the target's."""
    own = draft.own_parameters()
    state = draft.state_for_file()
    return {"own_params": own, "own_bytes": sum(t.numel() * t.element_size() for t in state.values()),
            "target_params": sum(p.numel() for p in target.parameters())}

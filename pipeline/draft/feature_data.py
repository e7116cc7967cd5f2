"""Training data of a feature draft: the target's own greedy answers and its features at every position.

The target answers chat-like prompts (prompt_source.py; windows of the user's text when the
checkpoint has no chat template) greedily, many rows a batch with a KV cache, rows leaving the
batch as they end. Each row keeps the feature the draft will read (the output of decoder layer
`feature_layer`, before the final norm) at every position the target processed, and the target's
greedy choice after every prompt position (the prefill computes those logits' inputs anyway): they
count toward the draft vocabulary, and train the draft with `TrainSettings.prompt_weight`. Which
prompts it answers is prompt_source.py's.

Generation dominates a feature draft's budget, so it runs in bfloat16 where the device multiplies
bfloat16 faster than float32 (CPUs with AMX / AVX512-BF16: measured 1.8-2.4x the tokens per
CPU-second; GPUs; `fastest_dtype` probes it), else in float32. It runs on the model's device (a GPU
with `--torch-device`, device.py); the rows come back to the CPU. bfloat16 greedy text drifts from
float32's after some tens of tokens, but it stays the target's kind of text and every label is that
model's own greedy choice after the row's prefix; the features differ from float32's in the last
bits, about as much as a quantized target's do at run time.

Batches are written as shards (`shard_NNNN.pt`) into a work directory as they finish, so an
interrupted run resumes after the last one; a batch still running at the deadline stops there,
its rows cut (still the target's text).
"""

from __future__ import annotations

import enum
import functools
import json
import logging
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specdec.pipeline.draft import decode_cache
from specdec.pipeline.draft.data_pace import BatchPace, prompt_cells, too_late
from specdec.pipeline.draft.device import model_device, synchronize
from specdec.pipeline.draft.feature_model import decoder_layers, layer_output
from specdec.pipeline.draft.prompt_source import PromptSource, request_writer
from specdec.pipeline.errors import InputError
from specdec.pipeline.progress import Progress

log = logging.getLogger(__name__)

SHARD_GLOB = "shard_*.pt"
HOLDOUT = 16  # 1 row in HOLDOUT is held out for the report's acceptance
_LOGIT_CHUNK = 64  # prompt positions whose logits are formed at once (49k-wide rows add up)


class GenerationDtype(enum.StrEnum):
    auto = "auto"  # the faster of the two on this CPU (fastest_dtype)
    float32 = "float32"
    bfloat16 = "bfloat16"


@dataclass(frozen=True)
class DataSettings:
    batch: int = 128  # rows generated together: wider batches read the weights once for more tokens
    max_new: int = 192  # tokens an answer may take
    max_prompt: int = 384  # prompt tokens kept (longer passages are cut at the front)
    # N > 0: every N-th batch asks about the target's earlier answers (chat_prompts.recycled). Off: on
    # SmolLM2-135M on an AVX2 VM (float32) those batches took 34 % of the data time for 17 % of the
    # answer tokens (their long prompts' pass); without them a 30-minute run (CPU clock, one thread,
    # side by side with N = 4) kept 154k answer tokens instead of 126k and drafted the demo's requests
    # at 0.429 against 0.408, better on its pasted-text chat requests too (0.425 against 0.377)
    recycle_every: int = 0
    self_share: float = 0.0  # of the other batches, the share whose requests the target writes (self_prompts.py)
    seed: int = 0


@dataclass
class Row:
    ids: torch.Tensor  # int64 [L]: prompt + answer
    prompt_len: int
    features: torch.Tensor  # float16 [L - 1, H]: feature of positions 0 .. L - 2
    labels: torch.Tensor  # int64 [L - 1]: the target's greedy token after positions 0 .. L - 2


def fastest_dtype(hidden: int, intermediate: int, rows: int = 128, repeats: int = 3,
                  device: torch.device | None = None) -> torch.dtype:
    """bfloat16 when `device` (default the CPU) multiplies a decode step's shapes faster in it than in
    float32 (on CPUs: AMX or AVX512-BF16; without those, bfloat16 matmuls are emulated and slower;
    on GPUs: tensor cores), else float32."""
    device = device or torch.device("cpu")
    best: dict[torch.dtype, float] = {}
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(rows, hidden, device=device).to(dtype)
        w = torch.randn(intermediate, hidden, device=device).to(dtype)
        torch.nn.functional.linear(x, w)  # warm-up: packing, lazy initialisation
        times = []
        for _ in range(repeats):
            synchronize(device)
            began = time.perf_counter()
            for _ in range(4):
                torch.nn.functional.linear(x, w)
            synchronize(device)
            times.append(time.perf_counter() - began)
        best[dtype] = min(times)
    choice = torch.bfloat16 if best[torch.bfloat16] < 0.8 * best[torch.float32] else torch.float32
    log.info("matmul probe on %s: float32 %.3f ms, bfloat16 %.3f ms: generating in %s", device.type,
             best[torch.float32] * 250, best[torch.bfloat16] * 250, choice)
    return choice


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The last axis's argmax. `max(-1).indices` picks the same (first) index as `argmax` but is
    3.5x faster on bfloat16 rows (torch 2.13 CPU: 0.29 against 1.03 s for 128 x 64 x 49,152), which
    was 13 % of generating the SmolLM2 answers."""
    return logits.max(-1).indices


@torch.no_grad()
def generate(model: Any, prompts: Sequence[Sequence[int]], *, max_new: int, eos: set[int], feature_layer: int,
             pad: int, stop: Callable[[], bool] | None = None,
             on_prefilled: Callable[[], None] | None = None) -> list[Row]:
    """Greedy answers to `prompts` (token ids) in one batch, with features and labels (see Row), on
    the model's device; the rows come back on the CPU. `stop()` is asked before every decode step;
    when it says so the live rows end there. `on_prefilled()` is called once the prompts' pass is
    done (data_pace times it)."""
    device = model_device(model)
    batch, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((batch, width), pad, dtype=torch.int64, device="cpu")
    mask = torch.zeros(batch, width, dtype=torch.int64, device="cpu")
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(list(prompt), dtype=torch.int64, device="cpu")
        mask[row, width - len(prompt):] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    hidden = int(model.config.hidden_size)
    features = torch.zeros(batch, width + max_new, hidden, dtype=torch.float16, device=device)
    captured: list[torch.Tensor] = []
    hook = decoder_layers(model)[feature_layer].register_forward_hook(
        lambda module, args, output: captured.append(layer_output(output)))
    try:
        cache = decode_cache.preallocated(model, width + max_new)
        out = model.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
        features[:, :width] = captured.pop().to(torch.float16)
        final = out.last_hidden_state
        prompt_argmax = torch.cat([greedy(model.lm_head(final[:, i:i + _LOGIT_CHUNK]))
                                   for i in range(0, width, _LOGIT_CHUNK)], dim=1).cpu()
        following = prompt_argmax[:, -1].to(device)
        if on_prefilled is not None:
            on_prefilled()
        live = torch.arange(batch, device=device)  # original row of each cache row
        live_rows = list(range(batch))
        answers: list[list[int]] = [[] for _ in range(batch)]
        finished = [False] * batch
        position = positions[:, -1] + 1
        for step in range(max_new):
            halt = step + 1 >= max_new or (stop is not None and stop())
            # one transfer a step: a GPU would otherwise wait on every row's token
            for row, token in zip(live_rows, following.tolist(), strict=True):
                if not finished[row]:
                    answers[row].append(token)
                    finished[row] = halt or token in eos
            running = [not finished[row] for row in live_rows]
            if not any(running):
                break
            if running.count(False) * 8 >= len(live_rows):  # compact: finished rows would cost a cache row each
                kept = [slot for slot, alive in enumerate(running) if alive]
                keep = torch.tensor(kept, dtype=torch.int64, device=device)
                cache.batch_select_indices(keep)
                live, mask, following, position = live[keep], mask[keep], following[keep], position[keep]
                live_rows = [live_rows[slot] for slot in kept]
            mask = torch.cat([mask, torch.ones(len(live_rows), 1, dtype=mask.dtype, device=device)], dim=1)
            out = model.model(input_ids=following[:, None], attention_mask=mask, position_ids=position[:, None],
                              cache=cache, use_cache=True)
            features[live, width + step] = captured.pop()[:, 0].to(torch.float16)
            following = greedy(model.lm_head(out.last_hidden_state[:, -1]))
            position = position + 1
    finally:
        hook.remove()
    features = features.cpu()
    rows = []
    for row, prompt in enumerate(prompts):
        answer = answers[row]
        if not answer:
            continue
        full = torch.tensor(list(prompt) + answer, dtype=torch.int64, device="cpu")
        start = width - len(prompt)
        feats = features[row, start:width + len(answer) - 1].clone()
        labels = torch.cat([prompt_argmax[row, start:], full[len(prompt) + 1:]])
        rows.append(Row(ids=full, prompt_len=len(prompt), features=feats, labels=labels))
    return rows


def answer_all(model: Any, tokenizer: Any, prompts: Sequence[Sequence[int]], settings: DataSettings, *,
               feature_layer: int, progress: Progress, description: str) -> list[Row]:
    """Greedy answers to every prompt, `settings.batch` at a time, in the given order (no deadline)."""
    eos = eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos))
    rows: list[Row] = []
    with progress.task(description, total=len(prompts)) as task:
        for start in range(0, len(prompts), settings.batch):
            chunk = prompts[start:start + settings.batch]
            rows += generate(model, chunk, max_new=settings.max_new, eos=eos, feature_layer=feature_layer,
                             pad=int(pad))
            task.advance(len(chunk))
    return rows


def _mark(marks: list[float], clock: Callable[[], float]) -> None:
    marks.append(clock())


def save_shard(path: Path, rows: Sequence[Row], seconds: float,
               timing: Mapping[str, float | int] | None = None) -> None:
    """The shard, then its sidecar (what it cost, and `timing`'s data_pace fields, read on resume
    without loading the features)."""
    state = {"ids": [r.ids for r in rows], "prompt_len": [r.prompt_len for r in rows],
             "features": [r.features for r in rows], "labels": [r.labels for r in rows], "seconds": seconds}
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    tmp.replace(path)
    answer = sum(len(r.ids) - r.prompt_len for r in rows)
    sidecar = {"seconds": seconds, "rows": len(rows), "answer_tokens": answer, **(timing or {})}
    path.with_suffix(".json").write_text(json.dumps(sidecar))


def _damaged(path: Path, exc: BaseException) -> InputError:
    reason = " ".join(str(exc).split())[:200] or type(exc).__name__
    shard = path.with_suffix(".pt")
    return InputError(f"kept answers '{path}' are damaged ({reason})",
                      f"delete '{shard}' and '{shard.with_suffix('.json')}' (the run makes them again)")


def load_shard(path: Path) -> tuple[list[Row], float]:
    try:
        state = torch.load(path, weights_only=True)
        rows = [Row(ids=i, prompt_len=int(p), features=f, labels=lab)
                for i, p, f, lab in zip(state["ids"], state["prompt_len"], state["features"], state["labels"],
                                        strict=True)]
        return rows, float(state["seconds"])
    except (OSError, RuntimeError, EOFError, KeyError, TypeError, ValueError, pickle.UnpicklingError) as exc:
        raise _damaged(path, exc) from exc


def read_sidecar(shard: Path) -> dict[str, Any]:
    """The sidecar record of `shard` ({} for a shard kept without one: cut between the two writes)."""
    sidecar = shard.with_suffix(".json")
    if not sidecar.is_file():
        return {}
    try:
        record = json.loads(sidecar.read_text())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        for key in ("seconds", "prefill_s", "prompt_cells"):
            if record.get(key) is not None and not isinstance(record[key], (int, float)):
                raise ValueError(f"'{key}' is not a number")
    except (OSError, ValueError) as exc:
        raise _damaged(sidecar, exc) from exc
    return record


@dataclass
class Corpus:
    train: list[Row]
    heldout: list[Row]
    seconds: float  # clock seconds the shards took (all runs)
    batches: int
    sources: dict[str, int] = field(default_factory=dict)  # batches by what they asked (PromptSource.last_kind)

    @property
    def generated_tokens(self) -> int:
        return sum(len(r.ids) - r.prompt_len for r in self.train + self.heldout)

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_len for r in self.train + self.heldout)


def split(rows: Sequence[Row], start: int) -> tuple[list[Row], list[Row]]:
    """(train, held out): every HOLDOUT-th row by its index over the whole run (`start` = rows before)."""
    train: list[Row] = []
    heldout: list[Row] = []
    for offset, row in enumerate(rows):
        (heldout if (start + offset) % HOLDOUT == HOLDOUT - 1 else train).append(row)
    return train, heldout


def build(model: Any, tokenizer: Any, work: Path, settings: DataSettings, *, feature_layer: int,
          clock: Callable[[], float], deadline: float, user_text: list[int] | None, progress: Progress,
          max_batches: int | None = None, min_batches: int = 1, requests: Sequence[list[int]] = ()) -> Corpus:
    """Generate batches into `work` until `deadline` on `clock` (a batch running then is cut) or
    `max_batches`, after reading the shards an earlier run left there. `min_batches` start whatever
    the deadline (each row of a batch cut at once still holds the prompt and one answer token).
    `requests`: the user's own prompts (token ids), asked first (PromptSource)."""
    eos = eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos))
    source = PromptSource(tokenizer, settings, user_text, writer=request_writer(model, tokenizer, eos),
                          requests=requests)
    corpus = Corpus(train=[], heldout=[], seconds=0.0, batches=0)
    pace = BatchPace()
    count = 0
    with progress.task("the target answers prompts (feature draft data)") as task:
        while max_batches is None or corpus.batches < max_batches:
            path = work / f"shard_{corpus.batches:04d}.pt"
            may_stop = corpus.batches >= min_batches
            if path.is_file():
                source.batch(corpus.batches, needed=False)
                rows, seconds = load_shard(path)
                pace.add_record(read_sidecar(path))
            else:
                if may_stop and too_late(clock(), deadline, pace):  # before the target writes requests
                    break
                began = clock()  # the target writing this batch's requests counts as its cost
                prompts = source.batch(corpus.batches)
                if may_stop and too_late(clock(), deadline, pace, prompts):
                    break
                generating = clock()
                prefilled: list[float] = []
                rows = generate(model, prompts, max_new=settings.max_new, eos=eos, feature_layer=feature_layer,
                                pad=int(pad), stop=lambda: clock() >= deadline,
                                on_prefilled=functools.partial(_mark, prefilled, clock))
                seconds = clock() - began
                prefill_s, cells = prefilled[0] - generating, prompt_cells(prompts)
                pace.add(seconds=seconds, prefill_s=prefill_s, prompt_cells=cells)
                save_shard(path, rows, seconds, {"prefill_s": prefill_s, "prompt_cells": cells})
                made = sum(len(r.ids) - r.prompt_len for r in rows)
                log.info("batch %d: %d rows, %d answer tokens in %.0f s (%.0f tokens/s; prompts' pass %.0f s)",
                         corpus.batches, len(rows), made, seconds, made / max(seconds, 1e-9), prefill_s)
            source.saw(rows)
            train, heldout = split(rows, count)
            count += len(rows)
            corpus.train += train
            corpus.heldout += heldout
            corpus.seconds += seconds
            corpus.batches += 1
            corpus.sources[source.last_kind] = corpus.sources.get(source.last_kind, 0) + 1
            task.advance()
            task.describe(f"the target answers prompts: {corpus.generated_tokens} tokens")
    if not corpus.heldout and len(corpus.train) > 1:  # a tiny run still reports on one unseen answer
        corpus.heldout.append(corpus.train.pop())
    return corpus


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """The ids that end an answer: the generation config's and the tokenizer's."""
    ids: set[int] = set()
    for value in (getattr(getattr(model, "generation_config", None), "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return ids or {0}

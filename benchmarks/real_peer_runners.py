"""Workers of benchmarks/real_peers.py: one runtime, one job, in a fresh process; JSON on stdout.

A fresh process per measurement keeps one runtime's thread pool and allocator state out of
another's numbers. The job (JSON on argv) names the runtime (`transformers`, `genai`, `llama.cpp`,
`specdec`), its model path, the thread count, runtime options and a task:

- `decode`: warm up on the first prompt, then decode every prompt greedily from its token ids
  until an end-of-sequence id (kept in the output) or `new_tokens`, timed end to end (prefill
  included); prints {"seconds": s, "outputs": [[ids], ...], "stats": {...}}.
- `perplexity`: each window teacher-forced from an empty cache; the logits of every position
  score the next token; prints {"nll": summed negative log-likelihood, "count": scored tokens}.

    python benchmarks/real_peer_runners.py '{"task": "decode", "runtime": "genai", "model": DIR, ...}'
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np


class Runtime(Protocol):
    def decode(self, prompt: list[int]) -> list[int]: ...

    def logits(self, ids: list[int]) -> np.ndarray: ...  # [len(ids), vocab]

    counters: dict[str, int]  # what the runtime counted over the decodes (speculation's rounds, acceptance)


def count(counters: dict[str, int], **values: int) -> None:
    for key, value in values.items():
        counters[key] = counters.get(key, 0) + value


def clip(tokens: list[int], new_tokens: int, eos: set[int]) -> list[int]:
    """The first `new_tokens` tokens, ending at the first end-of-sequence id (kept)."""
    tokens = tokens[:new_tokens]
    for index, token in enumerate(tokens):
        if token in eos:
            return tokens[: index + 1]
    return tokens


class Transformers:
    """Hugging Face transformers' greedy `generate` on the float checkpoint: the reference."""

    def __init__(self, job: dict[str, Any]) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(int(job["threads"]))
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(job["model"], dtype=torch.float32)  # in eval mode
        self.new_tokens, self.eos = int(job.get("new_tokens", 0)), [int(e) for e in job.get("eos", [])]
        self.counters: dict[str, int] = {}

    def decode(self, prompt: list[int]) -> list[int]:
        ids = self.torch.tensor([prompt])
        with self.torch.inference_mode():
            out = self.model.generate(ids, attention_mask=self.torch.ones_like(ids), max_new_tokens=self.new_tokens,
                                      do_sample=False, num_beams=1, repetition_penalty=1.0, eos_token_id=self.eos,
                                      pad_token_id=self.eos[0])
        return [int(t) for t in out[0, len(prompt):]]

    def logits(self, ids: list[int]) -> np.ndarray:
        with self.torch.inference_mode():
            return np.asarray(self.model(self.torch.tensor([ids])).logits[0].float().numpy())



# onnxruntime-genai's speculative counters summed over the prompts (Generator.get_speculative_stats)
GENAI_COUNTERS = ("rounds", "draft_tokens_proposed", "draft_tokens_accepted", "standard_fallback_steps",
                  "target_forward_passes", "ngram_lookup_hits", "ngram_lookup_misses")


class Genai:
    """onnxruntime-genai's own loop; `speculative` options (GeneratorParams.set_speculative_options) turn on
    its n-gram or draft-model speculation."""

    def __init__(self, job: dict[str, Any]) -> None:
        import onnxruntime_genai as og

        self.og = og
        config = og.Config(job["model"])
        config.clear_providers()  # the CPU provider
        self.model = og.Model(config)
        self.new_tokens, self.eos = int(job.get("new_tokens", 0)), {int(e) for e in job.get("eos", [])}
        self.speculative: dict[str, Any] | None = job.get("options", {}).get("speculative")
        self.counters: dict[str, int] = {}

    def _generator(self, ids: list[int], max_length: int) -> Any:
        params = self.og.GeneratorParams(self.model)
        # no min_length: the engine does not draft while the sequence is shorter than min_length
        params.set_search_options(max_length=max_length, do_sample=False)
        if self.speculative:
            params.set_speculative_options(**self.speculative)
        generator = self.og.Generator(self.model, params)
        generator.append_tokens(np.array([ids], np.int32))
        return generator

    def decode(self, prompt: list[int]) -> list[int]:
        generator = self._generator(prompt, len(prompt) + self.new_tokens)
        while not generator.is_done():
            generator.generate_next_token()
            if int(generator.get_next_tokens()[0]) in self.eos:
                break
        if self.speculative:
            stats = generator.get_speculative_stats()
            count(self.counters, **{key: int(stats.get(key, 0)) for key in GENAI_COUNTERS})
        return clip([int(t) for t in generator.get_sequence(0)[len(prompt):]], self.new_tokens, self.eos)

    def logits(self, ids: list[int]) -> np.ndarray:
        # the builder's graph returns the logits of every position it is fed (n-gram speculation relies on it)
        return np.asarray(self._generator(ids, len(ids) + 1).get_output("logits")[0])


class LlamaCpp:
    """llama.cpp through llama-cpp-python: `Llama.generate` greedy; `lookup` options turn on its prompt-lookup
    speculation (LlamaPromptLookupDecoding as the draft model)."""

    def __init__(self, job: dict[str, Any]) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        threads = int(job["threads"])
        lookup: dict[str, int] | None = job.get("options", {}).get("lookup")
        perplexity = job["task"] == "perplexity"
        self.llm: Any = Llama(model_path=job["model"], n_ctx=int(job["n_ctx"]), n_batch=512, n_threads=threads,
                         n_threads_batch=threads, logits_all=perplexity, verbose=False,
                         draft_model=LlamaPromptLookupDecoding(**lookup) if lookup is not None else None)
        self.new_tokens, self.eos = int(job.get("new_tokens", 0)), {int(e) for e in job.get("eos", [])}
        self.counters: dict[str, int] = {}

    def decode(self, prompt: list[int]) -> list[int]:
        # reset: generate() would otherwise reuse the cache of a previous prompt's common prefix (the chat
        # template's system turn), a saving the other runners are not given
        self.llm.reset()
        out: list[int] = []
        for token in self.llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
            out.append(int(token))
            if token in self.eos or len(out) >= self.new_tokens:
                break
        return out

    def logits(self, ids: list[int]) -> np.ndarray:
        self.llm.reset()
        self.llm.eval(ids)
        return np.array(self.llm.scores[: len(ids)], np.float32)


class Specdec:
    """specdec's engine with the settings `specdec generate` resolves on this machine (the bundle's tuned plan);
    `options` are DecodeOptions fields (e.g. speculative=False)."""

    def __init__(self, job: dict[str, Any]) -> None:
        from specdec.pipeline.bundle.store import Bundle
        from specdec.pipeline.generate.stage import GenerateConfig, Generator, generate_settings
        from specdec.pipeline.settings.decode_options import DecodeOptions
        from specdec.pipeline.settings.profiles import load_device

        threads = int(job["threads"])
        bundle = Bundle.load(job["model"])
        request = GenerateConfig(decode=DecodeOptions(max_new_tokens=max(int(job.get("new_tokens", 1)), 1),
                                                      **job.get("options", {})), threads=threads)
        settings = generate_settings(request, bundle, load_device("local-cpu"), None)
        self.config = settings.config
        self.engine = Generator(bundle, threads=threads, weight_format=settings.weight_format).engine
        self.engine.eos = {int(e) for e in job.get("eos", [])}  # the same stop ids as every runner
        self.counters: dict[str, int] = {}

    def decode(self, prompt: list[int]) -> list[int]:
        reply = self.engine.generate(prompt, self.config)
        for stats in reply.speculative_rounds:
            count(self.counters, speculative_rounds=1, speculative_tokens=stats.accepted_len)
        count(self.counters, rounds=len(reply.rounds))
        return [int(t) for t in reply.output_ids]

    def logits(self, ids: list[int]) -> np.ndarray:
        from specdec.pipeline.engine.runner import causal, no_scratch

        runner = self.engine.target  # the bundle's own runner (fused cpu graph): what decoding runs
        runner.reset()
        logits, _ = runner.forward(np.asarray(ids, np.int64), np.arange(len(ids)), no_scratch(len(ids)),
                                   causal(len(ids)))
        assert logits is not None
        return np.asarray(logits)


RUNTIMES: dict[str, Callable[[dict[str, Any]], Runtime]] = {
    "transformers": Transformers, "genai": Genai, "llama.cpp": LlamaCpp, "specdec": Specdec,
}


def next_token_nll(logits: np.ndarray, ids: list[int]) -> float:
    """Summed -log p(ids[i + 1] | ids[:i + 1]) over the window, in float64."""
    wide = logits[:-1].astype(np.float64)
    top = wide.max(axis=-1, keepdims=True)
    log_z = np.log(np.exp(wide - top).sum(axis=-1)) + top[:, 0]
    return float((log_z - wide[np.arange(len(ids) - 1), ids[1:]]).sum())


def run(job: dict[str, Any]) -> dict[str, Any]:
    runtime = RUNTIMES[job["runtime"]](job)
    if job["task"] == "perplexity":
        windows: list[list[int]] = job["windows"]
        nll = sum(next_token_nll(runtime.logits(window), window) for window in windows)
        return {"nll": nll, "count": sum(len(window) - 1 for window in windows)}
    prompts: list[list[int]] = job["prompts"]
    runtime.decode(prompts[0])  # warm-up: session creation and first-call allocations stay out of the time
    runtime.counters.clear()
    start = time.perf_counter()
    outputs = [runtime.decode(prompt) for prompt in prompts]
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "outputs": outputs, "stats": runtime.counters}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))))

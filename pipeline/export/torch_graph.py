"""Trace a Hugging Face causal LM into the graph contract of docs/design.md §2 with torch.onnx (dynamo).

The wrapper takes `(input_ids, position_ids, *masks, *flat_past)` and returns
`(logits, *flat_present)`; for a feature draft's target (`feature_layer`), `(logits, hidden_states,
*flat_present)`, `hidden_states` [1, q, H] being that decoder layer's output for every row, before
any later layer and the final norm (pipeline/draft/feature_model.py).

A mask is additive float (0 / finfo.min) of shape [1, 1, q, past + q]:
a boolean mask is silently wrong with eager attention, and a 4-D mask is what lets one graph
serve prefill (causal), decode (q = 1) and token trees alike. `attention_mask` is the mask of the
full-attention layers, `sliding_attention_mask` that of the windowed layers (the same tree mask
with every key at or beyond the window hidden); a graph takes the ones its layers use
(`mask_names`). Models that index masks by layer type get them as transformers' own
{layer type: mask} mapping; the others have one kind of layer and get the one mask.

The cache the wrapper builds holds every past row on every layer (a `DynamicCache` without the
model's config: with it, windowed layers would drop rows beyond the window), so `present` is
always `past + new` and how many rows a windowed layer keeps is the runtime's choice.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specdec.pipeline.engine.graph import HIDDEN_STATES
from specdec.pipeline.engine.masks import FULL_MASK, SLIDING_MASK, mask_names
from specdec.pipeline.errors import ExportError
from specdec.pipeline.export.architectures import KVGeometry
from specdec.pipeline.graphs.files import EXTERNAL_DATA_BYTES
from specdec.pipeline.records.decoder import Decoder

log = logging.getLogger(__name__)

# q >= 2 and past >= 2 for the example inputs: q = 1 specialises the dynamo trace (docs/design.md §2).
_EXAMPLE_Q = 3
_EXAMPLE_PAST = 4


def input_names(num_layers: int, masks: tuple[str, ...] = (FULL_MASK,)) -> list[str]:
    names = ["input_ids", "position_ids", *masks]
    for layer in range(num_layers):
        names += [f"past_key_values.{layer}.key", f"past_key_values.{layer}.value"]
    return names


def output_names(num_layers: int, features: bool = False) -> list[str]:
    names = ["logits", HIDDEN_STATES] if features else ["logits"]
    for layer in range(num_layers):
        names += [f"present.{layer}.key", f"present.{layer}.value"]
    return names


# transformers' layer-type keys for the masks of full-attention and windowed layers
_LAYER_TYPES = {FULL_MASK: "full_attention", SLIDING_MASK: "sliding_attention"}


def make_wrapper(model: Any, num_layers: int, decoder: Decoder | None = None, per_layer_masks: bool = False,
                 feature_layer: int | None = None) -> Any:
    import torch
    from transformers import DynamicCache

    from specdec.pipeline.draft.feature_model import decoder_layers, layer_output

    params = inspect.signature(model.forward).parameters
    # transformers 5.2x renamed `past_key_values` to `cache`; accept both spellings.
    cache_kwarg = "cache" if "cache" in params else "past_key_values"
    masks = mask_names(decoder)

    class GraphContractWrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self.captured: list[Any] = []
            # the layer's output, taken as it passes (a forward hook traces); removed after the export
            self.hook = None if feature_layer is None else decoder_layers(model)[feature_layer].register_forward_hook(
                lambda module, args, output: self.captured.append(layer_output(output)))

        def forward(self, input_ids: Any, position_ids: Any, *args: Any) -> Any:
            given, flat_past = args[: len(masks)], args[len(masks):]
            cache = DynamicCache()
            for layer in range(num_layers):
                cache.update(flat_past[2 * layer], flat_past[2 * layer + 1], layer)
            mask: Any = given[0]  # one kind of layer: the one mask
            if per_layer_masks:
                mask = {_LAYER_TYPES[name]: value for name, value in zip(masks, given, strict=True)}
            out = self.model(
                input_ids=input_ids,
                position_ids=position_ids,
                attention_mask=mask,
                use_cache=True,
                **{cache_kwarg: cache},
            )
            new_cache = out.get("cache", None) or out.get("past_key_values", None)
            result = [out.logits]
            if feature_layer is not None:
                result.append(self.captured.pop())
            for layer in new_cache.layers:
                result += [layer.keys, layer.values]
            return tuple(result)

    return GraphContractWrapper().eval()


@contextlib.contextmanager
def _static_rope(model: Any) -> Iterator[None]:
    """Trace rope types that recompute their frequencies per call (longrope, dynamic) with their
    short-context tables: within the context export records (architectures.usable_context) the
    recomputation never changes them, and a data-dependent branch does not trace."""
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    kinds = getattr(rotary, "rope_type", None)
    if rotary is None or kinds is None:
        yield
        return
    static = ({name: _static_kind(kind) for name, kind in kinds.items()} if isinstance(kinds, dict)
              else _static_kind(kinds))
    rotary.rope_type = static
    try:
        yield
    finally:
        rotary.rope_type = kinds


def _static_kind(kind: str) -> str:
    return "default" if kind == "longrope" or "dynamic" in kind else kind


def example_inputs(geometry: KVGeometry, dtype: Any, masks: int = 1) -> tuple[Any, ...]:
    import torch

    q, past = _EXAMPLE_Q, _EXAMPLE_PAST
    ids = torch.zeros((1, q), dtype=torch.int64)
    positions = torch.arange(past, past + q, dtype=torch.int64).unsqueeze(0)
    mask = [torch.zeros((1, 1, q, past + q), dtype=dtype) for _ in range(masks)]
    kv_shape = (1, geometry.num_kv_heads, past, geometry.head_dim)
    flat = [torch.zeros(kv_shape, dtype=dtype) for _ in range(2 * geometry.num_layers)]
    return (ids, positions, *mask, *flat)


def _dynamic_shapes(num_layers: int, masks: int = 1) -> tuple[Any, ...]:
    from torch.export import Dim

    seq = Dim("sequence_length", min=1, max=65536)
    past = Dim("past_sequence_length", min=0, max=1 << 20)
    total = Dim("total_sequence_length", min=1, max=1 << 20)
    mask_shapes = tuple({2: seq, 3: total} for _ in range(masks))
    return ({1: seq}, {1: seq}, (*mask_shapes, *({2: past} for _ in range(2 * num_layers))))


def export_onnx(model: Any, geometry: KVGeometry, path: Path, *, opset: int, dtype: str,
                decoder: Decoder | None = None, per_layer_masks: bool = False,
                feature_layer: int | None = None) -> None:
    """Export `model` to `path` (plus `path.data` when the weights exceed 1 GiB); with `feature_layer`,
    the graph also outputs that layer's `hidden_states` (a feature draft's target)."""
    import torch

    torch_dtype = getattr(torch, dtype)
    wrapper = make_wrapper(model, geometry.num_layers, decoder, per_layer_masks, feature_layer)
    masks = mask_names(decoder)
    args = example_inputs(geometry, torch_dtype, len(masks))
    try:
        trace(wrapper, args, path, opset=opset, input_names=input_names(geometry.num_layers, masks),
              output_names=output_names(geometry.num_layers, features=feature_layer is not None),
              dynamic_shapes=_dynamic_shapes(geometry.num_layers, len(masks)), rope_of=model)
    finally:
        if wrapper.hook is not None:
            wrapper.hook.remove()


def trace(wrapper: Any, args: tuple[Any, ...], path: Path, *, opset: int, input_names: list[str],
          output_names: list[str], dynamic_shapes: tuple[Any, ...], rope_of: Any) -> None:
    """torch.onnx.export (dynamo) of `wrapper` on `args`; one ExportError whatever torch raises.
    `rope_of`: the model whose rotary module is traced with its static tables (`_static_rope`)."""
    import torch

    # torch configures its own loggers on import; this one warns about optional torchvision ops
    # on every export, which says nothing about the model being exported.
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    weight_bytes = sum(p.numel() * p.element_size() for p in wrapper.parameters())
    captured = io.StringIO()
    try:
        # torch.onnx prints its own progress to stdout; keep it in the debug log instead.
        with contextlib.redirect_stdout(captured), torch.no_grad(), warnings.catch_warnings(), _static_rope(rope_of):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                wrapper,
                args,
                str(path),
                dynamo=True,
                opset_version=opset,
                input_names=input_names,
                output_names=output_names,
                dynamic_shapes=dynamic_shapes,
                external_data=weight_bytes > EXTERNAL_DATA_BYTES,
                verbose=False,
            )
    except Exception as exc:  # torch.onnx raises many unrelated types; report them as one
        log.debug("torch.onnx output:\n%s", captured.getvalue())
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(
            f"torch.onnx.export failed for {path.name}: {first}",
            "run with SPECDEC_DEBUG=1 for the full trace; try another --opset",
        ) from exc
    log.debug("torch.onnx output:\n%s", captured.getvalue())

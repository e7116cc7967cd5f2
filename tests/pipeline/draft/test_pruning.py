"""Pruning keeps whole GQA groups and FFN blocks: the pruned draft computes exactly what the target
computes with the dropped layers skipped and the dropped groups' and channels' outputs zeroed."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from support.tiny_models import make_model

from specdec.pipeline.draft import pruning
from specdec.pipeline.errors import InputError, UnsupportedModelError


def _target(arch: str) -> Any:
    model = make_model(arch, vocab=96, layers=4, hidden=64, seed=3)
    with torch.no_grad():  # break the symmetry random init leaves between norms and biases
        for name, param in model.named_parameters():
            if name.endswith(("norm.weight", "bias")):
                param.add_(0.2 * torch.randn_like(param))
    return model


def _batches() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randint(0, 96, (2, 12), generator=generator) for _ in range(2)]


def _masked_reference(target: Any, plan: pruning.PrunePlan, shape: pruning.Geometry) -> Any:
    """The target with what the plan drops turned off (layers skipped, o/down columns zeroed)."""
    reference = copy.deepcopy(target)
    q_rows = shape.group * shape.head_dim
    with torch.no_grad():
        for index, layer in enumerate(reference.model.layers):
            if index not in plan.layers:
                layer.register_forward_hook(lambda module, args, output: args[0])
                continue
            kept = plan.layers.index(index)
            for group in set(range(shape.kv_heads)) - set(plan.groups[kept]):
                layer.self_attn.o_proj.weight[:, group * q_rows:(group + 1) * q_rows] = 0
            dropped = sorted(set(range(shape.intermediate)) - set(plan.channels[kept]))
            layer.mlp.down_proj.weight[:, dropped] = 0
    return reference


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_pruned_draft_equals_target_with_dropped_structures_off(arch: str) -> None:
    target = _target(arch)
    shape = pruning.geometry(target.config)
    assert (shape.kv_heads, shape.group, shape.intermediate) == (2, 2, 128)
    importance = pruning.measure(target, _batches(), shape)
    plan = pruning.choose(importance, shape, size=0.5, layers=2, heads=1, ffn=64)
    draft = pruning.build(target, plan, shape)
    config = draft.config
    assert (config.num_hidden_layers, config.num_key_value_heads, config.num_attention_heads,
            config.intermediate_size) == (2, 1, 2, 64)
    # whole groups: the kept query heads are exactly those that read the kept KV head
    group = plan.groups[0][0]
    rows = shape.group * shape.head_dim
    source = target.model.layers[plan.layers[0]].self_attn
    kept_rows = source.q_proj.weight[group * rows:(group + 1) * rows]
    assert torch.equal(draft.model.layers[0].self_attn.q_proj.weight, kept_rows)
    ids = torch.randint(0, 96, (1, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = _masked_reference(target, plan, shape)(input_ids=ids).logits
        torch.testing.assert_close(draft(input_ids=ids).logits, expected, rtol=1e-5, atol=1e-5)
    kept = [name for name, _ in draft.named_parameters() if not name.startswith("model.layers.")]
    assert kept  # embedding, final norm, head: the target's tensors, never trained (a bundle stores them once)
    for name in kept:
        assert torch.equal(draft.state_dict()[name], target.state_dict()[name]), name


def test_nothing_pruned_is_the_target() -> None:
    target = _target("llama")
    shape = pruning.geometry(target.config)
    importance = pruning.measure(target, _batches(), shape)
    plan = pruning.choose(importance, shape, size=1.0, layers=4, heads=2, ffn=128)
    ids = torch.arange(10).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(pruning.build(target, plan, shape)(input_ids=ids).logits, target(input_ids=ids).logits)


def test_layers_are_chosen_by_measured_importance() -> None:
    target = _target("llama")
    with torch.no_grad():  # layers 0 and 2 contribute nothing: dropping them costs no KL
        for index in (0, 2):
            target.model.layers[index].self_attn.o_proj.weight.zero_()
            target.model.layers[index].mlp.down_proj.weight.zero_()
    shape = pruning.geometry(target.config)
    importance = pruning.measure(target, _batches(), shape)
    assert importance.layer_kl[0] == pytest.approx(0, abs=1e-6) and importance.layer_kl[2] == pytest.approx(0, abs=1e-6)
    plan = pruning.choose(importance, shape, size=0.5, layers=2, heads=None, ffn=None)
    assert plan.layers == (1, 3)
    # by size, layers that change nothing are never kept, even where the budget allows them
    assert pruning.choose(importance, shape, size=1.0, layers=None, heads=None, ffn=None).layers == (1, 3)


def test_default_ffn_keeps_the_channels_that_matter_in_blocks_of_64() -> None:
    target = _target("llama")
    with torch.no_grad():  # half of every FFN is dead: zero down_proj columns
        for layer in target.model.layers:
            layer.mlp.down_proj.weight[:, 64:] = 0
    shape = pruning.geometry(target.config)
    plan = pruning.choose(pruning.measure(target, _batches(), shape), shape, size=0.5, layers=None, heads=None,
                          ffn=None)
    assert plan.intermediate == 64 and all(channels == tuple(range(64)) for channels in plan.channels)
    # size 0.5 of the layer weights at half the FFN width fits more than half the layers
    assert len(plan.layers) == 3


@pytest.mark.parametrize("counts, flag", [({"layers": 5}, "layers"), ({"heads": 3}, "heads"),
                                          ({"ffn": 100}, "ffn"), ({"ffn": 192}, "ffn")])
def test_bad_counts_are_input_errors(counts: dict[str, int], flag: str) -> None:
    shape = pruning.geometry(_target("llama").config)
    with pytest.raises(InputError) as caught:
        pruning.check_counts(shape, **{"layers": None, "heads": None, "ffn": None, **counts})
    assert caught.value.keys == (flag,) or flag in caught.value.keys


def test_unsupported_architecture() -> None:
    with pytest.raises(UnsupportedModelError, match="gpt2"):
        pruning.geometry(make_model("gpt2", vocab=96).config)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_layer_sweep_equals_dropping_each_layer_in_a_full_forward(arch: str) -> None:
    """The sweep re-runs only the layers after the dropped one; it must measure what a full forward
    with that layer skipped gives."""
    target, batches = _target(arch), _batches()
    expected = []
    with torch.no_grad():
        references = [target(input_ids=b).logits for b in batches]
        for layer in target.model.layers:
            handle = layer.register_forward_hook(lambda module, args, output: args[0])
            pairs = zip(references, batches, strict=True)
            expected.append(sum(pruning._kl(r, target(input_ids=b).logits) for r, b in pairs) / len(batches))
            handle.remove()
    assert pruning.layer_importance(target, batches) == pytest.approx(expected, rel=1e-4, abs=1e-7)

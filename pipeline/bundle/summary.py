"""A bundle summary as plain data, shared by `specdec inspect` (table) and `--json`."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from specdec.pipeline.bundle.store import Bundle, Manifest
from specdec.pipeline.engine.fused_kv import ROUND_ROWS
from specdec.pipeline.engine.memory import kv_bytes_per_token
from specdec.pipeline.graphs.files import belongs_to
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.kv_policy import KVDtype, KVPolicy
from specdec.pipeline.records.manifest import GraphFlavour, TensorSpec

_LAYERED = re.compile(r"^(past_key_values|present)\.(\d+)\.(key|value)$")


def compact_io(specs: list[TensorSpec]) -> list[dict[str, Any]]:
    """Collapse per-layer KV tensors into one row each (`present.{0..3}.key|value`)."""
    rows: list[dict[str, Any]] = []
    layered: dict[str, dict[str, Any]] = {}
    for spec in specs:
        match = _LAYERED.match(spec.name)
        if match is None:
            rows.append({"name": spec.name, "dtype": spec.dtype, "shape": spec.shape})
            continue
        prefix = match.group(1)
        group = layered.get(prefix)
        if group is None:
            group = {"name": prefix, "dtype": spec.dtype, "shape": spec.shape, "layers": set()}
            layered[prefix] = group
            rows.append(group)
        group["layers"].add(int(match.group(2)))
    for group in layered.values():
        layers = sorted(group.pop("layers"))
        group["name"] = f"{group['name']}.{{{layers[0]}..{layers[-1]}}}.key|value"
    return rows


def precision(manifest: Manifest, role: str) -> str:
    """What a graph's weights really are: the exported dtype says float32 for INT4 graphs too."""
    dtype = manifest.graphs[role].dtype
    graph = manifest.quantization.graphs.get(role) if manifest.quantization is not None else None
    if graph is None:
        return dtype
    counts = {bits: n for bits, n in graph.summary.items() if n}
    weights = "/".join(bits for bits in ("int4", "int8") if bits in counts) or "float"
    compute = "int8" if graph.accuracy_level >= 4 else dtype
    if graph.mix is not None:  # the nbits layers compute as their level says, the w8a8 ones in int8
        mixed = "int8" if compute == "int8" else f"{compute}/int8"
        return f"mixed {weights} weights ({graph.method} + w8a8 by layer class), {mixed} compute"
    if manifest.quantization is not None and manifest.quantization.int8_matmuls(role):
        compute = "int8"  # w8a8: per-row uint8 activations
    return f"{weights} weights ({graph.method}), {compute} compute"


def summarize(bundle: Bundle) -> dict[str, Any]:
    manifest = bundle.manifest
    sizes: dict[str, int] = {}
    for rel, entry in manifest.files.items():
        top = rel.split("/", 1)[0]
        sizes[top] = sizes.get(top, 0) + entry.size
    graphs = {}
    for role, spec in manifest.graphs.items():
        files = role_files(manifest, role)
        graphs[role] = {
            **{key: value for key, value in dump(spec).items() if key not in ("inputs", "outputs")},
            "precision": precision(manifest, role),
            # what the bundle holds of the graph: a compiled bundle keeps only its compiled graphs
            "files": files,
            "bytes": sum(manifest.files[rel].size for rel in files),
            "inputs": compact_io(spec.inputs),
            "outputs": compact_io(spec.outputs),
        }
    return {
        "kv_cache": kv_cache(manifest),
        "path": str(bundle.path),
        "schema_version": manifest.schema_version,
        "tool_version": manifest.tool_version,
        "stages": bundle.stages(),
        "graphs": graphs,
        "tokenizer": dump(manifest.tokenizer),
        "total_bytes": sum(sizes.values()),
        "runner_bytes": bundle.runner_bytes(),  # the files a runner opens: what `bench` pushes to a device
        "bytes_by_entry": sizes,
        "lineage": dump(manifest.lineage),
        "reports": dump(manifest.reports),
        "custom_ops": dump(manifest.custom_ops),
        "quantization": dump(manifest.quantization),
        "buckets": dump(manifest.buckets),
        "plan": dump(manifest.plan),
        "draft": draft_summary(manifest),
    }


def draft_summary(manifest: Manifest) -> dict[str, Any] | None:
    """The draft's kind, vocabulary and (a feature draft) the target layer it reads; None without a draft."""
    graph = manifest.graphs.get("draft")
    if graph is None:
        return None
    spec = manifest.draft_spec
    target_vocab = manifest.graphs["target"].vocab_size
    return {"kind": spec.kind.value, "vocab_size": graph.vocab_size, "target_vocab_size": target_vocab,
            "vocab_file": spec.vocab.file if spec.vocab is not None else None,
            "feature_layer": spec.feature_layer, "hidden_size": spec.hidden_size}


def role_files(manifest: Manifest, role: str) -> list[str]:
    """The bundle's files of one graph: its compiled graphs (and the weights file they share) in a
    compiled bundle, else the exported graph and its external data."""
    table = manifest.buckets
    if table is None:
        return [rel for rel in manifest.files if belongs_to(rel, manifest.graphs[role].file)]
    fused = table.fused.get(role)
    files = {fused.file, fused.ort_file} if fused is not None else set()
    for variant in table.graphs.get(role, []):
        files |= {variant.file, variant.ort_file}
    if role in table.weights:
        files.add(table.weights[role])
    return sorted(rel for rel in files if rel is not None and rel in manifest.files)


def kv_cache(manifest: Manifest) -> dict[str, Any]:
    """The KV cache policy of the bundle's runtime graphs and what it costs: bytes per token (one key
    and one value row per layer, per role) and the slots a runner holds at most."""
    table = manifest.buckets
    policy = table.kv_policy if table is not None else KVPolicy()
    itemsize = {KVDtype.int8: 1, KVDtype.float16: 2}
    per_token = {role: kv_bytes_per_token(g.num_layers, g.num_kv_heads, g.head_dim,
                                          itemsize.get(policy.dtype, np.dtype(g.dtype).itemsize))
                 for role, g in manifest.graphs.items()}
    context = table.max_context if table is not None else min(g.max_position_embeddings
                                                              for g in manifest.graphs.values())
    slots = context
    if table is not None and policy.windowed:  # the npu flavour's ring of slots, the cpu flavour's buffers
        slots = (table.contexts("target")[-1] if table.flavour is GraphFlavour.npu
                 else policy.sinks + 2 * policy.window + ROUND_ROWS)
    return {"policy": policy.describe(manifest.graphs["target"].dtype), "lossy": policy.lossy,
            "bytes_per_token": per_token, "slots": slots, "bytes_held": sum(per_token.values()) * slots,
            "reply_positions": policy.positions(context)}

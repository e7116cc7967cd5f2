"""Export of feature drafts and reduced draft vocabularies (docs/draft.md, "Feature drafts").

A feature draft (pipeline/draft/feature_model.py, the one definition of the format) is exported
next to its target: the target graph gains the `hidden_states` output (the configured layer's
output for every row), the draft graph follows the contract

    inputs   input_ids int64 [1, q]; hidden_states [1, q, H]; position_ids int64 [1, q];
             attention_mask [1, 1, q, past + q] (the tree mask of docs/design.md §2);
             past_key_values.{i}.key|value [1, kv_heads, past, head_dim]
    outputs  logits [1, q, V']; hidden_out [1, q, H]; present.{i}.key|value [1, kv_heads, past + q, head_dim]

and both are checked against PyTorch like every exported graph. The draft's embedding is the
target's table: the graph holds it, and tensor_sharing.py stores it once for both graphs.

A reduced vocabulary (V' < the target's) is the bundle file `draft_vocab.npy` (int64 [V'], draft
row -> target id) recorded in the manifest's `draft` section; the engine maps the draft's
candidates through it. A feature draft carries its own; a model draft gets one with
`--draft-vocab FILE`, which keeps those rows of its head.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specdec.pipeline.checkpoints import builtin
from specdec.pipeline.checkpoints.source import CheckpointSource
from specdec.pipeline.engine.graph import HIDDEN_OUT, HIDDEN_STATES
from specdec.pipeline.errors import CompatibilityError, InputError, setting
from specdec.pipeline.export import checkpoint as ckpt
from specdec.pipeline.export.architectures import KVGeometry, lookup, usable_context
from specdec.pipeline.export.torch_graph import trace
from specdec.pipeline.export.validate import TREE_PARENTS, Check, tree_depths
from specdec.pipeline.graphs.files import describe_io
from specdec.pipeline.inputs.text import read_text_file
from specdec.pipeline.inputs.weights import transformers_quiet
from specdec.pipeline.records.draft_spec import DRAFT_VOCAB_FILE, DraftKind, DraftSpec, DraftVocab
from specdec.pipeline.records.manifest import CheckpointFormat, GraphSpec, SourceFormat

_PROMPT_LEN = 8
_EXAMPLE_Q, _EXAMPLE_PAST = 3, 4  # as torch_graph: q >= 2 and past >= 2 keep the trace general


@dataclass(frozen=True)
class FeatureSource:
    """A feature draft checkpoint as export finds it (config read; weights loaded later)."""

    source: str
    config: Any  # FeatureDraftConfig


def feature_source(spec: str | None) -> FeatureSource | None:
    """The feature draft at `spec` (a checkpoint directory), or None when it is another kind of draft."""
    if spec is None or builtin.lookup(spec) is not None:
        return None
    path = Path(spec).expanduser()
    if not path.is_dir():
        return None
    from specdec.pipeline.draft.feature_model import read_config

    config = read_config(path)
    return None if config is None else FeatureSource(str(path), config)


def check_feature_pair(feature: FeatureSource, target_config: Any, geometry: KVGeometry) -> None:
    """The feature draft must have been made for this target: its geometry, vocabulary and layers."""
    from specdec.pipeline.draft.feature_model import target_geometry

    want = target_geometry(target_config)
    have = feature.config
    for key in ("hidden_size", "target_vocab_size", "target_num_hidden_layers", "num_key_value_heads", "head_dim"):
        if getattr(have, key) != want[key]:
            raise CompatibilityError(f"the feature draft was made for a target with {key} {getattr(have, key)}, "
                                     f"this target has {want[key]}", "pass the target the feature draft was made for")
    if geometry.vocab_size != have.target_vocab_size:
        raise CompatibilityError(f"the target has {geometry.vocab_size} output rows, the feature draft reads "
                                 f"{have.target_vocab_size} token ids", "pass the target the draft was made for")


def load_tokenizer(feature: FeatureSource) -> Any:
    """The feature draft's tokenizer files. transformers reads config.json to pick a tokenizer class and
    warns that it does not know our model_type; the tokenizer files decide, so the warning is noise."""
    with transformers_quiet():
        return ckpt.load_tokenizer(CheckpointSource(feature.source), "draft")


def load_feature_draft(feature: FeatureSource, target_model: Any, dtype: str) -> Any:
    """The FeatureDraft on the target model's own embedding table, in the export dtype."""
    import torch

    from specdec.pipeline.draft.feature_model import FeatureDraft

    embedding = target_model.get_input_embeddings().weight.detach().float()
    draft = FeatureDraft.load(feature.source, embedding)
    return draft.to(getattr(torch, dtype)).eval()


# ---- the draft graph ---------------------------------------------------------------------------

def _input_names(layers: int) -> list[str]:
    names = ["input_ids", HIDDEN_STATES, "position_ids", "attention_mask"]
    for layer in range(layers):
        names += [f"past_key_values.{layer}.key", f"past_key_values.{layer}.value"]
    return names


def _output_names(layers: int) -> list[str]:
    names = ["logits", HIDDEN_OUT]
    for layer in range(layers):
        names += [f"present.{layer}.key", f"present.{layer}.value"]
    return names


def _wrapper(draft: Any) -> Any:
    import torch
    from transformers import DynamicCache

    layers = draft.config.num_hidden_layers

    class FeatureDraftContract(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = draft  # module paths `model.layers.0…` as a Hugging Face Llama's (query.module_name)

        def forward(self, input_ids: Any, hidden_states: Any, position_ids: Any, attention_mask: Any,
                    *flat_past: Any) -> Any:
            cache: Any = DynamicCache()
            for layer in range(layers):
                cache.update(flat_past[2 * layer], flat_past[2 * layer + 1], layer)
            logits, hidden_out = self.model(input_ids, hidden_states, position_ids, attention_mask, cache)
            result = [logits, hidden_out]
            for layer in cache.layers:
                result += [layer.keys, layer.values]
            return tuple(result)

    return FeatureDraftContract().eval()


def export_draft_graph(draft: Any, path: Path, *, opset: int, dtype: str) -> None:
    import torch
    from torch.export import Dim

    config = draft.config
    torch_dtype = getattr(torch, dtype)
    q, past = _EXAMPLE_Q, _EXAMPLE_PAST
    kv_shape = (1, config.num_key_value_heads, past, config.head_dim)
    args = (torch.zeros((1, q), dtype=torch.int64), torch.zeros((1, q, config.hidden_size), dtype=torch_dtype),
            torch.arange(past, past + q, dtype=torch.int64).unsqueeze(0),
            torch.zeros((1, 1, q, past + q), dtype=torch_dtype),
            *(torch.zeros(kv_shape, dtype=torch_dtype) for _ in range(2 * config.num_hidden_layers)))
    seq = Dim("sequence_length", min=1, max=65536)
    past_dim = Dim("past_sequence_length", min=0, max=1 << 20)
    total = Dim("total_sequence_length", min=1, max=1 << 20)
    shapes = ({1: seq}, {1: seq}, {1: seq}, {2: seq, 3: total},
              tuple({2: past_dim} for _ in range(2 * config.num_hidden_layers)))
    trace(_wrapper(draft), args, path, opset=opset, input_names=_input_names(config.num_hidden_layers),
          output_names=_output_names(config.num_hidden_layers), dynamic_shapes=shapes, rope_of=draft)


def draft_graph_spec(draft: Any, path: Path, source: str, dtype: str, context: int) -> GraphSpec:
    config = draft.config
    decoder = lookup("llama").describe(draft.llama, draft)  # the draft's layers are Llama's
    inputs, outputs = describe_io(path)
    return GraphSpec(file=path.name, architecture=config.model_type, source=source,
                     source_format=SourceFormat(CheckpointFormat.huggingface), dtype=dtype,  # type: ignore[arg-type]
                     num_layers=config.num_hidden_layers, num_kv_heads=config.num_key_value_heads,
                     head_dim=config.head_dim, vocab_size=config.draft_vocab_size,
                     max_position_embeddings=min(context, usable_context(draft.llama)), inputs=inputs,
                     outputs=outputs, parameters=draft.own_parameters(), decoder=decoder)


def draft_spec(feature: FeatureSource | None, vocab: np.ndarray | None, target_vocab: int) -> DraftSpec | None:
    """The manifest's `draft` record (None: a model draft over the whole vocabulary, the default)."""
    reduced = DraftVocab(DRAFT_VOCAB_FILE, int(vocab.size)) if vocab is not None and vocab.size < target_vocab \
        else None
    if feature is None:
        return None if reduced is None else DraftSpec(kind=DraftKind.model, vocab=reduced)
    return DraftSpec(kind=DraftKind.feature, feature_layer=feature.config.feature_layer,
                     hidden_size=feature.config.hidden_size, vocab=reduced)


def write_vocab(directory: Path, spec: DraftSpec | None, vocab: np.ndarray | None) -> None:
    if spec is not None and spec.vocab is not None and vocab is not None:
        np.save(directory / spec.vocab.file, np.ascontiguousarray(vocab, np.int64), allow_pickle=False)


# ---- validation against PyTorch -----------------------------------------------------------------

class _DraftGraph:
    def __init__(self, path: Path, layers: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.past = [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
        self.outputs = _output_names(layers)

    def run(self, ids: list[int], features: np.ndarray, positions: list[int], mask: np.ndarray,
            past: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        feeds = {"input_ids": np.array([ids], np.int64), HIDDEN_STATES: features[None],
                 "position_ids": np.array([positions], np.int64), "attention_mask": mask,
                 **dict(zip(self.past, past, strict=True))}
        logits, hidden, *present = self.session.run(self.outputs, feeds)
        return logits[0].astype(np.float32), hidden[0].astype(np.float32), present


def validate_draft_graph(draft: Any, path: Path, *, token_range: int, seed: int, atol: float,
                         rtol: float) -> list[Check]:
    """Prefill, a branching tree on that past and a decode step through ORT and the PyTorch draft run
    the plain way (each tree node as a causal forward over the prompt plus its path)."""
    import torch
    from transformers import DynamicCache

    from specdec.pipeline.engine.runner import tree_mask

    config = draft.config
    dtype = next(draft.parameters()).dtype
    np_dtype = np.dtype(str(dtype).removeprefix("torch."))
    rng = np.random.default_rng(seed)
    graph = _DraftGraph(path, config.num_hidden_layers)
    checks: list[Check] = []

    def reference(ids: list[int], features: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        cache: Any = DynamicCache()
        with torch.no_grad():
            logits, hidden = draft(torch.tensor([ids]), torch.from_numpy(features[None]).to(dtype), cache=cache)
        flat = [t.float().numpy() for layer in cache.layers for t in (layer.keys, layer.values)]
        return logits[0].float().numpy(), hidden[0].float().numpy(), flat

    def compare(case: str, output: str, got: np.ndarray, want: np.ndarray) -> None:
        diff = float(np.max(np.abs(got.astype(np.float32) - want))) if want.size else 0.0
        checks.append(Check(case, output, diff if np.isfinite(diff) else float("inf"),
                            atol + rtol * float(np.max(np.abs(want)))))

    def features(rows: int) -> np.ndarray:
        return rng.normal(size=(rows, config.hidden_size)).astype(np_dtype)

    length = _PROMPT_LEN
    prompt = [int(t) for t in rng.integers(0, token_range, length)]
    prompt_features = features(length)
    empty = [np.zeros((1, config.num_key_value_heads, 0, config.head_dim), np_dtype)
             for _ in range(2 * config.num_hidden_layers)]
    ref_logits, ref_hidden, ref_kv = reference(prompt, prompt_features)
    logits, hidden, present = graph.run(prompt, prompt_features, list(range(length)),
                                        tree_mask(tuple(range(-1, length - 1)), 0, np_dtype), empty)
    compare("prefill", "logits", logits, ref_logits)
    compare("prefill", HIDDEN_OUT, hidden, ref_hidden)
    compare("prefill", "present", np.concatenate([p.ravel() for p in present]),
            np.concatenate([r.ravel() for r in ref_kv]))

    depths = tree_depths(TREE_PARENTS)
    tokens = [int(t) for t in rng.integers(0, token_range, len(TREE_PARENTS))]
    tree_features = features(len(TREE_PARENTS))
    logits, hidden, tree_present = graph.run(tokens, tree_features, [length + d for d in depths],
                                             tree_mask(TREE_PARENTS, length, np_dtype), present)
    want_logits, want_hidden, want_kv, got_kv = [], [], [], []
    for node in range(len(TREE_PARENTS)):
        path_nodes = _path(node)
        node_logits, node_hidden, node_kv = reference(
            prompt + [tokens[i] for i in path_nodes], np.concatenate([prompt_features, tree_features[path_nodes]]))
        want_logits.append(node_logits[-1])
        want_hidden.append(node_hidden[-1])
        want_kv += [kv[:, :, -1] for kv in node_kv]
        got_kv += [kv[:, :, length + node] for kv in tree_present]
    compare("tree", "logits", logits, np.stack(want_logits))
    compare("tree", HIDDEN_OUT, hidden, np.stack(want_hidden))
    compare("tree", "present", np.concatenate([k.ravel() for k in got_kv]),
            np.concatenate([k.ravel() for k in want_kv]))

    token = int(rng.integers(0, token_range))
    step_feature = features(1)
    logits, hidden, step_present = graph.run([token], step_feature, [length],
                                             np.zeros((1, 1, 1, length + 1), np_dtype), present)
    ref_logits, ref_hidden, ref_kv = reference([*prompt, token], np.concatenate([prompt_features, step_feature]))
    compare("decode", "logits", logits, ref_logits[-1:])
    compare("decode", HIDDEN_OUT, hidden, ref_hidden[-1:])
    compare("decode", "present", np.concatenate([p.ravel() for p in step_present]),
            np.concatenate([r.ravel() for r in ref_kv]))
    return checks


def _path(node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = TREE_PARENTS[node]
    return path[::-1]


# ---- reduced vocabularies -------------------------------------------------------------------------

def read_vocab_file(path: Path, target_vocab: int) -> np.ndarray:
    """`--draft-vocab FILE`: target ids as a numpy .npy array or text (JSON list, or whitespace-separated)."""
    if not path.is_file():
        raise InputError(f"{setting('draft_vocab')} file '{path}' does not exist", "check the path")
    try:
        if path.suffix == ".npy":
            raw: Any = np.load(path, allow_pickle=False)
        else:
            text = read_text_file(path, setting("draft_vocab"))
            raw = json.loads(text) if text.lstrip().startswith("[") else text.split()
        ids = np.asarray(raw)
        if ids.dtype.kind not in "iu":
            ids = np.asarray([int(v) for v in np.ravel(ids)], np.int64)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{setting('draft_vocab')} file '{path}' holds no list of token ids ({exc})",
                         "write the ids with numpy.save, or as whitespace-separated integers") from None
    return check_vocab(ids.reshape(-1).astype(np.int64), target_vocab, f"{setting('draft_vocab')} '{path.name}'")


def check_vocab(ids: np.ndarray, target_vocab: int, what: str) -> np.ndarray:
    """A draft vocabulary must be target ids, increasing (each once), not empty."""
    if ids.size == 0:
        raise InputError(f"{what} is empty", "keep at least one token id")
    if int(ids.min()) < 0 or int(ids.max()) >= target_vocab:
        raise InputError(f"{what} holds ids outside the target's 0..{target_vocab - 1}", "store target token ids")
    if ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):
        raise InputError(f"{what} is not strictly increasing", "sort the ids and drop repeats")
    return ids


def reduce_head(model: Any, vocab: np.ndarray) -> Any:
    """A model draft whose head keeps the rows `vocab` (its logits are V' wide; row i is target id
    vocab[i]). The embedding, which reads token ids, stays whole; a tied head is untied."""
    import torch

    head = model.get_output_embeddings()
    weight = head.weight.detach()[torch.from_numpy(vocab)]
    bias = getattr(head, "bias", None)
    reduced = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, dtype=weight.dtype)
    with torch.no_grad():
        reduced.weight.copy_(weight)
        if bias is not None:
            reduced.bias.copy_(bias.detach()[torch.from_numpy(vocab)])
    model.config.tie_word_embeddings = False
    model.set_output_embeddings(reduced)
    return model


def draft_vocab_of(draft: Any) -> np.ndarray:
    """A loaded FeatureDraft's vocabulary as int64 numpy."""
    vocab: np.ndarray = draft.vocab.cpu().numpy().astype(np.int64)
    return vocab


def check_draft_vocab_flag(feature: FeatureSource | None, given: Path | None) -> None:
    if feature is not None and given is not None:
        raise InputError(f"{setting('draft_vocab')} applies to model drafts; the feature draft '{feature.source}' "
                         "carries its own vocabulary", f"drop {setting('draft_vocab')}")


__all__ = ["FeatureSource", "check_feature_pair", "draft_graph_spec", "draft_spec", "export_draft_graph",
           "feature_source", "load_feature_draft", "read_vocab_file", "reduce_head", "validate_draft_graph",
           "write_vocab"]


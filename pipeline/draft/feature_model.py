"""The feature-draft checkpoint format (EAGLE-style drafts): defined here and only here.

A feature draft reads the target's own hidden state ("feature") next to the embedding of the
next token, runs a few (usually one) Llama decoder layers of its own, and returns both its guess
of the target's next feature and logits over a (possibly reduced) draft vocabulary:

    e          = embed(x_t)                     the target's embedding table, shared, never stored
    e, f       = embed_norm(e), feature_norm(f) only with `input_norms`
    u          = fc([e ; f_{t-1}])               [2H] -> [H] (a bias only with `fc_bias`)
    h          = layers(u)                       Llama decoder layers, rotary at position t, own KV
    hidden_out = h                               ≈ f_t, the feature of position t
    logits     = lm_head(norm(h))                [V'] rows: target ids `draft_vocab`

Alignment (export, the engine and the trainer all follow it): the draft row at sequence position
t takes the token x_t and the feature f_{t-1} — the target's feature at position t - 1, zeros at
t = 0 — and returns hidden_out ≈ f_t and logits for x_{t+1}. Its rotary position is t (the
token's). A drafted node's children are drafted from rows (child token, the parent row's
hidden_out). The draft's KV rows of committed positions always come from the target's features:
after a round the engine re-feeds the accepted tokens with the features the target computed for
them (engine/model_drafter.py), so training with the target's features (teacher forcing) is what
the draft sees at the start of every round.

The feature f_t is the output of target decoder layer `feature_layer` (0-based) at position t,
before any later layer and before the final norm: by default the last layer's output before the
final norm (EAGLE-1's choice, and what the target graph outputs as `hidden_states`).

On disk, a directory:

- config.json: `FeatureDraftConfig` (model_type "specdec_feature_draft", format_version);
- model.safetensors: `fc.weight` [H, 2H] (`fc.bias` [H] with fc_bias), `layers.{i}.*` (a
  transformers LlamaDecoderLayer's own names: self_attn.{q,k,v,o}_proj.weight,
  mlp.{gate,up,down}_proj.weight, input_layernorm.weight, post_attention_layernorm.weight),
  `norm.weight` [H], `lm_head.weight` [V', H], `draft_vocab` int64 [V'] (draft row -> target
  token id, increasing; the identity when V' equals the target's vocabulary), and with
  input_norms `embed_norm.weight`, `feature_norm.weight`;
- the target's tokenizer files.

The layers are transformers' LlamaDecoderLayer / LlamaRMSNorm / LlamaRotaryEmbedding, built from
the target's own geometry and rotary parameters, so the draft's attention is the target's math.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specdec.pipeline.errors import InputError, UnsupportedModelError

MODEL_TYPE = "specdec_feature_draft"
FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
VOCAB_KEY = "draft_vocab"
_INIT_STD = 0.02  # transformers' initializer_range default


@dataclass(frozen=True)
class FeatureDraftConfig:
    """config.json of a feature draft. Geometry and rotary parameters are the target's."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_parameters: dict[str, Any]
    max_position_embeddings: int
    target_vocab_size: int  # rows of the target's embedding (token ids the draft reads)
    draft_vocab_size: int  # V': rows of the draft's head
    target_num_hidden_layers: int
    feature_layer: int  # the target decoder layer whose output (before the final norm) is the feature
    num_hidden_layers: int = 1  # the draft's own decoder layers
    fc_bias: bool = False
    input_norms: bool = False  # RMS norms on the embedding and the feature before fc
    hidden_act: str = "silu"
    model_type: str = MODEL_TYPE
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # `train`: what the trainer records (not read here)

    def __post_init__(self) -> None:
        problems = [
            (self.model_type != MODEL_TYPE, f"model_type is {self.model_type!r}, not {MODEL_TYPE!r}"),
            (self.format_version > FORMAT_VERSION,
             f"format_version {self.format_version} is newer than this specdec reads ({FORMAT_VERSION})"),
            (not 0 <= self.feature_layer < self.target_num_hidden_layers,
             f"feature_layer {self.feature_layer} is not a layer of a {self.target_num_hidden_layers}-layer target"),
            (not 1 <= self.draft_vocab_size <= self.target_vocab_size,
             f"draft_vocab_size {self.draft_vocab_size} is not within 1..target_vocab_size "
             f"{self.target_vocab_size}"),
            (self.num_hidden_layers < 1, "num_hidden_layers must be at least 1"),
            (self.num_attention_heads % self.num_key_value_heads != 0,
             "num_attention_heads must be a multiple of num_key_value_heads"),
            (self.hidden_act != "silu", f"hidden_act {self.hidden_act!r}: feature drafts use Llama's silu"),
        ]
        for failed, problem in problems:
            if failed:
                raise InputError(f"feature draft config: {problem}", "write it with `specdec draft --kind feature` "
                                 "or FeatureDraft.save")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str) -> FeatureDraftConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InputError(f"{where}: unknown feature draft config keys {unknown}",
                             "upgrade specdec, or remove the keys")
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [name for name in required if name not in raw]
        if missing:
            raise InputError(f"{where}: the feature draft config lacks {missing}", "re-save the draft")
        try:
            return cls(**raw)
        except TypeError as exc:
            raise InputError(f"{where}: {exc}", "re-save the draft") from None

    def llama_config(self) -> Any:
        """The transformers LlamaConfig of the draft's own decoder layers (eager attention: the
        tree mask is an additive float mask, docs/design.md §2)."""
        from transformers import LlamaConfig

        config = LlamaConfig(
            vocab_size=self.target_vocab_size, hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads, num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim, rms_norm_eps=self.rms_norm_eps, hidden_act=self.hidden_act,
            max_position_embeddings=self.max_position_embeddings, rope_parameters=dict(self.rope_parameters),
            attention_bias=False, mlp_bias=False, tie_word_embeddings=False,
        )
        config._attn_implementation = "eager"
        return config


def read_config(path: str | Path) -> FeatureDraftConfig | None:
    """The feature draft config in checkpoint directory `path`; None when it is another kind of
    checkpoint (a Hugging Face model), InputError when it is a broken feature draft."""
    file = Path(path) / CONFIG_NAME
    if not file.is_file():
        return None
    try:
        raw = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None  # not ours to judge: the Hugging Face loader words its own error
    if not isinstance(raw, dict) or raw.get("model_type") != MODEL_TYPE:
        return None
    return FeatureDraftConfig.from_dict(raw, str(file))


def target_geometry(target_config: Any) -> dict[str, Any]:
    """What a feature draft copies from its target's Hugging Face config."""
    needed = ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers", "vocab_size",
              "max_position_embeddings")
    missing = [key for key in needed if getattr(target_config, key, None) is None]
    if missing:
        model_type = getattr(target_config, "model_type", "?")
        raise UnsupportedModelError(f"a feature draft needs a gated-MLP decoder target; '{model_type}' has no "
                                    f"{', '.join(missing)}", "use a Llama-style target (llama, mistral, qwen2/3, "
                                    "gemma3_text, phi3, smollm3)")
    heads = int(target_config.num_attention_heads)
    hidden = int(target_config.hidden_size)
    rope = dict(getattr(target_config, "rope_parameters", None) or {})
    if rope and all(isinstance(value, dict) for value in rope.values()):  # per layer type (Gemma 3): the global one
        rope = dict(rope.get("full_attention") or next(iter(rope.values())))
    return {
        "hidden_size": hidden, "num_attention_heads": heads,
        "num_key_value_heads": int(getattr(target_config, "num_key_value_heads", None) or heads),
        "head_dim": int(getattr(target_config, "head_dim", None) or hidden // heads),
        "intermediate_size": int(target_config.intermediate_size),
        "rms_norm_eps": float(getattr(target_config, "rms_norm_eps", None) or 1e-6),
        "rope_parameters": rope or {"rope_type": "default", "rope_theta": 10000.0},
        "max_position_embeddings": int(target_config.max_position_embeddings),
        "target_vocab_size": int(target_config.vocab_size),
        "target_num_hidden_layers": int(target_config.num_hidden_layers),
    }


def decoder_layers(model: Any) -> Any:
    """The decoder layer list of a Hugging Face causal LM (`model.layers`, GPT-2's `transformer.h`)."""
    inner = getattr(model, "model", None) or getattr(model, "transformer", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        layers = getattr(inner, "h", None)
    if layers is None:
        raise InputError(f"cannot find the decoder layers of {type(model).__name__}",
                         "feature drafts need a decoder with a layer list")
    return layers


def layer_output(output: Any) -> torch.Tensor:
    """A decoder layer's hidden-state output (transformers returns a tensor or a tuple)."""
    tensor: torch.Tensor = output[0] if isinstance(output, tuple | list) else output
    return tensor


def additive_causal_mask(q: int, past: int, dtype: torch.dtype, batch: int = 1,
                         device: torch.device | str = "cpu") -> torch.Tensor:
    """[batch, 1, q, past + q]: 0 where visible (the past and the causal prefix), finfo.min elsewhere."""
    mask = torch.full((q, past + q), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask[:, :past] = 0
    mask[:, past:] = torch.triu(mask[:, past:], diagonal=1)
    return mask[None, None].expand(batch, 1, q, past + q)


class _Body(torch.nn.Module):
    """The parts under `model.`: the names match a Hugging Face Llama (`model.layers.0.self_attn.q_proj`,
    `model.norm`, `model.rotary_emb`), so the exported graph's module paths are what the architecture
    record (export/architectures.py) and the fused cpu builder (compile/fused/weights.py) read."""

    def __init__(self, llama: Any, embedding: torch.Tensor) -> None:
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

        super().__init__()
        # the target's table, frozen (Embedding.from_pretrained without its untyped signature)
        self.embed_tokens = torch.nn.Embedding(int(embedding.shape[0]), int(embedding.shape[1]))
        self.embed_tokens.weight = torch.nn.Parameter(embedding, requires_grad=False)
        self.layers = torch.nn.ModuleList(LlamaDecoderLayer(llama, index)
                                          for index in range(llama.num_hidden_layers))
        self.norm = LlamaRMSNorm(llama.hidden_size, eps=llama.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(llama)


class FeatureDraft(torch.nn.Module):
    """A feature draft (see the module docstring). `embedding` is the target's table [V, H]."""

    def __init__(self, config: FeatureDraftConfig, embedding: torch.Tensor) -> None:
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        super().__init__()
        if tuple(embedding.shape) != (config.target_vocab_size, config.hidden_size):
            raise InputError(f"the target's embedding is {list(embedding.shape)}, the feature draft expects "
                             f"[{config.target_vocab_size}, {config.hidden_size}]",
                             "pair the feature draft with the target it was made for")
        self.config = config
        self.llama = config.llama_config()
        self.model = _Body(self.llama, embedding)
        hidden = config.hidden_size
        self.embed_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps) if config.input_norms else None
        self.feature_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps) if config.input_norms else None
        self.fc = torch.nn.Linear(2 * hidden, hidden, bias=config.fc_bias)
        self.lm_head = torch.nn.Linear(hidden, config.draft_vocab_size, bias=False)
        self.register_buffer(VOCAB_KEY, torch.arange(config.draft_vocab_size, dtype=torch.int64))
        # transformers 5.2x renamed the decoder layers' `past_key_values` to `cache`
        params = inspect.signature(self.model.layers[0].forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_target(cls, target: Any, layers: int = 1, draft_vocab: Any = None, seed: int = 0,
                    feature_layer: int | None = None, input_norms: bool = False,
                    fc_bias: bool = False) -> FeatureDraft:
        """A freshly initialised draft for the Hugging Face causal LM `target`: random decoder layers
        and fc (normal, std 0.02, transformers' init), the target's final norm, and head rows copied
        from the target's head at `draft_vocab` (target token ids; None: every token)."""
        geometry = target_geometry(target.config)
        vocab = _vocab_tensor(draft_vocab, geometry["target_vocab_size"])
        last = geometry["target_num_hidden_layers"] - 1
        config = FeatureDraftConfig(**geometry, draft_vocab_size=int(vocab.numel()),
                                    feature_layer=last if feature_layer is None else feature_layer,
                                    num_hidden_layers=layers, fc_bias=fc_bias, input_norms=input_norms)
        embedding = target.get_input_embeddings().weight.detach().float().clone()
        generator = torch.Generator().manual_seed(seed)
        draft = cls(config, embedding)
        with torch.no_grad():
            for name, param in draft.named_parameters():
                if name.startswith(("model.layers.", "fc.")) and param.dim() == 2:
                    param.copy_(torch.randn(param.shape, generator=generator) * _INIT_STD)
                elif name.endswith(".bias"):
                    param.zero_()
            norm = getattr(getattr(target, "model", None), "norm", None)
            if norm is not None and getattr(norm, "weight", None) is not None:
                draft.model.norm.weight.copy_(norm.weight.detach().float())
            head = target.get_output_embeddings().weight.detach().float()
            draft.lm_head.weight.copy_(head[vocab])
            draft.vocab.copy_(vocab)
        return draft.eval()

    # -- the forward --------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, hidden_states: torch.Tensor, position_ids: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, cache: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [b, q, V'], hidden_out [b, q, H]) for rows (input_ids, hidden_states) at
        `position_ids` (default: after the cache's rows). `attention_mask`: additive [b, 1, q, past + q]
        (default causal over a fully visible past); `cache`: a transformers DynamicCache the rows
        are appended to (None: no past)."""
        x = self.hidden_out(input_ids, hidden_states, position_ids, attention_mask, cache)
        return self.lm_head(self.model.norm(x)), x

    def hidden_out(self, input_ids: torch.Tensor, hidden_states: torch.Tensor, position_ids: torch.Tensor | None = None,
                   attention_mask: torch.Tensor | None = None, cache: Any = None) -> torch.Tensor:
        """`forward` without the head: hidden_out alone (a trainer forms the logits its own way)."""
        batch, q = input_ids.shape
        past = cache.get_seq_length() if cache is not None else 0
        embedded = self.model.embed_tokens(input_ids)
        feature = hidden_states.to(embedded.dtype)
        if self.embed_norm is not None and self.feature_norm is not None:
            embedded, feature = self.embed_norm(embedded), self.feature_norm(feature)
        x: torch.Tensor = self.fc(torch.cat([embedded, feature], dim=-1))
        if position_ids is None:
            position_ids = torch.arange(past, past + q, dtype=torch.int64, device=x.device)[None].expand(batch, q)
        if attention_mask is None:
            attention_mask = additive_causal_mask(q, past, x.dtype, batch, x.device)
        embeddings = self.model.rotary_emb(x, position_ids)
        for layer in self.model.layers:
            x = layer_output(layer(x, attention_mask=attention_mask, position_ids=position_ids,
                                   use_cache=cache is not None, position_embeddings=embeddings,
                                   **{self._cache_kwarg: cache}))
        return x

    # -- files ---------------------------------------------------------------------------------
    def state_for_file(self) -> dict[str, torch.Tensor]:
        """model.safetensors' tensors: everything but the target's embedding, `model.` dropped."""
        state = {}
        for name, tensor in self.state_dict().items():
            if name == "model.embed_tokens.weight" or name.endswith("rotary_emb.inv_freq") \
                    or name.endswith("original_inv_freq"):
                continue
            state[name.removeprefix("model.")] = tensor.detach().contiguous()
        return state

    def save(self, path: str | Path, tokenizer: Any = None) -> Path:
        """Write the checkpoint into directory `path` (created; the caller stages it): config.json,
        model.safetensors and, given one, the target's tokenizer."""
        from safetensors.torch import save_file

        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_NAME).write_text(self.config.to_json())
        save_file(self.state_for_file(), str(directory / WEIGHTS_NAME), metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save_pretrained(str(directory))
        return directory

    @classmethod
    def load(cls, path: str | Path, embedding: torch.Tensor) -> FeatureDraft:
        """The draft in `path` on the target's embedding table `embedding` [V, H] (float32)."""
        from safetensors.torch import load_file

        directory = Path(path)
        config = read_config(directory)
        if config is None:
            raise InputError(f"'{directory}' is not a feature draft (config.json has no model_type {MODEL_TYPE!r})",
                             "pass a directory written by `specdec draft --kind feature`")
        weights = directory / WEIGHTS_NAME
        if not weights.is_file():
            raise InputError(f"feature draft '{directory}' has no {WEIGHTS_NAME}", "re-save the draft")
        draft = cls(config, embedding.detach().float())
        tensors = load_file(str(weights))
        state = {(name if name.startswith(("fc.", "lm_head.", "embed_norm.", "feature_norm.")) or name == VOCAB_KEY
                  else f"model.{name}"): tensor for name, tensor in tensors.items()}
        expected = {name: tensor for name, tensor in draft.state_dict().items()
                    if name != "model.embed_tokens.weight" and "rotary_emb" not in name}
        missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
        if missing or unexpected:
            raise InputError(f"feature draft '{directory}': {WEIGHTS_NAME} " + "; ".join(
                part for part in (f"lacks {[n.removeprefix('model.') for n in missing]}" if missing else "",
                                  f"has unknown tensors {unexpected}" if unexpected else "") if part),
                "re-save the draft with this specdec version")
        for name, tensor in state.items():
            if tuple(tensor.shape) != tuple(expected[name].shape):
                raise InputError(f"feature draft '{directory}': {name} is {list(tensor.shape)}, config.json "
                                 f"implies {list(expected[name].shape)}", "re-save the draft")
        _vocab_tensor(state[VOCAB_KEY], config.target_vocab_size)  # validates it
        with torch.no_grad():
            for name, tensor in state.items():
                target = expected[name]
                target.copy_(tensor.to(target.dtype))
        return draft.eval()

    def own_parameters(self) -> int:
        """Parameters the draft stores (the target's embedding, which it shares, not counted)."""
        return sum(p.numel() for name, p in self.named_parameters() if name != "model.embed_tokens.weight")

    @property
    def vocab(self) -> torch.Tensor:
        """draft_vocab: int64 [V'], the target token id of each head row."""
        vocab: torch.Tensor = getattr(self, VOCAB_KEY)
        return vocab


def _vocab_tensor(draft_vocab: Any, target_vocab: int) -> torch.Tensor:
    """`draft_vocab` (None: every id) as int64, checked: 1-D, increasing (so unique), inside the target's ids."""
    if draft_vocab is None:
        return torch.arange(target_vocab, dtype=torch.int64)
    ids = torch.as_tensor(draft_vocab).reshape(-1)
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise InputError("draft_vocab holds non-integer values", "store target token ids (int64)")
    ids = ids.to(torch.int64)
    if ids.numel() == 0:
        raise InputError("draft_vocab is empty", "keep at least one token")
    if int(ids.min()) < 0 or int(ids.max()) >= target_vocab:
        raise InputError(f"draft_vocab holds ids outside the target's 0..{target_vocab - 1}",
                         "store target token ids")
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise InputError("draft_vocab is not strictly increasing (sorted, no repeats)",
                         "store each target id once, in increasing order")
    return ids


def frequent_vocab(token_ids: Any, size: int, target_vocab: int, always: tuple[int, ...] = ()) -> torch.Tensor:
    """A draft vocabulary: the `size` most frequent ids of `token_ids` (ties: lower id first), the
    ids `always` (e.g. EOS) included, increasing. FR-Spec / EAGLE-3 choose it this way."""
    counts = torch.bincount(torch.as_tensor(token_ids, dtype=torch.int64).reshape(-1), minlength=target_vocab)
    chosen = set(int(i) for i in always)
    order = sorted(range(target_vocab), key=lambda i: (-int(counts[i]), i))
    for token in order:
        if len(chosen) >= size:
            break
        chosen.add(token)
    return torch.tensor(sorted(chosen)[: max(size, len(always))], dtype=torch.int64)


__all__ = ["CONFIG_NAME", "FORMAT_VERSION", "MODEL_TYPE", "VOCAB_KEY", "WEIGHTS_NAME", "FeatureDraft",
           "FeatureDraftConfig", "additive_causal_mask", "decoder_layers", "frequent_vocab", "layer_output",
           "read_config", "target_geometry"]

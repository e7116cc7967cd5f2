"""What `specdec quantize` is asked to do, validated before any work starts."""

from __future__ import annotations

import enum
import fnmatch
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.records.quantization import WeightFormat as WeightFormat  # re-exported: the stage's choice

log = logging.getLogger(__name__)

# MatMulNBits block 128 is the fast layout; smaller blocks are the fallback for narrow layers.
# accuracy_level 4 (int8 activation compute) is faster still, but it quantizes activations per
# row, so the last-bit differences between a token verified in a tree and the same token decoded
# alone (other kernels for one row, attention sums re-associated) become different int8 codes:
# in the tree layout greedy speculative output diverged from plain greedy on 1-2 of 8 prompts.
# The exact layout (chains, no single-row calls; settings.bundle_requirements turns it on for
# such bundles) computes every row identically, which the quality report checks; the default
# stays 0 (compute in the graph's float type) for bundles that decode in trees.
AUTO_GROUP_SIZES = (128, 64, 32)

# Vocabularies from this size on get quantized embedding tables by default (see QuantizeConfig).
LARGE_VOCAB = 32_000
ACCURACY_LEVELS = (0, 1, 2, 3, 4)

# The first decoder block of the target is the most sensitive to weight noise (its errors pass
# through every later block), as is the output projection (it sets the argmax the verifier
# compares): both get 8 bits by default. The draft only proposes, so it is fully 4-bit. Both are
# settable to 4 bits (onnxruntime-genai's default is every MatMul at 4 bits): on a 4-layer target an
# 8-bit first block is a quarter of the matmul time at 1.6x the 4-bit cost (benchmarks/formats.py).
_FIRST_BLOCK = re.compile(r"(^|\.)(layers|h|blocks|layer|decoder\.layers)\.0\.")
_OUTPUT_HEAD = ("lm_head", "embed_out", "output")


# The graphs a bundle can hold, in the order they are quantized.
GRAPH_ROLES = ("target", "draft")


class LayerClass(str, enum.Enum):
    """The layer classes a mixed format (`--format mixed --mix ...`) gives a weight format each."""

    attention = "attention"  # q/k/v (or packed qkv) and output projections
    mlp = "mlp"  # gate/up (or packed gate_up) and down projections
    head = "head"  # the output projection to the vocabulary


# The module path's parent (`model.layers.0.self_attn.q_proj` -> self_attn) names a decoder
# projection's class: the exporters' names for Llama/Qwen/Mistral/Phi/Gemma (self_attn, mlp) and
# GPT-2/NeoX/Falcon (attn, attention, self_attention; mlp).
_CLASS_OF_PARENT = {"self_attn": LayerClass.attention, "attn": LayerClass.attention,
                    "attention": LayerClass.attention, "self_attention": LayerClass.attention,
                    "mlp": LayerClass.mlp, "feed_forward": LayerClass.mlp, "ffn": LayerClass.mlp}


def layer_class(name: str) -> LayerClass | None:
    """The class of the linear layer at module path `name` (graph_query.Layer.name), None if unknown."""
    if name.split("#")[0] in _OUTPUT_HEAD:
        return LayerClass.head
    parts = name.split("#")[0].split(".")
    return _CLASS_OF_PARENT.get(parts[-2]) if len(parts) >= 2 else None


# `--format mixed` without `--mix`: the MLP (two thirds of a decoder's weight bytes) and the head in
# int4, where bytes matter most on a bandwidth-bound step; the attention projections in w8a8. Which
# mix is fastest depends on the CPU: carry it beside nbits and w8a8 and let `tune` measure.
DEFAULT_MIX = {LayerClass.attention: WeightFormat.w8a8, LayerClass.mlp: WeightFormat.nbits,
               LayerClass.head: WeightFormat.nbits}


def parse_mix(value: str) -> dict[LayerClass, WeightFormat]:
    """`attention=w8a8,mlp=nbits` to a format per class (QuantizeConfig fills the classes left out from
    DEFAULT_MIX and checks the whole)."""
    mix: dict[LayerClass, WeightFormat] = {}
    for part in (part.strip() for part in value.split(",") if part.strip()):
        if "=" not in part:
            raise InputError(f"{setting('mix')} entry '{part}' is not CLASS=FORMAT",
                             "e.g. attention=w8a8,mlp=nbits,head=nbits")
        key, chosen = part.split("=", 1)
        mix[_parse_choice(LayerClass, key.strip(), "layer class", "mix")] = _parse_choice(
            WeightFormat, chosen.strip(), "weight format", "mix")
    return mix


def check_mix(mix: Mapping[LayerClass, WeightFormat]) -> None:
    """A mix gives each class nbits or w8a8, and not all of them the same one."""
    for layer, fmt in mix.items():
        if fmt is WeightFormat.mixed:
            raise InputError(f"{setting('mix')} {layer.value}={fmt.value}: a layer class takes one format",
                             "use nbits or w8a8 for each class, e.g. attention=w8a8,mlp=nbits,head=nbits")
    if len(set(mix.values())) == 1:
        only = next(iter(mix.values())).value
        raise InputError(f"{setting('mix')} gives every layer class {only}: that is no mix",
                         f"use --format {only}, or give one class the other format")


Choice = TypeVar("Choice", bound=enum.Enum)


def _parse_choice(kind: type[Choice], value: Choice | str, what: str, key: str) -> Choice:
    if isinstance(value, kind):
        return value
    try:
        return kind(str(value).lower())
    except ValueError:
        raise InputError(f"unknown {what} '{value}' for {setting(key)}",
                         f"use one of: {', '.join(choice.value for choice in kind)}") from None


def parse_format(value: WeightFormat | str) -> WeightFormat:
    return _parse_choice(WeightFormat, value, "weight format", "format")


# The methods a format implements when --method is left out, and the ones it accepts.
# w8a8 is round-to-nearest per output column: at 8 bits per channel the rounding error is already
# below what AWQ's scaling or GPTQ's error feedback correct, so no calibration is run.
# mixed: the method of its nbits layers (its w8a8 layers are rtn).
DEFAULT_METHOD = {WeightFormat.nbits: "awq", WeightFormat.w8a8: "rtn", WeightFormat.mixed: "awq"}
FORMAT_METHODS = {WeightFormat.nbits: ("rtn", "gptq", "awq"), WeightFormat.w8a8: ("rtn",),
                  WeightFormat.mixed: ("rtn", "gptq", "awq")}
W8A8_WEIGHT_BITS = (7, 8)
# Settings of the nbits format alone (besides awq/gptq): given while --format is left out, they select nbits.
_NBITS_SETTINGS = ("group_size", "symmetric", "accuracy_level", "head_bits", "first_block_bits")


class Method(str, enum.Enum):
    rtn = "rtn"
    gptq = "gptq"
    awq = "awq"


def default_method(weight_format: WeightFormat) -> Method:
    return Method(DEFAULT_METHOD[weight_format])


def parse_method(value: Method | str, key: str = "method") -> Method:
    return _parse_choice(Method, value, "quantization method", key)


def parse_formats(text: str) -> tuple[WeightFormat, tuple[WeightFormat, ...]]:
    """`nbits,w8a8` -> (nbits, (w8a8,)): the bundle's own format and the others the target is also stored in."""
    first, *rest = [parse_format(part.strip()) for part in text.split(",") if part.strip()] or [parse_format(text)]
    return first, tuple(rest)


def parse_graphs(text: str) -> tuple[str, ...]:
    """`draft`, `draft,target`: the graphs to quantize, in GRAPH_ROLES order (QuantizeConfig checks the names)."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    return tuple(sorted(names, key=lambda name: GRAPH_ROLES.index(name) if name in GRAPH_ROLES else len(GRAPH_ROLES)))


DEFAULT_PROFILE = "local-cpu"  # the device profile whose quantize.format applies when `profile` is left out


@dataclass(frozen=True)
class QuantizeConfig:
    """What `specdec quantize` is asked to do: a plain value, checked on construction (no file is read).

    The CLI parses its text options into these types (`parse_formats`, `parse_graphs`, `parse_mix`); a
    pipeline section gives them as YAML (`format: w8a8`, `also_formats: [nbits]`, `graphs: [draft]`).
    What is left to decide is decided from the fields when asked: the weight format (`weight_format`:
    `format`, else the profile's quantize.format, read then) and each graph's method (`method_for`).
    """

    output: Path
    # Which graphs to quantize (None: every graph the bundle has); the others stay as they are.
    # Quantizing only the draft keeps the target, and so every output token, bit for bit what it
    # was, while the draft (a weight-bandwidth bound call per tree level) reads a third of the bytes.
    graphs: tuple[str, ...] | None = None
    # None: the `profile`'s quantize.format (the one measured fastest-exact on its device class), unless
    # a setting only nbits has is given (_NBITS_SETTINGS: awq/gptq, a group size, ...), which selects nbits.
    format: WeightFormat | None = None
    # the target is stored in these formats too (`--format nbits,w8a8`: `also_formats` w8a8), sharing the
    # rest of the bundle: `tune` measures each and its plan picks one
    also_formats: tuple[WeightFormat, ...] = ()
    profile: str = DEFAULT_PROFILE  # the device profile whose default format applies
    method: Method | None = None  # None: the format's default (DEFAULT_METHOD)
    target_method: Method | None = None
    draft_method: Method | None = None
    group_size: int | None = None  # None: per layer, 128 where the width allows, else 64 or 32
    symmetric: bool = False
    accuracy_level: int = 0
    head_bits: int = 8  # the target's output projection: 8 (default) or 4 (what onnxruntime-genai ships)
    first_block_bits: int = 8  # the target's first decoder block: 8 (default) or 4 (onnxruntime-genai's)
    keep_float: tuple[str, ...] = ()
    calib: Path | None = None
    calib_samples: int = 128
    calib_seq_len: int = 128
    eval_file: Path | None = None
    max_ppl_increase: float | None = None  # percent
    seed: int = 0
    force: bool = False
    # None: on for vocabularies of LARGE_VOCAB tokens or more, where the table is a large share of the
    # bundle (136M of Qwen2.5-0.5B's 494M parameters), off below, where it is small and stays exact.
    quantize_embeddings: bool | None = None
    # w8a8 weight range: 7 bits (+-63) is exact on every CPU; 8 bits (+-127) only where no kernel
    # accumulates pairs in saturating int16 (x86 with VNNI, arm64): pipeline/graphs/int8_matmul.py
    w8a8_weight_bits: int = 7
    # The mixed format's weight format per layer class (classes left out: DEFAULT_MIX); only with a
    # `mixed` format among the formats.
    mix: dict[LayerClass, WeightFormat] | None = None
    # Size of the engine check in the quality report (prompts x new tokens, greedy); None: by the
    # bundle's parameter count (quality.engine_check_size).
    eval_prompts: int | None = None
    eval_new_tokens: int | None = None
    # Most held-out windows scored for perplexity and draft agreement; None: by the parameter count
    # (quality.eval_window_count).
    eval_windows: int | None = None

    def __post_init__(self) -> None:
        formats = (self.format, *self.also_formats)
        twice = next((f for i, f in enumerate(formats) if f is not None and f in formats[:i]), None)
        if twice is not None:
            raise InputError(f"{setting('format')} names {twice.value} twice",
                             "list each weight format once, e.g. --format nbits,w8a8")
        named = {f for f in formats if f is not None}
        if self.mix is not None:
            if WeightFormat.mixed not in named:
                raise InputError(f"{setting('mix')} applies to the mixed format, which {setting('format')} does "
                                 "not name", "add mixed to --format (e.g. --format mixed, or nbits,w8a8,mixed)")
            check_mix(self.layer_formats)
        if self.format is not None:  # with the format left out, the profile's is known when asked for
            self._check_methods(self.format)
        if self.graphs is not None:
            unknown = [g for g in self.graphs if g not in GRAPH_ROLES]
            if unknown or not self.graphs:
                raise InputError(f"{setting('graphs')} {','.join(unknown) or '(empty)'} names no graph of a bundle",
                                 f"use {', '.join(GRAPH_ROLES)} or both (comma-separated)")
        group = self.group_size
        fix = "fix the setting and run again"
        problems = [
            (group is not None and (group < 16 or group & (group - 1) != 0),
             f"{setting('group_size')} {group} is not a power of two >= 16",
             "use 32, 64 or 128 (or leave it out for auto)"),
            (self.accuracy_level not in ACCURACY_LEVELS,
             f"{setting('accuracy_level')} {self.accuracy_level} is not one of {ACCURACY_LEVELS}",
             "use 4 (int8 compute, fastest on CPUs) or 0 (compute in the graph's float type)"),
            (self.head_bits not in (4, 8), f"{setting('head_bits')} {self.head_bits} is not 4 or 8",
             "use 8 (default) or 4"),
            (self.first_block_bits not in (4, 8),
             f"{setting('first_block_bits')} {self.first_block_bits} is not 4 or 8", "use 8 (default) or 4"),
            (self.w8a8_weight_bits not in W8A8_WEIGHT_BITS,
             f"{setting('w8a8_weight_bits')} {self.w8a8_weight_bits} is not 7 or 8",
             "use 7 (exact on every CPU) or 8 (x86 with VNNI, arm64)"),
            (bool(self.also_formats) and self.graphs is not None and "target" not in self.graphs,
             f"{setting('format')} with more than one format stores the target in each, but {setting('graphs')} "
             "leaves the target out", "name one format, or quantize the target too"),
            (self.calib_samples < 1, f"{setting('calib_samples')} must be at least 1", fix),
            (self.calib_seq_len < 8, f"{setting('calib_seq_len')} must be at least 8", fix),
            (self.max_ppl_increase is not None and self.max_ppl_increase < 0,
             f"{setting('max_ppl_increase')} must be >= 0 (a percentage)", fix),
            (self.eval_prompts is not None and self.eval_prompts < 1,
             f"{setting('eval_prompts')} must be at least 1", "pass 1 or more (or leave it out: by model size)"),
            (self.eval_new_tokens is not None and self.eval_new_tokens < 1,
             f"{setting('eval_new_tokens')} must be at least 1", "pass 1 or more (or leave it out: by model size)"),
            (self.eval_windows is not None and self.eval_windows < 1,
             f"{setting('eval_windows')} must be at least 1", "pass 1 or more (or leave it out: by model size)"),
        ]
        for failed, problem, hint in problems:
            if failed:
                raise InputError(problem, hint)

    @classmethod
    def from_text(cls, **values: Any) -> QuantizeConfig:
        """The config from options as a user types them: `format` a comma list (`nbits,w8a8`), `graphs` one
        (`draft`), `mix` CLASS=FORMAT pairs, the methods by name; the other fields as they are. The CLI
        builds its config so; a pipeline section is YAML of the fields themselves."""
        text = dict(values)
        weight_format = text.pop("format", None)
        if isinstance(weight_format, str):
            text["format"], also = parse_formats(weight_format)
            text["also_formats"] = (*also, *text.get("also_formats", ()))
        elif weight_format is not None:
            text["format"] = weight_format
        if isinstance(text.get("graphs"), str):
            text["graphs"] = parse_graphs(text["graphs"])
        if isinstance(text.get("mix"), str):
            text["mix"] = parse_mix(text["mix"])
        for key in ("method", "target_method", "draft_method"):
            if text.get(key) is not None:
                text[key] = parse_method(text[key], key)
        if text.get("keep_float") is not None:
            text["keep_float"] = tuple(text["keep_float"])
        return cls(**text)

    def _check_methods(self, weight_format: WeightFormat) -> None:
        accepted = FORMAT_METHODS[weight_format]
        for key in ("method", "target_method", "draft_method"):
            value: Method | None = getattr(self, key)
            if value is not None and value.value not in accepted:
                raise InputError(f"{setting(key)} {value.value} does not apply to {setting('format')} "
                                 f"{weight_format.value}", f"use {' or '.join(accepted)} (or leave it out)")

    @cached_property
    def weight_format(self) -> WeightFormat:
        """The format to write: `format`, else the profile's quantize.format (read here, once), else nbits
        where a setting only nbits has was given."""
        if self.format is not None:
            return self.format
        from specdec.pipeline.settings.profiles import load_device  # a profile is read when the format is asked

        default = load_device(self.profile).quantize.format
        chosen = self._given_nbits_settings()
        if default is not WeightFormat.nbits and chosen:
            log.info("%s given: quantizing to nbits, not profile %s's default %s", ", ".join(map(setting, chosen)),
                     self.profile, default.value)
            default = WeightFormat.nbits
        if default in self.also_formats:
            raise InputError(f"{setting('format')} left out is profile {self.profile}'s {default.value}, which "
                             f"{setting('also_formats')} names too", "name the bundle's own format with --format")
        self._check_methods(default)
        return default

    def for_format(self, weight_format: WeightFormat) -> QuantizeConfig:
        """The settings that quantize the target into `weight_format`, one of `also_formats`: the method
        given applies where that format accepts it (a default method counts as not given), else its default."""
        def method(value: Method | None) -> Method | None:
            given = value is not None and value is not default_method(self.weight_format)
            return value if given and value is not None and value.value in FORMAT_METHODS[weight_format] else None

        return replace(self, format=weight_format, also_formats=(), graphs=("target",), method=method(self.method),
                       target_method=method(self.target_method), draft_method=None,
                       mix=self.mix if weight_format is WeightFormat.mixed else None)

    def _given_nbits_settings(self) -> list[str]:
        """The settings only the nbits format has that were given (not at their defaults)."""
        defaults = {f.name: f.default for f in fields(self)}
        given = [key for key in _NBITS_SETTINGS if getattr(self, key) != defaults[key]]
        for key in ("method", "target_method", "draft_method"):
            value: Method | None = getattr(self, key)
            if value is not None and value.value not in FORMAT_METHODS[WeightFormat.w8a8]:
                given.append(key)
        return given

    def roles_in(self, available: Iterable[str]) -> tuple[str, ...]:
        """The graphs to quantize among a bundle's `available` ones (all of them by default)."""
        chosen = set(available) if self.graphs is None else set(self.graphs)
        return tuple(r for r in GRAPH_ROLES if r in chosen)

    def method_for(self, role: str) -> Method:
        override = self.target_method if role == "target" else self.draft_method
        return override or self.method or default_method(self.weight_format)

    @property
    def layer_formats(self) -> dict[LayerClass, WeightFormat]:
        """The mixed format's weight format per layer class: `mix` over DEFAULT_MIX."""
        return {**DEFAULT_MIX, **(self.mix or {})}

    def format_for(self, role: str, layer: str) -> WeightFormat:
        """The weight format of `role`'s layer `layer` in the mixed format, by its class."""
        kind = layer_class(layer)
        if kind is None:
            raise InputError(f"{role} layer {layer} is in no layer class of {setting('mix')} "
                             f"({', '.join(c.value for c in LayerClass)})",
                             "quantize this model with one format (--format nbits or w8a8)")
        return self.layer_formats[kind]

    def bits_for(self, role: str, layer: str) -> int | None:
        """4 or 8 bits for a layer, or None when a --keep-float pattern matches it."""
        if any(fnmatch.fnmatchcase(layer, pattern) for pattern in self.keep_float):
            return None
        if role == "target" and layer in _OUTPUT_HEAD:
            return self.head_bits
        if role == "target" and _FIRST_BLOCK.search(layer):
            return self.first_block_bits
        return 4

    def embeddings_on(self, vocab_size: int) -> bool:
        """Whether a graph's embedding tables are quantized: as asked, else by the vocabulary's size."""
        return vocab_size >= LARGE_VOCAB if self.quantize_embeddings is None else self.quantize_embeddings

    def embedding_bits_for(self, role: str, table: str) -> int | None:
        """Embedding tables: 8 bits in the target, 4 in the draft (None: --keep-float)."""
        if any(fnmatch.fnmatchcase(table, pattern) for pattern in self.keep_float):
            return None
        return 8 if role == "target" else 4

    def record(self) -> dict[str, Any]:
        """What the lineage stores: everything that changes the output."""
        from specdec.pipeline.graphs.files import sha256_file

        def file_record(path: Path | None) -> dict[str, str] | None:
            return None if path is None else {"path": str(path), "sha256": sha256_file(Path(path))}

        formats = (self.weight_format, *self.also_formats)
        w8a8 = {"format": ",".join(f.value for f in formats), "w8a8_weight_bits": self.w8a8_weight_bits} \
            if WeightFormat.w8a8 in formats or WeightFormat.mixed in formats else {}
        mix = {"mix": {kind.value: chosen.value for kind, chosen in self.layer_formats.items()}} \
            if WeightFormat.mixed in formats else {}
        return {
            **w8a8,
            **mix,
            "graphs": None if self.graphs is None else list(self.graphs),
            "target_method": self.method_for("target").value,
            "draft_method": self.method_for("draft").value,
            "group_size": self.group_size or "auto",
            "symmetric": self.symmetric,
            "accuracy_level": self.accuracy_level,
            "head_bits": self.head_bits,
            "first_block_bits": self.first_block_bits,
            "keep_float": list(self.keep_float),
            "calib": file_record(self.calib),
            "calib_samples": self.calib_samples,
            "calib_seq_len": self.calib_seq_len,
            "eval": file_record(self.eval_file),
            "max_ppl_increase": self.max_ppl_increase,
            "quantize_embeddings": "auto" if self.quantize_embeddings is None else self.quantize_embeddings,
            "seed": self.seed,
        }

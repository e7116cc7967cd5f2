"""The manifest's `reports` section: what each stage measured and decided, as typed records.

Each stage writes its own record (`Reports.export`, `.quantize`, ...) and the CLI, `inspect` and
later stages read its fields, through the same codec as the rest of the manifest. The JSON has the
shape it always had (a key per stage, a field per measurement). Every report keeps the keys it does
not name in `other` (`codec.REST`): a bundle written by an older or newer specdec reads, and is
written back, unchanged. Tables of measurements whose rows vary (per graph, per provider, per
bucket) stay mappings; the figures commands print are fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from specdec.pipeline.records.codec import OMIT_DEFAULT, REST

# ---- export ------------------------------------------------------------------------------------

@dataclass
class SharedTensors:
    """Tensors target and draft share, stored once in one external-data file (export/tensor_sharing.py)."""

    file: str | None  # None: nothing was identical
    tensors: int
    bytes: int
    saved_bytes: int


@dataclass
class ExportReport:
    # by role: the checks against PyTorch (case, output, max_abs_diff); or why they were skipped
    validation: dict[str, Any] | str
    warnings: list[str] = field(default_factory=list)
    shared: SharedTensors | None = field(default=None, metadata=OMIT_DEFAULT)
    draft: str | None = field(default=None, metadata=OMIT_DEFAULT)  # why the bundle has no draft graph
    other: dict[str, Any] = field(default_factory=dict, metadata=REST)


@dataclass
class SurgeryReport:
    validated: bool
    other: dict[str, Any] = field(default_factory=dict, metadata=REST)


# ---- quantize ----------------------------------------------------------------------------------

@dataclass
class CalibrationUse:
    """The calibration text quantize read and how much of it it used."""

    source: str
    samples: int
    seq_len: int
    tokens: int


@dataclass
class EvalUse:
    """The text perplexity was measured on."""

    source: str
    windows: int
    tokens: int


@dataclass
class SizeChange:
    bytes_before: int
    bytes_after: int
    size_ratio: float


@dataclass
class QuantizeReport:
    calibration: CalibrationUse
    eval: EvalUse
    # by role: bytes and perplexity before and after, and `logits_error` (what the format moves the
    # logits: compile scales its int8-compute tolerance by it)
    graphs: dict[str, dict[str, Any]]
    total: SizeChange
    warnings: list[str] = field(default_factory=list)
    # the pair decoded before and after: agreement, accepted length, lossless prompts, invariance
    speculative: dict[str, Any] | None = field(default=None, metadata=OMIT_DEFAULT)
    # the target in each further weight format (`quantize --format nbits,w8a8`), by format
    variants: dict[str, QuantizeReport] = field(default_factory=dict, metadata=OMIT_DEFAULT)
    other: dict[str, Any] = field(default_factory=dict, metadata=REST)

    def logits_error(self, role: str) -> float | None:
        value = self.graphs.get(role, {}).get("logits_error")
        return float(value) if isinstance(value, int | float) else None


# ---- compile -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Invariance:
    """Whether the target computes a token bitwise alike however it shares a call (engine/invariance.py)."""

    single_row: bool
    chain: bool
    tree: bool
    max_tree_diff: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass
class KVQuality:
    """What a lossy KV cache policy costs against the full cache (compile/kv_quality.py)."""

    policy: str
    windows: int
    tokens: int
    positions_past_reach: int
    mismatch_rate: float
    mismatch_rate_past_reach: float
    perplexity_full: float
    perplexity_policy: float
    perplexity_delta: float


@dataclass
class CompileReport:
    flavour: str
    max_abs_diff: dict[str, float]  # by role (npu: by variant): the compiled graph against the dynamic one
    notes: list[str] = field(default_factory=list)  # adjustments the user should hear about
    invariance: Invariance | None = field(default=None, metadata=OMIT_DEFAULT)  # cpu: the target's
    kv_quality: KVQuality | None = field(default=None, metadata=OMIT_DEFAULT)  # a lossy KV policy's cost
    # cpu: the target compiled again in each further weight format, by format
    variants: dict[str, CompileReport] = field(default_factory=dict, metadata=OMIT_DEFAULT)
    # npu: onnxsim's result per variant, mobile readiness per variant, the context buckets, the weights
    # files' sizes per role, the static-QDQ form's measurements, each variant's tolerance
    simplify: dict[str, Any] | None = field(default=None, metadata=OMIT_DEFAULT)
    readiness: dict[str, Any] | None = field(default=None, metadata=OMIT_DEFAULT)
    context_buckets: list[int] | None = field(default=None, metadata=OMIT_DEFAULT)
    sizes: dict[str, dict[str, Any]] | None = field(default=None, metadata=OMIT_DEFAULT)
    activations: dict[str, Any] | None = field(default=None, metadata=OMIT_DEFAULT)
    validation: dict[str, Any] | None = field(default=None, metadata=OMIT_DEFAULT)
    other: dict[str, Any] = field(default_factory=dict, metadata=REST)


# ---- tune --------------------------------------------------------------------------------------

@dataclass
class TuneReport:
    device: str  # the device key the plan was stored under
    created: str
    warnings: list[str] = field(default_factory=list)
    other: dict[str, Any] = field(default_factory=dict, metadata=REST)


@dataclass
class Reports:
    """By stage; None: the stage has not run on the bundle (or wrote no report)."""

    export: ExportReport | None = field(default=None, metadata=OMIT_DEFAULT)
    surgery: SurgeryReport | None = field(default=None, metadata=OMIT_DEFAULT)
    quantize: QuantizeReport | None = field(default=None, metadata=OMIT_DEFAULT)
    compile: CompileReport | None = field(default=None, metadata=OMIT_DEFAULT)
    tune: TuneReport | None = field(default=None, metadata=OMIT_DEFAULT)
    other: dict[str, Any] = field(default_factory=dict, metadata=REST)  # stages this specdec does not know

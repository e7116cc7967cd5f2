"""Device profiles and scenario templates (docs/design.md §7): YAML in `profiles/`, validated on load.

A device profile says how to reach and measure a device (transport, remote dir, Python, threads,
sensor paths with units and sign, thermal thresholds, power budget), how to quantize for it (the
default weight format) and how to compile for it (max context, buckets, tree limits). A scenario
template holds the DynamicTreePrune parameters and controller targets for one kind of prompt.
Unknown keys are errors, choices are enums.
"""

from __future__ import annotations

import enum
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, model_validator

from specdec.pipeline.errors import InputError
from specdec.pipeline.records.decode import MAX_LOOKUP_NGRAM, BanPolicy, DecodeConfig, DrafterKind, PruneParams
from specdec.pipeline.records.kv_policy import KVCache, KVDtype
from specdec.pipeline.records.manifest import GraphFlavour
from specdec.pipeline.records.quantization import WeightFormat
from specdec.pipeline.settings.strict_model import StrictModel, validate_model

# Tree and prune defaults are DecodeConfig's (the one place they live); a profile or scenario
# that leaves a field out gets the same value a bare DecodeConfig has.
_DECODE = DecodeConfig()
_PRUNE = PruneParams()


class Transport(str, enum.Enum):
    local = "local"
    adb = "adb"


class RuntimeKind(str, enum.Enum):
    """What runs the bench on the device: auto = its own Python when that has numpy and
    onnxruntime, else the portable runtime (pushed once; `specdec runtime build`)."""

    auto = "auto"
    portable = "portable"
    device_python = "device-python"


class CurrentUnit(str, enum.Enum):
    auto = "auto"
    microamp = "uA"
    milliamp = "mA"
    amp = "A"


class VoltageUnit(str, enum.Enum):
    auto = "auto"
    microvolt = "uV"
    millivolt = "mV"
    volt = "V"


class DischargeSign(str, enum.Enum):
    auto = "auto"
    negative = "negative"  # current_now < 0 while discharging (most Qualcomm / Pixel kernels)
    positive = "positive"


class RuntimeSpec(StrictModel):
    remote_dir: str = "/data/local/tmp/specdec"
    use: RuntimeKind = RuntimeKind.auto
    python: str = "python3"  # with use: device-python (or auto)
    threads: int = Field(4, ge=0)
    cpu_mask: str | None = None  # hex mask for `taskset`, e.g. "f0" for the big cores
    run_timeout_s: float = Field(1800, gt=0)


class SensorSpec(StrictModel):
    battery_dir: str = "/sys/class/power_supply/battery"
    usb_online: str = "/sys/class/power_supply/usb/online"
    current_unit: CurrentUnit = CurrentUnit.auto
    voltage_unit: VoltageUnit = VoltageUnit.auto
    discharge_sign: DischargeSign = DischargeSign.auto
    thermal_dir: str = "/sys/class/thermal"
    thermal_zone_types: list[str] = Field(default_factory=list)  # empty: every zone
    cpufreq_dir: str = "/sys/devices/system/cpu"
    interval_ms: int = Field(200, ge=20)
    rapl_energy: str | None = "/sys/class/powercap/intel-rapl:0/energy_uj"  # local only


class ThermalSpec(StrictModel):
    start_temp_c: float = 40.0  # cool down below this before each measured run
    cooldown_timeout_s: float = Field(180, ge=0)
    throttle_c: float = 50.0  # halve the tree width above this
    disable_c: float = 55.0  # plain decoding above this
    recover_c: float = 45.0  # back to full speculation below this

    @model_validator(mode="after")
    def _ordered(self) -> ThermalSpec:
        if not self.recover_c <= self.throttle_c <= self.disable_c:
            raise ValueError("thermal thresholds must satisfy recover_c <= throttle_c <= disable_c")
        return self


class PowerSpec(StrictModel):
    budget_w: float = Field(4.0, gt=0)


class CompileSpec(StrictModel):
    # cpu: fused onnxruntime contrib-op graphs with the KV cache in place (phone and desktop CPUs);
    # npu: static-shape standard-op buckets for NNAPI/QNN-style runtimes.
    target: GraphFlavour = GraphFlavour.cpu
    max_context: int = Field(2048, ge=16)
    buckets: list[int] = Field(default_factory=lambda: [8, 16, 24, 48, 96])
    draft_buckets: list[int] = Field(default_factory=lambda: [1, 4, 8, 16])
    prefill_chunk: int = Field(64, ge=1)
    # npu: KV slots of each context-length bucket (attention spans the smallest that holds the
    # sequence); capped at max_context, which is always the last bucket
    context_buckets: list[int] = Field(default_factory=lambda: [128, 256, 512, 1024])
    # the KV cache policy this device class compiles for (records/kv_policy.py): `full` keeps the
    # context exactly; `window` (lossy) keeps kv_sinks + the last kv_window positions
    kv_cache: KVCache = KVCache.full
    kv_sinks: int = Field(4, ge=0)
    kv_window: int = Field(256, ge=1)
    kv_dtype: KVDtype = KVDtype.float32  # int8: a quarter of the bytes, lossy

    @model_validator(mode="after")
    def _increasing(self) -> CompileSpec:
        for name in ("buckets", "draft_buckets", "context_buckets"):
            values = getattr(self, name)
            if not values or values[0] < 1 or any(b >= a for a, b in zip(values[1:], values, strict=False)):
                raise ValueError(f"{name} must be increasing and >= 1, got {values}")
        return self


class QuantizeSpec(StrictModel):
    # `specdec quantize`'s weight format when --format is left out: the one measured fastest among the
    # exact ones on this device class (benchmarks/peers.py); nbits, which every onnxruntime build runs,
    # where nothing was measured
    format: WeightFormat = WeightFormat.nbits


class TreeSpec(StrictModel):
    budget: int = Field(_DECODE.tree_budget, ge=1)  # nodes verified per round, root included
    depth: int = Field(_DECODE.depth, ge=1)
    width: int = Field(_DECODE.width, ge=1)  # frontier expanded per level
    max_k: int = Field(_PRUNE.max_k, ge=1)
    max_width: int = Field(16, ge=1)  # articles: 16 / 32
    # None: DecodeConfig's (model). Where a draft model costs too much per level (small targets
    # near onnxruntime's per-call floor), `lookup` drafts for free.
    drafter: DrafterKind | None = None


class ComplianceSpec(StrictModel):
    """Constrained decoding a profile or scenario asks for (docs/constrained.md); options override it.

    `ban` is a list of phrases, or the path of a file with one phrase per line (relative to the YAML
    file's folder); it is read when the profile loads, so a bad path fails before any decoding.
    """

    ban: list[str] | str | None = None
    ban_policy: BanPolicy | None = None
    refusal: str | None = None

    def settings(self) -> dict[str, Any]:
        phrases = tuple(self.ban) if isinstance(self.ban, list) and self.ban else None
        return {"ban": phrases, "ban_policy": self.ban_policy, "refusal": self.refusal}

    def resolve(self, folder: Path, source: str) -> None:
        if not isinstance(self.ban, str):
            return
        path = folder / self.ban
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{source}: compliance.ban file '{path}' cannot be read ({exc})",
                             "give a phrase list or a readable file relative to the YAML file") from None
        self.ban = [line.strip() for line in text.splitlines() if line.strip()]


class DeviceProfile(StrictModel):
    name: str
    description: str = ""
    transport: Transport
    soc: str | None = None
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    sensors: SensorSpec = Field(default_factory=SensorSpec)
    thermal: ThermalSpec = Field(default_factory=ThermalSpec)
    power: PowerSpec = Field(default_factory=PowerSpec)
    compile: CompileSpec = Field(default_factory=CompileSpec)
    quantize: QuantizeSpec = Field(default_factory=QuantizeSpec)
    tree: TreeSpec = Field(default_factory=TreeSpec)
    enable_threshold_ms: float = Field(150.0, ge=0)  # speculation pays off above this gain per reply
    compliance: ComplianceSpec = Field(default_factory=ComplianceSpec)
    kind: Literal["device"] = "device"


class ControllerTargets(StrictModel):
    target_accept_len: float = Field(3.5, gt=1)  # L_target
    eta: float = Field(0.1, gt=0, le=1)
    window: int = Field(5, ge=1)
    beta_min: float = Field(0.1, ge=0)
    beta_max: float = Field(0.6, le=1)
    accept_band: tuple[float, float] = (0.6, 0.75)
    fallback_after: int = Field(2, ge=1)  # K rounds with nothing accepted
    fallback_rounds: int = Field(8, ge=1)  # plain rounds before speculation is retried


class ScenarioProfile(StrictModel):
    name: str
    description: str = ""
    entropy_low: float = _PRUNE.entropy_low
    entropy_high: float = _PRUNE.entropy_high
    beta_base: float = Field(_PRUNE.beta_base, ge=0, le=1)
    rho_min: float = Field(_PRUNE.rho_min, ge=0, le=1)
    rho_max: float = Field(_PRUNE.rho_max, ge=0, le=1)
    depth: int | None = Field(None, ge=1)
    width: int | None = Field(None, ge=1)
    # Prompt lookup for text that copies from its prompt (code, RAG, summaries): None = not set here.
    drafter: DrafterKind | None = None
    lookup_max_ngram: int | None = Field(None, ge=1, le=MAX_LOOKUP_NGRAM)
    lookup_min_ngram: int | None = Field(None, ge=1, le=MAX_LOOKUP_NGRAM)
    controller: ControllerTargets = Field(default_factory=ControllerTargets)
    compliance: ComplianceSpec = Field(default_factory=ComplianceSpec)
    kind: Literal["scenario"] = "scenario"


_PACKAGE = "specdec.profiles"
_KINDS: dict[str, type[StrictModel]] = {"device": DeviceProfile, "scenario": ScenarioProfile}
_FOLDERS = {"device": "", "scenario": "scenarios"}


def _builtin_dir(kind: str) -> Path:
    base = Path(str(resources.files(_PACKAGE)))
    return base / _FOLDERS[kind] if _FOLDERS[kind] else base


def builtin_names(kind: str) -> list[str]:
    return sorted(p.stem for p in _builtin_dir(kind).glob("*.yaml"))


def _parse(path: Path, kind: str) -> Any:
    try:
        data = yaml.safe_load(path.read_bytes())  # bytes: PyYAML names a bad encoding's position
    except yaml.YAMLError as exc:
        raise InputError(f"{path} is not valid YAML ({exc})".replace("\n", " "), "fix the file") from exc
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a mapping of profile fields", "see `specdec profiles show local-cpu`")
    data.setdefault("name", path.stem)
    model = validate_model(_KINDS[kind], data, source=f"{kind} profile {path}",
                           fix="fix the field (unknown keys are errors; see `specdec profiles show`)")
    compliance = getattr(model, "compliance", None)
    if isinstance(compliance, ComplianceSpec):
        compliance.resolve(path.parent, f"{kind} profile {path}")
    return model


def load(name_or_path: str | Path, kind: str = "device") -> Any:
    """A built-in profile by name, or a YAML file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise InputError(f"profile file '{path}' does not exist", "pass a YAML file or a built-in name")
        return _parse(path, kind)
    candidate = _builtin_dir(kind) / f"{name_or_path}.yaml"
    if not candidate.is_file():
        raise InputError(f"unknown {kind} profile '{name_or_path}'",
                         f"built-in {kind} profiles: {', '.join(builtin_names(kind))}; or pass a YAML path")
    return _parse(candidate, kind)


# The device profile a command uses on a transport unless --profile names another.
DEFAULT_PROFILES = {Transport.local: "local-cpu", Transport.adb: "android-generic"}


def load_device(name_or_path: str | Path) -> DeviceProfile:
    profile: DeviceProfile = load(name_or_path, "device")
    return profile


def load_scenario(name_or_path: str | Path) -> ScenarioProfile:
    profile: ScenarioProfile = load(name_or_path, "scenario")
    return profile

"""`specdec tune`: measure a device's cost curve and the bundle's acceptance on it, store the plan.

The measuring runs where decoding will run — on the device, through the same push / run / pull
path as `specdec bench` (the device runner's tune mode, pipeline/engine/tune/measure.py) — and the
plan (records.plan.DevicePlan: cost curve with its fit, acceptance profile, chosen tree,
predicted speedup, device identity) goes into a new bundle's manifest, keyed by the device.
`generate` and `bench` then use it by default on that device; flags still override. A bundle
that carries its target in more than one weight format (`quantize --format nbits,w8a8`) is tuned
once per format, and the plan keeps the format with the best predicted tokens/s among the exact
ones (tune/plans.choose_format); `generate` and `bench` then load that format's target.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.pipeline.bundle.store import Bundle, BundleWriter, input_digests
from specdec.pipeline.errors import DeviceError, InputError, setting
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.ondevice.orchestrate import ProgressSink
from specdec.pipeline.ondevice.session import DeviceSession, DeviceTarget, calibration_prompts
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.records.codec import FLATTEN, to_dict
from specdec.pipeline.records.plan import DevicePlan, TunePlan
from specdec.pipeline.records.reports import TuneReport
from specdec.pipeline.records.results import RunSpec
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import RuntimeKind, Transport
from specdec.pipeline.settings.resolve import run_settings
from specdec.pipeline.tune import plans

CALIBRATION_TOKENS = 48  # tokens of each calibration reply
TUNING = "tuning on the device (plain timing, verify cost curve, calibration per drafter)"


@dataclass(frozen=True)
class TuneConfig:
    output: Path
    device: Transport = Transport.local
    profile: str | None = None
    serial: str | None = None
    adb_host: str | None = None
    adb_port: int | None = None
    calib: Path | None = None  # prompts to calibrate on (JSONL); default: held-out demo prompts
    threads: int | None = None
    python: str | None = None
    runtime: RuntimeKind | None = None  # None: the profile's runtime.use
    # the decode settings the run was given: `drafter` (None: calibrate every drafter the bundle can run),
    # `exact_layout`, ...; `max_new_tokens` is each calibration reply's length (default CALIBRATION_TOKENS)
    decode: DecodeOptions = field(default_factory=DecodeOptions, metadata=FLATTEN)
    force: bool = False

    def __post_init__(self) -> None:
        if self.calibration_tokens < 8:
            raise InputError(f"{setting('max_new_tokens')} must be at least 8 for calibration", "use 8 or more")

    @property
    def calibration_tokens(self) -> int:
        return self.decode.max_new_tokens if self.decode.max_new_tokens is not None else CALIBRATION_TOKENS

    @property
    def target(self) -> DeviceTarget:
        return DeviceTarget(self.device, self.profile, serial=self.serial, adb_host=self.adb_host,
                            adb_port=self.adb_port, python=self.python, runtime=self.runtime, threads=self.threads)

    @property
    def profile_name(self) -> str:
        return self.target.profile_name

    def record(self) -> dict[str, Any]:
        drafter = self.decode.drafter
        return {"device": self.device.value, "profile": self.profile_name, "threads": self.threads,
                "calib": str(self.calib) if self.calib else None, "max_new_tokens": self.calibration_tokens,
                "exact_layout": self.decode.exact_layout, "drafter": getattr(drafter, "value", drafter),
                **{key: value for key, value in to_dict(self.decode).items()
                   if value is not None and key not in ("max_new_tokens", "exact_layout", "drafter")}}


def tune_bundle(config: TuneConfig, source: Bundle, on_event: ProgressSink | None = None,
                progress: Progress | None = None) -> tuple[Bundle, DevicePlan]:
    target = config.target
    profile = target.load_profile()
    options = config.decode
    # one plan per weight format the bundle's target is carried in (one: its own format)
    carried = source.manifest.weight_formats()
    formats: list[str | None] = list(carried) if len(carried) > 1 else [None]
    # BundleError here for a --drafter that needs the draft graph this bundle lacks
    settings = {name: run_settings(options, source.manifest.with_format(name), profile=profile) for name in formats}
    codec = TextCodec(source.tokenizer_dir)
    prompts = calibration_prompts(codec, calib=config.calib, prompts=None, measured=[])
    # The output is checked (writable, not clobbered) and staged before any device work.
    with BundleWriter(config.output, force=config.force, sources=(source.path, config.calib)) as writer, \
            (progress or SilentProgress()).task(TUNING):
        session = DeviceSession.open(target, profile, progress)
        request = plans.tune_request(source, options, session.key, prompts, only=True,
                                     max_new_tokens=config.calibration_tokens)
        assert request is not None  # `only` always asks
        measured: dict[str | None, DevicePlan] = {}
        warnings: list[str] = []
        for name in formats:
            spec = RunSpec(decode=settings[name].config, prompts=[], threads=session.threads, tune=request,
                           weight_format=name)
            run = session.run(source, spec, cooldown=False, on_event=on_event)
            tuned = plans.tuned_plan(run.events)
            if tuned is None:
                raise DeviceError(f"{session.device.serial}: the device runner reported no plan"
                                  f"{' (device lost)' * run.partial}{f' for weight format {name}' * bool(name)}",
                                  f"see its output: {run.log_tail.strip()[-200:] or 'none'}")
            measured[name] = tuned
            warnings += run.warnings
        plan = plans.choose_format(measured, source.manifest)
        writer.copy_from(source)
        manifest = source.manifest.copy()
        manifest.plan = (manifest.plan or TunePlan()).with_plan(plan)
        manifest.reports.tune = TuneReport(device=session.key,
                                           created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                                           warnings=warnings)
        bundle = writer.finish(manifest, stage="tune", config=config.record() | {"device_key": session.key},
                               inputs=input_digests(source))
    return bundle, plan

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
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.bundle.store import Bundle, BundleWriter, input_digests
from specdec.pipeline.devices.session import new_run_id
from specdec.pipeline.errors import DeviceError, InputError, setting
from specdec.pipeline.inputs.prompts import CALIBRATION_PROMPTS, load_bench_prompts
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.ondevice.launch import prepare_device
from specdec.pipeline.ondevice.orchestrate import ProgressSink, run_on_device
from specdec.pipeline.ondevice.payload import build_payload
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.records.decode import DrafterKind
from specdec.pipeline.records.plan import DevicePlan, TunePlan
from specdec.pipeline.records.results import RunSpec
from specdec.pipeline.settings import profiles
from specdec.pipeline.settings.profiles import RuntimeKind, Transport
from specdec.pipeline.settings.resolve import run_settings
from specdec.pipeline.tune import plans

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
    max_new_tokens: int = 48
    drafter: DrafterKind | None = None  # None: calibrate every drafter the bundle can run
    exact_layout: bool | None = None
    force: bool = False

    @property
    def profile_name(self) -> str:
        return self.profile or profiles.DEFAULT_PROFILES[self.device]

    def record(self) -> dict[str, Any]:
        return {"device": self.device.value, "profile": self.profile_name, "threads": self.threads,
                "calib": str(self.calib) if self.calib else None, "max_new_tokens": self.max_new_tokens,
                "exact_layout": self.exact_layout, "drafter": self.drafter.value if self.drafter else None}


def _calibration(config: TuneConfig, codec: TextCodec) -> list[list[int]]:
    prompts = load_bench_prompts(config.calib, codec, None)
    # Without --calib: the last prompts of the default file, which `bench` (first N) does not measure; the file
    # interleaves its scenarios, so they span all of them.
    chosen = prompts[:CALIBRATION_PROMPTS] if config.calib else prompts[-CALIBRATION_PROMPTS:]
    return [p.ids for p in chosen]


def tune_bundle(config: TuneConfig, source: Bundle, on_event: ProgressSink | None = None,
                progress: Progress | None = None) -> tuple[Bundle, DevicePlan]:
    if config.max_new_tokens < 8:
        raise InputError(f"{setting('max_new_tokens')} must be at least 8 for calibration", "use 8 or more")
    profile = profiles.load_device(config.profile_name)
    if profile.transport is not config.device:
        raise InputError(f"profile '{profile.name}' is for the {profile.transport.value} transport, not "
                         f"{config.device.value}", f"pass {setting('device')} {profile.transport.value}")
    options = {"exact_layout": config.exact_layout, "drafter": config.drafter}
    # one plan per weight format the bundle's target is carried in (one: its own format)
    carried = source.manifest.weight_formats()
    formats: list[str | None] = list(carried) if len(carried) > 1 else [None]
    # BundleError here for a --drafter that needs the draft graph this bundle lacks
    settings = {name: run_settings(options, source.manifest.with_format(name), profile=profile) for name in formats}
    codec = TextCodec(source.tokenizer_dir)
    prompts = _calibration(config, codec)
    # The output is checked (writable, not clobbered) and staged before any device work.
    with BundleWriter(config.output, force=config.force, sources=(source.path, config.calib)) as writer, \
            (progress or SilentProgress()).task(TUNING):
        prepared = prepare_device(config.device, profile, serial=config.serial, adb_host=config.adb_host,
                                  adb_port=config.adb_port, python=config.python, runtime=config.runtime,
                                  threads=config.threads, progress=progress)
        device, python, launch, info, threads, key = (prepared.device, prepared.python, prepared.launch,
                                                      prepared.info, prepared.threads, prepared.key)
        request = plans.tune_request(source, options, key, prompts, only=True,
                                        max_new_tokens=config.max_new_tokens)
        assert request is not None  # `only` always asks
        measured: dict[str | None, DevicePlan] = {}
        warnings: list[str] = []
        for name in formats:
            spec = RunSpec(decode=settings[name].config, prompts=[], threads=threads, tune=request, weight_format=name)
            with tempfile.TemporaryDirectory() as scratch:
                payload = build_payload(source, spec, Path(scratch) / "payload")
                run = run_on_device(device, profile, payload, new_run_id(), python=python, cooldown=False,
                                    on_event=on_event, launch=launch, info=info)
            tuned = plans.tuned_plan(run.events)
            if tuned is None:
                raise DeviceError(f"{device.serial}: the device runner reported no plan"
                                  f"{' (device lost)' * run.partial}{f' for weight format {name}' * bool(name)}",
                                  f"see its output: {run.log_tail.strip()[-200:] or 'none'}")
            measured[name] = tuned
            warnings += run.warnings
        plan = plans.choose_format(measured, source.manifest)
        writer.copy_from(source)
        manifest = source.manifest.copy()
        manifest.plan = (manifest.plan or TunePlan()).with_plan(plan)
        manifest.reports["tune"] = {"device": key, "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                                    "warnings": warnings}
        bundle = writer.finish(manifest, stage="tune", config=config.record() | {"device_key": key},
                               inputs=input_digests(source))
    return bundle, plan

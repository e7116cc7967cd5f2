"""`specdec generate`: decode prompts from any bundle, speculatively or plainly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import GenerationError
from specdec.pipeline.profiles import DeviceProfile, ScenarioProfile
from specdec.pipeline.prompts import PromptItem
from specdec.pipeline.runtime.config import DecodeConfig
from specdec.pipeline.runtime.controllers import build_chain
from specdec.pipeline.runtime.engine import Engine, RoundController
from specdec.pipeline.runtime.graph import SessionOptions
from specdec.pipeline.runtime.manifest import BundleInfo
from specdec.pipeline.runtime.stats import Reply
from specdec.pipeline.settings import ResolvedSettings, controller_spec, resolve_decode
from specdec.pipeline.text import TextCodec


class Generator:
    """An engine plus the bundle's tokenizer."""

    def __init__(self, bundle: Path | BundleInfo, threads: int = 0) -> None:
        self.engine = Engine(bundle, SessionOptions(threads=threads))
        self.codec = TextCodec(self.engine.info.tokenizer_dir)

    def prompt_ids(self, item: PromptItem, config: DecodeConfig, truncate: bool) -> list[int]:
        ids = item.input_ids if item.input_ids is not None else self.codec.encode(item.text or "")
        if not ids:
            raise GenerationError(f"prompt '{item.id}' is empty", "pass some text or input_ids")
        limit = self.engine.max_context - min(config.max_new_tokens, self.engine.max_context // 2) - 1
        if truncate and len(ids) > limit:
            ids = ids[-limit:]
        return ids

    def run(self, item: PromptItem, config: DecodeConfig, *, truncate: bool = False,
            on_text: Callable[[str], None] | None = None, controller: RoundController | None = None
            ) -> tuple[Reply, str]:
        ids = self.prompt_ids(item, config, truncate)
        stream = self.codec.stream()
        sink = (lambda tokens: on_text(stream.push(tokens))) if on_text else None
        reply = self.engine.generate(ids, config, on_tokens=sink, controller=controller)
        if on_text:
            on_text(stream.flush())
        return reply, self.codec.decode(reply.output_ids)

    def run_all(self, items: list[PromptItem], config: DecodeConfig, *, truncate: bool = False,
                controller: RoundController | None = None) -> Iterator[dict[str, Any]]:
        for item in items:
            reply, text = self.run(item, config, truncate=truncate, controller=controller)
            yield {"id": item.id, "input_ids": reply.prompt_ids, "output_ids": reply.output_ids, "text": text,
                   "stats": reply.as_dict()}


def decode_settings(info: BundleInfo, options: dict[str, Any], profile: DeviceProfile,
                    scenario: ScenarioProfile | None) -> ResolvedSettings:
    """The settings resolver (pipeline/settings.py) with this bundle's plan and buckets, as bench uses it."""
    return resolve_decode(options, profile=profile, scenario=scenario, plan=info.plan, buckets=info.buckets,
                          has_draft="draft" in info.graphs)


def host_controllers(names: tuple[str, ...], profile: DeviceProfile, scenario: ScenarioProfile | None,
                     beta_base: float) -> RoundController | None:
    """Controllers for decoding on this machine: its thermal zones (where the profile reads them), no battery."""
    zones = [str(p) for p in sorted(Path(profile.sensors.thermal_dir).glob("thermal_zone*/temp"))]
    return build_chain(controller_spec(names, profile, scenario, beta_base), zones, None)

"""`specdec generate`: decode prompts from any bundle, speculatively or plainly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.devices.local import LocalDevice
from specdec.pipeline.engine.controllers import build_chain
from specdec.pipeline.engine.engine import Engine, RoundController
from specdec.pipeline.engine.graph import SessionOptions
from specdec.pipeline.engine.processors.base import REFUSED
from specdec.pipeline.engine.stats import Reply
from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.inputs.prompts import PromptItem, prompt_room, prompt_tokens
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.records.codec import FLATTEN
from specdec.pipeline.records.decode import BanPolicy, DecodeConfig
from specdec.pipeline.records.plan import device_key
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import DeviceProfile, ScenarioProfile
from specdec.pipeline.settings.resolve import (
    ResolvedSettings,
    controller_spec,
    run_settings,
    run_threads,
)


@dataclass(frozen=True)
class GenerateConfig:
    """What `specdec generate` was asked for; `decode` holds the decode settings the user set (None: not set,
    the plan, scenario, profile or built-in default decides: pipeline/settings/resolve.py)."""

    profile: str = "local-cpu"
    scenario: str | None = None
    controllers: tuple[str, ...] = ()  # on this machine only what the user asks for
    threads: int | None = None  # None: the profile's runtime.threads
    truncate: bool = False
    chat: bool = False  # text prompts as user messages through the bundle's chat template
    decode: DecodeOptions = field(default_factory=DecodeOptions, metadata=FLATTEN)


class Generator:
    """An engine plus the bundle's tokenizer, on a bundle `Bundle.load` verified (every file's sha256)."""

    def __init__(self, bundle: Bundle, threads: int = 0, weight_format: str | None = None) -> None:
        # weight_format: the target's, where the bundle carries several (ResolvedSettings.weight_format)
        self.engine = Engine(bundle.runtime_info(weight_format), SessionOptions(threads=threads))
        self.codec = TextCodec(self.engine.info.tokenizer_dir)

    def prompt_ids(self, item: PromptItem, config: DecodeConfig, truncate: bool, chat: bool = False) -> list[int]:
        """The prompt's tokens, checked: an empty prompt or one the context cannot hold is bad input.

        The error gives the prompt's token count, never its text (a long prompt would flood the terminal).
        """
        ids = prompt_tokens(item, self.codec, chat)
        if not ids:
            raise InputError(f"prompt '{item.id}' is empty", "pass some text or input_ids")
        vocab = self.engine.vocab
        if outside := [t for t in ids if not 0 <= t < vocab]:
            raise InputError(f"prompt '{item.id}' holds token id {outside[0]}, outside the vocabulary (0..{vocab - 1})",
                             "tokenize with the bundle's tokenizer")
        context = self.engine.max_context
        limit = prompt_room(context, config.max_new_tokens)
        if truncate and len(ids) > limit:
            return ids[-limit:]
        if len(ids) >= context:
            raise InputError(f"prompt '{item.id}' has {len(ids)} tokens but the bundle's context is {context}",
                             f"shorten it or pass {setting('truncate')} to keep its last {limit} tokens")
        return ids

    def prepare(self, items: list[PromptItem], config: DecodeConfig, truncate: bool,
                chat: bool = False) -> list[list[int]]:
        """Every prompt's tokens, all checked before the first is decoded (a batch never fails half-way)."""
        return [self.prompt_ids(item, config, truncate, chat) for item in items]

    def run(self, ids: list[int], config: DecodeConfig, *, on_text: Callable[[str], None] | None = None,
            controller: RoundController | None = None) -> tuple[Reply, str]:
        stream = self.codec.stream()
        # under the refuse policy nothing is shown before the reply is known to be clean
        refusing = bool(config.ban) and config.ban_policy is BanPolicy.refuse
        sink = (lambda tokens: on_text(stream.push(tokens))) if on_text and not refusing else None
        reply = self.engine.generate(ids, config, on_tokens=sink, controller=controller)
        text = config.refusal if reply.stop_reason == REFUSED else self.codec.decode(reply.output_ids)
        if on_text:
            on_text(text if refusing else stream.flush())
        return reply, text

    def run_all(self, items: list[PromptItem], config: DecodeConfig, *, truncate: bool = False, chat: bool = False,
                controller: RoundController | None = None) -> Iterator[dict[str, Any]]:
        """Replies one by one; every prompt is checked now, before the first is decoded."""
        prepared = self.prepare(items, config, truncate, chat)
        return self._replies(items, prepared, config, controller)

    def _replies(self, items: list[PromptItem], prepared: list[list[int]], config: DecodeConfig,
                 controller: RoundController | None) -> Iterator[dict[str, Any]]:
        for item, ids in zip(items, prepared, strict=True):
            reply, text = self.run(ids, config, controller=controller)
            yield {"id": item.id, "input_ids": reply.prompt_ids, "output_ids": reply.output_ids, "text": text,
                   "stats": reply.as_dict()}


def local_threads(threads: int | None, profile: DeviceProfile) -> int:
    return run_threads(threads, profile)


def local_device_key(threads: int) -> str:
    """This machine's device key (the plan `specdec tune --device local` stores at the same thread count)."""
    model, abi = LocalDevice.identity()
    return device_key("local", model, abi, threads)


def generate_settings(config: GenerateConfig, bundle: Bundle, profile: DeviceProfile,
                      scenario: ScenarioProfile | None) -> ResolvedSettings:
    """The run's decode settings (pipeline/settings/resolve.py), with the bundle's plan for this machine."""
    threads = local_threads(config.threads, profile)
    return run_settings(config.decode, bundle.manifest, profile=profile, scenario=scenario,
                        device=local_device_key(threads))


def host_controllers(names: tuple[str, ...], profile: DeviceProfile, scenario: ScenarioProfile | None,
                     settings: ResolvedSettings) -> RoundController | None:
    """Controllers for decoding on this machine: its thermal zones (where the profile reads them), no battery."""
    zones = [str(p) for p in sorted(Path(profile.sensors.thermal_dir).glob("thermal_zone*/temp"))]
    return build_chain(controller_spec(names, profile, scenario, settings), zones, None)

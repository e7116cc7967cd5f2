"""Declarative op schemas, shared by the reference, the ONNX function and graph surgery."""

from __future__ import annotations

from dataclasses import dataclass

from specdec.custom_ops import DOMAIN, VERSION


@dataclass(frozen=True)
class Port:
    name: str
    dtype: str
    shape: tuple[str | int, ...]
    doc: str = ""


@dataclass(frozen=True)
class OpSchema:
    name: str
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    attributes: dict[str, int]
    domain: str = DOMAIN
    version: int = VERSION

    @property
    def input_names(self) -> list[str]:
        return [p.name for p in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [p.name for p in self.outputs]

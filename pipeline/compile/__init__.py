"""Compile stage: the cpu flavour (fused contrib-op graphs, KV in place) or the npu flavour (static buckets)."""

from specdec.pipeline.compile.config import CompileConfig
from specdec.pipeline.compile.stage import compile_bundle, compile_settings
from specdec.pipeline.records.manifest import GraphFlavour, OutputFormat

__all__ = ["CompileConfig", "GraphFlavour", "OutputFormat", "compile_bundle", "compile_settings"]

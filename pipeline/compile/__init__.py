"""Compile stage: the cpu flavour (fused contrib-op graphs, KV in place) or the npu flavour (static buckets)."""

from specdec.pipeline.compile.stage import CompileConfig, GraphFlavour, OutputFormat, compile_bundle

__all__ = ["CompileConfig", "GraphFlavour", "OutputFormat", "compile_bundle"]

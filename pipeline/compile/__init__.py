"""Compile stage: static-shape bucket graphs over a fixed KV buffer, ORT format, readiness report."""

from specdec.pipeline.compile.stage import CompileConfig, OutputFormat, compile_bundle

__all__ = ["CompileConfig", "OutputFormat", "compile_bundle"]

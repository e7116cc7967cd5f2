"""Export stage: Hugging Face checkpoints to ONNX graphs that follow docs/design.md §2."""

from specdec.pipeline.export.stage import DType, ExportConfig, export_bundle

__all__ = ["DType", "ExportConfig", "export_bundle"]

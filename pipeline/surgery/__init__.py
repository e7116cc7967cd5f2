"""Graph surgery: the custom ops of domain com.endpoint.ai as model-local ONNX functions."""

from specdec.pipeline.surgery.stage import SurgeryConfig, surgery_bundle

__all__ = ["SurgeryConfig", "surgery_bundle"]

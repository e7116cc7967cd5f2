"""The fused CPU graph flavour (`specdec compile --target cpu`): onnxruntime contrib ops, KV in place."""

"""The decoding engine: numpy + onnxruntime + stdlib only, so the same code runs on the device."""

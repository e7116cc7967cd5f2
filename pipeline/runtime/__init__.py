"""Torch-free decoding runtime: numpy + onnxruntime + stdlib only, so it runs on the device."""

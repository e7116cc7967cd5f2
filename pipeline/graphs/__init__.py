"""ONNX graphs as files and as protos: load/save with external data (files), read-only queries (query),
small node edits (edit), and the exact int8 linear the quantize and compile stages both emit (int8_matmul)."""

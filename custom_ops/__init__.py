"""Custom ops of domain com.endpoint.ai (DESIGN §3).

One package per op: `schema` (names, inputs, attributes), `reference` (numpy, torch-free: the
runtime calls it on bundles without surgery) and `function` (the ONNX function body, standard
ops only, authored with onnxscript). Importing this package does not import onnxscript.
"""

DOMAIN = "com.endpoint.ai"
VERSION = 1

"""Custom ops of domain com.endpoint.ai (DESIGN §3).

One package per op: `reference.py` holds its `SCHEMA` (names, inputs, attributes, a `schema.OpSchema`)
and its numpy reference (torch-free: the runtime calls it on bundles without surgery), `function.py`
the ONNX function body (standard ops only, authored with onnxscript). `registry.py` finds the ops by
name. Importing this package does not import onnxscript.
"""

DOMAIN = "com.endpoint.ai"
VERSION = 1

"""Typed records that cross stage, host and device boundaries: stdlib dataclasses, no torch, no pydantic.

The host (bundle.py, the stages, the CLI) and the device runtime (pipeline/engine/) share these
definitions; `codec` validates plain JSON data into them (unknown keys are errors) and back.

- `manifest`: manifest.json — `Manifest` and its sections, and `read_manifest`, its one reader.
- `plan`: the manifest's `plan` section (tuned plans per device) and `run.json`'s tune request.
- `decode`: the decode settings (`DecodeConfig`, `PruneParams`, verify modes, drafters).
- `device`: DeviceInfo, PythonStatus and the thermal readings a bench run records.
- `results`: RunSpec (run.json, host -> device) and BenchResults (results.json).
"""

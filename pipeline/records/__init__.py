"""Typed records that cross stage, host and device boundaries: stdlib dataclasses, no torch, no pydantic.

The host (bundle.py, the stages, the CLI) and the device runtime (pipeline/runtime/) share these
definitions; `codec` validates plain JSON data into them (unknown keys are errors) and back.

- `manifest`: sections of manifest.json — TensorSpec, CustomOps, Quantization, BucketTable.
- `plan`: TunePlan, the manifest's (still empty) plan section: the planner's extension point.
- `device`: DeviceInfo, PythonStatus and the thermal readings a bench run records.
- `results`: RunSpec (run.json, host -> device) and BenchResults (results.json).
"""

from specdec.pipeline.records.codec import RecordError, dump, from_dict, parse, to_dict
from specdec.pipeline.records.device import CooldownResult, DeviceInfo, HalTemperature, PythonStatus, ThermalSnapshot
from specdec.pipeline.records.manifest import (
    MANIFEST_NAME,
    MANIFEST_SCHEMA,
    BucketTable,
    BucketVariant,
    CustomOpGraph,
    CustomOps,
    FusedGraph,
    GraphFlavour,
    GraphQuantization,
    LayerQuantization,
    OutputFormat,
    Quantization,
    TensorSpec,
)
from specdec.pipeline.records.plan import TunePlan
from specdec.pipeline.records.results import (
    RESULTS_SCHEMA,
    BenchResults,
    Figures,
    GateResult,
    RunSpec,
    read_figures,
    read_results,
)

__all__ = [
    "MANIFEST_NAME",
    "MANIFEST_SCHEMA",
    "RESULTS_SCHEMA",
    "BenchResults",
    "BucketTable",
    "BucketVariant",
    "CooldownResult",
    "CustomOpGraph",
    "CustomOps",
    "DeviceInfo",
    "Figures",
    "FusedGraph",
    "GateResult",
    "GraphFlavour",
    "GraphQuantization",
    "HalTemperature",
    "LayerQuantization",
    "OutputFormat",
    "PythonStatus",
    "Quantization",
    "RecordError",
    "RunSpec",
    "TensorSpec",
    "ThermalSnapshot",
    "TunePlan",
    "dump",
    "from_dict",
    "parse",
    "read_figures",
    "read_results",
    "to_dict",
]

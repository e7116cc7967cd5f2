"""Simplify and optimise a static variant with the field's tools, and convert to ORT format.

onnxsim does constant folding and shape propagation with the fixed shapes (about a quarter
fewer nodes on exported LLMs); onnxruntime's offline optimiser then runs at the *basic* level,
whose rewrites keep standard ONNX ops so NNAPI / CoreML / XNNPACK can still claim the nodes
(the extended and all levels emit CPU-only com.microsoft fusions).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

from specdec.pipeline.errors import SpecdecError, setting

log = logging.getLogger(__name__)


class CompileError(SpecdecError):
    exit_code = 5


def simplify(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """onnxsim with the graph's fixed shapes; on failure keep the model and say why."""
    try:
        import onnxsim

        simplified, ok = onnxsim.simplify(model)
    except Exception as exc:  # onnxsim raises anything from protobuf to RuntimeError
        return model, f"skipped: {str(exc).splitlines()[0][:160]}"
    if not ok:
        return model, "skipped: onnxsim could not verify the simplified graph"
    before, after = len(model.graph.node), len(simplified.graph.node)
    return simplified, f"{before} -> {after} nodes"


def ort_optimize(model: onnx.ModelProto, workdir: Path) -> onnx.ModelProto:
    """onnxruntime offline graph optimisation at the basic level (mobile-safe)."""
    import onnxruntime as ort

    source, target = workdir / "in.onnx", workdir / "out.onnx"
    onnx.save(model, str(source))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    options.log_severity_level = 3
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    return onnx.load(str(target))


def to_ort_format(directory: Path) -> dict[str, Path]:
    """Convert every .onnx in `directory` with onnxruntime's converter; returns stem -> .ort path."""
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [sys.executable, "-m", "onnxruntime.tools.convert_onnx_models_to_ort", str(directory),
             "--optimization_style", "Fixed", "--output_dir", scratch],
            capture_output=True, text=True,
        )
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise CompileError(f"ORT format conversion failed: {tail[0]}", f"try {setting('format')} onnx")
        produced = {}
        for ort_file in Path(scratch).glob("*.ort"):
            target = directory / ort_file.name
            target.write_bytes(ort_file.read_bytes())
            produced[ort_file.stem] = target
        config = Path(scratch) / "required_operators.config"
        if config.exists():  # feeds a reduced-operator onnxruntime build for the phone
            (directory / "required_operators.config").write_bytes(config.read_bytes())
    return produced

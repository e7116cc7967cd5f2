"""`specdec surgery`: insert DynamicTreePrune (draft) and BlockSparseVerify (target) as ONNX functions.

Each pass is a rewrite rule in its own module (pipeline/passes/, shared with compile) with a
`check` that says why a graph does not qualify and an `apply`. The result is validated: the
surgered graph's op outputs must equal the numpy reference applied to the original graph's
logits, and `onnx.checker` (full) must pass.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx

from specdec.custom_ops import DOMAIN, VERSION
from specdec.custom_ops.block_sparse_verify import block_sparse_verify
from specdec.custom_ops.dynamic_tree_prune import dynamic_tree_prune
from specdec.pipeline.bundle.store import Bundle, BundleWriter, input_digests
from specdec.pipeline.engine.graph import HIDDEN_STATES
from specdec.pipeline.engine.masks import FULL_MASK, SLIDING_MASK
from specdec.pipeline.engine.runner import tree_mask
from specdec.pipeline.errors import BundleError, ValidationError
from specdec.pipeline.graphs.files import describe_io, external_files, graph_files, load_graph
from specdec.pipeline.passes import PASSES, prune_pass
from specdec.pipeline.progress import Progress, SilentProgress
from specdec.pipeline.records.decode import PruneParams
from specdec.pipeline.records.manifest import CustomOpGraph, CustomOps
from specdec.pipeline.records.reports import SurgeryReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SurgeryConfig:
    output: Path
    max_k: int = PruneParams.max_k
    force: bool = False

    def record(self) -> dict[str, Any]:
        return {"max_k": self.max_k}


def _check_bundle(bundle: Bundle) -> None:
    if bundle.manifest.custom_ops:
        raise BundleError(f"bundle '{bundle.path}' already has the custom ops (surgery ran before)",
                          "use the bundle as it is; surgery is applied once")
    if bundle.manifest.buckets:
        raise BundleError(f"bundle '{bundle.path}' is compiled", "run surgery before `specdec compile`")


def _apply(pass_module: ModuleType, model: onnx.ModelProto, config: SurgeryConfig, graph_file: str) -> CustomOpGraph:
    reason = pass_module.check(model)
    if reason is not None:
        raise BundleError(f"{graph_file} does not qualify for {pass_module.OP.schema.name}: {reason}",
                          "pass a bundle written by `specdec export`")
    kwargs = {"max_k": config.max_k} if pass_module is prune_pass else {}
    record: CustomOpGraph = pass_module.apply(model, **kwargs)
    return record


def _surgery(pass_module: ModuleType, source: Path, out: Path, config: SurgeryConfig) -> CustomOpGraph:
    """The pass on the graph's structure only: the ops go after `logits` and read no weight, so a graph's
    external data files are copied as they are (a 1B-parameter graph's 5 GB never enter memory)."""
    model = load_graph(source, weights=False)
    record = _apply(pass_module, model, config, source.name)
    for location in external_files(source):
        (out.parent / location).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source.parent / location, out.parent / location)
    onnx.save(model, str(out))
    onnx.checker.check_model(str(out), full_check=True)  # by path: the checker reads external data itself
    return record


def surgery_bundle(config: SurgeryConfig, source: Bundle, progress: Progress | None = None) -> Bundle:
    progress = progress or SilentProgress()
    _check_bundle(source)
    source.check_graphs()
    manifest = source.manifest.copy()
    records: dict[str, CustomOpGraph] = {}
    with BundleWriter(config.output, force=config.force, sources=(source.path,)) as writer:
        writer.copy_from(source, exclude=graph_files(source.manifest.files, (s.file for s in manifest.graphs.values())))
        for pass_module in PASSES:
            role = pass_module.ROLE
            spec = manifest.graphs.get(role)
            if spec is None:  # a target-only bundle has no draft to prune for
                continue
            with progress.task(f"inserting {pass_module.OP.schema.name} into {spec.file}"):
                records[role] = _surgery(pass_module, source.graph_path(role), writer.dir / spec.file, config)
                out = writer.dir / spec.file
                validate_surgery(source.graph_path(role), out, role, config.max_k)
            spec.inputs, spec.outputs = describe_io(out)
        manifest.custom_ops = CustomOps(domain=DOMAIN, version=VERSION, graphs=records)
        manifest.reports.surgery = SurgeryReport(validated=True)
        return writer.finish(manifest, stage="surgery", config=config.record(), inputs=input_digests(source))


# ---- validation ------------------------------------------------------------------------------

def _random_tree(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    parents = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, n)], np.int64)
    depths = np.zeros(n, np.int64)
    for node in range(1, n):
        depths[node] = depths[parents[node]] + 1
    return parents, depths


def validate_surgery(before: Path, after: Path, role: str, max_k: int, seed: int = 0) -> None:
    """The surgered graph's op outputs must equal the reference applied to the original logits."""
    import onnxruntime as ort

    original = ort.InferenceSession(str(before), providers=["CPUExecutionProvider"])
    surgered = ort.InferenceSession(str(after), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    n = 7
    parents, depths = _random_tree(rng, n)
    feeds: dict[str, np.ndarray] = {}
    for value in original.get_inputs():
        dtype = np.float16 if "float16" in value.type else np.float32
        if value.name == "input_ids":
            feeds[value.name] = rng.integers(0, 100, (1, n)).astype(np.int64)
        elif value.name == "position_ids":
            feeds[value.name] = (3 + depths)[None].astype(np.int64)
        elif value.name in (FULL_MASK, SLIDING_MASK):  # any mask serves: both graphs get the same one
            feeds[value.name] = tree_mask(parents, 3, np.dtype(dtype))
        elif value.name == HIDDEN_STATES:  # a feature draft's features: any serve
            feeds[value.name] = rng.normal(size=(1, n, value.shape[2])).astype(dtype)
        else:
            shape = [1, value.shape[1], 3, value.shape[3]]
            feeds[value.name] = rng.normal(size=shape).astype(dtype)
    logits = original.run(["logits"], feeds)[0][0].astype(np.float32)
    if role == "draft":
        prune = PruneParams()
        scalars = {"temperature": 0.9, "entropy_low": prune.entropy_low, "entropy_high": prune.entropy_high,
                   "beta_base": prune.beta_base, "rho_min": prune.rho_min, "rho_max": prune.rho_max}
        got = surgered.run(["cand_ids", "keep"], {**feeds, **{k: np.array(v, np.float32) for k, v in scalars.items()}})
        ids, _, keep, _ = dynamic_tree_prune(logits, max_k=max_k, **scalars)
        same = np.array_equal(got[0], ids) and np.array_equal(got[1], keep)
    else:
        tokens = feeds["input_ids"][0]
        uniforms = rng.random((n, 1))
        extra: dict[str, np.ndarray] = {
            "tree_parent": parents, "tree_depth": depths, "uniforms": uniforms,
            "temperature": np.array(0.8, np.float32), "mode": np.array(1, np.int64),
            "top_k": np.array(0, np.int64), "top_p": np.array(1.0, np.float32)}
        got = surgered.run(["accepted", "accepted_len", "next_token"], {**feeds, **extra})
        accepted, length, token = block_sparse_verify(logits, tokens, parents, depths, uniforms, 0.8, 1)
        same = np.array_equal(got[0], accepted) and int(got[1]) == length and int(got[2]) == token
    if not same:
        raise ValidationError(f"surgered {after.name} disagrees with the numpy reference of its custom op",
                              "report this with SPECDEC_DEBUG=1 output")

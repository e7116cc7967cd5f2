"""What the bench pushes to a device: the torch-free runtime as a zip, the run spec, the bundle's graphs.

Only the files the runtime imports go in the zip (Python imports straight from it), and only
the graph files the runtime will open go in the bundle copy, so a compiled bundle ships its
buckets and not the dynamic graphs it was compiled from.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import zipfile
from pathlib import Path

import specdec
from specdec.pipeline.bundle.store import MANIFEST_NAME, Bundle
from specdec.pipeline.records.codec import to_dict
from specdec.pipeline.records.results import RunSpec

RUNTIME_ZIP = "runtime.zip"
RUN_SPEC = "run.json"
BUNDLE_DIR = "bundle"
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)  # fixed timestamps: the same code gives the same zip and hash

# The runtime's import closure; a test imports it from the zip with torch blocked.
RUNTIME_FILES = (
    "__init__.py",
    "pipeline/__init__.py",
    "pipeline/errors.py",
    "custom_ops/__init__.py",
    "custom_ops/schema.py",
    "custom_ops/numerics.py",
    "custom_ops/dynamic_tree_prune/__init__.py",
    "custom_ops/dynamic_tree_prune/reference.py",
    "custom_ops/block_sparse_verify/__init__.py",
    "custom_ops/block_sparse_verify/reference.py",
)


def package_root() -> Path:
    return Path(specdec.__file__).parent


def runtime_files() -> list[str]:
    root = package_root()
    shared = sorted(p.relative_to(root).as_posix() for folder in ("engine", "records")
                    for p in (root / "pipeline" / folder).rglob("*.py"))
    return [*RUNTIME_FILES, *shared]


def write_runtime_zip(path: Path) -> None:
    root = package_root()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for rel in runtime_files():
            info = zipfile.ZipInfo(f"specdec/{rel}", date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, (root / rel).read_bytes())


def payload_bytes(directory: Path) -> int:
    """The bytes a push of the payload at `directory` carries."""
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def build_payload(bundle: Bundle, spec: RunSpec, directory: Path) -> Path:
    """Lay out the device work dir locally: runtime.zip, run.json, bundle/ (manifest + graphs)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_runtime_zip(directory / RUNTIME_ZIP)
    target = directory / BUNDLE_DIR
    target.mkdir()
    shutil.copyfile(bundle.path / MANIFEST_NAME, target / MANIFEST_NAME)
    files = bundle.runner_files(spec.weight_format)
    if spec.decode.constrained:  # logits processors read the tokenizer on the device (engine/processors/vocab.py)
        files = [*files, f"{bundle.manifest.tokenizer.dir}/tokenizer.json"]
    for rel in files:
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundle.path / rel, target / rel)
    (directory / RUN_SPEC).write_text(json.dumps(to_dict(dataclasses.replace(spec, bundle=BUNDLE_DIR)), indent=1))
    return directory

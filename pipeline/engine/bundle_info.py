"""What the decoding engine needs from a bundle, derived from its manifest (records.manifest, stdlib only).

The manifest has one schema and one reader (`records.manifest.read_manifest`), on the host and on
the phone alike; this module turns it into the engine's view: graph files as paths under the
bundle, their geometry and I/O names, and the sections the runtime dispatches on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from specdec.pipeline.errors import BundleError
from specdec.pipeline.records.decoder import Decoder
from specdec.pipeline.records.draft_spec import DraftSpec
from specdec.pipeline.records.manifest import BucketTable, CustomOps, Manifest, read_manifest
from specdec.pipeline.records.plan import TunePlan
from specdec.pipeline.records.quantization import Quantization


@dataclass(frozen=True)
class GraphInfo:
    role: str
    file: Path
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    dtype: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    decoder: Decoder | None = None  # None: a bundle from before schema 4 (full attention)

    @property
    def window(self) -> int | None:
        """The attention window of the graph's windowed layers, None if it has none."""
        return self.decoder.window if self.decoder is not None else None


@dataclass(frozen=True)
class BundleInfo:
    path: Path
    graphs: dict[str, GraphInfo]
    eos_token_ids: tuple[int, ...]
    tokenizer_dir: Path
    stages: tuple[str, ...]
    custom_ops: CustomOps | None = None
    buckets: BucketTable | None = None  # set: a compiled bundle, run from its bucket graphs
    plan: TunePlan | None = None
    quantization: Quantization | None = None
    draft: DraftSpec = field(default_factory=DraftSpec)  # the draft's kind and vocabulary

    @property
    def max_context(self) -> int:
        return min(g.max_position_embeddings for g in self.graphs.values())

    def draft_vocab(self) -> np.ndarray | None:
        """The draft's vocabulary (int64 [V'], draft row -> target id), None when it is the target's.

        Read with numpy (allow_pickle off) and checked against the graphs: V' rows, increasing target
        ids, so a candidate mapped through it is always a token the target can verify."""
        vocab = self.draft.vocab
        if vocab is None:
            return None
        rel = PurePosixPath(vocab.file)
        if rel.is_absolute() or ".." in rel.parts:
            raise BundleError(f"the manifest's draft vocabulary '{vocab.file}' lies outside the bundle",
                              "re-create the bundle")
        path = self.path / rel
        try:
            ids = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise BundleError(f"bundle '{self.path}' cannot read its draft vocabulary '{vocab.file}' ({exc})",
                              "re-create the bundle") from None
        target = self.graphs["target"].vocab_size
        draft = self.graphs.get("draft")
        ok = (ids.ndim == 1 and ids.dtype == np.int64 and ids.size == vocab.size
              and (draft is None or draft.vocab_size == ids.size) and ids.size > 0
              and int(ids.min()) >= 0 and int(ids.max()) < target and bool(np.all(ids[1:] > ids[:-1])))
        if not ok:
            raise BundleError(f"bundle '{self.path}': '{vocab.file}' is not {vocab.size} increasing int64 target "
                              f"ids below {target}", "re-create the bundle")
        result: np.ndarray = ids
        return result


def read_bundle(path: str | Path, weight_format: str | None = None) -> BundleInfo:
    """The engine's view of the bundle at `path` (the device runner's way in; the host uses Bundle.runtime_info),
    its target in `weight_format` (None: the bundle's own; records.manifest.Manifest.with_format)."""
    return bundle_info(Path(path), read_manifest(path).with_format(weight_format))


def bundle_info(root: Path, manifest: Manifest) -> BundleInfo:
    graphs: dict[str, GraphInfo] = {}
    for role, spec in manifest.graphs.items():
        file = root / spec.file
        # a compiled bundle runs from its buckets; the device copy may leave the dynamic graphs out
        if not file.is_file() and manifest.buckets is None:
            raise BundleError(f"bundle '{root}' is missing its {role} graph '{spec.file}'", "re-create the bundle")
        graphs[role] = GraphInfo(role=role, file=file, num_layers=spec.num_layers, num_kv_heads=spec.num_kv_heads,
                                 head_dim=spec.head_dim, vocab_size=spec.vocab_size,
                                 max_position_embeddings=spec.max_position_embeddings, dtype=spec.dtype,
                                 input_names=tuple(t.name for t in spec.inputs),
                                 output_names=tuple(t.name for t in spec.outputs), decoder=spec.decoder)
    if "target" not in graphs:
        raise BundleError(f"bundle '{root}' has no target graph", "re-create the bundle with `specdec export`")
    return BundleInfo(path=root, graphs=graphs, eos_token_ids=tuple(manifest.tokenizer.eos_token_ids),
                      tokenizer_dir=root / manifest.tokenizer.dir,
                      stages=tuple(entry.stage for entry in manifest.lineage), custom_ops=manifest.custom_ops,
                      buckets=manifest.buckets, plan=manifest.plan, quantization=manifest.quantization,
                      draft=manifest.draft_spec)

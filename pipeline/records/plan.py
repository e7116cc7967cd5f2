"""The manifest's `plan` section: where a tuned decoding plan for one device will live.

EXTENSION POINT, deliberately empty. The planner (DESIGN §8, "cost model") fills this record
with what it measured and chose: the target's cost curve c(q), the draft's level cost, the
acceptance profile, the chosen tree shape, the predicted speedup and the identity of the device
it was measured on. Until then no stage writes a plan, `Manifest.plan` stays None and is left
out of manifest.json, so bundles keep manifest schema 1.

How it plugs in:
- `specdec.pipeline.bundle.Manifest.plan` and `runtime.manifest.BundleInfo.plan` hold it;
  writing one changes manifest.json's shape, so bump `records.manifest.MANIFEST_SCHEMA` then.
- `decode_settings()` is the plan's layer in the settings resolver (`specdec.pipeline.settings`):
  it returns the decode settings the plan chose (tree_budget, depth, width, ...) keyed by
  `DecodeConfig` field name; they rank below explicit options and above scenario and profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TunePlan:
    def decode_settings(self) -> dict[str, Any]:
        """Decode settings this plan chose, keyed by DecodeConfig / PruneParams field name."""
        return {}

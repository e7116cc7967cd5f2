"""The manifest's `draft` section: what the draft graph is and which vocabulary it proposes from.

Export writes it only where a bundle's draft is not a model draft over the target's whole vocabulary
(schema 7); a bundle without it, older ones included, reads as exactly that (`Manifest.draft_spec`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from specdec.pipeline.records.codec import OMIT_DEFAULT


class DraftKind(str, enum.Enum):
    """What the draft graph is (docs/drafters.md).

    model:   a small language model: (input_ids, its KV) -> logits;
    feature: an EAGLE-style feature draft (pipeline/draft/feature_model.py): (input_ids, the target's
             `hidden_states`, its KV) -> logits and `hidden_out`, its guess of the next feature;
             the target graph then outputs `hidden_states` for every row it computes.
    """

    model = "model"
    feature = "feature"


DRAFT_VOCAB_FILE = "draft_vocab.npy"


@dataclass
class DraftVocab:
    """A reduced draft vocabulary: the draft's logits cover `size` target ids, listed (increasing, int64)
    in the bundle file `file` (numpy .npy), draft row i standing for target id file[i]."""

    file: str
    size: int


@dataclass
class DraftSpec:
    """The draft's kind, the target layer a feature draft reads, and its vocabulary."""

    kind: DraftKind = DraftKind.model
    # feature: the target decoder layer (0-based) whose output, before the final norm, is the feature
    feature_layer: int | None = field(default=None, metadata=OMIT_DEFAULT)
    hidden_size: int | None = field(default=None, metadata=OMIT_DEFAULT)  # feature: H of hidden_states
    vocab: DraftVocab | None = field(default=None, metadata=OMIT_DEFAULT)  # None: the target's vocabulary

    @property
    def is_feature(self) -> bool:
        return self.kind is DraftKind.feature

"""`specdec draft`: a draft made from the target (a feature draft, or structured pruning and distillation)."""

from specdec.pipeline.draft.config import DraftConfig, DraftMethod, MadeDraft
from specdec.pipeline.draft.stage import make_draft

__all__ = ["DraftConfig", "DraftMethod", "MadeDraft", "make_draft"]

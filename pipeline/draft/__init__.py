"""`specdec draft`: a draft LLM made from the target by structured pruning and distillation."""

from specdec.pipeline.draft.stage import DraftConfig, MadeDraft, make_draft

__all__ = ["DraftConfig", "MadeDraft", "make_draft"]

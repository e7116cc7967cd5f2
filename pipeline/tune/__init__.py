"""`specdec tune` and the tuned plans a bench run uses: measure on the device, choose the tree, store the plan.

The host half: `stage.py` (the command: a tune-only run of the device runner, its plan stored in a
new bundle) and `plans.py` (which plan a bench run gets, what it asks the device to tune, and
prediction vs measurement). The device half, which measures and chooses, is `pipeline/engine/tune/`.
"""

from specdec.pipeline.tune.stage import TuneConfig, tune_bundle

__all__ = ["TuneConfig", "tune_bundle"]

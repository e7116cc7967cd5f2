"""Tuning on the device: measure the cost curve and the acceptance (`measure.py`), choose the tree (`planner.py`).

The host half (`specdec tune`, plans in a bench run) is `pipeline/tune/`.
"""

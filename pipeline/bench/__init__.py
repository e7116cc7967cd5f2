"""Bench: plain vs speculative decoding on a device, results for people and for CI."""

from specdec.pipeline.bench.stage import BenchConfig, BenchOutcome, run_bench

__all__ = ["BenchConfig", "BenchOutcome", "run_bench"]

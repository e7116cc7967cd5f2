"""Bench: plain vs speculative decoding on a device, results for people and for CI."""

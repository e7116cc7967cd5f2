"""Bundles on disk: reading and verifying them (store), opening outputs safely (staging), describing them (summary)."""
